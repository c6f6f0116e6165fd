// The session daemon of `iser-connect login`: a tree of targets (tree_server.h) that logins hand
// their sessions to (sessions/client.h starts it). Kept apart from tree_server.h so that the
// command line, which starts it, needs none of libfuse's headers.
#pragma once

#include "initiator/base/status.h"
#include "sessions/control.h"
#include "sessions/detach.h"
#include "sessions/state_dir.h"

namespace iser::fuse {

// How a session daemon serves its tree (a running daemon keeps its own).
struct SessionDaemonOptions {
  bool page_cache = false;
  bool read_only = false;
  bool allow_other = false;
  unsigned max_threads = 64;
};

// Serves the tree on paths.root with options, logged in to spec first (ServeTree). Runs in the
// daemon's process (sessions::LoginToDaemon's child) and returns when the daemon ends.
Status ServeSessionDaemon(const sessions::HolderPaths& paths, const sessions::LoginSpec& spec,
                          const SessionDaemonOptions& options, sessions::ReadyReporter* ready);

}  // namespace iser::fuse
