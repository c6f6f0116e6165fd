#include "frontends/fuse/size_watch.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "initiator/base/log.h"

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
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_) stop_cv_.WaitFor(&mu_, std::chrono::seconds(1));
      if (stop_) return;
    }
    for (size_t i = 0; i < files_.size(); ++i) {
      const uint64_t size = files_[i].device->size_bytes();
      if (size == told[i]) continue;
      told[i] = size;
      // A negative offset: the attributes only; the data is the same where both sizes hold it.
      const int rc = fuse_lowlevel_notify_inval_inode(se_, first_ino_ + i, -1, 0);
      if (rc != 0 && rc != -ENOENT) {
        Log(LogLevel::kWarning,
            "the kernel kept the cached size of " + files_[i].name + ": " + std::strerror(-rc));
      }
    }
  }
}

}  // namespace iser::fuse
