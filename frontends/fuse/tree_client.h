// The commands' side of the trees (tree_server.h): `login` hands a login to the session daemon of
// a tree, starting the daemon if none runs; `logout`, `session` and `session --rescan` reach every
// tree process of this user through the sockets in the state directory (tree_paths.h).
//
// Stale state: a socket nobody listens on (the process was killed) is skipped by logout, session
// and rescan; the next login to that tree removes it and its state file, unmounts a mount the
// dead process left (fusermount3 -u -z), says so in a warning, and starts afresh.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "frontends/fuse/control.h"
#include "initiator/base/status.h"

namespace iser::fuse {

// How a daemon started by a login serves its tree (a running daemon keeps its own).
struct TreeLoginOptions {
  std::string mountpoint;  // empty: DefaultTreeRoot(), created if missing
  bool page_cache = false;
  bool read_only = false;
  bool allow_other = false;
  unsigned max_threads = 64;
};

struct TreeLogin {
  bool exists = false;  // the tree had a session with that target already: nothing was done
  std::string root;     // the tree; the target's files are in root/<target>
};

// Logs in to url's target (every disk LUN, or the URL's LUN) in the tree's daemon, what
// OpenSession(url, options) does; the daemon's failure comes back as its Status. The secrets
// travel over the control socket only. Starting a daemon forks: call from a single-threaded
// process; the child never returns.
Result<TreeLogin> LoginToTree(IscsiUrl url, ConnectOptions options, const TreeLoginOptions& tree);

// Logout, session and rescan first check the state directory as login does (CheckStateDir): one
// that is not this user's alone is an InvalidArgument error, none at all means no tree runs.

// Logs out of the target (nullopt: of every target) in every tree holding it, and returns the
// targets logged out; NotFound when no tree holds it (or no tree runs). Waits for a tree process
// ending with its last session to be gone.
Result<std::vector<std::string>> LogoutOfTrees(const std::optional<std::string>& target);

// The status reply (control.h) of every live tree process.
Result<std::vector<Json>> TreeStatuses();
// The rescan reply of every live tree process, with "root" added.
Result<std::vector<Json>> RescanTrees();

}  // namespace iser::fuse
