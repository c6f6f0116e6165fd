// The session daemon of `iser-connect login`: a tree of targets (tree_server.h) that logins hand
// their sessions to (sessions/client.h starts it). Kept apart from tree_server.h so that the
// command line, which starts it, needs none of libfuse's headers.
#pragma once

#include "initiator/base/status.h"
#include "sessions/control.h"
#include "sessions/detach.h"
#include "sessions/state_dir.h"

namespace iser::fuse {

// FUSE worker threads of a session daemon whose first login named none.
inline constexpr unsigned kDefaultSessionDaemonThreads = 64;

// Serves the tree on paths.root, logged in to spec first (ServeTree); spec.serve's process
// options (page cache, allow_other, threads) become the tree's, which later logins must not
// contradict (sessions::ServeOptions). Runs in the daemon's process (sessions::LoginToDaemon's
// child) and returns when the daemon ends.
Status ServeSessionDaemon(const sessions::HolderPaths& paths, const sessions::LoginSpec& spec,
                          sessions::ReadyReporter* ready);

}  // namespace iser::fuse
