#include "initiator/transport/tcp/uring_datamover.h"

#include <limits.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace iser {

namespace {

// A receive (and the timeout before it), a send and an eventfd read are in flight at most.
constexpr unsigned kEntries = 8;
// Registered file indexes.
constexpr int kSocketFile = 0;
constexpr int kWakeFile = 1;
// Bits no kernel defines, for TestFaults: a timeout flag and a receive ioprio flag.
constexpr unsigned kUnknownTimeoutFlag = 1u << 31;
constexpr uint16_t kUnknownRecvFlag = 1u << 15;

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// ThreadSanitizer models every socket as one synchronization object that send calls release and
// receive calls acquire, so a peer in the same process (a test's fake target) and its reader are
// ordered. io_uring moves the bytes without a call it intercepts: under ThreadSanitizer a
// zero-length read after each receive (a zero-length recv would fail with EAGAIN on an empty
// socket, and a failed call acquires nothing) and a zero-length send before each send give it
// the same order. Nothing is read or written; other builds make neither call.
void SocketAcquireForThreadSanitizer(int fd) {
  if constexpr (kThreadSanitizer) {
    [[maybe_unused]] const ssize_t ignored = read(fd, nullptr, 0);
  }
}
void SocketReleaseForThreadSanitizer(int fd) {
  if constexpr (kThreadSanitizer) send(fd, nullptr, 0, MSG_DONTWAIT | MSG_NOSIGNAL);
}

std::string CallFailed(const std::string& call, int err) {
  return call + ": " + std::strerror(err);
}

// Sets up `ring` disabled (IORING_SETUP_R_DISABLED): the I/O thread enables it, and so becomes
// its single issuer. Kernels before 6.1 lack SINGLE_ISSUER and DEFER_TASKRUN, before 5.19
// COOP_TASKRUN: each is refused with EINVAL, and the next set is tried. The datamover needs
// IORING_FEAT_EXT_ARG (5.11) to wait with a timeout and no timeout request.
Status OpenRing(io_uring* ring) {
  static constexpr unsigned kFlagSets[] = {
      IORING_SETUP_R_DISABLED | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_R_DISABLED | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_R_DISABLED,
  };
  int rc = -EINVAL;
  for (const unsigned flags : kFlagSets) {
    io_uring_params params{};
    params.flags = flags;
    rc = io_uring_queue_init_params(kEntries, ring, &params);
    if (rc != -EINVAL) break;
  }
  if (rc < 0) return Status::NotSupported(CallFailed("io_uring_setup", -rc));
  if (!(ring->features & IORING_FEAT_EXT_ARG)) {
    io_uring_queue_exit(ring);
    return Status::NotSupported("io_uring lacks IORING_FEAT_EXT_ARG (Linux 5.11)");
  }
  return Status::OK();
}

}  // namespace

Status UringDatamover::Probe() {
  io_uring ring{};
  ISER_RETURN_IF_ERROR(OpenRing(&ring));
  io_uring_queue_exit(&ring);
  return Status::OK();
}

UringDatamover::~UringDatamover() {
  Shutdown();
  if (ring_open_) io_uring_queue_exit(&ring_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status UringDatamover::Start(DatamoverEvents* events) {
  if (fd_ < 0) return Status::ConnectionFailed("the io_uring datamover is not connected");
  StartFraming(events);
  ISER_RETURN_IF_ERROR(OpenRing(&ring_));
  ring_open_ = true;
  // A linked timeout that expires without cancelling its receive and posts nothing when it does:
  // ETIME_SUCCESS came in 5.16, CQE_SKIP_SUCCESS in 5.17, the feature bit with the latter.
  coalescing_usable_ = (ring_.features & ~faults_.cleared_features) & IORING_FEAT_CQE_SKIP;
  // Blocking: io_uring honours O_NONBLOCK on a read and would complete it with EAGAIN instead
  // of waiting. Nothing but this read and Wake's write use it.
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::ResourceExhausted(CallFailed("eventfd", errno));
  const int files[] = {fd_, wake_fd_};
  if (const int rc = io_uring_register_files(&ring_, files, 2); rc < 0) {
    return Status::ResourceExhausted(CallFailed("io_uring_register_files", -rc));
  }
  thread_ = std::thread([this] {
    started_.acquire();
    Run();
  });
  pthread_setname_np(thread_.native_handle(), "iscsi-tcp-uring");  // shows in top -H and bench
  started_.release();
  return Status::OK();
}

// As IoLoop::Wake: poked_ is set before awake_ is read, and Run clears awake_ before it reads
// poked_ (all sequentially consistent): either Run sees the poke before it waits, or this sees
// that it may wait and writes the eventfd.
void UringDatamover::Wake() {
  poked_.store(true);
  if (!awake_.load()) Signal();
}

void UringDatamover::Signal() {
  const uint64_t one = 1;
  ssize_t rc;
  do {
    rc = write(wake_fd_, &one, sizeof one);
  } while (rc < 0 && errno == EINTR);
}

void UringDatamover::Shutdown() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  Signal();
  thread_.join();
}

void UringDatamover::Fail(Status status) {
  if (failed_) return;
  StopConnection();
  ReportFailure(status);
}

void UringDatamover::StopConnection() {
  StopFraming();
  // The receive and send in flight end with an error or end of file, which is ignored; until
  // their completions are reaped the kernel may still write into a task's buffer or read it.
  ::shutdown(fd_, SHUT_RDWR);
  while (receiving_ || sending_) {
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) break;
    TakeCompletions();
  }
}

void UringDatamover::ReportDeferredFailure() {
  if (!failure_unreported_) return;
  failure_unreported_ = false;
  ReportFailure(unreported_failure_);
}

void UringDatamover::ReportFailure(const Status& status) {
  // The session's messages name the datamover (Describe); the cause names the connection.
  events_->OnConnectionError(status.WithContext("connection TCP " + peer_));
}

void UringDatamover::Retire(Task* task) {
  // Fail reaped what was in flight; a receive it reaped is not handled any more (OnReceived).
  if (failed_) {
    TcpFramedDatamover::Retire(task);
    return;
  }
  if (sending_ && BatchReaches(task)) {
    // The send may be over, its completion waiting in the queue; if not, a send waiting for
    // room in the socket (the kernel polls before it retries) is cancelled. Either way it ends
    // here, with the bytes it wrote, and what it did not write is the framing's to copy.
    io_uring_submit_and_get_events(&ring_);
    TakeCompletions();
    int cancel_result = 1;  // not yet known
    if (sending_) {
      io_uring_sqe* sqe = NextSqe();
      io_uring_prep_cancel64(sqe, kSend, 0);
      io_uring_sqe_set_data64(sqe, kCancelSend);
    }
    int send_error = 0;
    size_t next = completion_next_;
    for (;;) {
      for (; next < completion_count_; ++next) {
        Completion& c = completions_[next];
        if (c.request == kCancelSend) {
          c.request = kHandled;
          cancel_result = c.result;
        } else if (c.request == kSend) {
          c.request = kHandled;
          if (c.result >= 0) {
            Sent(static_cast<size_t>(c.result));
          } else if (c.result != -ECANCELED && c.result != -EINTR && c.result != -EAGAIN) {
            send_error = -c.result;
          }
        }
      }
      // A send the kernel is running in a worker thread cannot be cancelled (EALREADY), and a
      // peer that does not read makes it last for ever.
      if (!sending_ || cancel_result == -EALREADY) break;
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) break;
      TakeCompletions();
    }
    if (sending_ || send_error != 0) {
      // The loop reports the failure once the handler that called Retire has returned (the
      // session is inside it).
      StopConnection();
      failure_unreported_ = true;
      unreported_failure_ =
          send_error != 0
              ? Status::ConnectionFailed(CallFailed("send failed", send_error))
              : Status::ConnectionFailed(
                    "a task ended while a send of its data was in flight and could not be "
                    "cancelled: the connection is closed so that the target gets no more of its "
                    "buffer");
    }
  }
  // A receive straight into the task's buffer (the rest of one of its Data-In segments), in
  // flight or not yet accounted, ends with the connection too.
  bool receive_unhandled = receiving_;
  for (size_t i = completion_next_; i < completion_count_; ++i) {
    receive_unhandled |=
        completions_[i].request == kReceive || completions_[i].request == kLinkedReceive;
  }
  if (receive_unhandled && ReceiveReaches(task)) {
    StopConnection();
    failure_unreported_ = true;
    unreported_failure_ = Status::ConnectionFailed(
        "a task ended while a receive into its buffer was in flight: the connection is closed "
        "so that nothing more lands there");
  }
  TcpFramedDatamover::Retire(task);
}

io_uring_sqe* UringDatamover::NextSqe() {
  // A round prepares three requests at most and the queue has kEntries: should it ever be full,
  // submitting what it holds makes room.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void UringDatamover::Arm() {
  if (!wake_armed_ && !stopping_) {
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_read(sqe, kWakeFile, &wake_count_, sizeof wake_count_, 0);
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, kWakeRead);
    wake_armed_ = true;
  }
  if (failed_) return;
  if (!receiving_) {
    rx_msg_ = {};
    rx_msg_.msg_iov = rx_iov_;
    rx_msg_.msg_iovlen = static_cast<size_t>(PlanReceive(rx_iov_));
    const auto delay = coalescing_.Delay(events_->CommandsAwaitingResponse());
    receive_linked_ = coalescing_usable_ && delay.count() > 0;
    if (receive_linked_) {
      coalescing_delay_ = {0, delay.count()};
      io_uring_sqe* timeout = NextSqe();
      // ETIME_SUCCESS: the timeout expiring lets the linked receive run instead of cancelling
      // it; CQE_SKIP_SUCCESS: and posts nothing that would wake the thread.
      io_uring_prep_timeout(timeout, &coalescing_delay_, 0,
                            IORING_TIMEOUT_ETIME_SUCCESS |
                                (faults_.refuse_coalescing_timeout ? kUnknownTimeoutFlag : 0));
      timeout->flags |= IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
      io_uring_sqe_set_data64(timeout, kCoalescingTimeout);
      ++delayed_receives_;
    }
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_recvmsg(sqe, kSocketFile, &rx_msg_, 0);
    sqe->flags |= IOSQE_FIXED_FILE;
    // Not behind a delay: data has had time to arrive, and a refused POLL_FIRST would end the
    // link as a refused timeout does, costing coalescing too.
    receive_polls_first_ = socket_empty_ && poll_first_usable_ && !receive_linked_;
    if (receive_polls_first_) {
      sqe->ioprio |=
          IORING_RECVSEND_POLL_FIRST | (faults_.refuse_poll_first ? kUnknownRecvFlag : 0);
      ++polled_receives_;
    }
    io_uring_sqe_set_data64(sqe, receive_linked_ ? kLinkedReceive : kReceive);
    receiving_ = true;
  }
  if (!sending_) {
    const std::span<iovec> iov = PendingSend();
    if (!iov.empty()) {
      SocketReleaseForThreadSanitizer(fd_);
      tx_msg_ = {};
      tx_msg_.msg_iov = iov.data();
      tx_msg_.msg_iovlen = iov.size();
      io_uring_sqe* sqe = NextSqe();
      io_uring_prep_sendmsg(sqe, kSocketFile, &tx_msg_, MSG_NOSIGNAL);
      sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, kSend);
      sending_ = true;
    }
  }
}

void UringDatamover::Run() {
  thread_id_.store(std::this_thread::get_id());
  // liburing 2.3 declares io_uring_enable_rings but does not export it: the system call itself.
  if (syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) <
      0) {
    Fail(Status::ConnectionFailed(
        CallFailed("io_uring_register(IORING_REGISTER_ENABLE_RINGS)", errno)));
    thread_id_.store(std::thread::id());
    return;
  }
  // Saves looking the ring's descriptor up on every io_uring_enter; older kernels refuse it and
  // the descriptor is used as is.
  io_uring_register_ring_fd(&ring_);
  Clock::time_point next_tick = Clock::now() + tick_;
  while (!stopping_) {
    Arm();
    awake_.store(false);
    const bool poked = poked_.exchange(false);
    int rc;
    if (poked) {
      // Only a look at completions, so that they keep being read while submissions keep coming.
      rc = io_uring_submit_and_get_events(&ring_);
    } else {
      const auto left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(next_tick - Clock::now());
      __kernel_timespec timeout{};
      if (left.count() > 0) {
        timeout.tv_sec = left.count() / 1000000000;
        timeout.tv_nsec = left.count() % 1000000000;
      }
      io_uring_cqe* cqe = nullptr;
      rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &timeout, nullptr);
    }
    awake_.store(true);
    if (stopping_) break;
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      Fail(Status::ConnectionFailed(CallFailed("io_uring_enter", -rc)));
      break;
    }
    if (poked) events_->OnWake();
    TakeCompletions();
    // Handlers may add completions (Retire and Fail reap them), or take one out of turn.
    while (completion_next_ < completion_count_) Complete(completions_[completion_next_++]);
    completion_next_ = completion_count_ = 0;
    if (const Clock::time_point now = Clock::now(); now >= next_tick) {
      next_tick = now + tick_;
      events_->OnTimer();
    }
    // After every handler of the round, OnTimer's (command timeouts) included.
    ReportDeferredFailure();
  }
  ReportDeferredFailure();
  Drain();
  // The registration belongs to this thread: undone here, not by io_uring_queue_exit elsewhere.
  io_uring_unregister_ring_fd(&ring_);
  thread_id_.store(std::thread::id());
}

void UringDatamover::TakeCompletions() {
  unsigned head;
  unsigned seen = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    if (completion_count_ == kMaxCompletions) break;
    ++seen;
    switch (cqe->user_data) {
      case kReceive:
        receiving_ = false;
        break;
      case kLinkedReceive:
        // Ended already, with its refused timeout: nothing more to handle.
        if (!receive_linked_) continue;
        receive_linked_ = false;
        receiving_ = false;
        break;
      case kCoalescingTimeout:
        // Posted only when the timeout failed, so the receive linked to it never ran.
        if (receive_linked_) {
          receive_linked_ = false;
          receiving_ = false;
        }
        break;
      case kSend:
        sending_ = false;
        break;
      case kWakeRead:
        wake_armed_ = false;
        break;
    }
    completions_[completion_count_++] = {cqe->user_data, cqe->res};
  }
  io_uring_cq_advance(&ring_, seen);
}

void UringDatamover::Complete(const Completion& completion) {
  const int result = completion.result;
  switch (completion.request) {
    case kReceive:
    case kLinkedReceive: {
      const bool polled_first = receive_polls_first_;
      receive_polls_first_ = false;
      // What a kernel without the feature does: the next round arms the receive without it.
      if (completion.request == kLinkedReceive && result == -ECANCELED) {
        coalescing_usable_ = false;
      } else if (polled_first && result == -EINVAL) {
        poll_first_usable_ = false;
      } else {
        OnReceived(result);
      }
      break;
    }
    case kSend:
      OnSent(result);
      break;
    case kWakeRead:
      if (stopping_ || result < 0) break;
      poked_.store(false);
      events_->OnWake();
      break;
    case kCoalescingTimeout:
      // The kernel refused the timeout (TakeCompletions ended its receive).
      coalescing_usable_ = false;
      break;
  }
}

void UringDatamover::OnReceived(int result) {
  if (failed_) return;
  if (result > 0) {
    SocketAcquireForThreadSanitizer(fd_);
    socket_empty_ = Received(static_cast<size_t>(result));
    ParseReceived();
    const ReceivedSummary summary = TakeReceivedSummary();
    coalescing_.Received(Clock::now(), summary.responses, summary.r2t_or_large_data);
  } else if (result == 0) {
    Fail(Status::ConnectionFailed("the target closed the connection"));
  } else if (result != -EINTR && result != -EAGAIN) {
    Fail(Status::ConnectionFailed(CallFailed("receive failed", -result)));
  }
}

void UringDatamover::OnSent(int result) {
  if (failed_) return;
  if (result >= 0) {
    Sent(static_cast<size_t>(result));
  } else if (result != -EINTR && result != -EAGAIN) {
    Fail(Status::ConnectionFailed(CallFailed("send failed", -result)));
  }
}

// Every request in flight points into this datamover's buffers or a task's: end them and wait
// for their completions. Shutting the socket down ends the receive and the send, the eventfd
// write the read (kernels before 5.19 cannot cancel "any request", so nothing relies on it).
void UringDatamover::Drain() {
  if (receiving_ || sending_) ::shutdown(fd_, SHUT_RDWR);
  if (wake_armed_) Signal();
  while (receiving_ || sending_ || wake_armed_) {
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
    TakeCompletions();
    completion_next_ = completion_count_ = 0;
  }
}

}  // namespace iser
