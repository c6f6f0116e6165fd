#include "frontends/fuse/open_flags.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace iser::fuse {
namespace {

thread_local bool parallel_direct_writes_requested = false;

ssize_t ReadRequest(int fd, void* buf, size_t buf_len, void* /*userdata*/) {
  return ::read(fd, buf, buf_len);
}

// An open's reply is the out header and fuse_open_out, in two iovecs (fuse_reply_open).
ssize_t WriteReply(int fd, iovec* iov, int count, void* /*userdata*/) {
  if (!parallel_direct_writes_requested) return ::writev(fd, iov, count);
  parallel_direct_writes_requested = false;
  if (count != 2 || iov[0].iov_len != sizeof(fuse_out_header) ||
      iov[1].iov_len != sizeof(fuse_open_out)) {
    return ::writev(fd, iov, count);
  }
  fuse_out_header header;
  std::memcpy(&header, iov[0].iov_base, sizeof header);
  if (header.error != 0) return ::writev(fd, iov, count);
  fuse_open_out open;
  std::memcpy(&open, iov[1].iov_base, sizeof open);
  open.open_flags |= FOPEN_PARALLEL_DIRECT_WRITES;
  iovec out[2] = {iov[0], {&open, sizeof open}};
  return ::writev(fd, out, 2);
}

// Passed through so that libfuse keeps offering splice (it does not with custom I/O that lacks
// them).
ssize_t SpliceReceive(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                      unsigned int flags, void* /*userdata*/) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

ssize_t SpliceSend(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned int flags,
                   void* /*userdata*/) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

Status InstallOpenFlags(fuse_session* se) {
  static const fuse_custom_io io = {WriteReply, ReadRequest, SpliceReceive, SpliceSend};
  const int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));
  if (rc != 0) {
    return Status::IoError("libfuse refused our /dev/fuse I/O calls: " +
                           std::string(std::strerror(-rc)));
  }
  return Status::OK();
}

void AllowParallelDirectWritesInNextReply() {
  parallel_direct_writes_requested = true;
}

}  // namespace iser::fuse
