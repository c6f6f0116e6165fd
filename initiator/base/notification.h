// Notification: a one-shot event that one thread waits for and another signals; how synchronous
// callers (Session::Execute, BlockDevice's synchronous methods, the frontends' threads) wait for
// a completion that runs on the session's I/O thread.
//
// Wait() sleeps in futex(2) at once, and Notify() makes one FUTEX_WAKE, only if the waiter
// sleeps. Not std::binary_semaphore: libstdc++ 12 spins with sched_yield before it sleeps, and
// with dozens of nbdkit or FUSE threads waiting that spinning cost a fifth of the plugin's CPU
// time. Not a mutex and a condition variable either: the waiter may destroy the Notification as
// soon as Wait() returns, so Notify() would have to signal while holding the lock, waking the
// waiter into a held mutex (two more futex calls and a context switch per I/O). Here Notify()
// touches the object only with the exchange; the FUTEX_WAKE after it reads no memory, and a
// wake-up that reaches whatever reuses the address is spurious, which every futex waiter
// tolerates.
//
// Notify() is called at most once, from any thread; Wait() at most once.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace iser {

class Notification {
 public:
  void Notify() {
    if (state_.exchange(kDone, std::memory_order_acq_rel) == kWaiting) {
      syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

  void Wait() {
    uint32_t expected = kIdle;
    if (!state_.compare_exchange_strong(expected, kWaiting, std::memory_order_acq_rel)) return;
    // EINTR and EAGAIN (Notify came first) both end in the check.
    while (state_.load(std::memory_order_acquire) != kDone) {
      syscall(SYS_futex, &state_, FUTEX_WAIT_PRIVATE, kWaiting, nullptr, nullptr, 0);
    }
  }

 private:
  static constexpr uint32_t kIdle = 0;
  static constexpr uint32_t kWaiting = 1;
  static constexpr uint32_t kDone = 2;
  // futex(2) operates on the 32-bit word itself.
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  std::atomic<uint32_t> state_{kIdle};
};

}  // namespace iser
