// The iser-connect subcommands. Each Add*Command registers one subcommand with its options and
// a callback that runs it; failures throw CLI::RuntimeError carrying the exit code, after the
// message was printed.
#pragma once

#include <CLI/CLI.hpp>

#include <vector>

#include "cli/common.h"
#include "discovery/sendtargets.h"

namespace iser::cli {

void AddDiscoverCommand(CLI::App& app, GlobalOptions& g);
void AddLsCommand(CLI::App& app, GlobalOptions& g);
void AddBenchCommand(CLI::App& app, GlobalOptions& g);
void AddMountCommand(CLI::App& app, GlobalOptions& g);
void AddNodeCommand(CLI::App& app, GlobalOptions& g);
void AddLoginCommand(CLI::App& app, GlobalOptions& g);
void AddSessionCommand(CLI::App& app, GlobalOptions& g);
void AddLogoutCommand(CLI::App& app, GlobalOptions& g);

// SendTargets at the URL's portal (TCP unless the options ask for iSER).
Result<std::vector<DiscoveredTarget>> Discover(const IscsiUrl& portal_url, const ConnectOptions& c);

}  // namespace iser::cli
