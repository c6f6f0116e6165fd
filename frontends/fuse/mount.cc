#include "frontends/fuse/mount.h"

#include <dirent.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frontends/fuse/block_file_system.h"
#include "frontends/fuse/detach.h"
#include "frontends/fuse/lun_files.h"
#include "frontends/fuse/unmount_guard.h"
#include "initiator/base/log.h"

namespace iser::fuse {

namespace {

// The mount point as an absolute path (the daemon changes to "/"), checked to be an existing
// empty directory: FUSE would otherwise hide whatever is there.
Result<std::string> CheckMountPoint(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("mount point " + path + " does not exist");
    return Status::InvalidArgument("mount point " + path + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("mount point " + path + " is not a directory");
  }
  DIR* dir = opendir(path.c_str());
  if (!dir) return Status::InvalidArgument("mount point " + path + ": " + std::strerror(errno));
  bool empty = true;
  while (dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  closedir(dir);
  if (!empty) return Status::InvalidArgument("mount point " + path + " is not empty");
  char resolved[PATH_MAX];
  if (!realpath(path.c_str(), resolved)) {
    return Status::InvalidArgument("mount point " + path + ": " + std::strerror(errno));
  }
  return std::string(resolved);
}

// Shown in /proc/mounts and df; commas would split the mount options.
std::string FsName(const IscsiUrl& url) {
  std::string name = "iser-connect:" + url.portal.ToString() + "/" + url.target;
  if (url.lun) name.append("/").append(std::to_string(*url.lun));
  for (char& c : name) {
    if (c == ',' || c == '\\') c = '_';
  }
  return name;
}

std::vector<std::string> FuseArgs(const MountOptions& o, bool read_only) {
  std::string mount_opts =
      "fsname=" + FsName(o.url) +
      ",subtype=iser-connect,default_permissions,max_read=" + std::to_string(kMaxFuseIo);
  if (o.allow_other) mount_opts += ",allow_other";
  if (o.auto_unmount) mount_opts += ",auto_unmount";
  if (read_only) mount_opts += ",ro";
  std::vector<std::string> args = {"iser-connect", "-o", mount_opts};
  if (o.fuse_debug) args.push_back("-d");
  return args;
}

Status WritePidFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::InvalidArgument("pid file " + path + ": " + std::strerror(errno));
  std::fprintf(f, "%d\n", static_cast<int>(getpid()));
  if (std::fclose(f) != 0) {
    return Status::IoError("pid file " + path + ": " + std::strerror(errno));
  }
  return Status::OK();
}

// Blocks the shutdown signals in this thread and every thread it starts from now on (the
// session's I/O thread), so that they reach the thread running the FUSE loop, whose wait they
// must interrupt.
class ShutdownSignalsBlocked {
 public:
  ShutdownSignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ShutdownSignalsBlocked() { Unblock(); }
  void Unblock() {
    if (blocked_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    blocked_ = false;
  }

 private:
  sigset_t old_;
  bool blocked_ = true;
};

// Once the FUSE loop has ended, a second SIGTERM (timeout(1) and process-group kills send one to
// the whole group, systemd may repeat it) must not kill the process before the SYNCHRONIZE CACHE
// and the logout: the shutdown signals are ignored from then on. libfuse's
// fuse_remove_signal_handlers restores a signal only while its own handler is installed, so it
// leaves these alone.
void IgnoreShutdownSignals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &ignore, nullptr);
}

// Drains nothing itself: by the time it runs, the FUSE loop has joined its workers, so every
// request has completed. Makes the data durable, then logs out.
Status FlushAndLogOut(Session& session, std::vector<LunFile>& files, bool read_only) {
  Status first;
  for (LunFile& f : files) {
    if (read_only || f.device->info().read_only) continue;
    Status st = f.device->Flush();
    if (!st.ok()) {
      Log(LogLevel::kError, "flush of " + f.name + " at unmount: " + st.ToString());
      if (first.ok()) first = st;
    }
  }
  Status st = session.Close();
  if (!st.ok()) {
    Log(LogLevel::kError, "logout at unmount: " + st.ToString());
    if (first.ok()) first = st;
  }
  return first;
}

// Connects, mounts, serves until unmounted or signalled, shuts down. ready: the detached
// child's reporter, or nullptr in the foreground.
Status Serve(const MountOptions& o, const std::string& mountpoint, ReadyReporter* ready) {
  // Forked first, while this process has no other thread.
  std::unique_ptr<UnmountGuard> guard = o.auto_unmount ? UnmountGuard::Start(mountpoint) : nullptr;
  ShutdownSignalsBlocked blocked;
  Result<std::shared_ptr<Session>> session = OpenSession(o.url, o.connect);
  if (!session.ok()) return session.status();
  Result<std::vector<LunFile>> files = OpenLunFiles(*session, o.url.lun);
  if (!files.ok()) {
    (*session)->Close().IgnoreError();
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

  std::vector<std::string> arg_strings = FuseArgs(o, read_only);
  std::vector<char*> argv;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se =
      fuse_session_new(&args, &BlockFileSystem::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  fuse_opt_free_args(&args);
  if (!se) {
    FlushAndLogOut(**session, fs.files(), read_only).IgnoreError();
    return Status::InvalidArgument("libfuse refused the mount options (see above)");
  }
  fuse_set_signal_handlers(se);
  blocked.Unblock();
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    FlushAndLogOut(**session, fs.files(), read_only).IgnoreError();
    return Status::IoError("cannot mount on " + mountpoint + " (libfuse's reason is above)");
  }
  if (guard) guard->Arm();
  Status result;
  if (!o.pidfile.empty()) result = WritePidFile(o.pidfile);
  if (result.ok()) {
    Log(LogLevel::kInfo, "mounted " + o.url.Redacted() + " on " + mountpoint);
    if (ready) ready->Ready();
    fuse_loop_config* loop = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(loop, o.max_threads);
    // Idle workers stay: at queue depth 32 threads would otherwise be created and destroyed
    // all the time.
    fuse_loop_cfg_set_idle_threads(loop, o.max_threads);
    // One /dev/fuse descriptor per worker: replies do not contend on a single file.
    fuse_loop_cfg_set_clone_fd(loop, 1);
    const int rc = fuse_session_loop_mt(se, loop);
    fuse_loop_cfg_destroy(loop);
    if (rc < 0) result = Status::IoError(std::string("FUSE loop: ") + std::strerror(-rc));
  }
  IgnoreShutdownSignals();
  fuse_remove_signal_handlers(se);
  fuse_session_unmount(se);
  Status st = FlushAndLogOut(**session, fs.files(), read_only);
  if (result.ok()) result = st;
  fuse_session_destroy(se);
  if (!o.pidfile.empty()) unlink(o.pidfile.c_str());
  Log(LogLevel::kInfo, "unmounted " + mountpoint);
  return result;
}

}  // namespace

Status RunMount(const MountOptions& options) {
  Result<std::string> mountpoint = CheckMountPoint(options.mountpoint);
  if (!mountpoint.ok()) return mountpoint.status();
  if (options.url.target.empty()) {
    return Status::InvalidArgument("the URL names no target: iscsi://HOST[:PORT]/TARGET[/LUN]");
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
  if (o.foreground) return Serve(o, *mountpoint, nullptr);
  Status parent_result;
  std::unique_ptr<ReadyReporter> reporter = ForkDetached(&parent_result);
  if (!reporter) return parent_result;
  const Status st = Serve(o, *mountpoint, reporter.get());
  if (!reporter->reported()) reporter->Fail(st);
  // The child never returns to the caller: its exit is the end of the mount.
  std::fflush(nullptr);
  _exit(st.ok() ? 0 : 1);
}

}  // namespace iser::fuse
