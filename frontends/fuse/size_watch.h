// SizeWatch: makes a flat mount's LUN files show the sizes their LUNs have now. The kernel
// caches a file's attributes for kAttrTimeout, so a LUN the target resized would keep its old
// size in stat while reads and writes already follow the new one (BlockDevice::size_bytes()).
// A thread looks every second at the session's counts of UNIT ATTENTION 3F/0E (reported LUNs
// data has changed; tgtd's resize is a delete and a create) and 2A/09 (capacity data has
// changed); when one has moved it reads every LUN's capacity again and tells the kernel to drop
// the attributes it cached for each file. The LUNs a flat mount serves stay those it mounted:
// a tree (tree_server.h) also adds and removes files.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "frontends/fuse/lun_files.h"
#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/session/session.h"

namespace iser::fuse {

class SizeWatch {
 public:
  // File i of files has inode first_ino + i in se, which must stay mounted while this lives.
  SizeWatch(Session& session, std::vector<LunFile>& files, fuse_session* se, uint64_t first_ino);
  // Stops and joins the thread.
  ~SizeWatch();
  SizeWatch(const SizeWatch&) = delete;
  SizeWatch& operator=(const SizeWatch&) = delete;

 private:
  void Main();

  Session& session_;
  std::vector<LunFile>& files_;
  fuse_session* const se_;
  const uint64_t first_ino_;
  Mutex mu_;
  CondVar stop_cv_;
  bool stop_ ISER_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it uses the members above
};

}  // namespace iser::fuse
