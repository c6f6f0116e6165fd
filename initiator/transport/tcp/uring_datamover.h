// The io_uring iSCSI/TCP datamover: the PDU framing of TcpFramedDatamover (tcp_framing.h) driven
// by an io_uring of its own, on a thread named "iscsi-tcp-uring". The default where io_uring
// works (tcp_datamover_choice.h); TcpDatamover (epoll) is the fallback.
//
// One io_uring_enter per round of the I/O thread submits everything the round queued and waits
// for the next completion (or the 1 s tick): where the epoll datamover makes an epoll_wait, a
// readv per arriving chunk (plus one to hear EAGAIN when a read fills its buffers) and a writev,
// this makes one system call. At most one request of each kind is in flight:
//  - a receive (IORING_OP_RECVMSG) into the iovecs PlanReceive chose: the rest of a Data-In
//    segment straight into the task's buffer, then staging. One receive, not a multishot one
//    into provided buffers: the kernel then picks the buffer, and a 512 KiB read would be copied
//    once more out of it; small PDUs are copied out of staging either way. After a short
//    receive (the socket was empty) the next one polls first (IORING_RECVSEND_POLL_FIRST, Linux
//    5.19) instead of trying a read that would fail. When ReceiveCoalescing asks for a delay, a
//    timeout linked before the receive holds it back that long (IORING_TIMEOUT_ETIME_SUCCESS,
//    and IOSQE_CQE_SKIP_SUCCESS so that its completion is skipped: Linux 5.17, which the ring
//    reports as IORING_FEAT_CQE_SKIP), so the thread sleeps through the responses arriving
//    meanwhile and reads them in one go. Both are optional: coalescing is used only where the
//    ring reports IORING_FEAT_CQE_SKIP, and a kernel that refuses either (EINVAL on the receive
//    that polls first; EINVAL on the timeout, which ends the receive linked to it) turns it off
//    for the connection and gets its receive armed again, never a failed connection;
//  - a send (IORING_OP_SENDMSG) of the batch PendingSend built: every PDU the round queued, up
//    to IOV_MAX iovecs. PDUs queued while it is in flight go in the next batch; Retire may post
//    a cancel of it (below);
//  - a read of the eventfd that Wake writes, with the same protocol as IoLoop::Wake: while the
//    I/O thread works, Wake costs two atomic operations and no system call.
// The socket and the eventfd are registered files, and the ring's descriptor is registered with
// the thread; the ring is IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN where the
// kernel has them (6.1), so completions are run in the I/O thread's io_uring_enter, in a batch,
// instead of interrupting it.
//
// Completions are copied out of the completion queue, and the queue advanced, before any is
// handled: an event handler may call Retire or Fail, which reap completions themselves.
//
// Retire: where the send in flight reads the task's buffer, completions are first reaped without
// waiting (the send may be over: Sent accounts it and the rest of the batch is copied as
// tcp_framing.h says); if it is still in flight it is cancelled (IORING_OP_ASYNC_CANCEL: a send
// waiting for room in the socket writes nothing more) and reaped before Retire returns, and the
// framing copies what it did not write. Only a send the kernel cannot cancel (one running in a
// worker thread) ends the connection instead: the socket is shut down, the send reaped before
// Retire returns, and OnConnectionError reported by the I/O thread's loop once the handler that
// called Retire has returned. A receive in flight straight into the task's buffer (the rest of
// one of its Data-In segments) ends the connection the same way. Once the connection has failed
// nothing is in flight, and Retire is the framing's.
//
// Teardown: Fail shuts the socket down and reaps the receive and the send in flight (completing
// with an error or end of file, ignored) before it reports OnConnectionError, so no task is
// completed while the kernel may still write into its buffer (under DEFER_TASKRUN a receive
// woken by bytes that came before the shutdown copies them when the thread next enters the
// kernel). A wake read that completes meanwhile is handled as usual. Shutdown stops the thread,
// which first waits until no request of its own is in flight (they point into our buffers and
// the tasks'), so no task's buffer is written after Shutdown.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <semaphore>
#include <thread>

#include "initiator/transport/tcp/receive_coalescing.h"
#include "initiator/transport/tcp/tcp_framing.h"

namespace iser {

class UringDatamover final : public TcpFramedDatamover {
 public:
  UringDatamover() : TcpFramedDatamover("io_uring") {}
  ~UringDatamover() override;

  // Whether this process can run the datamover: sets up and tears down a ring as Start would.
  // The error names the refused call and errno (kernel.io_uring_disabled and seccomp profiles
  // such as Docker's default make io_uring_setup fail with EPERM).
  static Status Probe();

  void SetTimerPeriod(std::chrono::milliseconds period) override { tick_ = period; }
  Status Start(DatamoverEvents* events) override;
  void Wake() override;
  bool OnIoThread() const override { return std::this_thread::get_id() == thread_id_.load(); }
  void Shutdown() override;
  void Retire(Task* task) override;

  // What a kernel without an optional feature does, made to happen for real (tests): ring
  // features to ignore, and requests the kernel must refuse: the coalescing timeout (an unknown
  // timeout flag: EINVAL, and ECANCELED on the receive linked to it, as before 5.16) and the
  // receive that polls first (an unknown ioprio bit: EINVAL, as before 5.19). Before Start.
  struct TestFaults {
    unsigned cleared_features = 0;
    bool refuse_coalescing_timeout = false;
    bool refuse_poll_first = false;
  };
  void set_test_faults(const TestFaults& faults) { faults_ = faults; }

  // Read after Shutdown (tests): how many receives waited for ReceiveCoalescing's delay, how many
  // were armed to poll first, and whether each feature was still in use at the end.
  uint64_t delayed_receives() const { return delayed_receives_; }
  uint64_t polled_receives() const { return polled_receives_; }
  bool coalescing_in_use() const { return coalescing_usable_; }
  bool poll_first_in_use() const { return poll_first_usable_; }

 private:
  // user_data of each kind of request.
  // A receive behind a coalescing timeout is told apart: should the timeout be refused, the
  // receive ends with it, and its completion (-ECANCELED) comes or not depending on the kernel
  // (none since 5.17: a link whose skipped-on-success member fails posts nothing for the rest).
  enum Request : uint64_t {
    kReceive = 1,
    kLinkedReceive,
    kSend,
    kWakeRead,
    kCoalescingTimeout,
    kCancelSend
  };

  // A completion copied out of the completion queue; kHandled once taken out of turn.
  struct Completion {
    uint64_t request;
    int result;
  };
  static constexpr uint64_t kHandled = 0;
  // Fewer requests than this are ever in flight, so the completions copied out fit.
  static constexpr size_t kMaxCompletions = 16;

  void Run();
  // Copies what the completion queue holds into completions_, advancing it; clears the
  // in-flight flag of each request found.
  void TakeCompletions();
  void Complete(const Completion& completion);
  // Fail's first half: stops the framing, shuts the socket down and reaps the receive and the
  // send in flight.
  void StopConnection();
  void ReportFailure(const Status& status);
  // Reports what Retire failed from inside a handler, once that handler has returned.
  void ReportDeferredFailure();
  void OnReceived(int result);
  void OnSent(int result);
  void Arm();  // the receive, send and eventfd read the round calls for
  io_uring_sqe* NextSqe();
  void Drain();
  void Signal();  // writes the eventfd
  void Fail(Status status) override;

  io_uring ring_{};
  bool ring_open_ = false;
  std::chrono::milliseconds tick_{1000};  // OnTimer's period
  int wake_fd_ = -1;
  std::thread thread_;
  // Released once Start has stored thread_: the loop, and whatever its events start (the
  // session's recovery thread, which joins it through Shutdown), run only after that write.
  std::binary_semaphore started_{0};
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> stopping_{false};
  // As IoLoop's: poked_ is set by Wake(); awake_ is true while the I/O thread works between two
  // waits and will look at poked_ before the next one.
  std::atomic<bool> poked_{false};
  std::atomic<bool> awake_{false};

  // In flight, and what the kernel reads or writes while they are.
  bool receiving_ = false;
  bool sending_ = false;
  bool wake_armed_ = false;
  bool socket_empty_ = false;         // the last receive came back short
  bool receive_linked_ = false;       // the receive in flight is a kLinkedReceive
  bool receive_polls_first_ = false;  // the receive in flight was armed with POLL_FIRST
  ReceiveCoalescing coalescing_;
  __kernel_timespec coalescing_delay_{};  // read by the kernel when the timeout is submitted
  bool coalescing_usable_ = false;        // the ring has it and the kernel took it
  bool poll_first_usable_ = true;         // until a kernel refuses it
  TestFaults faults_;
  uint64_t delayed_receives_ = 0;
  uint64_t polled_receives_ = 0;
  Completion completions_[kMaxCompletions] = {};
  size_t completion_next_ = 0;  // the next to handle
  size_t completion_count_ = 0;
  // Retire failed the connection from inside an event handler: reported by the loop.
  bool failure_unreported_ = false;
  Status unreported_failure_;
  iovec rx_iov_[2] = {};
  msghdr rx_msg_{};
  msghdr tx_msg_{};
  uint64_t wake_count_ = 0;
};

}  // namespace iser
