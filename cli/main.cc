// iser-connect: discover, inspect, benchmark and mount iSCSI/iSER LUNs from user space.
//
// Besides `iser-connect SUBCOMMAND ...`, the program is a mount helper: mount(8) runs it as
// `iser-connect URL DIR -o OPTS` (through mount.fuse3, for type fuse.iser-connect) or as
// `mount.fuse.iser-connect URL DIR [-o OPTS] [-t TYPE] [-n] [-s] [-v]` (a link installed in sbin,
// which util-linux runs itself), which both mean `iser-connect mount URL DIR -o OPTS`.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
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
  // Set after the subcommands, which would otherwise inherit it.
  app.footer(
      "As a mount helper (mount -t fuse.iser-connect, fstab; docs/fstab.md):\n"
      "  iser-connect URL MOUNTPOINT [-o OPTIONS]  is  iser-connect mount URL MOUNTPOINT -o "
      "OPTIONS");
  try {
    // CLI11 takes the arguments last to first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : iser::cli::exit_code::kInvalidArgument;
  }
  return 0;
}
