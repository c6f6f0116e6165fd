// The steps every FUSE-serving process of iser-connect shares (the flat mount, the whole-portal
// mount and the session daemon): checking the mount point, the libfuse arguments, the shutdown
// signals, the multi-threaded loop, and the flush and logout at the end.
#pragma once

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>

#include <string>
#include <vector>

#include "frontends/fuse/lun_files.h"
#include "initiator/base/status.h"
#include "initiator/paths/path_set.h"

namespace iser::fuse {

// The mount point as an absolute path (the daemon changes to "/"), checked to be an existing
// empty directory: FUSE would otherwise hide whatever is there.
Result<std::string> CheckMountPoint(const std::string& path);

struct FuseArgsSpec {
  std::string fsname;  // shown in /proc/mounts and df
  bool allow_other = false;
  bool auto_unmount = true;
  bool read_only = false;
  bool fuse_debug = false;
};
// The argv libfuse's fuse_session_new parses.
std::vector<std::string> FuseArgs(const FuseArgsSpec& spec);

// Writes this process's pid.
Status WritePidFile(const std::string& path);

// Blocks the shutdown signals in this thread and every thread it starts from now on (the
// session's I/O thread), so that they reach the thread running the FUSE loop, whose wait they
// must interrupt.
class ShutdownSignalsBlocked {
 public:
  ShutdownSignalsBlocked();
  ~ShutdownSignalsBlocked() { Unblock(); }
  ShutdownSignalsBlocked(const ShutdownSignalsBlocked&) = delete;
  ShutdownSignalsBlocked& operator=(const ShutdownSignalsBlocked&) = delete;
  void Unblock();

 private:
  sigset_t old_;
  bool blocked_ = true;
};

// Once the FUSE loop has ended, a second SIGTERM (timeout(1) and process-group kills send one to
// the whole group, systemd may repeat it) must not kill the process before the SYNCHRONIZE CACHE
// and the logout: the shutdown signals are ignored from then on. libfuse's
// fuse_remove_signal_handlers restores a signal only while its own handler is installed, so it
// leaves these alone.
void IgnoreShutdownSignals();

// libfuse's multi-threaded loop until the session exits (unmount or signal).
// fuse_session_mount, then InstallOpenFlags (open_flags.h); unmounted again if the second fails.
Status MountFuseSession(fuse_session* se, const std::string& mountpoint);
Status RunFuseLoop(fuse_session* se, unsigned max_threads);
// Ends RunFuseLoop on loop_thread from another thread: its wait is interrupted by the signal
// libfuse handles there (a holder's last logout).
void EndFuseLoop(fuse_session* se, pthread_t loop_thread);

// Drains nothing itself: by the time it runs, no request uses the files any more. Makes the data
// durable (SYNCHRONIZE CACHE on every writable LUN), then logs out of every path
// (sessions::LogOut). Returns the first error.
Status FlushAndLogOut(PathSet& paths, const std::vector<const LunFile*>& files, bool read_only);
Status FlushAndLogOut(PathSet& paths, std::vector<LunFile>& files, bool read_only);

}  // namespace iser::fuse
