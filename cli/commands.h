// The iser-connect subcommands. Each Add*Command registers one subcommand with its options and
// a callback that runs it; failures throw CLI::RuntimeError carrying the exit code, after the
// message was printed.
#pragma once

#include <CLI/CLI.hpp>

#include <vector>

#include "cli/common.h"
#include "discovery/node_store.h"
#include "discovery/sendtargets.h"
#include "frontends/fuse/session_daemon.h"
#include "sessions/client.h"

namespace iser::cli {

void AddDiscoverCommand(CLI::App& app, GlobalOptions& g);
void AddLsCommand(CLI::App& app, GlobalOptions& g);
void AddBenchCommand(CLI::App& app, GlobalOptions& g);
void AddMountCommand(CLI::App& app, GlobalOptions& g);
void AddNodeCommand(CLI::App& app, GlobalOptions& g);
void AddLoginCommand(CLI::App& app, GlobalOptions& g);
void AddSessionCommand(CLI::App& app, GlobalOptions& g);
void AddLogoutCommand(CLI::App& app, GlobalOptions& g);
void AddInameCommand(CLI::App& app, GlobalOptions& g);

// SendTargets at the URL's portal (TCP unless the options ask for iSER).
Result<std::vector<DiscoveredTarget>> Discover(const IscsiUrl& portal_url, const ConnectOptions& c);

// The session daemon's tree: where it is, and how a login wants its target served (the
// process options apply when the login starts the daemon, and must match a running one's).
struct TreeLoginOptions {
  std::string mountpoint;  // empty: sessions::DefaultTreeRoot()
  sessions::ServeOptions serve;
  bool new_session = false;  // sessions::LoginToDaemon's
};

// The options of the session daemon's tree (--mountpoint, --read-only, ...), for login and
// discover -l.
void AddTreeOptions(CLI::App& cmd, TreeLoginOptions& tree);
// Logs in to each record (its settings, overridden by what the command line gave in base) and
// prints each outcome; returns 0, 15 when every session existed already, else the exit code of
// the last failure. Logs in from this process: it must be single-threaded (LoginToDaemon forks).
int LoginToRecords(const NodeStore& store, const std::vector<NodeRecord>& records,
                   const ConnectOptions& base, const TreeLoginOptions& tree);

}  // namespace iser::cli
