#include "cli/habits.h"

#include <algorithm>

namespace iser::cli {

namespace {

bool Has(const std::vector<std::string>& args, std::initializer_list<const char*> any) {
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) {
    return std::any_of(any.begin(), any.end(), [&](const char* x) { return a == x; });
  });
}

// What iser-connect does for iscsiadm's -m mode, with args' -l/-u.
std::string CommandFor(const std::string& mode, const std::vector<std::string>& args) {
  const bool login = Has(args, {"-l", "--login"});
  const bool logout = Has(args, {"-u", "--logout"});
  if (mode == "discovery" || mode == "discoverydb" || mode == "discover") {
    return "iser-connect discover -p PORTAL (-t st is accepted; -o new records what it finds, -l "
           "logs in to it)";
  }
  if (mode == "node") {
    if (login) return "iser-connect login -T IQN, -p PORTAL or --all";
    if (logout) return "iser-connect logout -T IQN, -p PORTAL or --all";
    return "iser-connect node [-T IQN] [-p PORTAL] [--op new|update|delete ...]";
  }
  if (mode == "session") {
    if (logout) return "iser-connect logout -r SID (or -T IQN, -p PORTAL, --all)";
    return "iser-connect session [-P 1]";
  }
  return "";
}

}  // namespace

std::optional<std::string> IscsiadmHabit(const std::vector<std::string>& args) {
  if (args.empty()) return std::nullopt;
  std::string mode;
  if ((args[0] == "-m" || args[0] == "--mode") && args.size() > 1) {
    mode = args[1];
  } else if (args[0].starts_with("--mode=")) {
    mode = args[0].substr(7);
  } else if (args[0] == "node" && Has(args, {"-l", "--login", "-u", "--logout"})) {
    return "node only edits records: " + CommandFor("node", args) +
           " logs in to them (iscsiadm's -m node -l)";
  } else {
    return std::nullopt;
  }
  const std::string command = CommandFor(mode, args);
  if (command.empty()) {
    return "iscsiadm's -m " + mode +
           " has no counterpart: iser-connect binds no interfaces (the system's routing picks "
           "the way) and has no host adapters or firmware boot (iser-connect --help lists what "
           "it does)";
  }
  return "iscsiadm's -m " + mode + " is a subcommand here: " + command;
}

}  // namespace iser::cli
