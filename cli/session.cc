// iser-connect session: the live sessions of every process of this user that holds sessions (the
// session daemon, whole-portal and single-target mounts), as iscsiadm -m session lists them;
// --rescan asks each to read its LUNs again, and whole-portal mounts to discover their portal.
#include <cstdio>

#include "cli/commands.h"
#include "cli/json_output.h"
#include "sessions/client.h"

namespace iser::cli {

namespace {

std::string ValueText(const Json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// "HOST:PORT,TPGT" as iscsiadm prints a portal (IPv6 in brackets), from PortalJson.
std::string PortalText(const Json& p) {
  if (!p.is_object()) return ValueText(p);
  std::string text =
      Portal{p.value("address", std::string()), p.value("port", uint16_t{0})}.ToString();
  if (p.contains("tpgt") && !p["tpgt"].is_null()) text += "," + ValueText(p["tpgt"]);
  return text;
}

// What cleans up after a holder that is gone: a session daemon's tree is the next login's to
// clean (it unmounts what is left); a mount's is its mount point, which only its owner reuses;
// nbdkit leaves nothing mounted, and the next one removes what it left.
std::string StaleAdvice(const sessions::HolderState& s) {
  if (s.kind == "daemon" || s.kind.empty()) {
    return "the next login to that tree cleans it up, unmounting what it left mounted";
  }
  if (s.kind == "nbdkit") return "the next nbdkit serving with the iser plugin removes it";
  if (sessions::IsMounted(s.root)) {
    return "unmount what it left with fusermount3 -u " + s.root +
           "; the next mount there replaces its state";
  }
  return "the next mount there replaces its state";
}

// A target's paths and each LUN over them, as multipath -ll shows a device: one line per path,
// then per LUN its identity and each path's port group, ALUA state and whether it serves it.
void PrintPaths(const Json& s) {
  const Json& paths = s.value("paths", Json::array());
  if (paths.empty()) return;
  std::printf("\t\tPaths: %zu (%s), path changes: %s\n", paths.size(),
              s.value("path_selector", std::string()).c_str(),
              ValueText(s.value("path_changes", Json(0))).c_str());
  for (const Json& p : paths) {
    if (p["path"].is_null()) {
      std::printf("\t\t  path -: %s not logged in since the open (it joins when it can)\n",
                  PortalText(p["portal"]).c_str());
      continue;
    }
    std::printf("\t\t  path %s: %s via %s %s %s, recoveries: %s, commands: %s\n",
                ValueText(p["path"]).c_str(), PortalText(p["portal"]).c_str(),
                PortalText(p["current_portal"]).c_str(), p.value("state", std::string()).c_str(),
                p.value("healthy", false) ? "healthy" : "down", ValueText(p["recoveries"]).c_str(),
                ValueText(p["commands"]).c_str());
  }
  for (const Json& l : s.value("luns", Json::array())) {
    const std::string identity = l.value("identity", std::string());
    std::printf("\t\tLUN %s: %s%s\n", ValueText(l["lun"]).c_str(),
                identity.empty() ? "no identity (failover only)" : identity.c_str(),
                l.value("alua", false) ? ", ALUA" : ", no ALUA (every path active/optimized)");
    for (const Json& p : l.value("paths", Json::array())) {
      std::string line = "path " + ValueText(p["path"]) + ": ";
      if (p.value("serves", false)) {
        line += "group " + ValueText(p["target_port_group"]) + " " +
                p.value("alua_state", std::string()) + ", outstanding " +
                ValueText(p["outstanding"]);
      } else {
        line += "not serving: " + p.value("why_not", std::string());
      }
      std::printf("\t\t  %s\n", line.c_str());
    }
  }
}

// Level 0 is iscsiadm's one line per session; 1 adds where it is, its state and its files as
// iscsiadm -P 1 lays a session out; 2 and 3 add the negotiated parameters (iscsiadm -P 2).
void PrintSessions(const Json& sessions, int print_level) {
  for (const Json& s : sessions) {
    const std::string target = s["target"].get<std::string>();
    if (print_level < 1) {
      std::printf("%s: [%s] %s %s (non-flash)\n", s["transport"].get<std::string>().c_str(),
                  ValueText(s["sid"]).c_str(), PortalText(s["portal"]).c_str(), target.c_str());
      continue;
    }
    std::printf("Target: %s (non-flash)\n", target.c_str());
    std::printf("\tCurrent Portal: %s\n", PortalText(s["current_portal"]).c_str());
    std::printf("\tPersistent Portal: %s\n", PortalText(s["portal"]).c_str());
    std::printf("\t\tSID: %s\n", ValueText(s["sid"]).c_str());
    std::printf("\t\tTransport: %s\n", s["transport"].get<std::string>().c_str());
    std::printf("\t\tDatamover: %s\n", s.value("datamover", std::string()).c_str());
    std::printf("\t\tConnection: %s\n", s.value("connection", std::string()).c_str());
    std::printf("\t\tSession State: %s\n", s["state"].get<std::string>().c_str());
    std::printf("\t\tHeld by: %s %s (pid %d)\n", s.value("kind", std::string()).c_str(),
                s.value("root", std::string()).c_str(), s.value("pid", 0));
    std::string files;
    for (const Json& f : s["files"]) files += " " + f.get<std::string>();
    std::printf("\t\tFiles:%s\n", files.c_str());
    std::printf("\t\tRecoveries: %s, commands: %s, bytes read: %s, bytes written: %s\n",
                ValueText(s["recoveries"]).c_str(), ValueText(s["commands"]).c_str(),
                ValueText(s["bytes_read"]).c_str(), ValueText(s["bytes_written"]).c_str());
    PrintPaths(s);
    if (print_level < 2) continue;
    std::printf("\t\t************************\n");
    std::printf("\t\tNegotiated iSCSI params:\n");
    std::printf("\t\t************************\n");
    for (const auto& [key, value] : s["parameters"].items()) {
      std::printf("\t\t%s: %s\n", key.c_str(), ValueText(value).c_str());
    }
  }
}

void PrintRescans(const std::vector<Json>& replies) {
  for (const Json& r : replies) {
    const Status st = sessions::StatusOfReply(r);
    const std::string root = r.value("root", std::string());
    if (!st.ok()) {
      std::printf("Rescan of %s failed: %s\n", root.c_str(), st.ToString().c_str());
      continue;
    }
    std::printf("Rescan of %s: added %zu, removed %zu, failed %zu\n", root.c_str(),
                r["added"].size(), r["removed"].size(), r["failed"].size());
    for (const Json& t : r["added"]) std::printf("\tadded %s\n", t.get<std::string>().c_str());
    for (const Json& t : r["removed"]) std::printf("\tremoved %s\n", t.get<std::string>().c_str());
    for (const Json& f : r.value("luns_added", Json::array())) {
      std::printf("\tnew LUN %s\n", f.get<std::string>().c_str());
    }
    for (const Json& f : r.value("luns_removed", Json::array())) {
      std::printf("\tLUN gone %s\n", f.get<std::string>().c_str());
    }
    for (const Json& t : r["failed"]) {
      std::printf("\tfailed %s: %s\n", t["target"].get<std::string>().c_str(),
                  t["error"].get<std::string>().c_str());
    }
  }
}

}  // namespace

void AddSessionCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    int print_level = 0;
    bool json = false;
    bool rescan = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "session", "list the live sessions: target, portal, transport, state, files, counters");
  AddGlobalOptions(*cmd, g);
  cmd->add_option("-P,--print", args->print_level,
                  "0: one line per session (SID, portal, target); 1: also where each is now, its "
                  "state, tree, files and counters; 2 or 3: also the negotiated parameters")
      ->check(CLI::Range(0, 3));
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_flag("--rescan", args->rescan,
                "read every target's LUNs and sizes again (new LUNs appear, deleted ones go); "
                "whole-portal mounts also discover again: new targets appear, dropped ones go");
  cmd->callback([args, &g] {
    SetupLogging(g);
    if (args->rescan) {
      Result<std::vector<Json>> rescanned = sessions::RescanHolders();
      if (!rescanned.ok()) throw CLI::RuntimeError(Fail(rescanned.status()));
      const std::vector<Json>& replies = *rescanned;
      if (replies.empty()) {
        throw CLI::RuntimeError(Fail(Status::NotFound("no active sessions")));
      }
      if (args->json) {
        std::printf("%s\n", DumpJson(Json(replies)).c_str());
      } else {
        PrintRescans(replies);
      }
      for (const Json& r : replies) {
        const Status st = sessions::StatusOfReply(r);
        if (!st.ok()) throw CLI::RuntimeError(ExitCodeFor(st));
      }
      return;
    }
    Result<std::vector<Json>> statuses = sessions::HolderStatuses();
    if (!statuses.ok()) throw CLI::RuntimeError(Fail(statuses.status()));
    const Json sessions = SessionsJson(*statuses);
    if (args->json) {
      std::printf("%s\n", DumpJson(sessions).c_str());
    } else if (!sessions.empty()) {
      PrintSessions(sessions, args->print_level);
    }
    if (sessions.empty()) {
      std::string stale;
      for (const sessions::HolderState& s : sessions::StaleHolders()) {
        stale += "; the process that served " + s.root + " (pid " + std::to_string(s.pid) +
                 ") is gone and left its state behind: " + StaleAdvice(s);
      }
      throw CLI::RuntimeError(Fail(Status::NotFound("no active sessions" + stale)));
    }
  });
}

}  // namespace iser::cli
