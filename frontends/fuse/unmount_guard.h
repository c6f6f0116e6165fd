// UnmountGuard: the second half of auto_unmount. fusermount3 (3.14, and libfuse upstream to date)
// removes the mount of a process that died only if opening the mount point then fails with
// ENOTCONN. When its socket to the dead process closes before the kernel has aborted the FUSE
// connection (a worker thread can drop the last /dev/fuse reference a moment after the socket),
// the open fails with ECONNABORTED instead and the dead mount stays (docs/iser-connect-mount.md).
//
// The guard is a small process, forked while the caller is still single-threaded, holding the
// read end of a pipe whose write end only the serving process has. Once told which mount to watch
// (Arm), it waits for the pipe to close (the serving process ended, however), gives fusermount3 a
// moment, and if that same mount (same mount ID, same mount point) is still there it runs
// `fusermount3 -u -z` on it. A mount that ended normally is gone by then and the guard just
// exits; so does a guard never armed. It keeps no other descriptor (no /dev/fuse, no terminal).
#pragma once

#include <memory>
#include <string>

namespace iser::fuse {

class UnmountGuard {
 public:
  // Forks the guard; nullptr (and a warning) if that fails: the mount then relies on fusermount3
  // alone.
  static std::unique_ptr<UnmountGuard> Start(const std::string& mountpoint);
  UnmountGuard(const UnmountGuard&) = delete;
  UnmountGuard& operator=(const UnmountGuard&) = delete;
  // Closes our end of the pipe: the guard checks now.
  ~UnmountGuard();

  // Tells the guard to watch the newest mount on the mount point (the one just made).
  void Arm();

 private:
  UnmountGuard(int fd, std::string mountpoint) : fd_(fd), mountpoint_(std::move(mountpoint)) {}
  int fd_;
  std::string mountpoint_;
};

}  // namespace iser::fuse
