// iser-connect logout: flush, log out and remove a target's files from the tree holding it
// (sessions/client.h); the last logout of a tree ends its process.
#include <cstdio>

#include "cli/commands.h"
#include "sessions/client.h"

namespace iser::cli {

void AddLogoutCommand(CLI::App& app, GlobalOptions& g) {
  struct Args {
    std::string target;
    bool all = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "logout",
      "drain, flush (SYNCHRONIZE CACHE) and log out of a target, removing its files; the tree "
      "goes with its last session");
  AddGlobalOptions(*cmd, g);
  CLI::Option* target = cmd->add_option("-T,--targetname", args->target, "the target's IQN");
  CLI::Option* all = cmd->add_flag("--all", args->all, "every session of every tree");
  target->excludes(all);
  cmd->callback([args, &g] {
    SetupLogging(g);
    if (args->target.empty() && !args->all) {
      throw CLI::RuntimeError(Fail(Status::InvalidArgument("give -T IQN or --all")));
    }
    std::optional<std::string> which;
    if (!args->all) which = args->target;
    Result<std::vector<sessions::LoggedOut>> done = sessions::LogoutOfHolders(which);
    if (!done.ok()) throw CLI::RuntimeError(Fail(done.status()));
    for (const sessions::LoggedOut& l : *done) {
      std::printf("Logout of [target: %s] successful: %s\n", l.target.c_str(), l.root.c_str());
    }
  });
}

}  // namespace iser::cli
