// A misbehaving iSER peer. tgtd never uses a stale or out-of-range STag, never writes into a
// buffer it may only read, never sends more than our receive buffers hold and never sends Data-In
// over iSER, so a scripted fake target (tests/integration/fake_iser_target.h, a mock by
// necessity) does. The RDMA checks happen in softrdma exactly where a NIC makes them: at our side,
// against the STags we advertised; the target sees a remote access error, our memory is not
// touched, and the session fails the I/O with a clear error instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "initiator/transport/iser/iser_header.h"
#include "tests/integration/fake_iser_target.h"

namespace iser {
namespace {

using test::FakeIserTarget;
using test::FakePdu;
using test::ResponseHeader;

constexpr uint16_t kPort = 3260;  // each test runs in a network namespace of its own

SessionOptions IserOptions() {
  SessionOptions o;
  o.portal = {"127.0.0.1", kPort};
  o.transport = TransportKind::kIser;
  o.target_name = "iqn.2026-11.io.iser-connect.test:fake-iser";
  o.initiator_name = "iqn.2026-11.io.iser-connect.test:initiator";
  o.login_timeout = std::chrono::seconds(5);
  o.logout_timeout = std::chrono::milliseconds(200);  // the fake target does not answer Logout
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
  EXPECT_EQ(second, std::vector<uint8_t>(n, 0xee)) << "a failed READ delivered data";
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
  EXPECT_EQ(buf, std::vector<uint8_t>(n, 0xee));
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

INSTANTIATE_TEST_SUITE_P(ThroughSlotsAndDirect, IserPeerSize,
                         ::testing::Values(4096u, 256u * 1024));

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
