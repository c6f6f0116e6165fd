#include "frontends/fuse/size_watch.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "initiator/base/log.h"
#include "initiator/base/status.h"
#include "initiator/block/lun_info.h"
#include "initiator/session/session.h"

namespace iser::fuse {

SizeWatch::SizeWatch(std::vector<LunFile>& files, fuse_session* se, uint64_t first_ino)
    : files_(files), se_(se), first_ino_(first_ino), thread_([this] { Main(); }) {}

SizeWatch::~SizeWatch() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  thread_.join();
}

void SizeWatch::Main() {
  std::vector<uint64_t> told;
  for (const LunFile& f : files_) told.push_back(f.device->size_bytes());
  // Every file's device shares one set of paths, and a unit attention may come on any of them.
  uint64_t changes_seen = files_.empty() ? 0 : files_.front().device->paths().lun_changes();
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_) stop_cv_.WaitFor(&mu_, std::chrono::seconds(1));
      if (stop_) return;
    }
    // A LUN deleted and created again under its number gets no unit attention itself, but the
    // target's other LUNs do (3F/0E): then every LUN's identity is read again, so that a
    // descriptor kept open does not go on reading the old LUN's pages (an open checks too).
    std::vector<bool> replaced(files_.size(), false);
    const uint64_t changes = files_.empty() ? 0 : files_.front().device->paths().lun_changes();
    if (changes != changes_seen) {
      changes_seen = changes;
      for (size_t i = 0; i < files_.size(); ++i) {
        BlockDevice& device = *files_[i].device;
        Result<LunIdentity> now = ReadLunIdentity(device.paths(), device.info().lun);
        if (!now.ok()) {
          Log(LogLevel::kWarning, "cannot tell whether " + files_[i].name +
                                      " is still the LUN mounted: " + now.status().ToString());
        } else {
          replaced[i] = !KeepCachedPages(files_[i], *now, device.size_bytes());
        }
      }
    }
    for (size_t i = 0; i < files_.size(); ++i) {
      const uint64_t size = files_[i].device->size_bytes();
      if (size == told[i] && !replaced[i]) continue;
      told[i] = size;
      // Offset 0, length 0: the attributes and every cached page. Pages of a LUN that only grew
      // are still right, but tgtd resizes a LUN by creating it again with the deleted one's
      // identity, so a new size may be the only sign of other blocks.
      const int rc = fuse_lowlevel_notify_inval_inode(se_, first_ino_ + i, 0, 0);
      if (rc != 0 && rc != -ENOENT) {
        Log(LogLevel::kWarning, "the kernel kept the cached size or pages of " + files_[i].name +
                                    ": " + std::strerror(-rc));
      }
    }
  }
}

}  // namespace iser::fuse
