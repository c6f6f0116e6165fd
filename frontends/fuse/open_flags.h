// Open flags the kernel takes and libfuse 3.14 has no field for. The kernel runs the direct
// writes to one FUSE file one at a time (each holds the inode's lock for its whole request), so
// eight threads writing to a LUN file had one write in flight, and a write held for a path's
// fence held them all. FOPEN_PARALLEL_DIRECT_WRITES in an open's reply (Linux 6.2) lets direct
// writes that do not extend the file share the lock; libfuse has a field for it only from 3.15
// (fuse_file_info::parallel_direct_writes), Debian 12 has 3.14.
//
// So a session's /dev/fuse traffic passes through our own read and write calls
// (fuse_session_custom_io), and the one open reply a handler asked for gets the flag.
//
// Contract: InstallOpenFlags once per session, after fuse_session_mount and before the loop.
// A handler calls AllowParallelDirectWritesInNextReply() on its thread right before
// fuse_reply_open() of a file opened for direct I/O (the kernel ignores the flag otherwise):
// libfuse sends a reply on the thread that replies, and the next reply that thread sends clears
// the request whatever it is. Kernels before 6.2 ignore the flag.
#pragma once

#include <fuse_lowlevel.h>

#include "initiator/base/status.h"

namespace iser::fuse {

Status InstallOpenFlags(fuse_session* se);

void AllowParallelDirectWritesInNextReply();

}  // namespace iser::fuse
