// Both iSCSI/TCP datamovers (tcp_datamover.h: epoll; uring_datamover.h: io_uring) against a peer
// that is a plain socket in the test: a Data-In segment much larger than one read lands in the
// task's buffer and the PDU behind it is parsed; thousands of PDUs queued in one wake-up reach
// the peer complete and in order however the socket cuts the sends; Shutdown returns while a send
// waits for a peer that never reads; a closed connection is reported once, naming the connection;
// with many commands waiting, receives held back (io_uring) still bring every response.
// Then how a process chooses between them (tcp_datamover_choice.h): forced by
// ISER_CONNECT_TCP_DATAMOVER, and the fallback when io_uring_setup is refused (a seccomp filter
// on the choosing thread, as Docker's default profile refuses it), with its log line.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "initiator/base/log.h"
#include "initiator/base/mutex.h"
#include "initiator/task/task.h"
#include "initiator/transport/portal.h"
#include "initiator/transport/tcp/tcp_datamover_choice.h"
#include "initiator/transport/tcp/uring_datamover.h"

namespace iser {
namespace {

using std::chrono::milliseconds;

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Records the events, and runs `on_wake` (on the I/O thread) at each wake-up.
class Events : public DatamoverEvents {
 public:
  void OnWake() override {
    if (on_wake) on_wake();
  }
  void OnTimer() override {}
  Status PlaceDataIn(const Bhs& bhs, uint8_t** destination) override {
    ++placed;
    *destination = read_buffer.data() + bhs.u32(bhs::kBufferOffset);
    return Status::OK();
  }
  void OnPdu(const Bhs& bhs, std::span<const uint8_t> data) override {
    MutexLock lock(&mu);
    pdus.push_back(bhs.opcode());
    last_data.assign(data.begin(), data.end());
  }
  void OnConnectionError(const Status& status) override {
    if (on_error) on_error();
    MutexLock lock(&mu);
    errors.push_back(status.ToString());
  }
  uint32_t CommandsAwaitingResponse() const override { return awaiting; }
  size_t pdu_count() {
    MutexLock lock(&mu);
    return pdus.size();
  }
  size_t error_count() {
    MutexLock lock(&mu);
    return errors.size();
  }

  std::function<void()> on_wake;
  std::function<void()> on_error;  // in OnConnectionError, on the I/O thread
  std::vector<uint8_t> read_buffer;
  std::atomic<int> placed{0};  // PlaceDataIn calls
  uint32_t awaiting = 0;       // what CommandsAwaitingResponse says
  Mutex mu;
  std::vector<Opcode> pdus ISER_GUARDED_BY(mu);
  std::vector<uint8_t> last_data ISER_GUARDED_BY(mu);
  std::vector<std::string> errors ISER_GUARDED_BY(mu);
};

struct FakeWirePdu {
  Bhs bhs;
  std::vector<uint8_t> data;
};

class TcpDatamovers : public ::testing::TestWithParam<TcpDatamoverKind> {
 public:
  void SetUp() override {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listener_, 1), 0);
    socklen_t len = sizeof addr;
    ASSERT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    dm_ = NewTcpDatamover(GetParam());
    const Portal portal{"127.0.0.1", ntohs(addr.sin_port)};
    ASSERT_TRUE(dm_->Connect(portal, Clock::now() + std::chrono::seconds(5)).ok());
    peer_ = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(peer_, 0);
    ConnectionParams params;
    params.initiator_max_recv_data_segment_length = 16777215;
    params.target_max_recv_data_segment_length = 262144;
    ASSERT_TRUE(dm_->EnterFullFeature(params).ok());
  }
  void TearDown() override {
    if (dm_) dm_->Shutdown();
    dm_.reset();
    if (peer_ >= 0) close(peer_);
    if (listener_ >= 0) close(listener_);
  }

  void PeerSend(const void* p, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t sent = send(peer_, bytes, n, MSG_NOSIGNAL);
      ASSERT_GT(sent, 0);
      bytes += sent;
      n -= static_cast<size_t>(sent);
    }
  }
  bool PeerReceive(void* p, size_t n) {
    auto* bytes = static_cast<uint8_t*>(p);
    while (n > 0) {
      const ssize_t got = recv(peer_, bytes, n, 0);
      if (got <= 0) return false;
      bytes += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }

  // One whole PDU from the peer's side (no digests): false at the end of the stream, or when it
  // ends inside a PDU (a connection failed mid-send).
  bool PeerReadPdu(FakeWirePdu* pdu) {
    if (!PeerReceive(pdu->bhs.data(), kBhsLength)) return false;
    const uint32_t length = pdu->bhs.data_segment_length();
    pdu->data.resize(length + (4 - length % 4) % 4);
    if (!PeerReceive(pdu->data.data(), pdu->data.size())) return false;
    pdu->data.resize(length);
    return true;
  }
  // The peer stops reading (so that what the datamover sends backs up) with a small receive
  // buffer, and gives up on a read after 20 s instead of hanging the test.
  void PeerReceiveBufferSmall() {
    const int size = 64 * 1024;
    ASSERT_EQ(setsockopt(peer_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size), 0);
    const timeval bound{20, 0};
    ASSERT_EQ(setsockopt(peer_, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound), 0);
  }
  // Queues `count` NOP-Outs with distinct ITTs in one wake-up and checks that the peer gets each
  // once, in order.
  void ControlsQueuedInOneWakeArriveOnceInOrder(uint32_t count) {
    events_.on_wake = [this, count] {
      if (queued_.exchange(true)) return;
      for (uint32_t i = 0; i < count; ++i) {
        Bhs nop;
        nop.set_opcode(Opcode::kNopOut, true);
        nop.set_flags(kFinalBit);
        nop.set_itt(0x1000 + i);
        nop.set_u32(bhs::kTtt, kReservedTag);
        const uint8_t data[4] = {static_cast<uint8_t>(i), static_cast<uint8_t>(i >> 8), 0x77, 0x66};
        nop.set_data_segment_length(i % 2 == 0 ? sizeof data : 0);
        dm_->SendControl(nop, std::span<const uint8_t>(data, i % 2 == 0 ? sizeof data : 0));
      }
    };
    ASSERT_TRUE(dm_->Start(&events_).ok());
    dm_->Wake();
    for (uint32_t i = 0; i < count; ++i) {
      FakeWirePdu pdu;
      ASSERT_TRUE(PeerReadPdu(&pdu)) << "NOP-Out " << i << " of " << count;
      ASSERT_EQ(pdu.bhs.itt(), 0x1000 + i) << "NOP-Out " << i << " of " << count;
      if (i % 2 == 0) {
        const std::vector<uint8_t> expected = {static_cast<uint8_t>(i),
                                               static_cast<uint8_t>(i >> 8), 0x77, 0x66};
        ASSERT_EQ(pdu.data, expected) << "NOP-Out " << i;
      } else {
        ASSERT_TRUE(pdu.data.empty()) << "NOP-Out " << i;
      }
    }
    // Nothing more: a control sent twice would follow.
    const timeval brief{0, 200000};
    ASSERT_EQ(setsockopt(peer_, SOL_SOCKET, SO_RCVTIMEO, &brief, sizeof brief), 0);
    uint8_t extra;
    EXPECT_LT(recv(peer_, &extra, 1, 0), 1) << "more bytes after the last NOP-Out";
    EXPECT_EQ(events_.error_count(), 0u);
  }

  int listener_ = -1;
  int peer_ = -1;
  // What a test's wake-up reaches, kept until TearDown has stopped the I/O thread (also when an
  // ASSERT ends the test early).
  std::vector<Task> tasks_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::atomic<bool> queued_{false};
  std::atomic<int> on_thread_{0};
  Events events_;
  std::unique_ptr<Datamover> dm_;
};

TEST_P(TcpDatamovers, DescribeNamesTheDatamover) {
  const std::string name = GetParam() == TcpDatamoverKind::kIoUring ? "(io_uring)" : "(epoll)";
  EXPECT_NE(dm_->Describe().find(name), std::string::npos) << dm_->Describe();
}

// 3 MiB in one Data-In PDU, sent in pieces with pauses, then a NOP-In with data: every byte lands
// in the task's buffer at the PDU's offset, and the NOP-In's data arrives whole.
TEST_P(TcpDatamovers, LargeDataInLandsInTheTasksBufferAndThePduBehindItIsParsed) {
  constexpr uint32_t kLength = 3 << 20;
  constexpr uint32_t kOffset = 4096;
  events_.read_buffer.assign(kOffset + kLength, 0);
  ASSERT_TRUE(dm_->Start(&events_).ok());
  std::vector<uint8_t> data(kLength);
  for (uint32_t i = 0; i < kLength; ++i) data[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  Bhs in;
  in.set_opcode(Opcode::kDataIn, false);
  in.set_flags(kFinalBit);
  in.set_data_segment_length(kLength);
  in.set_itt(1);
  in.set_u32(bhs::kBufferOffset, kOffset);
  PeerSend(in.data(), kBhsLength);
  for (uint32_t sent = 0; sent < kLength; sent += 256 * 1024) {
    PeerSend(data.data() + sent, std::min<uint32_t>(256 * 1024, kLength - sent));
    std::this_thread::sleep_for(milliseconds(2));
  }
  const uint8_t ping[6] = {1, 2, 3, 4, 5, 6};
  Bhs nop;
  nop.set_opcode(Opcode::kNopIn, false);
  nop.set_flags(kFinalBit);
  nop.set_data_segment_length(sizeof ping);
  nop.set_itt(kReservedTag);
  PeerSend(nop.data(), kBhsLength);
  const uint8_t padded[8] = {1, 2, 3, 4, 5, 6, 0, 0};
  PeerSend(padded, sizeof padded);
  ASSERT_TRUE(WaitFor([&] { return events_.pdu_count() == 2; }));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), events_.read_buffer.begin() + kOffset));
  MutexLock lock(&events_.mu);
  EXPECT_EQ(events_.pdus[0], Opcode::kDataIn);
  EXPECT_EQ(events_.pdus[1], Opcode::kNopIn);
  EXPECT_EQ(events_.last_data, std::vector<uint8_t>(ping, ping + sizeof ping));
  EXPECT_TRUE(events_.errors.empty());
}

// 3000 commands with 0 to 12 KiB of immediate data queued in one wake-up: many batches of
// frames, sends cut wherever the socket buffer fills (the peer starts reading late). Each PDU
// arrives whole, in order.
TEST_P(TcpDatamovers, ManyPdusQueuedAtOnceArriveWholeAndInOrder) {
  constexpr uint32_t kPdus = 3000;
  tasks_.resize(kPdus);
  buffers_.resize(kPdus);
  for (uint32_t i = 0; i < kPdus; ++i) {
    buffers_[i].assign((i * 37) % 12289, static_cast<uint8_t>(i));
    Task& t = tasks_[i];
    t.buffer = buffers_[i].data();
    t.immediate_bytes = static_cast<uint32_t>(buffers_[i].size());
    t.bhs.set_opcode(Opcode::kScsiCommand, false);
    t.bhs.set_flags(kFinalBit);
    t.bhs.set_itt(i);
    t.bhs.set_data_segment_length(t.immediate_bytes);
  }
  events_.on_wake = [this] {
    if (queued_.exchange(true)) return;
    for (Task& t : tasks_) dm_->SendCommand(&t);
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  dm_->Wake();
  std::this_thread::sleep_for(milliseconds(100));
  for (uint32_t i = 0; i < kPdus; ++i) {
    Bhs got;
    ASSERT_TRUE(PeerReceive(got.data(), kBhsLength)) << "PDU " << i;
    ASSERT_EQ(got.itt(), i);
    const uint32_t length = (i * 37) % 12289;
    ASSERT_EQ(got.data_segment_length(), length);
    std::vector<uint8_t> data(length + (4 - length % 4) % 4);
    ASSERT_TRUE(PeerReceive(data.data(), data.size())) << "PDU " << i;
    for (uint32_t k = 0; k < length; ++k) ASSERT_EQ(data[k], static_cast<uint8_t>(i));
  }
  EXPECT_EQ(events_.error_count(), 0u);
}

// The peer never reads: the datamover's send waits for room that never comes. Shutdown still
// ends the I/O thread (over io_uring it first waits for the send it had in flight to end).
TEST_P(TcpDatamovers, ShutdownReturnsWhileASendWaitsForAPeerThatNeverReads) {
  events_.on_wake = [this] {
    if (queued_.exchange(true)) return;
    Bhs nop;
    nop.set_opcode(Opcode::kNopOut, true);
    nop.set_flags(kFinalBit);
    const std::vector<uint8_t> data(8 << 20, 0x5a);
    nop.set_data_segment_length(static_cast<uint32_t>(data.size()));
    for (int i = 0; i < 4; ++i) dm_->SendControl(nop, data);
    ++on_thread_;  // queued: the I/O thread goes back to sending
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return on_thread_.load() > 0; }));
  std::this_thread::sleep_for(milliseconds(200));
  const auto before = std::chrono::steady_clock::now();
  dm_->Shutdown();
  // A hang would be forever; the bound leaves room for a loaded machine under a sanitizer.
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(5));
}

TEST_P(TcpDatamovers, APeerThatClosesIsReportedOnceNamingTheConnection) {
  ASSERT_TRUE(dm_->Start(&events_).ok());
  close(peer_);
  peer_ = -1;
  ASSERT_TRUE(WaitFor([&] { return events_.error_count() > 0; }));
  std::this_thread::sleep_for(milliseconds(50));
  MutexLock lock(&events_.mu);
  ASSERT_EQ(events_.errors.size(), 1u);
  EXPECT_NE(events_.errors[0].find("the target closed the connection"), std::string::npos)
      << events_.errors[0];
  EXPECT_NE(events_.errors[0].find(": connection TCP 127.0.0.1:"), std::string::npos)
      << events_.errors[0];
}

// The target resets the connection: every later send is an error of the connection. A write
// to a reset socket without MSG_NOSIGNAL raises SIGPIPE, which kills this test binary as it
// would kill any program that hosts the library (gtest does not ignore the signal).
TEST_P(TcpDatamovers, SendingToAResetConnectionIsAnErrorNotASignal) {
  const linger reset{1, 0};
  ASSERT_EQ(setsockopt(peer_, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
  close(peer_);
  peer_ = -1;
  std::this_thread::sleep_for(milliseconds(50));
  Bhs nop;
  nop.set_opcode(Opcode::kNopOut, true);
  nop.set_flags(kFinalBit);
  for (int i = 0; i < 3; ++i) {
    const Status st = dm_->SendPdu(nop, {}, Clock::now() + std::chrono::seconds(5));
    ASSERT_FALSE(st.ok()) << "send " << i;
    EXPECT_EQ(st.code(), StatusCode::kConnectionFailed) << st.ToString();
  }
}

TEST_P(TcpDatamovers, WakeRunsOnTheIoThread) {
  events_.on_wake = [this] {
    if (dm_->OnIoThread()) ++on_thread_;
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  EXPECT_FALSE(dm_->OnIoThread());
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return on_thread_.load() > 0; }));
}

// With many commands waiting, the io_uring datamover holds receives back (receive_coalescing.h)
// behind a timeout linked to them: the responses still all arrive whole, and
// Shutdown while a held-back receive is in flight returns.
TEST_P(TcpDatamovers, ResponsesArriveWholeWhileReceivesAreHeldBack) {
  constexpr uint32_t kBursts = 40;
  constexpr uint32_t kPerBurst = 8;
  events_.awaiting = 64;
  ASSERT_TRUE(dm_->Start(&events_).ok());
  for (uint32_t b = 0; b < kBursts; ++b) {
    std::vector<uint8_t> burst;
    for (uint32_t i = 0; i < kPerBurst; ++i) {
      Bhs response;
      response.set_opcode(Opcode::kScsiResponse, false);
      response.set_flags(kFinalBit);
      response.set_itt(b * kPerBurst + i);
      burst.insert(burst.end(), response.data(), response.data() + kBhsLength);
    }
    PeerSend(burst.data(), burst.size());
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_TRUE(WaitFor([&] { return events_.pdu_count() == kBursts * kPerBurst; }))
      << events_.pdu_count();
  dm_->Shutdown();
  EXPECT_EQ(events_.error_count(), 0u);
  if (GetParam() == TcpDatamoverKind::kIoUring) {
    EXPECT_GT(static_cast<UringDatamover*>(dm_.get())->delayed_receives(), 0u);
  }
}

// Controls (NOP-Out, TMF, Text, Logout) queued in one wake-up, more than any fixed number of
// them: each reaches the peer once, in order, with its own header and data.
TEST_P(TcpDatamovers, SixtyFiveControlsQueuedInOneWakeArriveOnceInOrder) {
  ControlsQueuedInOneWakeArriveOnceInOrder(65);
}

TEST_P(TcpDatamovers, AThousandControlsQueuedInOneWakeArriveOnceInOrder) {
  ControlsQueuedInOneWakeArriveOnceInOrder(1000);
}

// A write command with unsolicited Data-Out, queued behind 16 MiB the peer does not read yet,
// is retired and its buffer overwritten (the session hands it back to its caller), then the peer
// reads everything. `same_batch`: the command is queued in the same wake-up as the 16 MiB, so
// its PDUs are in the batch being written, and the peer reads the 16 MiB first, so that the
// socket buffers fill with the task's first bytes and the write still in flight (io_uring: a
// send the kernel holds) reads the rest from its buffer when it is retired; otherwise the
// command is queued in a later wake-up, so its PDUs are still queued. Whatever goes out of the
// task must be whole and hold its original bytes (or be absent), and every PDU must parse; a
// connection failed to keep the promise (io_uring, a send in flight) ends the stream, between
// two PDUs or inside one.
void RetiredWriteNeverSendsTheBufferAsItIsNow(TcpDatamovers* test, bool same_batch) {
  constexpr uint32_t kImmediate = 8192;
  // More than the socket buffers hold: 49 Data-Out PDUs.
  constexpr uint32_t kUnsolicited = 48 * 262144 + 1000;
  static constexpr uint8_t kOriginal = 0x11;
  static constexpr uint8_t kMarker = 0xee;
  auto& f = *test;
  ASSERT_NO_FATAL_FAILURE(f.PeerReceiveBufferSmall());
  f.buffers_.assign(1, std::vector<uint8_t>(kImmediate + kUnsolicited, kOriginal));
  f.tasks_.resize(1);
  Task& t = f.tasks_[0];
  t.buffer = f.buffers_[0].data();
  t.itt = 0x42;
  t.immediate_bytes = kImmediate;
  t.unsolicited_bytes = kUnsolicited;
  t.bhs.set_opcode(Opcode::kScsiCommand, false);
  t.bhs.set_flags(0x20);  // W
  t.bhs.set_itt(t.itt);
  t.bhs.set_data_segment_length(kImmediate);
  std::atomic<int> phase{0};
  f.events_.on_wake = [&f, &t, &phase, same_batch] {
    if (phase.load() == 0) {
      Bhs nop;
      nop.set_opcode(Opcode::kNopOut, true);
      nop.set_flags(kFinalBit);
      nop.set_itt(1);
      // 16 MiB: more than the socket buffers hold (a data segment carries 16 MiB less one).
      const std::vector<uint8_t> data(8 << 20, 0x5a);
      nop.set_data_segment_length(static_cast<uint32_t>(data.size()));
      f.dm_->SendControl(nop, data);
      f.dm_->SendControl(nop, data);
      if (same_batch) f.dm_->SendCommand(&t);
      phase = 1;
    } else if (phase.load() == 2) {
      if (!same_batch) f.dm_->SendCommand(&t);
      f.dm_->Retire(&t);
      std::fill(f.buffers_[0].begin(), f.buffers_[0].end(), kMarker);
      Bhs last;
      last.set_opcode(Opcode::kNopOut, true);
      last.set_flags(kFinalBit);
      last.set_itt(2);
      f.dm_->SendControl(last, {});
      phase = 3;
    }
  };
  ASSERT_TRUE(f.dm_->Start(&f.events_).ok());
  f.dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return phase.load() == 1; }));
  if (same_batch) {
    for (int i = 0; i < 2; ++i) {
      FakeWirePdu nop;
      ASSERT_TRUE(f.PeerReadPdu(&nop));
      ASSERT_EQ(nop.bhs.opcode(), Opcode::kNopOut);
    }
  }
  // Lets the datamover write until the socket buffers are full and its write blocks.
  std::this_thread::sleep_for(milliseconds(100));
  phase = 2;
  f.dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return phase.load() == 3; }));
  uint32_t task_bytes = 0;
  bool last_seen = false;
  FakeWirePdu pdu;
  while (!last_seen && f.PeerReadPdu(&pdu)) {
    const Opcode op = pdu.bhs.opcode();
    ASSERT_TRUE(op == Opcode::kNopOut || op == Opcode::kScsiCommand || op == Opcode::kDataOut)
        << "not a PDU boundary: opcode 0x" << std::hex << static_cast<int>(op);
    if (op == Opcode::kNopOut) {
      last_seen = pdu.bhs.itt() == 2;
      continue;
    }
    ASSERT_EQ(pdu.bhs.itt(), t.itt);
    for (const uint8_t b : pdu.data) ASSERT_EQ(b, kOriginal) << "the retired buffer went out";
    task_bytes += static_cast<uint32_t>(pdu.data.size());
  }
  // Either the stream went on to the last NOP-Out, or the connection was failed for the promise.
  if (!last_seen) {
    ASSERT_TRUE(WaitFor([&] { return f.events_.error_count() > 0; }));
  }
  EXPECT_LE(task_bytes, kImmediate + kUnsolicited);
}

TEST_P(TcpDatamovers, ARetiredWritesQueuedPdusNeverCarryItsBufferAsItIsNow) {
  RetiredWriteNeverSendsTheBufferAsItIsNow(this, false);
}

TEST_P(TcpDatamovers, ARetiredWritesPdusInTheBatchBeingWrittenKeepTheirBytes) {
  RetiredWriteNeverSendsTheBufferAsItIsNow(this, true);
}

// A write answered with an R2T has Data-Out queued behind data the peer does not read yet; the
// task is retired (its abort was answered) and sent again under a new ITT as a READ, as recovery
// and the abort escalation do. No Data-Out goes out under the new ITT.
TEST_P(TcpDatamovers, NoDataOutOfARetiredTaskGoesOutUnderItsNextItt) {
  ASSERT_NO_FATAL_FAILURE(PeerReceiveBufferSmall());
  buffers_.assign(1, std::vector<uint8_t>(65536, 0x11));
  tasks_.resize(1);
  Task& t = tasks_[0];
  t.buffer = buffers_[0].data();
  t.itt = 0x42;
  std::atomic<int> phase{0};
  events_.on_wake = [this, &t, &phase] {
    if (phase.load() == 0) {
      Bhs nop;
      nop.set_opcode(Opcode::kNopOut, true);
      nop.set_flags(kFinalBit);
      nop.set_itt(1);
      const std::vector<uint8_t> data(8 << 20, 0x5a);
      nop.set_data_segment_length(static_cast<uint32_t>(data.size()));
      dm_->SendControl(nop, data);
      dm_->SendControl(nop, data);
      phase = 1;
    } else if (phase.load() == 2) {
      dm_->SendDataOut(&t, 0x77, 0, 65536);
      dm_->Retire(&t);
      t.itt = 0x1042;
      t.bhs.Clear();
      t.bhs.set_opcode(Opcode::kScsiCommand, false);
      t.bhs.set_flags(kFinalBit | 0x40);  // R
      t.bhs.set_itt(t.itt);
      t.immediate_bytes = 0;
      t.unsolicited_bytes = 0;
      dm_->SendCommand(&t);
      phase = 3;
    }
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return phase.load() == 1; }));
  std::this_thread::sleep_for(milliseconds(100));
  phase = 2;
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return phase.load() == 3; }));
  bool resent_seen = false;
  FakeWirePdu pdu;
  while (!resent_seen && PeerReadPdu(&pdu)) {
    if (pdu.bhs.opcode() == Opcode::kDataOut) {
      ASSERT_NE(pdu.bhs.itt(), 0x1042u) << "Data-Out of the retired task under its new ITT";
    }
    resent_seen = pdu.bhs.opcode() == Opcode::kScsiCommand && pdu.bhs.itt() == 0x1042;
  }
  EXPECT_TRUE(resent_seen);
}

// A Data-In segment is half received, so that (io_uring) a receive into the task's buffer is in
// flight; on the I/O thread the rest of the segment is queued on the socket and the connection
// fails at once. In OnConnectionError the session hands the buffer back (here: fills it with a
// marker); nothing the datamover receives may land in it after that.
TEST_P(TcpDatamovers, NoBytesLandInATasksBufferAfterTheConnectionFailed) {
  constexpr uint32_t kLength = 1 << 20;
  constexpr uint32_t kFirst = 65536;
  static constexpr uint8_t kMarker = 0xee;
  events_.read_buffer.assign(kLength, 0);
  std::atomic<bool> failed{false};
  events_.on_error = [this, &failed] {
    std::fill(events_.read_buffer.begin(), events_.read_buffer.end(), kMarker);
    failed = true;
  };
  const std::vector<uint8_t> data(kLength, 0x33);
  std::atomic<bool> armed{false};
  events_.on_wake = [&] {
    if (!armed.load() || queued_.exchange(true)) return;
    PeerSend(data.data() + kFirst, 256 * 1024);
    dm_->Abort(Status::ConnectionFailed("the test fails the connection"));
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  Bhs in;
  in.set_opcode(Opcode::kDataIn, false);
  in.set_flags(kFinalBit);
  in.set_data_segment_length(kLength);
  in.set_itt(1);
  PeerSend(in.data(), kBhsLength);
  PeerSend(data.data(), kFirst);
  ASSERT_TRUE(WaitFor([&] { return events_.placed.load() > 0; }));
  // Lets the datamover take what came and (io_uring) arm the receive for the rest.
  std::this_thread::sleep_for(milliseconds(100));
  armed = true;
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return failed.load(); }));
  dm_->Shutdown();
  for (uint32_t i = 0; i < kLength; ++i) {
    ASSERT_EQ(events_.read_buffer[i], kMarker) << "byte " << i << " written after the failure";
  }
}

// A read is retired (it timed out for good) while one of its Data-In segments is half received:
// the rest of the segment must not land in its buffer, handed back by then (here: filled with a
// marker). The epoll datamover takes the rest into memory of its own; the io_uring datamover,
// whose receive into the buffer may be in flight, ends the connection.
TEST_P(TcpDatamovers, TheRestOfARetiredReadsDataInSegmentNeverLandsInItsBuffer) {
  constexpr uint32_t kLength = 1 << 20;
  constexpr uint32_t kFirst = 65536;
  static constexpr uint8_t kMarker = 0xee;
  events_.read_buffer.assign(kLength, 0);
  tasks_.resize(1);
  tasks_[0].itt = 1;
  tasks_[0].buffer = events_.read_buffer.data();
  std::atomic<bool> armed{false};
  events_.on_wake = [this, &armed] {
    if (!armed.load() || queued_.load()) return;
    dm_->Retire(&tasks_[0]);
    std::fill(events_.read_buffer.begin(), events_.read_buffer.end(), kMarker);
    queued_ = true;
  };
  ASSERT_TRUE(dm_->Start(&events_).ok());
  Bhs in;
  in.set_opcode(Opcode::kDataIn, false);
  in.set_flags(kFinalBit);
  in.set_data_segment_length(kLength);
  in.set_itt(1);
  PeerSend(in.data(), kBhsLength);
  const std::vector<uint8_t> data(kLength, 0x33);
  PeerSend(data.data(), kFirst);
  ASSERT_TRUE(WaitFor([&] { return events_.placed.load() > 0; }));
  // Lets the datamover take what came and (io_uring) arm the receive for the rest.
  std::this_thread::sleep_for(milliseconds(100));
  armed = true;
  dm_->Wake();
  ASSERT_TRUE(WaitFor([&] { return queued_.load(); }));
  // The rest of the segment; a connection already ended refuses it, which is no error here.
  const uint8_t* rest = data.data() + kFirst;
  for (size_t left = kLength - kFirst; left > 0;) {
    const ssize_t sent = send(peer_, rest, left, MSG_NOSIGNAL);
    if (sent <= 0) break;
    rest += sent;
    left -= static_cast<size_t>(sent);
  }
  ASSERT_TRUE(WaitFor([&] { return events_.pdu_count() > 0 || events_.error_count() > 0; }));
  dm_->Shutdown();
  for (uint32_t i = 0; i < kLength; ++i) {
    ASSERT_EQ(events_.read_buffer[i], kMarker) << "byte " << i << " written after Retire";
  }
}

INSTANTIATE_TEST_SUITE_P(Both, TcpDatamovers,
                         ::testing::Values(TcpDatamoverKind::kIoUring, TcpDatamoverKind::kEpoll),
                         [](const ::testing::TestParamInfo<TcpDatamoverKind>& p) {
                           return p.param == TcpDatamoverKind::kIoUring ? "IoUring" : "Epoll";
                         });

// The io_uring datamover where the kernel lacks an optional feature: each refusal is made to
// happen for real in the kernel the test runs on (TestFaults), and the connection must carry on
// without the feature.
class UringDegrades : public TcpDatamovers {
 public:
  UringDatamover& uring() { return *static_cast<UringDatamover*>(dm_.get()); }
  // With many commands waiting (so that receives would be held back), bursts of responses with
  // pauses between them (so that receives come back short and the next one polls first): every
  // response arrives, and the connection never fails.
  void ResponsesArriveAndTheConnectionCarriesOn(const UringDatamover::TestFaults& faults) {
    constexpr uint32_t kBursts = 40;
    constexpr uint32_t kPerBurst = 8;
    events_.awaiting = 64;
    uring().set_test_faults(faults);
    ASSERT_TRUE(dm_->Start(&events_).ok());
    for (uint32_t b = 0; b < kBursts; ++b) {
      std::vector<uint8_t> burst;
      for (uint32_t i = 0; i < kPerBurst; ++i) {
        Bhs response;
        response.set_opcode(Opcode::kScsiResponse, false);
        response.set_flags(kFinalBit);
        response.set_itt(b * kPerBurst + i);
        burst.insert(burst.end(), response.data(), response.data() + kBhsLength);
      }
      PeerSend(burst.data(), burst.size());
      std::this_thread::sleep_for(milliseconds(2));
    }
    ASSERT_TRUE(WaitFor([&] {
      return events_.pdu_count() == kBursts * kPerBurst || events_.error_count() > 0;
    })) << events_.pdu_count();
    dm_->Shutdown();
    MutexLock lock(&events_.mu);
    EXPECT_TRUE(events_.errors.empty()) << events_.errors[0];
    EXPECT_EQ(events_.pdus.size(), kBursts * kPerBurst);
  }
};

// A kernel before 5.17 reports no IORING_FEAT_CQE_SKIP: no receive is ever held back.
TEST_P(UringDegrades, WithoutCqeSkipNoReceiveIsHeldBack) {
  ResponsesArriveAndTheConnectionCarriesOn({.cleared_features = IORING_FEAT_CQE_SKIP});
  EXPECT_EQ(uring().delayed_receives(), 0u);
  EXPECT_FALSE(uring().coalescing_in_use());
}

// The linked timeout refused (EINVAL, and ECANCELED on its receive): coalescing goes off for the
// connection after the first attempt, and the receive is armed again.
TEST_P(UringDegrades, ARefusedCoalescingTimeoutTurnsCoalescingOff) {
  ResponsesArriveAndTheConnectionCarriesOn({.refuse_coalescing_timeout = true});
  EXPECT_EQ(uring().delayed_receives(), 1u);
  EXPECT_FALSE(uring().coalescing_in_use());
}

// A receive that polls first refused (EINVAL, as before 5.19): polling first goes off for the
// connection after the first attempt, and the receive is armed again.
TEST_P(UringDegrades, ARefusedPollFirstTurnsItOff) {
  ResponsesArriveAndTheConnectionCarriesOn({.refuse_poll_first = true});
  EXPECT_EQ(uring().polled_receives(), 1u);
  EXPECT_FALSE(uring().poll_first_in_use());
}

// Where nothing is refused, both are in use on this kernel (the tests above would prove nothing
// if they were not).
TEST_P(UringDegrades, OnThisKernelBothAreInUse) {
  ResponsesArriveAndTheConnectionCarriesOn({});
  EXPECT_GT(uring().delayed_receives(), 0u);
  EXPECT_GT(uring().polled_receives(), 0u);
  EXPECT_TRUE(uring().coalescing_in_use());
  EXPECT_TRUE(uring().poll_first_in_use());
}

INSTANTIATE_TEST_SUITE_P(IoUring, UringDegrades, ::testing::Values(TcpDatamoverKind::kIoUring),
                         [](const ::testing::TestParamInfo<TcpDatamoverKind>&) {
                           return "IoUring";
                         });

TEST(UringDatamover, StartWithoutAConnectionFails) {
  UringDatamover dm;
  Events events;
  const Status st = dm.Start(&events);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not connected"), std::string::npos) << st.ToString();
}

// The log lines of ChooseTcpDatamover, and the environment variable, for one test.
class Choice : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("ISER_CONNECT_TCP_DATAMOVER");
    lines().clear();
    SetLogSink(&Record, LogLevel::kInfo);
  }
  void TearDown() override {
    SetLogSink(nullptr, LogLevel::kWarning);
    unsetenv("ISER_CONNECT_TCP_DATAMOVER");
  }
  static std::vector<std::string>& lines() {
    static std::vector<std::string> l;
    return l;
  }
  static void Record(LogLevel level, const std::string& message) {
    if (level == LogLevel::kInfo) lines().push_back(message);
  }
};

// Runs `fn` on a thread of its own where io_uring_setup fails with EPERM, as under Docker's
// default seccomp profile. The filter stays with that thread.
void WithIoUringRefused(const std::function<void()>& fn) {
  std::thread t([&] {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    ASSERT_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    ASSERT_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
    fn();
  });
  t.join();
}

TEST_F(Choice, IoUringWhereItWorks) {
  const Status probe = UringDatamover::Probe();
  Result<TcpDatamoverChoice> choice = ChooseTcpDatamover();
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  ASSERT_EQ(lines().size(), 1u);
  if (probe.ok()) {
    EXPECT_EQ(choice->kind, TcpDatamoverKind::kIoUring);
    EXPECT_EQ(lines()[0], "iSCSI/TCP datamover: io_uring");
  } else {
    EXPECT_EQ(choice->kind, TcpDatamoverKind::kEpoll);
    EXPECT_EQ(lines()[0], "iSCSI/TCP datamover: epoll (" + probe.message() + ")");
  }
}

TEST_F(Choice, RefusedIoUringFallsBackToEpollAndSaysWhy) {
  Result<TcpDatamoverChoice> choice = Status::Aborted("not chosen");
  WithIoUringRefused([&] { choice = ChooseTcpDatamover(); });
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_EQ(choice->kind, TcpDatamoverKind::kEpoll);
  ASSERT_EQ(lines().size(), 1u);
  EXPECT_EQ(
      lines()[0].rfind("iSCSI/TCP datamover: epoll (io_uring_setup: Operation not permitted", 0),
      0u)
      << lines()[0];
}

TEST_F(Choice, TheVariableForcesEpoll) {
  setenv("ISER_CONNECT_TCP_DATAMOVER", "epoll", 1);
  Result<TcpDatamoverChoice> choice = ChooseTcpDatamover();
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_EQ(choice->kind, TcpDatamoverKind::kEpoll);
  ASSERT_EQ(lines().size(), 1u);
  EXPECT_EQ(lines()[0], "iSCSI/TCP datamover: epoll (ISER_CONNECT_TCP_DATAMOVER=epoll)");
}

TEST_F(Choice, IoUringForcedWhereItIsRefusedIsAnError) {
  setenv("ISER_CONNECT_TCP_DATAMOVER", "io_uring", 1);
  Result<TcpDatamoverChoice> choice = TcpDatamoverChoice{};
  WithIoUringRefused([&] { choice = ChooseTcpDatamover(); });
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(choice.status().message().find("io_uring_setup: Operation not permitted"),
            std::string::npos)
      << choice.status().ToString();
}

TEST_F(Choice, AnUnknownValueIsAnError) {
  setenv("ISER_CONNECT_TCP_DATAMOVER", "poll", 1);
  Result<TcpDatamoverChoice> choice = ChooseTcpDatamover();
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(choice.status().message(),
            "ISER_CONNECT_TCP_DATAMOVER=poll: must be io_uring or epoll");
}

}  // namespace
}  // namespace iser
