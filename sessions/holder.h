// A holder: a process that holds sessions (the session daemon, a whole-portal mount, a
// single-target mount) and registers them in the session table, so that `session` lists them and
// `logout` reaches them wherever they are.
//
// HolderServer registers the process in the state directory (state_dir.h: its socket and state
// file, named after its mount point) and answers the control protocol (control.h) on a thread of
// its own, one connection at a time, by calling the Holder. Requests from another user are
// refused. It gives each session its SID (session_ids.h) when it logs in, or when the server
// first sees it (at start, at a status request), and gives it back when the session is gone. The
// Holder's methods run on that thread (a batch of logins also on threads it starts for them) and
// must not wait for SCSI commands of a session in recovery
// (they would hold `session` and `logout` up to its replacement timeout): Rescan takes the
// connection and answers it from elsewhere.
//
// Ending: a logout that removes the holder's last session ends the process. The server then
// stops answering, calls Holder::End (which makes the serving loop return), and keeps the
// logout's reply until Finish, which the process calls once its mount is gone: the command that
// logged out returns only when the process has cleaned up.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/paths/path_set.h"
#include "initiator/session/session.h"
#include "sessions/control.h"
#include "sessions/session_ids.h"
#include "sessions/state_dir.h"

namespace iser::sessions {

// How many logins of one batch request ("logins", control.h) a holder runs at once.
inline constexpr size_t kParallelLogins = 8;

class Holder {
 public:
  virtual ~Holder() = default;
  // A login request: logs in to spec's target; *exists when it holds a session with it already.
  // A batch calls it from up to kParallelLogins threads at once, for different targets.
  virtual Status Login(const LoginSpec& spec, bool* exists) = 0;
  // A logout request ({"target": IQN} or {"all": true}): the reply (control.h); *last when no
  // session is left.
  virtual Json Logout(const Json& request, bool* last) = 0;
  // The "sessions" of the status reply (SessionStatus for each); only_target: that target's
  // alone (none if it holds none), so that a login's check costs one entry, not the table.
  virtual Json Sessions(const std::string& only_target) = 0;
  // A rescan request: answers fd (and closes it) when done; fd -1 is SIGHUP's (log only).
  virtual void Rescan(int fd) = 0;
  // The last session is gone: make the serving loop return. On the control thread.
  virtual void End() = 0;
};

// Holder::Rescan's answer for a holder whose targets and LUNs are fixed (a single-target mount
// follows its LUNs' sizes by itself, nbdkit lists exports as clients ask): nothing added or
// removed. Closes fd; fd -1 (SIGHUP's) is ignored.
void ReplyNothingToRescan(int fd);

// Logs out of every path of a target (OpenPaths, discovery/connect.h): PathSet::Close, and the
// lone session of a set of one, which PathSet::Of leaves to whoever opened it (here the holder).
// The first failure.
Status LogOut(PathSet& paths);

// One target's session as a status reply lists it: its first path's target, portal, connection,
// transport, datamover, state and counters, whether its files are read-only, files (absolute
// paths) and negotiated parameters; with several paths (multipath) also "path_selector",
// "path_changes", "paths" (every path:
// "path" its number from 1 as log lines name it, "portal", "current_portal", "connection", "state",
// "healthy", "recoveries", "commands" (its session's, probes included), "bytes_read",
// "bytes_written"; a path not logged in since the open has "path" null, "portal", "state" and
// "healthy" only) and
// "luns" (each LUN added to the set: "lun", "identity", "alua", and per path "path", "serves",
// "why_not", "alua_state", "target_port_group", "outstanding").
Json SessionStatus(PathSet& paths, const std::string& target, const std::vector<std::string>& files,
                   bool read_only);

class HolderServer {
 public:
  // kind: "daemon", "portal", "mount" or "nbdkit", in the status reply; portal: a whole-portal
  // mount's.
  HolderServer(HolderPaths paths, std::string kind, std::string portal = {});
  HolderServer(const HolderServer&) = delete;
  HolderServer& operator=(const HolderServer&) = delete;
  ~HolderServer();

  // Binds the control socket and writes the state file: from now on commands find this process.
  Status Register();
  // Starts answering requests with holder's methods, until Stop.
  void Start(Holder* holder);
  // Asks the control thread for a rescan (Holder::Rescan(-1)); async-signal-safe.
  void PokeRescan() const;
  // The holder ended sessions on a thread of its own (a rescan that found targets gone): the
  // control thread gives their SIDs back. Any thread.
  void SessionsEnded() const;
  // No request is answered from now on (the control thread is joined, the socket closed).
  void Stop();
  // Removes the socket and state file when they are still this process's, and sends the reply
  // of the logout that ended the process, if one did.
  void Finish();

 private:
  // Wakes the control thread with what to do; async-signal-safe.
  void Poke(char what) const;
  void ControlMain();
  // One connection; false when the process must end (the reply waits in reply_fd_).
  bool Handle(int fd);
  // Holder::Sessions, each with its "sid"; with every session (only_target empty), the SIDs of
  // sessions gone are given back.
  Json SessionsWithIds(const std::string& only_target = "");
  // A "logins" request's: Holder::Login of each, kParallelLogins at a time; a reply per login.
  Json LoginAll(const Json& logins);

  const HolderPaths paths_;
  const std::string kind_;
  const std::string portal_;
  SessionIds ids_;  // control thread only
  Holder* holder_ = nullptr;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread control_;
  int reply_fd_ = -1;
  Json reply_;
};

}  // namespace iser::sessions
