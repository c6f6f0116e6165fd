// iser-connect: discover, inspect, benchmark and mount iSCSI/iSER LUNs from user space.
//
// Besides `iser-connect SUBCOMMAND ...`, the program is a mount helper: mount(8) runs it as
// `iser-connect URL DIR -o OPTS` (through mount.fuse3, for type fuse.iser-connect) or as
// `mount.fuse.iser-connect URL DIR [-o OPTS] [-t TYPE] [-n] [-s] [-v]` (a link installed in sbin,
// which util-linux runs itself), which both mean `iser-connect mount URL DIR -o OPTS`.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/habits.h"
#include "cli/mount_options.h"
#include "cli/version.h"

namespace {

// Called under a mount.* name, or with a URL where a subcommand belongs.
bool IsMountHelperCall(int argc, char** argv) {
  std::string_view name = argv[0];
  if (const size_t slash = name.rfind('/'); slash != std::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  return name.starts_with("mount.") ||
         (argc > 1 && std::string_view(argv[1]).find("://") != std::string_view::npos);
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (IsMountHelperCall(argc, argv)) {
    iser::Result<std::vector<std::string>> mount_args = iser::cli::MountHelperArgs(args);
    if (!mount_args.ok()) return iser::cli::Fail(mount_args.status());
    args = std::move(*mount_args);
  }
  iser::cli::GlobalOptions g;
  CLI::App app{"iser-connect: a user-space iSCSI/iSER initiator", "iser-connect"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", "iser-connect " + std::string(iser::cli::kVersion),
                       "print the version and exit");
  iser::cli::AddGlobalOptions(app, g);
  iser::cli::AddDiscoverCommand(app, g);
  iser::cli::AddLsCommand(app, g);
  iser::cli::AddBenchCommand(app, g);
  iser::cli::AddMountCommand(app, g);
  iser::cli::AddLoginCommand(app, g);
  iser::cli::AddSessionCommand(app, g);
  iser::cli::AddLogoutCommand(app, g);
  iser::cli::AddNodeCommand(app, g);
  iser::cli::AddInameCommand(app, g);
  // Set after the subcommands, which would otherwise inherit it.
  app.footer(
      "As a mount helper (mount -t fuse.iser-connect, fstab; docs/fstab.md):\n"
      "  iser-connect URL MOUNTPOINT [-o OPTIONS]  is  iser-connect mount URL MOUNTPOINT -o "
      "OPTIONS");
  if (std::optional<std::string> habit = iser::cli::IscsiadmHabit(args)) {
    std::fprintf(stderr, "iser-connect: %s\n", habit->c_str());
    return iser::cli::exit_code::kInvalidArgument;
  }
  std::vector<CLI::App*> subcommands = app.get_subcommands([](CLI::App*) { return true; });
  auto named = [&](const std::string& name) -> CLI::App* {
    for (CLI::App* s : subcommands) {
      if (s->get_name() == name) return s;
    }
    return nullptr;
  };
  if (!args.empty() && args[0] == "help" && args.size() == 1) {
    std::printf("%s", app.help().c_str());
    return 0;
  }
  if (!args.empty() && args[0] == "help" && named(args[1]) != nullptr) {
    std::printf("%s", named(args[1])->help("iser-connect").c_str());
    return 0;
  }
  if (!args.empty() && args[0] == "help") args.erase(args.begin());  // help NAME: NAME unknown
  if (!args.empty() && !args[0].starts_with("-") && named(args[0]) == nullptr) {
    std::string names;
    for (CLI::App* s : subcommands) names += (names.empty() ? "" : ", ") + s->get_name();
    std::fprintf(stderr, "iser-connect: unknown subcommand '%s'; the subcommands: %s, help\n",
                 args[0].c_str(), names.c_str());
    return iser::cli::exit_code::kInvalidArgument;
  }
  try {
    // CLI11 takes the arguments last to first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Like every other error: one line, the program's prefix, where to look.
    std::string where = "iser-connect";
    for (CLI::App* s : app.get_subcommands()) where += " " + s->get_name();
    std::fprintf(stderr, "iser-connect: %s (%s --help)\n", e.what(), where.c_str());
    return iser::cli::exit_code::kInvalidArgument;
  }
  return 0;
}
