// SizeWatch: makes a flat mount's LUN files show the sizes their LUNs have now. The kernel
// caches a file's attributes for kAttrTimeout, so a LUN the target resized would keep its old
// size in stat while reads and writes already follow the new one (BlockDevice::size_bytes(),
// read again after UNIT ATTENTION 3F/0E or 2A/09 and at each open). A thread looks at every
// file's size each second and, when it is not the one the kernel last got, tells the kernel to
// drop the attributes and the pages it cached (with --page-cache): a LUN deleted and created
// again under its number may come back with another size and other blocks. After such a unit
// attention it also reads each LUN's identity (KeepCachedPages, as each open does); a LUN that is
// another one now keeps its file, which serves the new LUN, and the kernel drops its pages too.
// The LUNs a flat mount serves stay those it mounted: a tree (tree_server.h) also adds and
// removes files.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "frontends/fuse/lun_files.h"
#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"

namespace iser::fuse {

class SizeWatch {
 public:
  // File i of files has inode first_ino + i in se, which must stay mounted while this lives.
  SizeWatch(std::vector<LunFile>& files, fuse_session* se, uint64_t first_ino);
  // Stops and joins the thread.
  ~SizeWatch();
  SizeWatch(const SizeWatch&) = delete;
  SizeWatch& operator=(const SizeWatch&) = delete;

 private:
  void Main();

  std::vector<LunFile>& files_;
  fuse_session* const se_;
  const uint64_t first_ino_;
  Mutex mu_;
  CondVar stop_cv_;
  bool stop_ ISER_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it uses the members above
};

}  // namespace iser::fuse
