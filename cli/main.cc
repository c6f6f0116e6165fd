// iser-connect: discover, inspect, benchmark and mount iSCSI/iSER LUNs from user space.
#include <CLI/CLI.hpp>

#include <csignal>

#include "cli/commands.h"
#include "cli/common.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  iser::cli::GlobalOptions g;
  CLI::App app{"iser-connect: a user-space iSCSI/iSER initiator", "iser-connect"};
  app.require_subcommand(1);
  iser::cli::AddGlobalOptions(app, g);
  iser::cli::AddDiscoverCommand(app, g);
  iser::cli::AddLsCommand(app, g);
  iser::cli::AddBenchCommand(app, g);
  iser::cli::AddMountCommand(app, g);
  iser::cli::AddLoginCommand(app, g);
  iser::cli::AddSessionCommand(app, g);
  iser::cli::AddLogoutCommand(app, g);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : iser::cli::exit_code::kInvalidArgument;
  }
  return 0;
}
