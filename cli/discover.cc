// iser-connect discover: SendTargets discovery, printed as iscsiadm prints it.
#include "cli/commands.h"

#include <cstdio>

#include "cli/json_output.h"
#include "discovery/discovery.h"

namespace iser::cli {

Result<std::vector<DiscoveredTarget>> Discover(const IscsiUrl& portal_url,
                                               const ConnectOptions& c) {
  IscsiUrl url = portal_url;
  ISER_RETURN_IF_ERROR(ResolveCredentials(&url, c));
  Result<SessionOptions> so = DiscoverySessionOptionsFor(url, c);
  if (!so.ok()) return so.status();
  return DiscoverTargets(*so);
}

void AddDiscoverCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string portal;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("discover", "SendTargets discovery: list targets and portals");
  AddGlobalOptions(*cmd, g);
  cmd->add_option("-p,--portal", args->portal, "portal HOST[:PORT] or iscsi:// URL")->required();
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args, &g] {
    SetupLogging(g);
    Result<IscsiUrl> url = ParseUrlOrPortal(args->portal);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    Result<std::vector<DiscoveredTarget>> targets = Discover(*url, *c);
    if (!targets.ok()) throw CLI::RuntimeError(Fail(targets.status()));
    if (args->json) {
      std::printf("%s\n", DumpJson(DiscoveryJson(*targets)).c_str());
    } else {
      for (const DiscoveredTarget& t : *targets) {
        for (const TargetPortal& p : t.portals) {
          std::printf("%s,%u %s\n", p.portal.ToString().c_str(), p.tpgt, t.name.c_str());
        }
      }
    }
    if (targets->empty()) {
      throw CLI::RuntimeError(
          Fail(Status::NotFound("no targets found at " + url->portal.ToString() +
                                " (is this initiator allowed to see any target?)")));
    }
  });
}

}  // namespace iser::cli
