#include "frontends/fuse/size_watch.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "initiator/base/log.h"
#include "initiator/base/status.h"
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

namespace {

uint64_t ChangesOf(const Session& session) {
  return session.luns_changes() + session.capacity_changes();
}

}  // namespace

void SizeWatch::Main() {
  std::vector<uint64_t> told;
  for (const LunFile& f : files_) told.push_back(f.device->size_bytes());
  // Every file's device shares one session.
  uint64_t changes_seen = files_.empty() ? 0 : ChangesOf(files_.front().device->session());
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_) stop_cv_.WaitFor(&mu_, std::chrono::seconds(1));
      if (stop_) return;
    }
    std::vector<bool> replaced(files_.size(), false);
    if (!files_.empty()) {
      const uint64_t changes = ChangesOf(files_.front().device->session());
      if (changes != changes_seen) {
        changes_seen = changes;
        for (size_t i = 0; i < files_.size(); ++i) {
          Result<bool> same = SameLun(*files_[i].device);
          if (!same.ok()) {
            Log(LogLevel::kWarning, "cannot tell whether " + files_[i].name +
                                        " is still the LUN mounted: " + same.status().ToString());
          } else if (!*same) {
            Log(LogLevel::kWarning, files_[i].name +
                                        " is another LUN now (the target created it again under "
                                        "its number): the file serves the new one");
            replaced[i] = true;
          }
        }
      }
    }
    for (size_t i = 0; i < files_.size(); ++i) {
      const uint64_t size = files_[i].device->size_bytes();
      if (size == told[i] && !replaced[i]) continue;
      told[i] = size;
      // Offset 0, length 0: the attributes and every cached page.
      const int rc = fuse_lowlevel_notify_inval_inode(se_, first_ino_ + i, 0, 0);
      if (rc != 0 && rc != -ENOENT) {
        Log(LogLevel::kWarning, "the kernel kept the cached size or pages of " + files_[i].name +
                                    ": " + std::strerror(-rc));
      }
    }
  }
}

}  // namespace iser::fuse
