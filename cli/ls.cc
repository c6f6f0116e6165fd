// iser-connect ls: targets, their LUNs and what each LUN is (like iscsi-ls -s, with more).
#include <cstdio>

#include "cli/commands.h"
#include "cli/json_output.h"
#include "cli/listing.h"
#include "cli/size.h"
#include "initiator/block/lun_info.h"

namespace iser::cli {

namespace {

std::string Provisioning(const LunInfo& l) {
  if (!l.thin) return "full";
  std::string s = "thin";
  if (l.unmapped_reads_zero) s += " (LBPRZ)";
  return s;
}

void PrintText(const std::vector<TargetListing>& listing) {
  for (const TargetListing& t : listing) {
    std::printf("Target: %s (%s,%u)\n", t.name.c_str(), t.portal.portal.ToString().c_str(),
                t.portal.tpgt);
    if (!t.status.ok()) {
      std::printf("  error: %s\n", t.status.ToString().c_str());
      continue;
    }
    for (const LunInfo& l : t.luns) {
      std::printf("  LUN %llu: %s  %s %s %s\n", static_cast<unsigned long long>(l.lun),
                  l.device_type_name.c_str(), l.vendor.c_str(), l.product.c_str(),
                  l.revision.c_str());
      if (!l.is_disk) continue;
      std::printf("    size %s (%llu bytes), blocks %u logical / %u physical, max transfer %s\n",
                  HumanBytes(l.size_bytes).c_str(), static_cast<unsigned long long>(l.size_bytes),
                  l.logical_block_size, l.physical_block_size,
                  HumanBytes(l.max_transfer_bytes).c_str());
      std::printf(
          "    provisioning %s, UNMAP %s, WRITE SAME with UNMAP %s, write cache %s, FUA %s, "
          "%s%s\n",
          Provisioning(l).c_str(), l.unmap ? "yes" : "no", l.write_same_unmap ? "yes" : "no",
          l.write_cache ? "on" : "off", l.fua ? "yes" : "no",
          l.read_only ? "read-only" : "read-write", l.rotational ? ", rotational" : "");
      if (!l.serial.empty() || !l.identifier.empty()) {
        std::printf("    serial %s, id %s\n", l.serial.c_str(), l.identifier.c_str());
      }
    }
  }
}

// A command that failed because recovery gave up is reported with recovery's cause, so that ls
// exits with the code of what went wrong (24 for CHAP refused at each login, ...).
Status CommandFailure(const Session& session, const Status& failed) {
  Status cause = session.RecoveryFailure();
  return cause.ok() ? failed : cause;
}

TargetListing ListTarget(const IscsiUrl& base, const ConnectOptions& c, const std::string& name,
                         const TargetPortal& portal) {
  TargetListing t{name, portal, Status::OK(), {}};
  IscsiUrl url = base;
  url.target = name;
  url.portal = portal.portal;
  Result<std::shared_ptr<Session>> session = OpenSession(url, c);
  if (!session.ok()) {
    t.status = session.status();
    return t;
  }
  // The group the login answered with, not the one a URL without discovery could only guess.
  if (std::optional<uint16_t> tpgt = (*session)->params().target_portal_group_tag) {
    t.portal.tpgt = *tpgt;
  }
  std::vector<uint64_t> luns;
  if (base.lun) {
    luns.push_back(*base.lun);
  } else {
    Result<std::vector<uint64_t>> reported = ReportLuns(**session);
    if (!reported.ok()) {
      t.status = CommandFailure(**session, reported.status());
      return t;
    }
    luns = *reported;
  }
  for (uint64_t lun : luns) {
    Result<LunInfo> info = ProbeLun(**session, lun);
    if (!info.ok()) {
      t.status = CommandFailure(**session, info.status());
      return t;
    }
    t.luns.push_back(*info);
  }
  Status st = (*session)->Close();
  if (!st.ok()) t.status = st;
  return t;
}

}  // namespace

void AddLsCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string where;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("ls", "list targets and LUNs with their properties");
  AddGlobalOptions(*cmd, g);
  AddSessionOptions(*cmd, g);
  cmd->get_option("--replacement-timeout")
      ->description(
          "seconds a command waits for a lost connection to be recovered before ls reports the "
          "cause (default: the URL's replacement_timeout=, else the login timeout)");
  cmd->add_option("url", args->where, "iscsi:// or iser:// URL, or a portal HOST[:PORT]")
      ->required();
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args, &g] {
    SetupLogging(g);
    Result<IscsiUrl> url = ParseUrlOrPortal(args->where);
    if (!url.ok()) throw CLI::RuntimeError(Fail(url.status()));
    Result<ConnectOptions> c = MakeConnectOptions(g);
    if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
    // A one-shot command answers within the login timeout: I/O waits for a lost connection no
    // longer than that, unless --replacement-timeout or the URL says otherwise.
    if (!c->replacement_timeout && !url->replacement_timeout) {
      c->replacement_timeout = c->login_timeout;
    }
    std::vector<TargetListing> listing;
    if (!url->target.empty()) {
      listing.push_back(ListTarget(*url, *c, url->target, TargetPortal{url->portal, 1}));
    } else {
      Result<std::vector<DiscoveredTarget>> targets = Discover(*url, *c);
      if (!targets.ok()) throw CLI::RuntimeError(Fail(targets.status()));
      for (const DiscoveredTarget& t : *targets) {
        listing.push_back(ListTarget(*url, *c, t.name, t.portals.front()));
      }
      if (targets->empty()) {
        throw CLI::RuntimeError(
            Fail(Status::NotFound("no targets found at " + url->portal.ToString())));
      }
    }
    if (args->json) {
      std::printf("%s\n", DumpJson(ListingJson(listing)).c_str());
    } else {
      PrintText(listing);
    }
    for (const TargetListing& t : listing) {
      if (!t.status.ok()) throw CLI::RuntimeError(ExitCodeFor(t.status));
    }
  });
}

}  // namespace iser::cli
