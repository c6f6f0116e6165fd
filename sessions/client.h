// The commands' side of the session table: `login` hands a login to the session daemon of a
// tree, starting the daemon if none runs; `logout`, `session` and `session --rescan` reach every
// process of this user that holds sessions (a holder: the session daemon, a whole-portal or
// single-target mount, nbdkit) through the sockets in the state directory (state_dir.h). What a
// holder serves (files in a FUSE tree, NBD exports) is its own business: this layer starts a
// daemon through the caller's DaemonMain.
//
// Stale state: a socket nobody listens on (the process was killed) is skipped by logout, session
// and rescan; the next login to the daemon's tree removes it and its state file, unmounts a mount
// the dead process left (fusermount3 -u -z), says so in a warning, and starts afresh. A mount's
// goes with the next mount on its mount point, an nbdkit's with the next nbdkit
// (RemoveGoneHolders).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "discovery/connect.h"
#include "discovery/url.h"
#include "initiator/base/status.h"
#include "sessions/control.h"
#include "sessions/detach.h"
#include "sessions/state_dir.h"

namespace iser::sessions {

// Runs a new session daemon in its own (forked, detached) process: logs in to spec, serves the
// tree on paths.root, registers at paths, then reports through ready; returns when the daemon
// ends.
using DaemonMain =
    std::function<Status(const HolderPaths& paths, const LoginSpec& spec, ReadyReporter* ready)>;

struct DaemonLogin {
  bool exists = false;  // a holder had a session with that target already: nothing was done
  std::string root;     // the tree (or, when exists, the holder's mount point)
  // When exists: whether the holder serves it read-only, if it said.
  std::optional<bool> held_read_only;
};

// Logs in to each spec's target (every disk LUN, or the URL's LUN) in the tree's daemon, what
// OpenPaths(url, options) does, served as spec.serve says, and calls done(i, result) for specs[i]
// as each ends (not in order). The daemon's failure comes back as its Status (a process option
// that differs from the running daemon's: InvalidArgument). A target that any holder of this user
// holds already (the daemon, a whole-portal or single-target mount) is not logged in to again:
// exists, with that holder's root and how it serves it; new_session: a session held in another
// holder does not count (a tree still holds one session per target). The secrets travel over the
// control socket only. mountpoint: the tree's (empty: DefaultTreeRoot(), created if missing).
//
// The first login that succeeds starts the daemon if none runs; the others go to it in batches
// that it logs in to several at a time (holder.h). Starting a daemon forks and runs daemon_main
// in the child: call from a single-threaded process; the child never returns.
using LoginDone = std::function<void(size_t index, const Result<DaemonLogin>& result)>;
void LoginAllToDaemon(std::vector<LoginSpec> specs, const std::string& mountpoint,
                      const DaemonMain& daemon_main, bool new_session, const LoginDone& done);

// LoginAllToDaemon of one spec.
Result<DaemonLogin> LoginToDaemon(LoginSpec spec, const std::string& mountpoint,
                                  const DaemonMain& daemon_main, bool new_session = false);

// Logout, session and rescan first check the state directory as login does (CheckStateDir): one
// that is not this user's alone is an InvalidArgument error, none at all means no tree runs.

struct LoggedOut {
  std::string target;
  std::string root;  // the mount point of the holder it was logged out of
};

// Which sessions a logout ends: all of them, or those that match every criterion given.
struct LogoutSelection {
  bool all = false;
  std::optional<std::string> target;
  std::optional<Portal> portal;  // a portal the session (any of its paths) logged in at
  std::optional<int> sid;        // session_ids.h
  std::string ToString() const;  // as the command line gives it: "-T IQN -p HOST:PORT"
};

// Logs out of the sessions selected, in whichever holders hold them: the sessions logged out,
// and the first failure (a holder that refused, or could not log out of one), also when others
// were logged out; NotFound, naming the selection, when none matches (or no holder runs). Waits
// for a holder ending with its last session to be gone.
struct LogoutResult {
  std::vector<LoggedOut> done;
  Status status;
};
LogoutResult LogoutOfHolders(const LogoutSelection& which);

// The status reply (control.h) of every live tree process, with "socket" added (where it was
// asked: a holder's socket need not be named after its root); only_target: with that target's
// session alone.
Result<std::vector<Json>> HolderStatuses(const std::string& only_target = "");
// A live holder's session with a target: its root, and its entry in the status reply.
struct HeldSession {
  std::string root;
  Json session;
};
// The first live holder found that has a session with target, if any.
std::optional<HeldSession> HolderOf(const std::string& target);
// What holders that are gone left in the state directory (a process killed with SIGKILL): the
// state of each socket nobody listens on. The next login to that tree cleans it up.
std::vector<HolderState> StaleHolders();
// Removes what gone holders of this kind left in the state directory (their sockets, state files
// and SIDs): for a kind that leaves no mount behind (nbdkit), whose next process calls it.
void RemoveGoneHolders(const std::string& kind);
// The rescan reply of every live tree process, with "root" added.
Result<std::vector<Json>> RescanHolders();

}  // namespace iser::sessions
