// Mutex, MutexLock and CondVar: std::mutex, std::lock_guard and std::condition_variable with
// clang's thread-safety annotations (base/thread_annotations.h), so that -Wthread-safety checks
// every access to ISER_GUARDED_BY state. Same semantics and cost as the std types they wrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "initiator/base/thread_annotations.h"

namespace iser {

class ISER_CAPABILITY("mutex") Mutex {
 public:
  void Lock() ISER_ACQUIRE() { mu_.lock(); }
  void Unlock() ISER_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ISER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ISER_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ISER_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits release the mutex while blocked and hold it again when they return, as
// std::condition_variable does; the caller holds it around the call.
class CondVar {
 public:
  void Wait(Mutex* mu) ISER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False when the timeout passed first.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) ISER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace iser
