// IoLoop: the I/O thread of one connection, shared by the transports. It owns an epoll set, an
// eventfd for wake-ups and a timerfd for a periodic tick, runs a named thread that waits on them,
// and dispatches what is ready: each registered descriptor to its own callback, the eventfd to
// IoLoopEvents::OnWake, the timerfd to IoLoopEvents::OnTick, and after every round of events
// IoLoopEvents::OnRoundEnd (where a transport writes out what the round queued).
//
// Contract:
//  - Open creates the descriptors; Add/Modify/Remove then change which descriptors the loop
//    watches, from the thread that opened the loop before Start, or on the loop thread after it.
//    Every epoll_ctl and timerfd_settime result is checked: a failure returns a Status naming
//    the call, the descriptor and errno.
//  - Start runs the thread; every event, callback included, runs on it. Stop (not from the loop
//    thread) ends and joins it; it is idempotent and the destructor calls it.
//  - Wake may be called from any thread at any time (before Open it does nothing): OnWake runs
//    on the loop thread after the call. Wake calls that arrive before OnWake has run coalesce
//    into one OnWake (two at most, when one came through the eventfd and another was seen
//    before the loop slept). While the loop thread is busy, Wake costs two atomic operations
//    and no system call.
//  - OnIoThread is true exactly on the loop thread, from any thread, without a data race.
//  - Timers: one periodic tick (the period is the constructor's). Deadlines finer than that
//    (command timeouts, reconnect back-off) are measured against the transport's clock at the
//    tick, so that they all live on this thread.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/transport/datamover.h"

namespace iser {

// The milliseconds left until `deadline` for poll or epoll_wait: 0 when it has passed.
int MillisUntil(Deadline deadline);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT); Timeout at the deadline. For the
// login phase, before the loop runs. `what` says what was waited for, in messages.
Status WaitFd(int fd, short events, Deadline deadline, const std::string& what);

// What the loop calls, on its thread.
class IoLoopEvents {
 public:
  virtual ~IoLoopEvents() = default;
  // First thing on the new thread, before any event.
  virtual void OnLoopStart() {}
  // Wake() was called.
  virtual void OnWake() = 0;
  // The periodic tick.
  virtual void OnTick() = 0;
  // After each round of events.
  virtual void OnRoundEnd() = 0;
  // The loop cannot go on (epoll_wait failed): called once, then the thread ends.
  virtual void OnLoopFailure(const Status& status) = 0;
};

class IoLoop {
 public:
  // Called with the epoll events (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP) that are ready.
  using FdCallback = std::function<void(uint32_t events)>;

  // `thread_name` (at most 15 characters) shows in /proc/PID/task/*/comm and top -H.
  IoLoop(std::string thread_name, std::chrono::milliseconds tick);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  Status Open();
  // The tick's period, before Start.
  void set_tick(std::chrono::milliseconds tick) { tick_ = tick; }
  Status Add(int fd, uint32_t events, FdCallback on_ready);
  Status Modify(int fd, uint32_t events);
  // The callback is dropped even when epoll_ctl fails; no event of `fd` reaches it afterwards.
  Status Remove(int fd);
  Status Start(IoLoopEvents* events);
  void Wake();
  bool OnIoThread() const { return std::this_thread::get_id() == thread_id_.load(); }
  void Stop();

 private:
  struct Watch {
    int fd;
    FdCallback on_ready;
  };

  void Run();
  void Signal();  // writes the eventfd
  Status Control(int op, int fd, uint32_t events);
  void Dispatch(int fd, uint32_t events);

  const std::string thread_name_;
  std::chrono::milliseconds tick_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int timer_fd_ = -1;
  IoLoopEvents* events_ = nullptr;
  std::vector<Watch> watches_;  // a connection watches one or two descriptors: a linear search
  std::thread thread_;
  // Released once Start has stored thread_: the loop, and whatever its events start (the
  // session's recovery thread, which joins it through Shutdown), run only after that write.
  std::binary_semaphore started_{0};
  // Written by the loop thread as it starts and ends, read by any thread in OnIoThread: atomic,
  // so a reader sees either the loop thread's id or none, never a torn or stale-cached value.
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> stopping_{false};
  // Wake-ups: poked_ is set by Wake(); awake_ is true while the loop thread runs between two
  // epoll_waits and will look at poked_ before the next one, so Wake() need not write the eventfd.
  std::atomic<bool> poked_{false};
  std::atomic<bool> awake_{false};
};

}  // namespace iser
