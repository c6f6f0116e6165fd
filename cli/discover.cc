// iser-connect discover: SendTargets discovery, printed as iscsiadm prints it; with -o, recorded
// in the node record store as iscsiadm's discovery database operations do (discovery/node_sync.h).
// stdout stays the discovery lines scripts parse; what the store gained or lost goes to stderr.
#include "cli/commands.h"

#include <cstdio>
#include <optional>

#include "cli/json_output.h"
#include "discovery/discovery.h"
#include "discovery/node_sync.h"

namespace iser::cli {

Result<std::vector<DiscoveredTarget>> Discover(const IscsiUrl& portal_url,
                                               const ConnectOptions& c) {
  IscsiUrl url = portal_url;
  ISER_RETURN_IF_ERROR(ResolveCredentials(&url, c));
  Result<SessionOptions> so = DiscoverySessionOptionsFor(url, c);
  if (!so.ok()) return so.status();
  return DiscoverTargets(*so);
}

namespace {

void PrintChanges(const NodeChanges& changes, const NodeStore& store) {
  const auto print = [&](const char* what, const std::vector<NodeRecord>& records) {
    for (const NodeRecord& r : records) {
      std::fprintf(stderr, "iser-connect: %s record %s,%u %s (%s)\n", what,
                   r.portal.ToString().c_str(), r.tpgt, r.name.c_str(), store.PathOf(r).c_str());
    }
  };
  print("new", changes.added);
  print("refreshed", changes.refreshed);
  print("removed", changes.removed);
  for (const std::string& s : changes.skipped) {
    std::fprintf(stderr, "iser-connect: not recorded: %s\n", s.c_str());
  }
}

// -o new|old|delete: records what the discovery found.
void RecordTargets(const std::vector<std::string>& ops, NodeStore& store, const IscsiUrl& url,
                   const ConnectOptions& c, const std::vector<DiscoveredTarget>& targets) {
  DiscoveryRecordOps o;
  for (const std::string& op : ops) {
    o.add_new |= op == "new";
    o.refresh_old |= op == "old";
    o.delete_stale |= op == "delete";
  }
  DiscoverySource source;
  source.portal = url.portal;
  // As DiscoverySessionOptionsFor decides: TCP unless -I iser asked for iSER.
  source.transport = c.transport.value_or(TransportKind::kTcp);
  source.new_transport = c.transport.value_or(url.transport);
  Result<NodeChanges> changes = RecordDiscovery(store, source, targets, o);
  if (!changes.ok()) throw CLI::RuntimeError(FailStore(changes.status()));
  PrintChanges(*changes, store);
}

// -l: one record per target found, the one at the discovery's portal if there is one; iSCSI
// recovery tries the target's other portals itself.
std::vector<NodeRecord> RecordsToLogIn(const NodeStore& store, const IscsiUrl& url,
                                       const std::vector<DiscoveredTarget>& targets) {
  std::vector<NodeRecord> chosen;
  for (const DiscoveredTarget& t : targets) {
    Result<std::vector<NodeRecord>> records = store.Find(t.name, std::nullopt);
    if (!records.ok()) throw CLI::RuntimeError(FailStore(records.status()));
    if (records->empty()) {
      std::fprintf(stderr, "iser-connect: no record of %s: not logging in to it\n", t.name.c_str());
      continue;
    }
    const NodeRecord* pick = &records->front();
    for (const NodeRecord& r : *records) {
      if (r.portal == url.portal) pick = &r;
    }
    chosen.push_back(*pick);
  }
  return chosen;
}

}  // namespace

void AddDiscoverCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string portal;
    std::string type;
    bool json = false;
    std::vector<std::string> ops;
    bool login = false;
    TreeLoginOptions tree;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("discover", "SendTargets discovery: list targets and portals");
  AddGlobalOptions(*cmd, g);
  cmd->add_option("-p,--portal", args->portal, "portal HOST[:PORT] or iscsi:// URL")->required();
  cmd->add_flag("--json", args->json, "print JSON");
  // iscsiadm's -t: SendTargets is the one discovery there is here.
  cmd->add_option("-t,--type", args->type, "the discovery type: st (sendtargets), the only one")
      ->check(CLI::IsMember({"st", "sendtargets"}));
  cmd->add_option("-o,--op", args->ops,
                  "record what is found (repeatable): new adds records for new targets, old "
                  "refreshes existing ones, delete removes those this portal no longer reports; "
                  "without -o nothing is recorded")
      ->check(CLI::IsMember({"new", "old", "delete"}))
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("-l,--login", args->login,
                "then log in to the records of the targets found (one per target, the one at "
                "this portal first), as login does; without -o, records new targets and "
                "refreshes old ones first");
  AddSessionOptions(*cmd, g);
  AddTreeOptions(*cmd, args->tree);
  cmd->callback([args, &g] {
    if (args->login && args->ops.empty()) args->ops = {"new", "old"};
    SetupLogging(g);
    Result<IscsiUrl> url = ParseUrlOrPortal(args->portal);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    // The store is opened (and created) first: a bad --config-dir fails before the network.
    std::optional<NodeStore> store;
    if (!args->ops.empty()) {
      Result<NodeStore> opened = OpenNodeStore(g.config_dir, /*create=*/true);
      if (!opened.ok()) throw CLI::RuntimeError(FailStore(opened.status()));
      store.emplace(std::move(*opened));
    }
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
    if (store) RecordTargets(args->ops, *store, *url, *c, *targets);
    if (targets->empty()) {
      throw CLI::RuntimeError(
          Fail(Status::NotFound("no targets found at " + url->portal.ToString() +
                                " (is this initiator allowed to see any target?)")));
    }
    if (args->login) {
      const std::vector<NodeRecord> records = RecordsToLogIn(*store, *url, *targets);
      if (records.empty()) {
        throw CLI::RuntimeError(Fail(Status::NotFound("no records of the targets found at " +
                                                      url->portal.ToString() + " to log in to")));
      }
      const int rc = LoginToRecords(*store, records, *c, args->tree);
      if (rc != exit_code::kOk) throw CLI::RuntimeError(rc);
    }
  });
}

}  // namespace iser::cli
