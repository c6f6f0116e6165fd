#include "frontends/fuse/size_watch.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "initiator/base/log.h"

namespace iser::fuse {

namespace {

uint64_t ChangesOf(const Session& session) {
  return session.luns_changes() + session.capacity_changes();
}

}  // namespace

SizeWatch::SizeWatch(Session& session, std::vector<LunFile>& files, fuse_session* se,
                     uint64_t first_ino)
    : session_(session),
      files_(files),
      se_(se),
      first_ino_(first_ino),
      thread_([this] { Main(); }) {}

SizeWatch::~SizeWatch() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  thread_.join();
}

void SizeWatch::Main() {
  uint64_t seen = ChangesOf(session_);
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_) stop_cv_.WaitFor(&mu_, std::chrono::seconds(1));
      if (stop_) return;
    }
    const uint64_t changes = ChangesOf(session_);
    if (changes == seen) continue;
    seen = changes;
    for (size_t i = 0; i < files_.size(); ++i) {
      Result<uint64_t> size = files_[i].device->RefreshSize();
      if (!size.ok()) {
        Log(LogLevel::kWarning, files_[i].name + ": " + size.status().ToString());
        continue;
      }
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
