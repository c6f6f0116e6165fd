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
//    receive (the socket was empty) the next one polls first (IORING_RECVSEND_POLL_FIRST)
//    instead of trying a read that would fail. When ReceiveCoalescing asks for a delay, a
//    timeout linked before the receive holds it back that long (its completion is skipped), so
//    the thread sleeps through the responses arriving meanwhile and reads them in one go;
//  - a send (IORING_OP_SENDMSG) of the batch PendingSend built: every PDU the round queued, up
//    to IOV_MAX iovecs. PDUs queued while it is in flight go in the next batch;
//  - a read of the eventfd that Wake writes, with the same protocol as IoLoop::Wake: while the
//    I/O thread works, Wake costs two atomic operations and no system call.
// The socket and the eventfd are registered files, and the ring's descriptor is registered with
// the thread; the ring is IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN where the
// kernel has them (6.1), so completions are run in the I/O thread's io_uring_enter, in a batch,
// instead of interrupting it.
//
// Teardown: Fail shuts the socket down (what is in flight completes with an error and is
// ignored); Shutdown stops the thread, which first waits until no request of its own is in flight
// (they point into our buffers and the tasks'), so no task's buffer is written after Shutdown.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
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

  Status Start(DatamoverEvents* events) override;
  void Wake() override;
  bool OnIoThread() const override { return std::this_thread::get_id() == thread_id_.load(); }
  void Shutdown() override;

  // How many receives waited for ReceiveCoalescing's delay. Read after Shutdown (tests).
  uint64_t delayed_receives() const { return delayed_receives_; }

 private:
  // user_data of each kind of request.
  enum Request : uint64_t { kReceive = 1, kSend, kWakeRead, kCoalescingTimeout };

  void Run();
  void Complete(uint64_t request, int result);
  void OnReceived(int result);
  void OnSent(int result);
  void Arm();  // the receive, send and eventfd read the round calls for
  io_uring_sqe* NextSqe();
  void Drain();
  void Signal();  // writes the eventfd
  void Fail(Status status) override;

  io_uring ring_{};
  bool ring_open_ = false;
  int wake_fd_ = -1;
  std::thread thread_;
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
  bool socket_empty_ = false;  // the last receive came back short
  ReceiveCoalescing coalescing_;
  __kernel_timespec coalescing_delay_{};  // read by the kernel when the timeout is submitted
  uint64_t delayed_receives_ = 0;
  iovec rx_iov_[2] = {};
  msghdr rx_msg_{};
  msghdr tx_msg_{};
  uint64_t wake_count_ = 0;
};

}  // namespace iser
