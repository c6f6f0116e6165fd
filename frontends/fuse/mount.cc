#include "frontends/fuse/mount.h"

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frontends/fuse/block_file_system.h"
#include "frontends/fuse/lun_files.h"
#include "frontends/fuse/serving.h"
#include "frontends/fuse/size_watch.h"
#include "frontends/fuse/tree_server.h"
#include "frontends/fuse/unmount_guard.h"
#include "initiator/base/log.h"
#include "sessions/detach.h"
#include "sessions/holder.h"
#include "sessions/state_dir.h"

namespace iser::fuse {

using sessions::ForkDetached;
using sessions::PathsForRoot;

namespace {

// Shown in /proc/mounts and df.
std::string FsName(const IscsiUrl& url) {
  std::string name = "iser-connect:" + url.portal.ToString() + "/" + url.target;
  if (url.lun) name.append("/").append(std::to_string(*url.lun));
  return name;
}

// A single-target mount in the session table (sessions/holder.h): `session` lists its session
// (its first path's, with every path), a logout of its target ends the
// mount and every path. It takes no logins: its mount point shows one target.
class MountHolder : public sessions::Holder {
 public:
  MountHolder(PathSet& paths, std::string target, std::vector<std::string> files, bool read_only,
              fuse_session* se)
      : paths_(paths),
        target_(std::move(target)),
        files_(std::move(files)),
        read_only_(read_only),
        se_(se),
        main_thread_(pthread_self()) {}

  Status Login(const sessions::LoginSpec& spec, bool* exists) override {
    *exists = spec.url.target == target_;
    if (*exists) return Status::OK();
    return Status::NotSupported("this mount serves " + target_ +
                                " only: mount another target elsewhere, or log in to it in the "
                                "session daemon's tree");
  }
  sessions::Json Logout(const sessions::Json& request, bool* last) override {
    if (!request.value("all", false) && request.value("target", std::string()) != target_) {
      return sessions::ReplyFor(
          Status::NotFound("no session with " + request.value("target", std::string())));
    }
    *last = true;  // the files go with the mount, which ends: Serve flushes and logs out
    sessions::Json reply = sessions::ReplyFor(Status::OK());
    reply["targets"] = sessions::Json::array({target_});
    return reply;
  }
  sessions::Json Sessions(const std::string& only_target) override {
    if (!only_target.empty() && only_target != target_) return sessions::Json::array();
    return sessions::Json::array({sessions::SessionStatus(paths_, target_, files_, read_only_)});
  }
  // The LUNs of a single-target mount are the ones it was mounted with (SizeWatch follows their
  // sizes): a rescan has nothing to add.
  void Rescan(int fd) override { sessions::ReplyNothingToRescan(fd); }
  void End() override { EndFuseLoop(se_, main_thread_); }

 private:
  PathSet& paths_;
  const std::string target_;
  const std::vector<std::string> files_;
  const bool read_only_;
  fuse_session* const se_;
  const pthread_t main_thread_;
};

// Connects, mounts, serves until unmounted or signalled, shuts down. ready: the detached
// child's reporter, or nullptr in the foreground.
Status Serve(const MountOptions& o, const std::string& mountpoint, ReadyReporter* ready) {
  // Forked first, while this process has no other thread.
  std::unique_ptr<UnmountGuard> guard = o.auto_unmount ? UnmountGuard::Start(mountpoint) : nullptr;
  ShutdownSignalsBlocked blocked;
  Result<std::shared_ptr<PathSet>> paths = OpenPaths(o.url, o.connect);
  if (!paths.ok()) return paths.status();
  Result<std::vector<LunFile>> files = OpenLunFiles(*paths, o.url.lun);
  if (!files.ok()) {
    sessions::LogOut(**paths).IgnoreError();
    return files.status();
  }
  bool all_read_only = true;
  for (const LunFile& f : *files) all_read_only &= f.device->info().read_only;
  const bool read_only = o.read_only || all_read_only;

  FileSystemConfig config;
  config.page_cache = o.page_cache;
  config.read_only = o.read_only;
  config.uid = getuid();
  config.gid = getgid();
  BlockFileSystem fs(std::move(files.value()), config);

  std::vector<std::string> arg_strings =
      FuseArgs({FsName(o.url), o.allow_other, o.auto_unmount, read_only, o.fuse_debug});
  std::vector<char*> argv;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se =
      fuse_session_new(&args, &BlockFileSystem::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  fuse_opt_free_args(&args);
  if (!se) {
    FlushAndLogOut(**paths, fs.files(), read_only).IgnoreError();
    return Status::InvalidArgument("libfuse refused the mount options (see above)");
  }
  fuse_set_signal_handlers(se);
  blocked.Unblock();
  if (Status st = MountFuseSession(se, mountpoint); !st.ok()) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    FlushAndLogOut(**paths, fs.files(), read_only).IgnoreError();
    return st;
  }
  if (guard) guard->Arm();
  std::vector<std::string> names;
  for (const LunFile& f : fs.files()) names.push_back(mountpoint + "/" + f.name);
  MountHolder holder(**paths, o.url.target, std::move(names), read_only, se);
  const sessions::HolderPaths table = PathsForRoot(mountpoint);
  sessions::HolderServer registration(table, "mount");
  Status result = registration.Register();
  if (result.ok() && !o.pidfile.empty()) result = WritePidFile(o.pidfile);
  const bool serve = result.ok();
  if (serve) {
    Log(LogLevel::kInfo, "mounted " + o.url.Redacted() + " on " + mountpoint);
    SizeWatch sizes(fs.files(), se, BlockFileSystem::kFirstFileIno);
    registration.Start(&holder);
    if (ready) ready->Ready();
    result = RunFuseLoop(se, o.max_threads);
  }
  IgnoreShutdownSignals();
  fuse_remove_signal_handlers(se);
  registration.Stop();
  // A login that finds no socket from now on waits for this lock, then for the unmount.
  const int lock = serve ? sessions::LockStateDir(table.state_dir) : -1;
  fuse_session_unmount(se);
  Status st = FlushAndLogOut(**paths, fs.files(), read_only);
  if (result.ok()) result = st;
  fuse_session_destroy(se);
  if (!o.pidfile.empty()) unlink(o.pidfile.c_str());
  Log(LogLevel::kInfo, "unmounted " + mountpoint);
  registration.Finish();
  if (lock >= 0) close(lock);
  return result;
}

// A URL without a target: every target of the portal, in a tree that rescans (tree_server.h).
Status ServePortal(const MountOptions& o, const std::string& mountpoint, ReadyReporter* ready) {
  TreeServerOptions so;
  so.paths = PathsForRoot(mountpoint);
  so.fs.page_cache = o.page_cache;
  so.fs.read_only = o.read_only;
  so.fs.uid = getuid();
  so.fs.gid = getgid();
  so.fuse = {"iser-connect:" + o.url.portal.ToString(), o.allow_other, o.auto_unmount, o.read_only,
             o.fuse_debug};
  so.max_threads = o.max_threads;
  so.pidfile = o.pidfile;
  so.portal = LoginSpec{o.url, o.connect, {.read_only = o.read_only}};
  return ServeTree(so, {}, ready);
}

Status ServeAny(const MountOptions& o, const std::string& mountpoint, ReadyReporter* ready) {
  if (o.url.target.empty()) return ServePortal(o, mountpoint, ready);
  return Serve(o, mountpoint, ready);
}

}  // namespace

Status RunMount(const MountOptions& options) {
  Result<std::string> mountpoint = CheckMountPoint(options.mountpoint);
  if (!mountpoint.ok()) return mountpoint.status();
  if (options.url.target.empty() && options.url.lun) {
    return Status::InvalidArgument("the URL names a LUN but no target");
  }
  MountOptions o = options;
  // The daemon works from "/" and removes the pid file at exit.
  if (!o.pidfile.empty() && o.pidfile[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) {
      return Status::InvalidArgument(std::string("current directory: ") + std::strerror(errno));
    }
    o.pidfile = std::string(cwd) + "/" + o.pidfile;
  }
  if (o.foreground) return ServeAny(o, *mountpoint, nullptr);
  Status parent_result;
  std::unique_ptr<ReadyReporter> reporter = ForkDetached(&parent_result);
  if (!reporter) return parent_result;
  const Status st = ServeAny(o, *mountpoint, reporter.get());
  if (!reporter->reported()) reporter->Fail(st);
  // The child never returns to the caller: its exit is the end of the mount.
  std::fflush(nullptr);
  _exit(st.ok() ? 0 : 1);
}

}  // namespace iser::fuse
