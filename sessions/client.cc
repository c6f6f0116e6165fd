#include "sessions/client.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "initiator/base/log.h"
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
  if (state.ok() && HolderProcessAlive(state->pid)) {
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

// Calls fn with a connection to each live tree process. The state directory is checked as login
// checks it: a socket in a directory another user could write may be theirs, and the commands
// would hand it logouts or believe its answers. No directory: no tree process.
template <typename Fn>
Status ForEachLiveTree(Fn&& fn) {
  const std::string dir = StateDir();
  const Status checked = CheckStateDir(dir);
  if (checked.code() == StatusCode::kNotFound) return Status::OK();
  ISER_RETURN_IF_ERROR(checked);
  for (const std::string& socket : ListHolderSockets(dir)) {
    Result<int> fd = ConnectControl(socket);
    if (!fd.ok()) continue;  // stale: the next login to that tree cleans it up
    fn(*fd);
    close(*fd);
  }
  return Status::OK();
}

}  // namespace

Result<DaemonLogin> LoginToDaemon(LoginSpec spec, const std::string& mountpoint,
                                  const DaemonMain& daemon_main, bool new_session) {
  IscsiUrl& url = spec.url;
  ConnectOptions& options = spec.options;
  if (url.target.empty()) {
    return Status::InvalidArgument("the URL names no target: iscsi://HOST[:PORT]/TARGET[/LUN]");
  }
  // The daemon's environment is not this command's: the secrets and names travel resolved.
  ISER_RETURN_IF_ERROR(ResolveCredentials(&url, options));
  if (options.initiator_name.empty()) options.initiator_name = DefaultInitiatorName();
  bool created = false;
  std::string root = mountpoint;
  if (root.empty()) {
    Result<std::string> def = DefaultTreeRoot();
    if (!def.ok()) return def.status();
    root = *def;
    if (mkdir(root.c_str(), 0755) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      return Status::InvalidArgument("tree " + root + ": " + std::strerror(errno));
    }
  }
  Result<std::string> absolute = AbsolutePath(root);
  if (!absolute.ok()) return absolute.status();
  const HolderPaths paths = PathsForRoot(*absolute);
  ISER_RETURN_IF_ERROR(EnsureStateDir(paths.state_dir));
  const int lock = LockStateDir(paths.state_dir);
  DaemonLogin result{false, paths.root};
  Status st;
  std::optional<HeldSession> held;
  if (!new_session) held = HolderOf(url.target);
  if (held) {
    result = DaemonLogin{true, held->root, std::nullopt};
    if (held->session.contains("read_only")) {
      result.held_read_only = held->session["read_only"].get<bool>();
    }
    if (created) rmdir(paths.root.c_str());
  } else if (Result<int> fd = ConnectControl(paths.socket); fd.ok()) {
    st = SendMessage(*fd, LoginRequest(spec));
    Result<Json> reply =
        st.ok() ? ReceiveMessage(*fd, LoginReplyTimeout(options)) : Result<Json>(st);
    close(*fd);
    st = reply.ok() ? StatusOfReply(*reply) : reply.status();
    if (st.ok()) result.exists = reply->value("exists", false);
  } else {
    st = CleanStale(paths);
    if (st.ok()) st = StartDaemon(paths, spec, daemon_main, lock);
    if (!st.ok() && created) rmdir(paths.root.c_str());
  }
  if (lock >= 0) close(lock);
  if (!st.ok()) return st;
  return result;
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
  if (which.portal) {
    const Json& p = session.value("portal", Json::object());
    if (p.value("address", std::string()) != which.portal->host ||
        p.value("port", 0) != which.portal->port) {
      return false;
    }
  }
  return true;
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

Result<std::vector<LoggedOut>> LogoutOfHolders(const LogoutSelection& which) {
  std::vector<LoggedOut> done;
  bool any = false;
  Status first;
  auto note = [&](const Status& st) {
    if (!st.ok() && st.code() != StatusCode::kNotFound && first.ok()) first = st;
  };
  if (which.all) {
    ISER_RETURN_IF_ERROR(ForEachLiveTree([&](int fd) {
      any = true;
      note(LogoutRequest(fd, {{"op", "logout"}, {"all", true}}, &done));
    }));
  } else {
    // What each holder holds that matches, then one request per target: a holder ends with its
    // last session, so a list made first does not ask an ended one.
    Result<std::vector<Json>> statuses = HolderStatuses();
    if (!statuses.ok()) return statuses.status();
    any = !statuses->empty();
    for (const Json& reply : *statuses) {
      const std::string socket = PathsForRoot(reply.value("root", std::string())).socket;
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
  if (!first.ok()) return first;
  if (!any) return Status::NotFound("no active sessions");
  if (done.empty()) {
    return Status::NotFound(which.all ? "no active sessions"
                                      : "no session matches " + which.ToString());
  }
  return done;
}

std::optional<HeldSession> HolderOf(const std::string& target) {
  Result<std::vector<Json>> statuses = HolderStatuses(target);
  if (!statuses.ok()) return std::nullopt;
  for (const Json& reply : *statuses) {
    for (const Json& s : reply.value("sessions", Json::array())) {
      if (s.value("target", std::string()) == target) {
        return HeldSession{reply.value("root", std::string()), s};
      }
    }
  }
  return std::nullopt;
}

Result<std::vector<Json>> HolderStatuses(const std::string& only_target) {
  std::vector<Json> out;
  Json request = {{"op", "status"}};
  if (!only_target.empty()) request["target"] = only_target;
  ISER_RETURN_IF_ERROR(ForEachLiveTree([&](int fd) {
    if (!SendMessage(fd, request).ok()) return;
    Result<Json> reply = ReceiveMessage(fd, kStatusTimeout);
    if (reply.ok() && StatusOfReply(*reply).ok()) out.push_back(*reply);
  }));
  return out;
}

std::vector<HolderState> StaleHolders() {
  std::vector<HolderState> out;
  const std::string dir = StateDir();
  if (!CheckStateDir(dir).ok()) return out;
  for (const std::string& socket : ListHolderSockets(dir)) {
    Result<int> fd = ConnectControl(socket);
    if (fd.ok()) {
      close(*fd);
      continue;
    }
    Result<HolderState> state = ReadHolderState(StateFileOfSocket(socket));
    if (state.ok() && !HolderProcessAlive(state->pid)) out.push_back(*state);
  }
  return out;
}

Result<std::vector<Json>> RescanHolders() {
  std::vector<Json> out;
  ISER_RETURN_IF_ERROR(ForEachLiveTree([&](int fd) {
    if (!SendMessage(fd, {{"op", "rescan"}}).ok()) return;
    Result<Json> reply = ReceiveMessage(fd, kRescanTimeout);
    if (reply.ok()) out.push_back(*reply);
  }));
  return out;
}

}  // namespace iser::sessions
