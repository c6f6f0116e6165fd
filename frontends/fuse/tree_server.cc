#include "frontends/fuse/tree_server.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "discovery/discovery.h"
#include "frontends/fuse/lun_files.h"
#include "frontends/fuse/session_daemon.h"
#include "frontends/fuse/tree_file_system.h"
#include "frontends/fuse/unmount_guard.h"
#include "initiator/base/log.h"
#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/block/lun_info.h"
#include "initiator/login/negotiation.h"
#include "sessions/control.h"
#include "sessions/holder.h"

namespace iser::fuse {

using namespace sessions;  // the control protocol and the state directory it serves

namespace {

// The SIGHUP handler's way to the control thread (a whole-portal mount's rescan).
std::atomic<const HolderServer*> g_rescan_server{nullptr};

void RescanSignal(int) {
  if (const HolderServer* server = g_rescan_server.load()) server->PokeRescan();
}

class TreeServer : public Holder {
 public:
  explicit TreeServer(const TreeServerOptions& o) : o_(o), fs_(o.fs) {}

  Status Serve(const std::vector<LoginSpec>& initial, ReadyReporter* ready);

  // Holder: the control thread's requests (Login also on the threads of a batch, holder.h). A
  // login whose process options differ from this tree's is refused (CheckServeOptions).
  Status Login(const LoginSpec& spec, bool* exists) override;
  Json Logout(const Json& request, bool* last) override;
  Json Sessions(const std::string& only_target) override;
  // Has the watch thread rescan, then reply on fd (-1: SIGHUP's, only logged) and close it.
  void Rescan(int fd) override;
  // The FUSE loop ends (its wait is interrupted by the signal libfuse handles), and the main
  // thread finishes the rest.
  void End() override;

 private:
  Status CheckServeOptions(const ServeOptions& serve) const;
  Result<std::vector<DiscoveredTarget>> DiscoverPortal();
  struct ScanResult {
    Status status;  // of the discovery
    std::vector<std::string> added, removed;
    std::vector<std::pair<std::string, Status>> failed;
    // LUN files, as paths under the root ("<iqn>/lun<N>"), that appeared and went.
    std::vector<std::string> luns_added, luns_removed;
    Json ToJson() const;
  };
  // The portal's targets now: logs in to the new ones and out of the gone ones (whole-portal
  // mounts); then every target's LUNs and sizes are read again (RescanLuns).
  ScanResult RescanAll();
  // Discovers (again): logs in to the targets the portal added, out of those it dropped. what:
  // "discovery" (the first) or "rescan", for the log.
  void RescanPortal(ScanResult* r, const std::string& what);
  // One target's LUNs now (REPORT LUNS, unless the login named a LUN): files appear for new
  // disk LUNs and go for the LUNs gone; a LUN that is another one under the same number
  // (SameLun: its identity, or RefreshSize: its block size) gets a new file; every LUN's capacity
  // is read again (NotifySizes then tells the kernel about the sizes that changed).
  void RescanLuns(const TreeTargetView& t, ScanResult* r);
  // RescanLuns for the targets whose paths got UNIT ATTENTION 3F/0E (reported LUNs data has
  // changed) or 2A/09 (capacity data has changed) since the last look; then NotifySizes. The
  // watch thread calls it every kLunWatchInterval, between rescans.
  void RescanChangedLuns();
  // Tells the kernel to drop the attributes and pages it cached for each file whose LUN's size
  // is not the one it was last told (a rescan, a unit attention or an open read it again).
  void NotifySizes();
  Status StartLogins(const std::vector<LoginSpec>& initial);
  // The watch thread: RescanChangedLuns every kLunWatchInterval, and the rescans asked for.
  void WatchMain();
  Status RemoveAll();

  const TreeServerOptions o_;
  TreeFileSystem fs_;
  fuse_session* se_ = nullptr;
  pthread_t main_thread_{};
  // Set before the watch thread starts, which alone uses it; outlives it.
  const HolderServer* holder_server_ = nullptr;

  // Every SCSI command of the LUN watch and of the rescans runs on the watch thread: a target in
  // recovery holds them up to its replacement timeout, and the control thread, which answers
  // session, login and logout, must not wait with them.
  std::thread watch_;
  Mutex watch_mu_;
  CondVar watch_cv_;
  bool watch_stop_ ISER_GUARDED_BY(watch_mu_) = false;
  std::vector<int> rescans_ ISER_GUARDED_BY(watch_mu_);  // Rescan's, in order
  // Per target, its paths' lun_changes() when its LUNs were last read. A login sets it, the
  // watch thread reads and moves it.
  std::map<std::string, uint64_t> changes_seen_ ISER_GUARDED_BY(watch_mu_);
  // Per file ("<iqn>/lun<N>"), the size the kernel last got from us (watch thread only).
  std::map<std::string, uint64_t> sizes_told_;
};

// How often the watch thread looks for targets that reported changed LUNs or capacities: a unit
// attention a command got shows in the tree within about this long.
constexpr std::chrono::seconds kLunWatchInterval{1};

Status TreeServer::CheckServeOptions(const ServeOptions& serve) const {
  const std::string tree = "the tree " + o_.paths.root;
  const std::string fix =
      ": that is the whole tree's, set when its process starts; log out of "
      "every target of it first (logout --all), or use another --mountpoint";
  auto on_off = [](bool on) { return on ? "on" : "off"; };
  if (serve.page_cache && *serve.page_cache != o_.fs.page_cache) {
    return Status::InvalidArgument(tree + " runs with the page cache " + on_off(o_.fs.page_cache) +
                                   ", this login asks for it " + on_off(*serve.page_cache) + fix);
  }
  if (serve.allow_other && *serve.allow_other != o_.fuse.allow_other) {
    return Status::InvalidArgument(tree + " runs with allow_other " + on_off(o_.fuse.allow_other) +
                                   ", this login asks for it " + on_off(*serve.allow_other) + fix);
  }
  if (serve.threads && *serve.threads != o_.max_threads) {
    return Status::InvalidArgument(tree + " runs " + std::to_string(o_.max_threads) +
                                   " FUSE threads, this login asks for " +
                                   std::to_string(*serve.threads) + fix);
  }
  if (o_.fs.read_only && !serve.read_only) {
    return Status::InvalidArgument(tree +
                                   " is read-only as a whole (mounted -o ro): log in with "
                                   "-r, or mount the target elsewhere");
  }
  return Status::OK();
}

Status TreeServer::Login(const LoginSpec& spec, bool* exists) {
  *exists = fs_.Contains(spec.url.target);
  if (*exists) return Status::OK();
  ISER_RETURN_IF_ERROR(CheckServeOptions(spec.serve));
  Result<std::shared_ptr<PathSet>> paths = OpenPaths(spec.url, spec.options);
  if (!paths.ok()) return paths.status();
  Result<std::vector<LunFile>> files = OpenLunFiles(*paths, spec.url.lun);
  if (!files.ok()) {
    LogOut(**paths).IgnoreError();
    return files.status();
  }
  const uint64_t changes = (*paths)->lun_changes();
  // A login request (control thread) and a whole-portal mount's rescan (watch thread) may log in
  // to one target at once: the second is refused here and logs out again.
  const Status added =
      fs_.Add({spec.url.target, *paths, std::move(files.value()), !spec.url.lun.has_value(),
               spec.serve.read_only || o_.fs.read_only});
  if (!added.ok()) {
    LogOut(**paths).IgnoreError();
    *exists = fs_.Contains(spec.url.target);
    return *exists ? Status::OK() : added;
  }
  {
    // After Add, so that the refused login does not overwrite the count of the paths kept. A
    // watch that looks in between finds no count and reads the new target's LUNs once more.
    MutexLock lock(&watch_mu_);
    changes_seen_[spec.url.target] = changes;
  }
  Log(LogLevel::kInfo, "logged in to " + spec.url.Redacted());
  return Status::OK();
}

Result<std::vector<DiscoveredTarget>> TreeServer::DiscoverPortal() {
  IscsiUrl url = o_.portal->url;
  ISER_RETURN_IF_ERROR(ResolveCredentials(&url, o_.portal->options));
  Result<SessionOptions> so = DiscoverySessionOptionsFor(url, o_.portal->options);
  if (!so.ok()) return so.status();
  return DiscoverTargets(*so);
}

TreeServer::ScanResult TreeServer::RescanAll() {
  ScanResult r;
  if (o_.portal) RescanPortal(&r, "rescan");
  for (const TreeTargetView& t : fs_.Targets()) {
    // Those just logged in to have their LUNs read already.
    if (std::find(r.added.begin(), r.added.end(), t.name) == r.added.end()) RescanLuns(t, &r);
  }
  NotifySizes();
  return r;
}

void TreeServer::RescanLuns(const TreeTargetView& t, ScanResult* r) {
  {
    MutexLock lock(&watch_mu_);
    changes_seen_[t.name] = t.paths->lun_changes();
  }
  std::map<uint64_t, std::shared_ptr<const LunFile>> have;
  for (const auto& f : t.luns) have[f->device->info().lun] = f;
  std::set<uint64_t> reported;
  if (t.all_luns) {
    Result<std::vector<uint64_t>> luns = ReportLuns(*t.paths);
    if (!luns.ok()) {
      Log(LogLevel::kWarning, "LUN rescan of " + t.name + ": " + luns.status().ToString());
      return;
    }
    reported.insert(luns->begin(), luns->end());
  }
  auto add = [&](uint64_t lun) {
    Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(t.paths, lun);
    if (!dev.ok()) {
      // A controller or other non-disk LUN is not served, as at login.
      if (dev.status().code() != StatusCode::kNotSupported) {
        Log(LogLevel::kWarning, "LUN rescan of " + t.name + ": " + dev.status().ToString());
      }
      return;
    }
    const std::string path = t.name + "/" + LunFileName(lun);
    const uint64_t size = (*dev)->info().size_bytes;
    if (fs_.AddLun(t.name, LunFile{LunFileName(lun), std::move(dev.value())}).ok()) {
      Log(LogLevel::kInfo,
          "LUN rescan: " + path + " appeared (" + std::to_string(size) + " bytes)");
      r->luns_added.push_back(path);
    }
  };
  auto remove = [&](uint64_t lun) {
    const std::string path = t.name + "/" + LunFileName(lun);
    sizes_told_.erase(path);
    if (fs_.RemoveLun(t.name, *t.paths, LunFileName(lun)).ok()) {
      Log(LogLevel::kInfo, "LUN rescan: " + path + " is gone");
      r->luns_removed.push_back(path);
    }
  };
  for (uint64_t lun : reported) {
    if (!have.count(lun)) add(lun);
  }
  for (const auto& [lun, f] : have) {
    if (t.all_luns && !reported.count(lun)) {
      remove(lun);
      continue;
    }
    Result<LunIdentity> now = ReadLunIdentity(*t.paths, lun);
    if (!now.ok()) {
      Log(LogLevel::kWarning, "LUN rescan of " + t.name + ": " + now.status().ToString());
      continue;
    }
    const LunInfo& opened = f->device->info();
    if (!SameLun({opened.identifier, opened.serial}, *now)) {
      // Its file goes and comes back with another inode: nothing the kernel cached for the old
      // one (attributes, pages with --page-cache) reaches the new LUN.
      Log(LogLevel::kInfo, t.name + "/" + LunFileName(lun) +
                               " is another LUN now (the target created it again under its "
                               "number)");
      remove(lun);
      add(lun);
      continue;
    }
    Result<uint64_t> size = f->device->RefreshSize();
    if (size.status().code() == StatusCode::kNotSupported) {
      // Another LUN under the same number (deleted and created again with other blocks).
      Log(LogLevel::kInfo, size.status().message());
      remove(lun);
      add(lun);
    } else if (!size.ok()) {
      Log(LogLevel::kWarning, "LUN rescan of " + t.name + ": " + size.status().ToString());
    }
  }
}

void TreeServer::RescanChangedLuns() {
  for (const TreeTargetView& t : fs_.Targets()) {
    {
      MutexLock lock(&watch_mu_);
      if (t.paths->lun_changes() == changes_seen_[t.name]) continue;
    }
    ScanResult r;
    RescanLuns(t, &r);
  }
  NotifySizes();
}

void TreeServer::NotifySizes() {
  for (const TreeTargetView& t : fs_.Targets()) {
    for (const auto& f : t.luns) {
      const uint64_t size = f->device->size_bytes();
      auto [it, first] = sizes_told_.try_emplace(t.name + "/" + f->name, size);
      if (first || it->second == size) continue;
      it->second = size;
      fs_.SizeChanged(t.name, f->name);
    }
  }
}

void TreeServer::RescanPortal(ScanResult* out, const std::string& what) {
  ScanResult& r = *out;
  Result<std::vector<DiscoveredTarget>> found = DiscoverPortal();
  if (!found.ok()) {
    Log(LogLevel::kError,
        what + " of " + o_.portal->url.portal.ToString() + ": " + found.status().ToString());
    r.status = found.status();
    return;
  }
  std::set<std::string> names;
  for (const DiscoveredTarget& t : *found) {
    names.insert(t.name);
    LoginSpec spec = *o_.portal;
    spec.url.target = t.name;
    spec.url.portal = t.portals.front().portal;
    bool exists = false;
    const Status st = Login(spec, &exists);
    if (!st.ok()) {
      Log(LogLevel::kWarning, what + ": login to " + t.name + ": " + st.ToString());
      r.failed.emplace_back(t.name, st);
    } else if (!exists) {
      r.added.push_back(t.name);
    }
  }
  for (const std::string& name : fs_.Names()) {
    if (names.count(name)) continue;
    const Status st = fs_.Remove(name);
    if (!st.ok()) Log(LogLevel::kWarning, what + ": logout of " + name + ": " + st.ToString());
    r.removed.push_back(name);
  }
  if (!r.removed.empty() && holder_server_) holder_server_->SessionsEnded();
}

Json TreeServer::ScanResult::ToJson() const {
  Json reply = ReplyFor(status);
  reply["added"] = added;
  reply["removed"] = removed;
  Json f = Json::array();
  for (const auto& [name, st] : failed) f.push_back({{"target", name}, {"error", st.ToString()}});
  reply["failed"] = f;
  reply["luns_added"] = luns_added;
  reply["luns_removed"] = luns_removed;
  return reply;
}

Status TreeServer::StartLogins(const std::vector<LoginSpec>& initial) {
  bool exists = false;
  for (const LoginSpec& spec : initial) ISER_RETURN_IF_ERROR(Login(spec, &exists));
  if (!o_.portal) return Status::OK();
  ScanResult scan;
  RescanPortal(&scan, "discovery");
  ISER_RETURN_IF_ERROR(scan.status);
  if (!fs_.Names().empty()) return Status::OK();
  if (scan.failed.empty()) {
    return Status::NotFound("no targets found at " + o_.portal->url.portal.ToString());
  }
  // Every target refused: the first refusal says why, with its own code (e.g. CHAP's).
  const auto& [name, st] = scan.failed.front();
  return Status(st.code(), name + ": " + st.message());
}

Json TreeServer::Sessions(const std::string& only_target) {
  Json sessions = Json::array();
  for (const TreeTargetView& t : fs_.Targets()) {
    if (!only_target.empty() && t.name != only_target) continue;
    std::vector<std::string> files;
    for (const std::string& f : t.files) files.push_back(o_.paths.root + "/" + f);
    // One entry per target (SessionStatus lists its paths).
    sessions.push_back(SessionStatus(*t.paths, t.name, files, t.read_only));
  }
  return sessions;
}

Json TreeServer::Logout(const Json& request, bool* last) {
  std::vector<std::string> names;
  if (request.value("all", false)) {
    names = fs_.Names();
  } else {
    const std::string target = request.value("target", std::string());
    if (!fs_.Contains(target)) return ReplyFor(Status::NotFound("no session with " + target));
    names.push_back(target);
  }
  Status first;
  Json done = Json::array();
  for (const std::string& name : names) {
    const Status st = fs_.Remove(name);
    if (!st.ok() && first.ok()) first = st;
    done.push_back(name);
  }
  *last = fs_.Names().empty();
  Json reply = ReplyFor(first);
  reply["targets"] = done;
  return reply;
}

void TreeServer::Rescan(int fd) {
  MutexLock lock(&watch_mu_);
  rescans_.push_back(fd);
  watch_cv_.SignalAll();
}

void TreeServer::WatchMain() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_watch = Clock::now() + kLunWatchInterval;
  for (;;) {
    std::vector<int> rescans;
    {
      MutexLock lock(&watch_mu_);
      while (!watch_stop_ && rescans_.empty() && Clock::now() < next_watch) {
        watch_cv_.WaitFor(&watch_mu_, next_watch - Clock::now());
      }
      if (watch_stop_) {
        // The tree is going: a rescan still asked for gets no reply.
        for (int fd : rescans_) {
          if (fd >= 0) close(fd);
        }
        rescans_.clear();
        return;
      }
      rescans.swap(rescans_);
    }
    if (rescans.empty()) {
      RescanChangedLuns();
      next_watch = Clock::now() + kLunWatchInterval;
      continue;
    }
    // One rescan answers every request that waited for it.
    Json reply = RescanAll().ToJson();
    reply["root"] = o_.paths.root;
    for (int fd : rescans) {
      if (fd < 0) {
        Log(LogLevel::kInfo, "rescan: added " + reply["added"].dump() + ", removed " +
                                 reply["removed"].dump() + ", LUNs added " +
                                 reply["luns_added"].dump() + ", LUNs removed " +
                                 reply["luns_removed"].dump());
        continue;
      }
      SendMessage(fd, reply).IgnoreError();
      close(fd);
    }
  }
}

void TreeServer::End() {
  EndFuseLoop(se_, main_thread_);
}

Status TreeServer::RemoveAll() {
  Status first;
  for (const std::string& name : fs_.Names()) {
    const Status st = fs_.Remove(name);
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

Status TreeServer::Serve(const std::vector<LoginSpec>& initial, ReadyReporter* ready) {
  // Forked first, while this process has no other thread.
  std::unique_ptr<UnmountGuard> guard =
      o_.fuse.auto_unmount ? UnmountGuard::Start(o_.paths.root) : nullptr;
  ShutdownSignalsBlocked blocked;
  ISER_RETURN_IF_ERROR(EnsureStateDir(o_.paths.state_dir));
  ISER_RETURN_IF_ERROR(StartLogins(initial));

  std::vector<std::string> arg_strings = FuseArgs(o_.fuse);
  std::vector<char*> argv;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  se_ = fuse_session_new(&args, &TreeFileSystem::Ops(), sizeof(fuse_lowlevel_ops), &fs_);
  fuse_opt_free_args(&args);
  if (!se_) {
    RemoveAll().IgnoreError();
    return Status::InvalidArgument("libfuse refused the mount options (see above)");
  }
  if (Status st = MountFuseSession(se_, o_.paths.root); !st.ok()) {
    fuse_session_destroy(se_);
    RemoveAll().IgnoreError();
    return st;
  }
  if (guard) guard->Arm();
  fs_.SetNotifySession(se_);
  HolderServer holder(o_.paths, o_.portal ? "portal" : "daemon",
                      o_.portal ? o_.portal->url.portal.ToString() : std::string());
  Status result = holder.Register();
  if (result.ok() && !o_.pidfile.empty()) result = WritePidFile(o_.pidfile);
  const bool serve = result.ok();
  if (serve) {
    fuse_set_signal_handlers(se_);
    if (o_.portal) {
      g_rescan_server = &holder;
      struct sigaction hup {};
      hup.sa_handler = RescanSignal;
      sigemptyset(&hup.sa_mask);
      sigaction(SIGHUP, &hup, nullptr);
    }
    main_thread_ = pthread_self();
    // Started while the signals are blocked: it and the sessions it opens leave them to the
    // FUSE loop's thread.
    holder.Start(this);
    holder_server_ = &holder;
    watch_ = std::thread([this] { WatchMain(); });
    blocked.Unblock();
    Log(LogLevel::kInfo, "serving the tree " + o_.paths.root);
    if (ready) ready->Ready();
    result = RunFuseLoop(se_, o_.max_threads);
    IgnoreShutdownSignals();
    fuse_remove_signal_handlers(se_);
    g_rescan_server = nullptr;
    holder.Stop();
    {
      MutexLock lock(&watch_mu_);
      watch_stop_ = true;
      watch_cv_.SignalAll();
    }
    // Waits for a rescan under way, as the control thread did when it ran them.
    watch_.join();
  }
  holder.Stop();
  // A login that finds no socket from now on waits for this lock, then for the unmount. Not
  // before ready: the login that started this process holds the lock until then.
  const int lock = serve ? LockStateDir(o_.paths.state_dir) : -1;
  fs_.SetNotifySession(nullptr);
  fuse_session_unmount(se_);
  const Status st = RemoveAll();
  if (result.ok()) result = st;
  fuse_session_destroy(se_);
  if (!o_.pidfile.empty()) unlink(o_.pidfile.c_str());
  Log(LogLevel::kInfo, "unmounted " + o_.paths.root);
  holder.Finish();
  if (lock >= 0) close(lock);
  return result;
}

}  // namespace

Status ServeTree(const TreeServerOptions& options, const std::vector<LoginSpec>& initial,
                 ReadyReporter* ready) {
  TreeServer server(options);
  return server.Serve(initial, ready);
}

Status ServeSessionDaemon(const HolderPaths& paths, const LoginSpec& spec, ReadyReporter* ready) {
  Result<std::string> checked = CheckMountPoint(paths.root);
  if (!checked.ok()) return checked.status();
  // The first login sets what is the whole tree's; read-only is each target's own, so the tree
  // is never mounted read-only as a whole.
  TreeServerOptions so;
  so.paths = paths;
  so.fs.page_cache = spec.serve.page_cache.value_or(false);
  so.fs.uid = getuid();
  so.fs.gid = getgid();
  so.fuse.fsname = "iser-connect:sessions";
  so.fuse.allow_other = spec.serve.allow_other.value_or(false);
  so.max_threads = spec.serve.threads.value_or(kDefaultSessionDaemonThreads);
  return ServeTree(so, {spec}, ready);
}

}  // namespace iser::fuse
