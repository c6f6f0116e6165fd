#include "initiator/transport/io_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace iser {

namespace {

std::string CallFailed(const std::string& call, int err) {
  return call + ": " + std::strerror(err);
}

const char* EpollOpName(int op) {
  switch (op) {
    case EPOLL_CTL_ADD:
      return "EPOLL_CTL_ADD";
    case EPOLL_CTL_MOD:
      return "EPOLL_CTL_MOD";
    default:
      return "EPOLL_CTL_DEL";
  }
}

}  // namespace

int MillisUntil(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

Status WaitFd(int fd, short events, Deadline deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MillisUntil(deadline));
    if (n > 0) return Status::OK();
    if (n == 0) return Status::Timeout("timed out " + what);
    if (errno != EINTR) return Status::ConnectionFailed(what + ": " + CallFailed("poll", errno));
  }
}

IoLoop::IoLoop(std::string thread_name, std::chrono::milliseconds tick)
    : thread_name_(std::move(thread_name)), tick_(tick) {}

IoLoop::~IoLoop() {
  Stop();
  for (int fd : {epoll_fd_, wake_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

Status IoLoop::Open() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return Status::ResourceExhausted(CallFailed("epoll_create1", errno));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::ResourceExhausted(CallFailed("eventfd", errno));
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) return Status::ResourceExhausted(CallFailed("timerfd_create", errno));
  ISER_RETURN_IF_ERROR(Control(EPOLL_CTL_ADD, wake_fd_, EPOLLIN));
  return Control(EPOLL_CTL_ADD, timer_fd_, EPOLLIN);
}

Status IoLoop::Control(int op, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, op, fd, &ev) == 0) return Status::OK();
  const int err = errno;
  return Status::ConnectionFailed(CallFailed(
      std::string("epoll_ctl(") + EpollOpName(op) + ", fd " + std::to_string(fd) + ")", err));
}

Status IoLoop::Add(int fd, uint32_t events, FdCallback on_ready) {
  ISER_RETURN_IF_ERROR(Control(EPOLL_CTL_ADD, fd, events));
  watches_.push_back({fd, std::move(on_ready)});
  return Status::OK();
}

Status IoLoop::Modify(int fd, uint32_t events) {
  return Control(EPOLL_CTL_MOD, fd, events);
}

Status IoLoop::Remove(int fd) {
  std::erase_if(watches_, [fd](const Watch& w) { return w.fd == fd; });
  return Control(EPOLL_CTL_DEL, fd, 0);
}

Status IoLoop::Start(IoLoopEvents* events) {
  events_ = events;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(tick_);
  const timespec period{static_cast<time_t>(seconds.count()),
                        static_cast<long>(std::chrono::nanoseconds(tick_ - seconds).count())};
  const itimerspec every{period, period};
  if (timerfd_settime(timer_fd_, 0, &every, nullptr) != 0) {
    return Status::ResourceExhausted(CallFailed("timerfd_settime", errno));
  }
  thread_ = std::thread([this] {
    started_.acquire();
    Run();
  });
  pthread_setname_np(thread_.native_handle(), thread_name_.c_str());
  started_.release();
  return Status::OK();
}

// poked_ is set before awake_ is read, and Run clears awake_ before it reads poked_ (all
// sequentially consistent): either Run sees the poke before it sleeps, or this sees that it may
// sleep and writes the eventfd. A burst of submissions while the loop works costs no system call.
void IoLoop::Wake() {
  poked_.store(true);
  if (!awake_.load()) Signal();
}

void IoLoop::Signal() {
  const uint64_t one = 1;
  ssize_t rc;
  do {
    rc = write(wake_fd_, &one, sizeof one);
  } while (rc < 0 && errno == EINTR);
}

void IoLoop::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  Signal();
  thread_.join();
}

void IoLoop::Run() {
  thread_id_.store(std::this_thread::get_id());
  events_->OnLoopStart();
  epoll_event ready[8];
  while (!stopping_) {
    awake_.store(false);
    const bool poked = poked_.exchange(false);
    // Poked: only a look at the descriptors, so that completions keep being read while
    // submissions keep coming.
    const int n = epoll_wait(epoll_fd_, ready, 8, poked ? 0 : -1);
    awake_.store(true);
    if (stopping_) break;
    if (poked) events_->OnWake();
    if (n < 0) {
      if (errno == EINTR) {
        // What OnWake queued, or a failure it deferred, is the round's end's to handle.
        if (poked) events_->OnRoundEnd();
        continue;
      }
      events_->OnLoopFailure(Status::ConnectionFailed(CallFailed("epoll_wait", errno)));
      break;
    }
    for (int i = 0; i < n; ++i) Dispatch(ready[i].data.fd, ready[i].events);
    events_->OnRoundEnd();
  }
  thread_id_.store(std::thread::id());
}

void IoLoop::Dispatch(int fd, uint32_t events) {
  // One read returns an eventfd's or timerfd's whole count and resets it.
  uint64_t count;
  if (fd == wake_fd_) {
    if (read(wake_fd_, &count, sizeof count) < 0 || stopping_) return;
    poked_.store(false);
    events_->OnWake();
  } else if (fd == timer_fd_) {
    if (read(timer_fd_, &count, sizeof count) < 0) return;
    events_->OnTick();
  } else {
    // A callback may add or remove descriptors, its own included, and the events of a removed
    // one may still be in this round: look each up, and call a copy of the callback.
    for (const Watch& w : watches_) {
      if (w.fd == fd) {
        const FdCallback on_ready = w.on_ready;
        on_ready(events);
        return;
      }
    }
  }
}

}  // namespace iser
