#include "frontends/fuse/serving.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "frontends/fuse/lun_file_ops.h"
#include "frontends/fuse/open_flags.h"
#include "initiator/base/log.h"
#include "sessions/holder.h"

namespace iser::fuse {

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

std::vector<std::string> FuseArgs(const FuseArgsSpec& spec) {
  std::string fsname = spec.fsname;
  // Commas would split the mount options.
  for (char& c : fsname) {
    if (c == ',' || c == '\\') c = '_';
  }
  std::string mount_opts =
      "fsname=" + fsname +
      ",subtype=iser-connect,default_permissions,max_read=" + std::to_string(kMaxFuseIo);
  if (spec.allow_other) mount_opts += ",allow_other";
  if (spec.auto_unmount) mount_opts += ",auto_unmount";
  if (spec.read_only) mount_opts += ",ro";
  std::vector<std::string> args = {"iser-connect", "-o", mount_opts};
  if (spec.fuse_debug) args.push_back("-d");
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

ShutdownSignalsBlocked::ShutdownSignalsBlocked() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, &old_);
}

void ShutdownSignalsBlocked::Unblock() {
  if (blocked_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  blocked_ = false;
}

void IgnoreShutdownSignals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &ignore, nullptr);
}

void EndFuseLoop(fuse_session* se, pthread_t loop_thread) {
  fuse_session_exit(se);
  pthread_kill(loop_thread, SIGTERM);
}

Status MountFuseSession(fuse_session* se, const std::string& mountpoint) {
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    return Status::IoError("cannot mount on " + mountpoint + " (libfuse's reason is above)");
  }
  Status st = InstallOpenFlags(se);
  if (!st.ok()) fuse_session_unmount(se);
  return st;
}

Status RunFuseLoop(fuse_session* se, unsigned max_threads) {
  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, max_threads);
  // Idle workers stay: at queue depth 32 threads would otherwise be created and destroyed all
  // the time.
  fuse_loop_cfg_set_idle_threads(loop, max_threads);
  // One /dev/fuse descriptor per worker: replies do not contend on a single file.
  fuse_loop_cfg_set_clone_fd(loop, 1);
  const int rc = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  if (rc < 0) return Status::IoError(std::string("FUSE loop: ") + std::strerror(-rc));
  return Status::OK();
}

Status FlushAndLogOut(PathSet& paths, std::vector<LunFile>& files, bool read_only) {
  std::vector<const LunFile*> list;
  for (const LunFile& f : files) list.push_back(&f);
  return FlushAndLogOut(paths, list, read_only);
}

Status FlushAndLogOut(PathSet& paths, const std::vector<const LunFile*>& files, bool read_only) {
  Status first;
  for (const LunFile* f : files) {
    if (read_only || f->device->info().read_only) continue;
    Status st = f->device->Flush();
    if (!st.ok()) {
      Log(LogLevel::kError, "flush of " + f->name + " at logout: " + st.ToString());
      if (first.ok()) first = st;
    }
  }
  Status st = sessions::LogOut(paths);
  if (!st.ok()) {
    Log(LogLevel::kError, "logout of " + paths.target_name() + ": " + st.ToString());
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace iser::fuse
