// iser-connect session: the live sessions of every tree process of this user (the session
// daemon, whole-portal mounts), as iscsiadm -m session lists them; --rescan asks each tree to
// discover its portal again.
#include <cstdio>

#include "cli/commands.h"
#include "cli/json_output.h"
#include "sessions/client.h"

namespace iser::cli {

namespace {

std::string ValueText(const Json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void PrintSessions(const Json& sessions, int print_level) {
  for (const Json& s : sessions) {
    std::printf("%s: [pid %d] %s %s (%s)\n", s["transport"].get<std::string>().c_str(),
                s["pid"].get<int>(), s["portal"].get<std::string>().c_str(),
                s["target"].get<std::string>().c_str(), s["state"].get<std::string>().c_str());
    std::string files;
    for (const Json& f : s["files"]) files += " " + f.get<std::string>();
    std::printf("\tFiles:%s\n", files.c_str());
    std::printf("\tRecoveries: %s, commands: %s, bytes read: %s, bytes written: %s\n",
                ValueText(s["recoveries"]).c_str(), ValueText(s["commands"]).c_str(),
                ValueText(s["bytes_read"]).c_str(), ValueText(s["bytes_written"]).c_str());
    if (print_level < 1) continue;
    std::printf("\tConnection: %s\n", s.value("connection", std::string()).c_str());
    const std::string datamover = s.value("datamover", std::string());
    if (!datamover.empty()) std::printf("\tDatamover: %s\n", datamover.c_str());
    std::printf("\tNegotiated parameters:\n");
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
  cmd->add_option("-P,--print", args->print_level, "1: also the negotiated parameters")
      ->check(CLI::Range(0, 1));
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
    if (sessions.empty()) throw CLI::RuntimeError(Fail(Status::NotFound("no active sessions")));
  });
}

}  // namespace iser::cli
