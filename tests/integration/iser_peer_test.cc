// A misbehaving iSER peer. tgtd never uses a stale or out-of-range STag, never writes into a
// buffer it may only read, never sends more than our receive buffers hold and never sends Data-In
// over iSER, so a scripted fake target (tests/integration/fake_iser_target.h, a mock by
// necessity) does. The RDMA checks happen in softrdma exactly where a NIC makes them: at our side,
// against the STags we advertised; the target sees a remote access error, our memory is not
// touched, and the session fails the I/O with a clear error instead of hanging.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "initiator/block/lun_info.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "initiator/transport/iser/iser_header.h"
#include "initiator/transport/iser/iser_memory.h"
#include "initiator/transport/iser/iser_resources.h"
#include "tests/integration/fake_iser_target.h"

namespace iser {
namespace {

using test::AnswerTaskManagement;
using test::FakeIserTarget;
using test::FakePdu;
using test::ReadUntil;
using test::ResponseHeader;

constexpr uint16_t kPort = 3260;  // each test runs in a network namespace of its own

SessionOptions IserOptions() {
  SessionOptions o = test::FakeIserSessionOptions(kPort);
  // These tests are about how one connection fails; a scripted target serves one connection, so
  // recovery (tests/unit/session_recovery_test.cc, tests/recovery/) is off.
  o.recover = false;
  return o;
}

Bhs GoodResponse(FakeIserTarget& t, const FakePdu& cmd) {
  return ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(),
                        cmd.bhs.u32(bhs::kCmdSN) + 1, cmd.bhs.u32(bhs::kCmdSN) + 64);
}

std::unique_ptr<Session> Open(const FakeIserTarget& target) {
  EXPECT_EQ(target.error(), "");
  Result<std::unique_ptr<Session>> s = Session::Open(IserOptions());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// A session whose commands time out after 1 s, the least command_timeout takes: the scripts
// below sit on commands to make the initiator abort them.
std::unique_ptr<Session> OpenWithCommandTimeout(const FakeIserTarget& target) {
  SessionOptions o = IserOptions();
  o.command_timeout = std::chrono::seconds(1);
  o.nop_interval = std::chrono::milliseconds(0);  // the target reads nothing but the commands
  EXPECT_EQ(target.error(), "");
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Runs a READ of `bytes` into a buffer filled with 0xee and returns its status.
Status ReadBytes(Session& s, std::vector<uint8_t>* buf, uint32_t bytes = 4096) {
  buf->assign(bytes, 0xee);
  Task t;
  scsi::Read(t, 0, bytes / 512, buf->data(), bytes);
  t.lun = 1;
  const auto start = std::chrono::steady_clock::now();
  s.Execute(&t);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  return scsi::TaskStatus(t, "READ");
}

// softrdma's count of the keys in this process that grant remote access (keys.h); -1, and a
// failure, when the tests do not run under softrdma.
int RemoteKeys() {
  using Count = int (*)();
  static const auto count = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "softrdma_remote_keys"));
  if (count == nullptr) {
    ADD_FAILURE()
        << "softrdma_remote_keys not found: run under softrdma (tests/harness/iser-netns)";
    return -1;
  }
  return count();
}

// The count once the unsignaled invalidations posted last have run (bounded wait).
int RemoteKeysSettledAt(int expected) {
  int n = RemoteKeys();
  for (int i = 0; i < 200 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = RemoteKeys();
  }
  return n;
}

// A READ that failed holds no byte the target sent: the poison the test filled it with, or the
// zeroes a read buffer registered directly starts with.
bool HoldsNoTargetBytes(const std::vector<uint8_t>& buf) {
  return std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xee || b == 0; });
}

// The target's side of a READ the initiator sent again after an abort or a reset: it places
// `fill` through the new STag and answers GOOD, gives the caller time to check its data, then
// writes through the first command's STag and returns that write's status.
int AnswerAgainThenUseTheFirstStag(FakeIserTarget& t, const FakePdu& first,
                                   const test::IserStags& old, uint32_t n, uint8_t fill) {
  FakePdu again;
  if (!t.Read(&again)) return -1;
  EXPECT_EQ(again.bhs.opcode(), Opcode::kScsiCommand);
  EXPECT_NE(again.bhs.itt(), first.bhs.itt());
  const test::IserStags fresh = t.last_stags();
  EXPECT_EQ(t.RdmaWrite(fresh.read_stag, fresh.read_va, std::vector<uint8_t>(n, fill)),
            IBV_WC_SUCCESS);
  t.Send(GoodResponse(t, again));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return t.RdmaWrite(old.read_stag, old.read_va, std::vector<uint8_t>(n, 0x66));
}

// Small commands go through pre-registered slots, large ones through the caller's buffer
// registered for the command: both must hold.
class IserPeerSize : public ::testing::TestWithParam<uint32_t> {};

TEST_P(IserPeerSize, StaleStagIsRefusedAfterTheResponse) {
  const uint32_t n = GetParam();
  std::atomic<int> first{-1}, stale{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    const test::IserStags stags = t.last_stags();
    EXPECT_EQ(stags.flags, kIserControl | kIserRsv);
    first = t.RdmaWrite(stags.read_stag, stags.read_va, std::vector<uint8_t>(n, 0x11));
    t.Send(GoodResponse(t, cmd));
    FakePdu next;  // the initiator's second READ: its response tells us the first is done
    if (!t.Read(&next)) return;
    stale = t.RdmaWrite(stags.read_stag, stags.read_va, std::vector<uint8_t>(n, 0x22));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  ASSERT_TRUE(ReadBytes(*s, &buf, n).ok());
  EXPECT_EQ(first, IBV_WC_SUCCESS);
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0x11));
  std::vector<uint8_t> second;
  Status st = ReadBytes(*s, &second, n);
  target.Join();
  EXPECT_EQ(stale, IBV_WC_REM_ACCESS_ERR) << "the first READ's STag still worked";
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0x11)) << "a completed READ's data changed";
  EXPECT_TRUE(HoldsNoTargetBytes(second)) << "a failed READ delivered data";
}

TEST_P(IserPeerSize, WriteBeyondTheAdvertisedLengthIsRefused) {
  const uint32_t n = GetParam();
  std::atomic<int> beyond{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    beyond = t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va,
                         std::vector<uint8_t>(n + 1, 0x33));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  Status st = ReadBytes(*s, &buf, n);
  target.Join();
  EXPECT_EQ(beyond, IBV_WC_REM_ACCESS_ERR) << "an RDMA WRITE one byte longer than the READ";
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kConnectionFailed) << st.ToString();
  EXPECT_NE(st.message().find("127.0.0.1:3260"), std::string::npos) << st.ToString();
  EXPECT_TRUE(HoldsNoTargetBytes(buf));
}

TEST_P(IserPeerSize, WriteBufferIsReadOnlyToTheTarget) {
  const uint32_t n = GetParam();
  std::atomic<int> read_status{-1}, write_status{-1};
  std::vector<uint8_t> fetched(n);
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    const test::IserStags stags = t.last_stags();
    EXPECT_EQ(stags.flags, kIserControl | kIserWsv);
    EXPECT_EQ(stags.read_stag, 0u);
    read_status = t.RdmaRead(stags.write_stag, stags.write_va, &fetched);
    write_status = t.RdmaWrite(stags.write_stag, stags.write_va, std::vector<uint8_t>(16, 0x44));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> original = data;
  Task t;
  scsi::Write(t, 0, n / 512, data.data(), n, false);
  t.lun = 1;
  s->Execute(&t);
  target.Join();
  EXPECT_FALSE(scsi::TaskStatus(t, "WRITE").ok());
  EXPECT_EQ(read_status, IBV_WC_SUCCESS);
  EXPECT_EQ(fetched, original) << "the target read something else than the WRITE's data";
  EXPECT_EQ(write_status, IBV_WC_REM_ACCESS_ERR) << "the target could write into a WRITE's buffer";
  EXPECT_EQ(data, original);
}

// The pool (docs/initiator.md: where registration is expensive and windows are missing) keeps
// each slot registered with remote access for the connection's life. What that exposes, and no
// more: a target that uses a READ's STag after the response writes into our idle slot, never
// into the caller's buffer, and the next command through that slot starts from zeroes again.
TEST(IserPeer, WithThePoolAStaleStagNeverReachesACallersBuffer) {
  constexpr uint32_t kLarge = 128 * 1024;  // not through the small slot the first READ used
  std::atomic<int> stale{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    const test::IserStags first = t.last_stags();
    t.RdmaWrite(first.read_stag, first.read_va, std::vector<uint8_t>(4096, 0x11));
    t.Send(GoodResponse(t, cmd));
    if (!t.Read(&cmd)) return;  // the first READ is over
    stale = t.RdmaWrite(first.read_stag, first.read_va, std::vector<uint8_t>(4096, 0x22));
    t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va,
                std::vector<uint8_t>(kLarge, 0x33));
    t.Send(GoodResponse(t, cmd));
    if (!t.Read(&cmd)) return;     // through the first READ's slot again
    t.Send(GoodResponse(t, cmd));  // GOOD, with nothing written by this command
  });
  setenv("ISER_CONNECT_STAGS", "pool", 1);
  auto s = Open(target);
  unsetenv("ISER_CONNECT_STAGS");
  ASSERT_TRUE(s);
  EXPECT_NE(s->stats().datamover.find("a pool of registered slots"), std::string::npos)
      << s->stats().datamover;
  std::vector<uint8_t> first, large, third;
  ASSERT_TRUE(ReadBytes(*s, &first, 4096).ok());
  ASSERT_TRUE(ReadBytes(*s, &large, kLarge).ok());
  ASSERT_TRUE(ReadBytes(*s, &third, 4096).ok());
  target.Join();
  EXPECT_EQ(stale, IBV_WC_SUCCESS) << "the pool's keys are the connection's, by design";
  EXPECT_EQ(first, std::vector<uint8_t>(4096, 0x11)) << "a completed READ's data changed";
  EXPECT_EQ(large, std::vector<uint8_t>(kLarge, 0x33));
  EXPECT_EQ(third, std::vector<uint8_t>(4096, 0)) << "a stale write reached a later command";
}

// A READ answered GOOD without a byte written: the caller never gets what its buffer or a slot
// held before (another command's, another LUN's, another target's data), but zeroes, through a
// slot as in a buffer registered directly. The second READ reuses the first one's buffer as it
// came back, as the FUSE daemon's per-thread buffer is reused for every file of every target.
TEST_P(IserPeerSize, AReadAnsweredGoodWithoutDataReturnsNoEarlierCommandsBytes) {
  const uint32_t n = GetParam();
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va, std::vector<uint8_t>(n, 0x5a));
    t.Send(GoodResponse(t, cmd));
    if (!t.Read(&cmd)) return;
    t.Send(GoodResponse(t, cmd));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  ASSERT_TRUE(ReadBytes(*s, &buf, n).ok());
  ASSERT_EQ(buf, std::vector<uint8_t>(n, 0x5a));
  Task again;
  scsi::Read(again, 0, n / 512, buf.data(), n);
  again.lun = 1;
  s->Execute(&again);
  target.Join();
  ASSERT_TRUE(scsi::TaskStatus(again, "READ").ok()) << again.status.ToString();
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0x5a), 0)
      << "bytes of the previous command were returned";
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0)) << "bytes the target did not place reached the caller";
}

// command_timeout aborts a READ the target sits on; the target answers the ABORT TASK, and the
// READ is sent again under a new ITT. The first STag must be dead by then: a target that still
// writes through it gets a remote access error, and the data the caller gets is the second
// command's.
TEST_P(IserPeerSize, AnAbortedCommandsStagIsRevokedBeforeItIsSentAgain) {
  const uint32_t n = GetParam();
  std::atomic<int> stale{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu first;
    if (!t.Read(&first)) return;
    const test::IserStags old = t.last_stags();
    FakePdu tmf;
    if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
    EXPECT_EQ(tmf.bhs.flags() & 0x7f, 1) << "ABORT TASK";
    AnswerTaskManagement(t, tmf, 0);
    stale = AnswerAgainThenUseTheFirstStag(t, first, old, n, 0x21);
  });
  auto s = OpenWithCommandTimeout(target);
  ASSERT_TRUE(s);
  const int baseline = RemoteKeys();
  std::vector<uint8_t> buf;
  ASSERT_TRUE(ReadBytes(*s, &buf, n).ok());
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0x21));
  EXPECT_EQ(RemoteKeysSettledAt(baseline), baseline) << "a registration outlived its command";
  target.Join();
  EXPECT_EQ(stale, IBV_WC_REM_ACCESS_ERR) << "the aborted command's STag still worked";
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0x21)) << "the caller's data changed after completion";
}

// The target refuses the ABORT TASK, resets the LUN and answers the reset: the READ it covered is
// sent again under a new STag, and none of the reset's commands keeps a registration.
TEST_P(IserPeerSize, ALunResetRevokesTheStagsOfTheTasksItEnded) {
  const uint32_t n = GetParam();
  std::atomic<int> stale{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu first;
    if (!t.Read(&first)) return;
    const test::IserStags old = t.last_stags();
    FakePdu tmf;
    if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
    EXPECT_EQ(tmf.bhs.flags() & 0x7f, 1) << "ABORT TASK";
    AnswerTaskManagement(t, tmf, 255);  // rejected
    if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
    EXPECT_EQ(tmf.bhs.flags() & 0x7f, 5) << "LOGICAL UNIT RESET";
    AnswerTaskManagement(t, tmf, 0);
    stale = AnswerAgainThenUseTheFirstStag(t, first, old, n, 0x31);
  });
  auto s = OpenWithCommandTimeout(target);
  ASSERT_TRUE(s);
  const int baseline = RemoteKeys();
  std::vector<uint8_t> buf;
  ASSERT_TRUE(ReadBytes(*s, &buf, n).ok());
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0x31));
  EXPECT_EQ(RemoteKeysSettledAt(baseline), baseline) << "a registration outlived its command";
  target.Join();
  EXPECT_EQ(stale, IBV_WC_REM_ACCESS_ERR) << "the reset command's first STag still worked";
}

// A READ the target never answers, though it answers every ABORT TASK: after its third abort the
// READ fails with a timeout, holding nothing, and no registration of any of its three tries is
// left.
TEST_P(IserPeerSize, ACommandThatTimesOutForGoodLeavesNoRegistration) {
  const uint32_t n = GetParam();
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    for (int round = 0; round < 3; ++round) {
      FakePdu tmf;
      if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
      AnswerTaskManagement(t, tmf, 0);
    }
  });
  auto s = OpenWithCommandTimeout(target);
  ASSERT_TRUE(s);
  const int baseline = RemoteKeys();
  std::vector<uint8_t> buf;
  Status st = ReadBytes(*s, &buf, n);
  target.Join();
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.ToString();
  EXPECT_TRUE(HoldsNoTargetBytes(buf));
  EXPECT_EQ(RemoteKeysSettledAt(baseline), baseline) << "a registration outlived its command";
}

// A target that writes the whole buffer but says (underflow residual) it moved only the first
// half: the caller sees the first half and nothing of the second, neither the bytes the target
// placed there nor an earlier command's. Through a slot the tail is not copied; in a buffer
// registered directly it is zeroed at revocation.
TEST_P(IserPeerSize, BytesPastTheResidualNeverReachTheCaller) {
  const uint32_t n = GetParam();
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va, std::vector<uint8_t>(n, 0x5a));
    Bhs rsp = GoodResponse(t, cmd);
    rsp.set_flags(kFinalBit | kResidualUnderflow);
    rsp.set_u32(bhs::kResidualCount, n / 2);
    t.Send(rsp);
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  ASSERT_TRUE(ReadBytes(*s, &buf, n).ok());
  target.Join();
  const std::vector<uint8_t> head(buf.begin(), buf.begin() + n / 2);
  const std::vector<uint8_t> tail(buf.begin() + n / 2, buf.end());
  EXPECT_EQ(head, std::vector<uint8_t>(n / 2, 0x5a));
  EXPECT_TRUE(HoldsNoTargetBytes(tail)) << "bytes past the residual reached the caller";
}

INSTANTIATE_TEST_SUITE_P(ThroughSlotsAndDirect, IserPeerSize,
                         ::testing::Values(4096u, 256u * 1024));

// A READ the target rejects (Reject, reason "invalid PDU field", the command's header attached)
// never got its data: its STag goes with it. The next READ, under the same ITT slot, is placed
// by RDMA WRITE into the caller's buffer and must arrive whole, with nothing copied over it.
TEST(IserPeer, ARejectedReadLeavesNoStagBehind) {
  std::atomic<int> stale{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    const test::IserStags rejected = t.last_stags();
    Bhs reject = ResponseHeader(Opcode::kReject, kReservedTag, t.next_statsn(),
                                cmd.bhs.u32(bhs::kCmdSN) + 1, cmd.bhs.u32(bhs::kCmdSN) + 64);
    reject.b[2] = 0x09;
    reject.set_data_segment_length(kBhsLength);
    t.Send(reject, std::vector<uint8_t>(cmd.bhs.b.begin(), cmd.bhs.b.end()));
    if (!t.Read(&cmd)) return;
    t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va,
                std::vector<uint8_t>(256 * 1024, 0x77));
    t.Send(GoodResponse(t, cmd));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the caller checks its data
    stale = t.RdmaWrite(rejected.read_stag, rejected.read_va, std::vector<uint8_t>(4096, 0x66));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  const int baseline = RemoteKeys();
  std::vector<uint8_t> small;
  Status st = ReadBytes(*s, &small, 4096);
  ASSERT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
  EXPECT_NE(st.message().find("invalid PDU field"), std::string::npos) << st.ToString();
  EXPECT_EQ(RemoteKeysSettledAt(baseline), baseline) << "the rejected READ's STag is still live";
  std::vector<uint8_t> large;
  ASSERT_TRUE(ReadBytes(*s, &large, 256 * 1024).ok());
  EXPECT_EQ(large, std::vector<uint8_t>(256 * 1024, 0x77));
  EXPECT_EQ(RemoteKeysSettledAt(baseline), baseline) << "a registration outlived its command";
  target.Join();
  EXPECT_EQ(stale, IBV_WC_REM_ACCESS_ERR) << "the rejected READ's STag still worked";
  EXPECT_EQ(small, std::vector<uint8_t>(4096, 0xee)) << "a rejected READ delivered data";
}

// An underflow residual past the Expected Data Transfer Length cannot be right: the command
// fails with an error that says so (REPORT LUNS once sized its answer by it and died).
TEST(IserPeer, AResidualPastTheTransferLengthIsAProtocolError) {
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    Bhs rsp = GoodResponse(t, cmd);
    rsp.set_flags(kFinalBit | kResidualUnderflow);
    rsp.set_u32(bhs::kResidualCount, cmd.bhs.u32(bhs::kExpectedDataTransferLength) + 1);
    t.Send(rsp);
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::shared_ptr<Session> session = std::move(s);
  Result<std::vector<uint64_t>> luns = ReportLuns(*session);
  target.Join();
  ASSERT_FALSE(luns.ok());
  EXPECT_EQ(luns.status().code(), StatusCode::kProtocolError) << luns.status().ToString();
  EXPECT_NE(luns.status().message().find("residual"), std::string::npos)
      << luns.status().ToString();
}

// A target whose CmdSN window (1000) is wider than the receives we posted: however many
// commands are submitted, no more wait for their answers at once than we have receives for
// (on IB and RoCE one more would cost an RNR wait, on iWARP the connection), and all complete.
TEST(IserPeer, AWindowWiderThanOurReceivesNeverOutrunsThem) {
  constexpr int kCommands = 400;
  constexpr size_t kReceives = IserResources::kRecvBuffers - IserResources::kUnexpectedReceives;
  std::atomic<size_t> most_held{0};
  std::atomic<int> answered{0};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    while (answered < kCommands) {
      // Everything the initiator sends until it stops sending, unanswered.
      std::vector<FakePdu> held;
      FakePdu pdu;
      while (t.ReadWithin(
          &pdu, held.empty() ? std::chrono::milliseconds(10000) : std::chrono::milliseconds(300))) {
        if (pdu.bhs.opcode() == Opcode::kScsiCommand) held.push_back(pdu);
      }
      if (held.empty()) return;
      most_held = std::max<size_t>(most_held, held.size());
      for (const FakePdu& cmd : held) {
        const uint32_t cmdsn = cmd.bhs.u32(bhs::kCmdSN);
        t.Send(ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), cmdsn + 1,
                              cmdsn + 1000));
        ++answered;
      }
    }
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<Task> tasks(kCommands);
  std::atomic<int> done{0};
  for (Task& t : tasks) {
    scsi::TestUnitReady(t);
    t.lun = 1;
    t.context = &done;
    t.on_complete = [](Task* task) { ++*static_cast<std::atomic<int>*>(task->context); };
  }
  for (Task& t : tasks) s->Submit(&t);
  for (int i = 0; i < 3000 && done < kCommands; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  target.Join();
  ASSERT_EQ(done, kCommands);
  for (const Task& t : tasks) EXPECT_TRUE(scsi::TaskStatus(t, "TEST UNIT READY").ok());
  EXPECT_LE(most_held, kReceives) << "more commands awaited answers than receives were posted";
  EXPECT_GT(most_held, 64u) << "the target's window was never wider than the login's";
}

TEST(IserPeer, SendLargerThanOurReceiveBuffersIsDetected) {
  std::atomic<int> sent{-1};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    // A SCSI Response whose sense data runs past the 8192 bytes we declared and posted.
    Bhs rsp = GoodResponse(t, cmd);
    rsp.b[3] = 0x02;
    rsp.set_data_segment_length(12000);
    std::vector<uint8_t> bytes(kIserHeaderLength + kBhsLength + 12000, 0x55);
    BuildIserHeader(bytes.data(), kIserControl, 0, 0, 0, 0);
    std::copy(rsp.b.begin(), rsp.b.end(), bytes.begin() + kIserHeaderLength);
    sent = t.SendRaw(bytes);
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  Status st = ReadBytes(*s, &buf);
  target.Join();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(sent, IBV_WC_SUCCESS) << "the oversized SEND was accepted";
  EXPECT_NE(st.message().find("length"), std::string::npos) << st.ToString();
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0xee));
}

TEST(IserPeer, DataInOnAnIserConnectionIsAProtocolError) {
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    Bhs data_in = GoodResponse(t, cmd);
    data_in.set_opcode(Opcode::kDataIn, false);
    data_in.set_data_segment_length(512);
    t.Send(data_in, std::vector<uint8_t>(512, 0x66));
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf;
  Status st = ReadBytes(*s, &buf);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Data-In"), std::string::npos) << st.ToString();
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0xee));
}

// Over iSER the target places read data with RDMA WRITEs, which the initiator cannot observe:
// only the SCSI Response's residual says how much it wrote (DataInAccounting::kTargetPlaced).
// So the session takes the target at its word, and Task::data_in_bytes, which counts Data-In
// PDUs, stays 0: the datamover no longer fills it in from the residual. What a target that
// claims data it never wrote leaves in the buffer cannot be checked; what it says it did not
// write is never copied in.
TEST(IserPeer, ReadDataIsTakenOnTheResidualsWord) {
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    FakePdu cmd;
    if (!t.Read(&cmd)) return;
    t.RdmaWrite(t.last_stags().read_stag, t.last_stags().read_va, std::vector<uint8_t>(4096, 0x5a));
    t.Send(GoodResponse(t, cmd));
    if (!t.Read(&cmd)) return;  // GOOD, with nothing written
    t.Send(GoodResponse(t, cmd));
    if (!t.Read(&cmd)) return;  // GOOD, nothing written, and it says so
    Bhs rsp = GoodResponse(t, cmd);
    rsp.set_flags(kFinalBit | kResidualUnderflow);
    rsp.set_u32(bhs::kResidualCount, 4096);
    t.Send(rsp);
  });
  auto s = Open(target);
  ASSERT_TRUE(s);
  std::vector<uint8_t> buf(4096, 0xee);
  auto read = [&](Task* t) {
    std::fill(buf.begin(), buf.end(), 0xee);
    scsi::Read(*t, 0, 8, buf.data(), 4096);
    t->lun = 1;
    s->Execute(t);
  };
  Task normal;
  read(&normal);
  ASSERT_TRUE(scsi::TaskStatus(normal, "READ").ok()) << normal.status.ToString();
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0x5a));
  EXPECT_EQ(normal.data_in_bytes, 0u);

  Task unwritten;
  read(&unwritten);
  EXPECT_TRUE(scsi::TaskStatus(unwritten, "READ").ok()) << unwritten.status.ToString();
  EXPECT_EQ(unwritten.data_in_bytes, 0u);

  Task underflow;
  read(&underflow);
  target.Join();
  ASSERT_TRUE(scsi::TaskStatus(underflow, "READ").ok()) << underflow.status.ToString();
  EXPECT_TRUE(underflow.residual_underflow);
  EXPECT_EQ(underflow.residual, 4096u);
  EXPECT_EQ(underflow.data_in_bytes, 0u);
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0xee)) << "bytes the target did not write arrived";
}

}  // namespace
}  // namespace iser
