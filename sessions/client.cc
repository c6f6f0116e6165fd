#include "sessions/client.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "initiator/base/log.h"
#include "sessions/holder.h"
#include "sessions/session_ids.h"

namespace iser::sessions {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kStatusTimeout = seconds(10);
// Each target is flushed and logged out, each bounded by the session's own timeouts.
constexpr milliseconds kLogoutTimeout = seconds(300);
constexpr milliseconds kRescanTimeout = seconds(300);
// A tree process ending after its last logout only has its exit left to do.
constexpr milliseconds kExitTimeout = seconds(30);

// A login may try each portal, then probes the LUNs and asks SendTargets for more portals.
milliseconds LoginReplyTimeout(const ConnectOptions& o) {
  return 4 * o.login_timeout + seconds(60);
}

// An absolute path without trailing slashes, made without touching the file system: a dead FUSE
// mount answers every stat with ENOTCONN.
Result<std::string> AbsolutePath(std::string path) {
  if (path.empty()) return Status::InvalidArgument("empty mount point");
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) {
      return Status::InvalidArgument(std::string("current directory: ") + std::strerror(errno));
    }
    path = std::string(cwd) + "/" + path;
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

void LazyUnmount(const std::string& root) {
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("fusermount3", "fusermount3", "-u", "-z", "--", root.c_str(), nullptr);
    _exit(127);
  }
  int wstatus = 0;
  if (pid > 0) waitpid(pid, &wstatus, 0);
  if (pid < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    Log(LogLevel::kWarning, "fusermount3 -u -z " + root + " failed");
  }
}

// Nobody listens on the tree's socket: whatever its last process left goes. A process that still
// runs is ending (it closed its socket and waits for the lock this command holds): its mount is
// not ours to remove.
Status CleanStale(const HolderPaths& paths) {
  Result<HolderState> state = ReadHolderState(paths.state_file);
  if (state.ok() && HolderProcessAlive(*state)) {
    return Status::Aborted("the process serving " + paths.root + " (pid " +
                           std::to_string(state->pid) + ") is ending; try again");
  }
  struct stat st;
  const bool socket_left = lstat(paths.socket.c_str(), &st) == 0;
  const bool mounted = IsMounted(paths.root);
  if (!state.ok() && !socket_left && !mounted) return Status::OK();
  Log(LogLevel::kWarning,
      "cleaning up after a tree process that is gone" +
          (state.ok() ? " (pid " + std::to_string(state->pid) + ")" : std::string()) + ": " +
          paths.root + (mounted ? ", unmounting it" : ""));
  if (mounted) LazyUnmount(paths.root);
  unlink(paths.socket.c_str());
  unlink(paths.state_file.c_str());
  RemoveFreeSessionIds(paths.state_dir);
  return Status::OK();
}

// Waits, at most kExitTimeout, for the process of the tree's state file to be gone.
void WaitForEnd(const HolderPaths& paths) {
  const auto until = std::chrono::steady_clock::now() + kExitTimeout;
  while (std::chrono::steady_clock::now() < until) {
    Result<HolderState> state = ReadHolderState(paths.state_file);
    if (!state.ok() || !HolderProcessAlive(*state)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Starts the daemon for the tree, logging in to spec first. Returns in the parent only.
Status StartDaemon(const HolderPaths& paths, const LoginSpec& spec, const DaemonMain& daemon_main,
                   int lock) {
  Status parent_result;
  std::unique_ptr<ReadyReporter> reporter = ForkDetached(&parent_result);
  if (!reporter) return parent_result;
  // The child's copy of the lock: the parent holds the lock until this process is ready.
  if (lock >= 0) close(lock);
  const Status st = daemon_main(paths, spec, reporter.get());
  if (!reporter->reported()) reporter->Fail(st);
  std::fflush(nullptr);
  _exit(st.ok() ? 0 : 1);
}

// Calls fn with a connection to each live tree process, and its socket. The state directory is
// checked as login checks it: a socket in a directory another user could write may be theirs, and
// the commands would hand it logouts or believe its answers. No directory: no tree process.
template <typename Fn>
Status ForEachLiveTree(Fn&& fn) {
  const std::string dir = StateDir();
  const Status checked = CheckStateDir(dir);
  if (checked.code() == StatusCode::kNotFound) return Status::OK();
  ISER_RETURN_IF_ERROR(checked);
  for (const std::string& socket : ListHolderSockets(dir)) {
    Result<int> fd = ConnectControl(socket);
    if (!fd.ok()) continue;  // stale: the next login to that tree cleans it up
    fn(*fd, socket);
    close(*fd);
  }
  return Status::OK();
}

}  // namespace

namespace {

// How many logins one request carries: its reply comes within LoginReplyTimeout per round of the
// logins the daemon runs at once (kParallelLogins, holder.h), and the daemon answers no other
// request (session, logout) meanwhile: two rounds.
constexpr size_t kLoginsPerRequest = 2 * kParallelLogins;
// How often a batch starts the daemon again when it is gone between two requests.
constexpr int kDaemonRestarts = 3;

struct LoginOutcome {
  Status status;
  bool exists = false;
};

// Logs in to specs[which...] through a running daemon's socket: one "logins" request, or one
// "login" request each for a daemon older than the batches. An error only when the daemon cannot
// be reached (it is gone): then none of them was tried.
Result<std::vector<LoginOutcome>> LoginThroughSocket(const std::string& socket,
                                                     const std::vector<LoginSpec>& specs,
                                                     const std::vector<size_t>& which) {
  milliseconds per_round{0};
  Json logins = Json::array();
  std::set<std::string> targets;
  for (size_t i : which) {
    per_round = std::max(per_round, LoginReplyTimeout(specs[i].options));
    logins.push_back(LoginRequest(specs[i]));
    targets.insert(specs[i].url.target);
  }
  // A target asked twice waits for the others (HolderServer::LoginAll): a round each.
  const size_t rounds =
      (targets.size() + kParallelLogins - 1) / kParallelLogins + (which.size() - targets.size());
  std::vector<LoginOutcome> out(which.size());
  Result<int> fd = ConnectControl(socket);
  if (!fd.ok()) return fd.status();
  Status st = SendMessage(*fd, {{"op", "logins"}, {"logins", logins}});
  Result<Json> reply =
      st.ok() ? ReceiveMessage(*fd, per_round * static_cast<int>(rounds)) : Result<Json>(st);
  close(*fd);
  st = reply.ok() ? StatusOfReply(*reply) : reply.status();
  const Json results = reply.ok() ? reply->value("results", Json()) : Json();
  if (st.ok() && results.is_array() && results.size() == which.size()) {
    for (size_t k = 0; k < which.size(); ++k) {
      out[k] = {StatusOfReply(results[k]), results[k].value("exists", false)};
    }
    return out;
  }
  if (st.ok()) st = Status::ProtocolError("the session daemon's reply lists no result per login");
  if (st.code() != StatusCode::kInvalidArgument ||
      st.message().find("unknown control request") == std::string::npos) {
    for (LoginOutcome& o : out) o.status = st;
    return out;
  }
  for (size_t k = 0; k < which.size(); ++k) {
    const LoginSpec& spec = specs[which[k]];
    Result<Json> single = CallControl(socket, LoginRequest(spec), LoginReplyTimeout(spec.options));
    out[k].status = single.ok() ? StatusOfReply(*single) : single.status();
    if (out[k].status.ok()) out[k].exists = single->value("exists", false);
  }
  return out;
}

// The holders' sessions with these targets, by target (the first holder found for each). One
// target: a filtered status, which costs a holder one entry; more: one listing of the table.
std::map<std::string, HeldSession> HeldTargets(const std::set<std::string>& targets) {
  std::map<std::string, HeldSession> held;
  Result<std::vector<Json>> replies =
      HolderStatuses(targets.size() == 1 ? *targets.begin() : std::string());
  if (!replies.ok()) return held;
  for (const Json& reply : *replies) {
    for (const Json& session : reply.value("sessions", Json::array())) {
      const std::string target = session.value("target", std::string());
      if (targets.count(target) && !held.count(target)) {
        held[target] = HeldSession{reply.value("root", std::string()), session};
      }
    }
  }
  return held;
}

// Calls fn(socket, state file, state) for each holder that is gone: nobody listens on its socket,
// and the process its state file names no longer runs.
template <typename Fn>
void ForEachGoneHolder(const std::string& dir, Fn&& fn) {
  for (const std::string& socket : ListHolderSockets(dir)) {
    Result<int> fd = ConnectControl(socket);
    if (fd.ok()) {
      close(*fd);
      continue;
    }
    const std::string state_file = StateFileOfSocket(socket);
    Result<HolderState> state = ReadHolderState(state_file);
    if (state.ok() && !HolderProcessAlive(*state)) fn(socket, state_file, *state);
  }
}

}  // namespace

void LoginAllToDaemon(std::vector<LoginSpec> specs, const std::string& mountpoint,
                      const DaemonMain& daemon_main, bool new_session, const LoginDone& done) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < specs.size(); ++i) {
    IscsiUrl& url = specs[i].url;
    ConnectOptions& options = specs[i].options;
    Status st;
    if (url.target.empty()) {
      st = Status::InvalidArgument("the URL names no target: iscsi://HOST[:PORT]/TARGET[/LUN]");
    } else {
      // The daemon's environment is not this command's: the secrets and names travel resolved.
      st = ResolveCredentials(&url, options);
    }
    if (!st.ok()) {
      done(i, st);
      continue;
    }
    if (options.initiator_name.empty()) options.initiator_name = DefaultInitiatorName();
    todo.push_back(i);
  }
  if (todo.empty()) return;
  auto fail_all = [&](const Status& st, size_t from) {
    for (size_t k = from; k < todo.size(); ++k) done(todo[k], st);
  };
  bool created = false;
  std::string root = mountpoint;
  if (root.empty()) {
    Result<std::string> def = DefaultTreeRoot();
    if (!def.ok()) return fail_all(def.status(), 0);
    root = *def;
    if (mkdir(root.c_str(), 0755) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      return fail_all(Status::InvalidArgument("tree " + root + ": " + std::strerror(errno)), 0);
    }
  }
  Result<std::string> absolute = AbsolutePath(root);
  if (!absolute.ok()) return fail_all(absolute.status(), 0);
  const HolderPaths paths = PathsForRoot(*absolute);
  if (Status st = EnsureStateDir(paths.state_dir); !st.ok()) return fail_all(st, 0);
  const int lock = LockStateDir(paths.state_dir);
  if (!new_session) {
    std::set<std::string> targets;
    for (size_t i : todo) targets.insert(specs[i].url.target);
    const std::map<std::string, HeldSession> held = HeldTargets(targets);
    std::vector<size_t> rest;
    for (size_t i : todo) {
      auto h = held.find(specs[i].url.target);
      if (h == held.end()) {
        rest.push_back(i);
        continue;
      }
      DaemonLogin login{true, h->second.root, std::nullopt};
      if (h->second.session.contains("read_only")) {
        login.held_read_only = h->second.session["read_only"].get<bool>();
      }
      done(i, login);
    }
    todo = std::move(rest);
  }
  // The lock makes one daemon per tree: taken until it runs (found, or started with the first
  // login that succeeds), and again if it is gone between two batches (ended by a logout
  // elsewhere, or killed), so that the rest start a new one. The batches' logins do not hold it.
  int held_lock = lock;
  size_t next = 0;
  bool daemon_runs = false;
  bool daemon_ran = false;
  int restarts = 0;
  Status unreachable;
  while (next < todo.size()) {
    if (!daemon_runs) {
      if (daemon_ran && ++restarts > kDaemonRestarts) {
        fail_all(unreachable, next);
        break;
      }
      if (held_lock < 0) held_lock = LockStateDir(paths.state_dir);
      if (Result<int> fd = ConnectControl(paths.socket); fd.ok()) {
        close(*fd);
        daemon_runs = true;
      } else if (Status clean = CleanStale(paths); !clean.ok()) {
        // The daemon this batch used is ending (a logout elsewhere took its last session): its
        // state goes once it has unmounted, without the lock, which its end needs.
        if (daemon_ran && clean.code() == StatusCode::kAborted) {
          close(held_lock);
          held_lock = -1;
          unreachable = clean;
          WaitForEnd(paths);
          continue;
        }
        fail_all(clean, next);
        break;
      }
      while (!daemon_runs && next < todo.size()) {
        const size_t i = todo[next++];
        const Status st = StartDaemon(paths, specs[i], daemon_main, held_lock);
        daemon_runs = st.ok();
        done(i, daemon_runs ? Result<DaemonLogin>(DaemonLogin{false, paths.root, std::nullopt})
                            : Result<DaemonLogin>(st));
      }
      if (!daemon_runs) break;
      daemon_ran = true;
      if (held_lock >= 0) close(held_lock);
      held_lock = -1;
      continue;
    }
    const std::vector<size_t> batch(todo.begin() + static_cast<std::ptrdiff_t>(next),
                                    todo.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       todo.size(), next + kLoginsPerRequest)));
    Result<std::vector<LoginOutcome>> outcomes = LoginThroughSocket(paths.socket, specs, batch);
    if (!outcomes.ok()) {
      daemon_runs = false;
      unreachable = outcomes.status();
      continue;
    }
    for (size_t k = 0; k < batch.size(); ++k) {
      const LoginOutcome& o = (*outcomes)[k];
      done(batch[k], o.status.ok()
                         ? Result<DaemonLogin>(DaemonLogin{o.exists, paths.root, std::nullopt})
                         : Result<DaemonLogin>(o.status));
    }
    next += batch.size();
  }
  if (created && !daemon_ran) rmdir(paths.root.c_str());
  if (held_lock >= 0) close(held_lock);
}

Result<DaemonLogin> LoginToDaemon(LoginSpec spec, const std::string& mountpoint,
                                  const DaemonMain& daemon_main, bool new_session) {
  Result<DaemonLogin> out = Status::Aborted("no login was made");
  std::vector<LoginSpec> specs;
  specs.push_back(std::move(spec));
  LoginAllToDaemon(std::move(specs), mountpoint, daemon_main, new_session,
                   [&out](size_t, const Result<DaemonLogin>& r) { out = r; });
  return out;
}

namespace {

// One logout request on a holder's connection; what it logged out is added to done. A holder
// that ends with it closes the connection at its exit, which this waits for.
Status LogoutRequest(int fd, const Json& request, std::vector<LoggedOut>* done) {
  Status st = SendMessage(fd, request);
  Result<Json> reply = st.ok() ? ReceiveMessage(fd, kLogoutTimeout) : Result<Json>(st);
  st = reply.ok() ? StatusOfReply(*reply) : reply.status();
  if (reply.ok()) {
    const std::string root = reply->value("root", std::string());
    for (const Json& t : reply->value("targets", Json::array())) done->push_back({t, root});
    if (reply->value("exiting", false)) ReceiveMessage(fd, kExitTimeout).status().IgnoreError();
  }
  return st;
}

bool Matches(const LogoutSelection& which, const Json& session) {
  if (which.target && session.value("target", std::string()) != *which.target) return false;
  if (which.sid && session.value("sid", 0) != *which.sid) return false;
  if (!which.portal) return true;
  // A target with several paths matches the portal of any of them.
  auto at_portal = [&which](const Json& p) {
    return p.value("address", std::string()) == which.portal->host &&
           p.value("port", 0) == which.portal->port;
  };
  if (at_portal(session.value("portal", Json::object()))) return true;
  for (const Json& path : session.value("paths", Json::array())) {
    if (at_portal(path.value("portal", Json::object()))) return true;
  }
  return false;
}

}  // namespace

std::string LogoutSelection::ToString() const {
  if (all) return "--all";
  std::string text;
  if (target) text += " -T " + *target;
  if (portal) text += " -p " + portal->ToString();
  if (sid) text += " -r " + std::to_string(*sid);
  return text.empty() ? text : text.substr(1);
}

LogoutResult LogoutOfHolders(const LogoutSelection& which) {
  LogoutResult result;
  std::vector<LoggedOut>& done = result.done;
  bool any = false;
  Status& first = result.status;
  auto note = [&](const Status& st) {
    if (!st.ok() && st.code() != StatusCode::kNotFound && first.ok()) first = st;
  };
  if (which.all) {
    note(ForEachLiveTree([&](int fd, const std::string&) {
      any = true;
      note(LogoutRequest(fd, {{"op", "logout"}, {"all", true}}, &done));
    }));
  } else {
    // What each holder holds that matches, then one request per target: a holder ends with its
    // last session, so a list made first does not ask an ended one.
    Result<std::vector<Json>> statuses = HolderStatuses();
    if (!statuses.ok()) {
      first = statuses.status();
      return result;
    }
    any = !statuses->empty();
    for (const Json& reply : *statuses) {
      const std::string socket = reply.value("socket", std::string());
      for (const Json& s : reply.value("sessions", Json::array())) {
        if (!Matches(which, s)) continue;
        Result<int> fd = ConnectControl(socket);
        if (!fd.ok()) {
          note(fd.status());
          break;
        }
        note(LogoutRequest(*fd, {{"op", "logout"}, {"target", s.value("target", std::string())}},
                           &done));
        close(*fd);
      }
    }
  }
  if (!first.ok()) return result;
  if (!any) {
    first = Status::NotFound("no active sessions");
  } else if (done.empty()) {
    first = Status::NotFound(which.all ? "no active sessions"
                                       : "no session matches " + which.ToString());
  }
  return result;
}

std::optional<HeldSession> HolderOf(const std::string& target) {
  std::map<std::string, HeldSession> held = HeldTargets({target});
  if (held.empty()) return std::nullopt;
  return held.begin()->second;
}

Result<std::vector<Json>> HolderStatuses(const std::string& only_target) {
  std::vector<Json> out;
  Json request = {{"op", "status"}};
  if (!only_target.empty()) request["target"] = only_target;
  ISER_RETURN_IF_ERROR(ForEachLiveTree([&](int fd, const std::string& socket) {
    if (!SendMessage(fd, request).ok()) return;
    Result<Json> reply = ReceiveMessage(fd, kStatusTimeout);
    if (!reply.ok() || !StatusOfReply(*reply).ok()) return;
    (*reply)["socket"] = socket;
    out.push_back(*reply);
  }));
  return out;
}

std::vector<HolderState> StaleHolders() {
  std::vector<HolderState> out;
  const std::string dir = StateDir();
  if (!CheckStateDir(dir).ok()) return out;
  ForEachGoneHolder(dir, [&](const std::string&, const std::string&, const HolderState& state) {
    out.push_back(state);
  });
  return out;
}

void RemoveGoneHolders(const std::string& kind) {
  const std::string dir = StateDir();
  if (!CheckStateDir(dir).ok()) return;
  // Never waits: nbdkit is serving already, and a daemon starting holds the lock until it is
  // ready. What is left now goes with a later nbdkit.
  const int lock = TryLockStateDir(dir);
  if (lock < 0) return;
  bool removed = false;
  ForEachGoneHolder(
      dir, [&](const std::string& socket, const std::string& state_file, const HolderState& state) {
        if (state.kind != kind) return;
        Log(LogLevel::kInfo, "removing the state of " + kind + " pid " + std::to_string(state.pid) +
                                 ", which is gone");
        unlink(socket.c_str());
        unlink(state_file.c_str());
        removed = true;
      });
  if (removed) RemoveFreeSessionIds(dir);
  close(lock);
}

Result<std::vector<Json>> RescanHolders() {
  std::vector<Json> out;
  ISER_RETURN_IF_ERROR(ForEachLiveTree([&](int fd, const std::string& socket) {
    if (!SendMessage(fd, {{"op", "rescan"}}).ok()) return;
    Result<Json> reply = ReceiveMessage(fd, kRescanTimeout);
    if (!reply.ok()) return;
    // Only a tree's rescan knows its root; the others' is in their state file.
    if (!reply->contains("root")) {
      Result<HolderState> state = ReadHolderState(StateFileOfSocket(socket));
      (*reply)["root"] = state.ok() ? state->root : socket;
    }
    out.push_back(*reply);
  }));
  return out;
}

}  // namespace iser::sessions
