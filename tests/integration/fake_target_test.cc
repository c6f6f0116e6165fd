// Bad input from a target: malformed PDUs, lies and garbage during login. These faults cannot
// be produced with tgtd, so a scripted fake target (tests/integration/fake_target.h) sends them.
// Each must fail the connection (or the login) with a specific error, without crashing and
// without hanging; the sanitizer build checks memory safety on the way.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <semaphore>
#include <thread>

#include "initiator/block/lun_info.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using test::AnswerTaskManagement;
using test::FakePdu;
using test::FakeTarget;
using test::ReadUntil;
using test::ResponseHeader;

SessionOptions OptionsFor(const FakeTarget& t) {
  SessionOptions o = test::LoopbackOptions(t.port(), "iqn.2026-11.io.iser-connect.test:fake");
  o.logout_timeout = std::chrono::milliseconds(200);  // the fake target does not answer Logout
  // These tests are about how one connection fails; a scripted target serves one connection, so
  // recovery (tests/unit/session_recovery_test.cc, tests/recovery/) is off.
  o.recover = false;
  return o;
}

// Logs in to the fake target, runs one 4 KiB READ and returns its status. A connection-level
// failure must also fail the next command at once; a command-level one must not.
Status ReadThroughFake(FakeTarget::Script script, FakeTarget::LoginBehavior login = {},
                       bool session_survives = false, uint32_t max_recv_data_segment_length = 0) {
  FakeTarget target(login, std::move(script));
  SessionOptions o = OptionsFor(target);
  if (login.header_digest) o.offer.header_digest = {DigestType::kCrc32c};
  if (max_recv_data_segment_length) {
    o.offer.max_recv_data_segment_length = max_recv_data_segment_length;
  }
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  if (!s.ok()) return s.status();
  std::vector<uint8_t> buf(4096);
  Task t;
  scsi::Read(t, 0, 8, buf.data(), 4096);
  t.lun = 1;
  (*s)->Execute(&t);
  Status st = scsi::TaskStatus(t, "READ");
  Task t2;
  scsi::TestUnitReady(t2);
  (*s)->Execute(&t2);
  if (session_survives) {
    EXPECT_TRUE(t2.status.ok()) << "a command-level error broke the session: "
                                << t2.status.ToString();
  } else {
    EXPECT_FALSE(t2.status.ok()) << "the session kept working after a fatal error";
  }
  return st;
}

void ExpectError(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.ToString();
}

TEST(FakeTarget, UnknownOpcode) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs bad = ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), 2, 64);
    bad.b[0] = 0x3a;
    t.Send(bad);
  });
  ExpectError(st, StatusCode::kProtocolError, "unknown opcode 0x3a");
}

TEST(FakeTarget, DataSegmentLongerThanNegotiated) {
  auto script = [](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), 0, 2, 64);
    din.set_flags(0);
    din.set_data_segment_length(1 << 20);
    t.Send(din);
  };
  // Our default is the RFC's maximum, which leaves no length to exceed: declare 256 KiB.
  Status st = ReadThroughFake(script, {}, false, 262144);
  ExpectError(st, StatusCode::kProtocolError, "exceeds our MaxRecvDataSegmentLength");
}

TEST(FakeTarget, ResponseForUnknownItt) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    t.Send(
        ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt() ^ 0x5a5a0000, t.next_statsn(), 2, 64));
  });
  ExpectError(st, StatusCode::kProtocolError, "unknown ITT");
}

TEST(FakeTarget, TruncatedPduThenClose) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs rsp = ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), 2, 64);
    t.SendRaw(rsp.data(), 20);
    t.Close();
  });
  ExpectError(st, StatusCode::kConnectionFailed, "closed the connection");
}

TEST(FakeTarget, BadHeaderDigest) {
  FakeTarget::LoginBehavior login;
  login.header_digest = true;
  login.operational_keys[0] = "HeaderDigest=CRC32C";
  Status st = ReadThroughFake(
      [](FakeTarget& t) {
        FakePdu cmd;
        ASSERT_TRUE(t.Read(&cmd));
        Bhs rsp = ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), 2, 64);
        const uint8_t wrong_digest[4] = {1, 2, 3, 4};
        t.SendRaw(rsp.data(), kBhsLength);
        t.SendRaw(wrong_digest, 4);
      },
      login);
  ExpectError(st, StatusCode::kProtocolError, "header digest mismatch");
}

TEST(FakeTarget, SuccessWithoutTheData) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    t.Send(ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), 2, 64));
  });
  ExpectError(st, StatusCode::kProtocolError, "sent 0 of 4096 bytes");
}

TEST(FakeTarget, DataInBeyondTheBuffer) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), 0, 2, 64);
    din.set_flags(0);
    din.set_u32(bhs::kBufferOffset, 4000);
    din.set_data_segment_length(512);
    t.Send(din, std::vector<uint8_t>(512, 0xee));
  });
  ExpectError(st, StatusCode::kProtocolError, "beyond the expected transfer length");
}

TEST(FakeTarget, DataInOutOfSequence) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), 0, 2, 64);
    din.set_flags(0);
    din.set_u32(bhs::kDataSN, 3);
    din.set_data_segment_length(512);
    t.Send(din, std::vector<uint8_t>(512, 0));
  });
  ExpectError(st, StatusCode::kProtocolError, "DataSN 3, expected 0");
}

TEST(FakeTarget, TargetIgnoresNopOutAndStopsResponding) {
  FakeTarget target({}, [](FakeTarget& t) {
    FakePdu pdu;
    while (t.Read(&pdu)) {
    }
  });
  SessionOptions o = OptionsFor(target);
  o.nop_interval = std::chrono::milliseconds(500);
  o.nop_timeout = std::chrono::milliseconds(1000);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> buf(4096);
  Task t;
  scsi::Read(t, 0, 8, buf.data(), 4096);
  const auto start = std::chrono::steady_clock::now();
  (*s)->Execute(&t);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ExpectError(t.status, StatusCode::kTimeout, "NOP-Out");
}

TEST(FakeTarget, LoginGarbageKeys) {
  FakeTarget::LoginBehavior login;
  login.operational_keys = {"this is not a key value pair"};
  FakeTarget target(login, [](FakeTarget&) {});
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(target));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError) << s.status().ToString();
  EXPECT_NE(s.status().message().find("operational negotiation"), std::string::npos)
      << s.status().ToString();
}

TEST(FakeTarget, LoginAnswerOutsideTheRules) {
  FakeTarget::LoginBehavior login;
  login.operational_keys[0] = "HeaderDigest=MD5";
  FakeTarget target(login, [](FakeTarget&) {});
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(target));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(s.status().message().find("HeaderDigest"), std::string::npos) << s.status().ToString();
}

TEST(FakeTarget, LoginStatusDecoded) {
  FakeTarget::LoginBehavior login;
  login.status_class = 2;
  login.status_detail = 3;
  FakeTarget target(login, [](FakeTarget&) {});
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(target));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFatalLogin);
  EXPECT_NE(s.status().message().find("Not found"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(s.status().message().find("negotiation"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("0x0203"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace iser

namespace iser {
namespace {

// A target ping (NOP-In with a TTT) must be answered with a NOP-Out echoing TTT and LUN.
// The first NOP-Out the initiator sends, if one arrives before it hangs up.
bool ReadNopOut(FakeTarget& t, FakePdu* reply) {
  while (t.Read(reply)) {
    if (reply->bhs.opcode() == Opcode::kNopOut) return true;
  }
  return false;
}

// Logs in to target with no keepalive pings of our own (so that every NOP-Out answers the
// target) and waits up to `limit` for the target's script to set `flag`.
void LogInAndWaitFor(FakeTarget& target, const std::atomic<bool>& flag,
                     std::chrono::milliseconds limit) {
  SessionOptions o = OptionsFor(target);
  o.nop_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!flag && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(FakeTarget, TargetPingIsAnsweredWithTheSameTtt) {
  std::atomic<bool> answered{false};
  FakeTarget target({}, [&](FakeTarget& t) {
    Bhs ping = ResponseHeader(Opcode::kNopIn, kReservedTag, t.next_statsn(), 1, 64);
    ping.set_u32(bhs::kTtt, 0xabcd0001);
    ping.set_lun(EncodeLun(3));
    t.Send(ping);
    FakePdu reply;
    answered = ReadNopOut(t, &reply) && reply.bhs.u32(bhs::kTtt) == 0xabcd0001 &&
               reply.bhs.itt() == kReservedTag && reply.bhs.immediate() &&
               DecodeLun(reply.bhs.lun()) == 3;
  });
  LogInAndWaitFor(target, answered, std::chrono::seconds(2));
  EXPECT_TRUE(answered);
}

// A data segment far larger than any sense data: the buffer for non-Data-In segments grows to
// it, the stream stays in step, and the ping after it is answered.
TEST(FakeTarget, LargeNopInDataSegmentIsReceivedWhole) {
  std::atomic<bool> answered{false};
  FakeTarget target({}, [&](FakeTarget& t) {
    Bhs big = ResponseHeader(Opcode::kNopIn, kReservedTag, t.next_statsn(), 1, 64);
    big.set_u32(bhs::kTtt, kReservedTag);  // unsolicited: no answer expected
    std::vector<uint8_t> data(3 << 20, 0xa5);
    big.set_data_segment_length(static_cast<uint32_t>(data.size()));
    t.Send(big, data);
    Bhs ping = ResponseHeader(Opcode::kNopIn, kReservedTag, t.next_statsn(), 1, 64);
    ping.set_u32(bhs::kTtt, 0xabcd0002);
    t.Send(ping);
    FakePdu reply;
    answered = ReadNopOut(t, &reply) && reply.bhs.u32(bhs::kTtt) == 0xabcd0002;
  });
  LogInAndWaitFor(target, answered, std::chrono::seconds(5));
  EXPECT_TRUE(answered);
}

// With a window of one command, commands wait for MaxCmdSN to move and are sent in order.
TEST(FakeTarget, CommandsPastMaxCmdSNWaitInOrder) {
  std::atomic<int> violations{0};
  std::vector<uint32_t> seen;
  FakeTarget target({}, [&](FakeTarget& t) {
    uint32_t max_cmdsn = 1;  // login answered ExpCmdSN 1, MaxCmdSN 64: shrink at once
    Bhs nop = ResponseHeader(Opcode::kNopIn, kReservedTag, t.next_statsn(), 1, 1);
    nop.set_u32(bhs::kStatSN, 0);
    t.Send(nop);
    FakePdu cmd;
    while (t.Read(&cmd)) {
      if (cmd.bhs.opcode() != Opcode::kScsiCommand) continue;
      const uint32_t cmdsn = cmd.bhs.u32(bhs::kCmdSN);
      if (static_cast<int32_t>(cmdsn - max_cmdsn) > 0) ++violations;
      seen.push_back(cmdsn);
      ++max_cmdsn;
      t.Send(ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), cmdsn + 1,
                            max_cmdsn));
    }
  });
  SessionOptions o = OptionsFor(target);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  constexpr int kN = 20;
  std::vector<Task> tasks(kN);
  std::counting_semaphore<kN> done(0);
  for (Task& t : tasks) {
    scsi::TestUnitReady(t);
    t.context = &done;
    t.on_complete = [](Task* x) {
      static_cast<std::counting_semaphore<kN>*>(x->context)->release();
    };
    (*s)->Submit(&t);
  }
  for (int i = 0; i < kN; ++i) ASSERT_TRUE(done.try_acquire_for(std::chrono::seconds(5)));
  for (const Task& t : tasks) EXPECT_TRUE(t.status.ok()) << t.status.ToString();
  (*s)->Close().IgnoreError();  // the script ends before a Logout: Close times out
  EXPECT_EQ(violations, 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kN));
  for (int i = 1; i < kN; ++i) EXPECT_EQ(seen[i], seen[i - 1] + 1);
}

TEST(FakeTarget, RejectedCommandFailsThatTaskOnly) {
  Status st = ReadThroughFake(
      [](FakeTarget& t) {
        FakePdu cmd;
        ASSERT_TRUE(t.Read(&cmd));
        Bhs rej = ResponseHeader(Opcode::kReject, kReservedTag, t.next_statsn(), 2, 64);
        rej.b[2] = 0x05;
        rej.set_data_segment_length(kBhsLength);
        t.Send(rej, std::vector<uint8_t>(cmd.bhs.b.begin(), cmd.bhs.b.end()));
        FakePdu next;
        while (t.Read(&next)) {
          if (next.bhs.opcode() == Opcode::kScsiCommand) {
            t.Send(ResponseHeader(Opcode::kScsiResponse, next.bhs.itt(), t.next_statsn(), 3, 64));
          }
        }
      },
      {}, true);
  ExpectError(st, StatusCode::kProtocolError, "command not supported");
}

TEST(FakeTarget, ResidualUnderflowIsReported) {
  FakeTarget target({}, [](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), t.next_statsn(), 2, 64);
    din.set_flags(kFinalBit | kStatusBit | kResidualUnderflow);
    din.set_u32(bhs::kResidualCount, 4096 - 36);
    din.set_data_segment_length(36);
    t.Send(din, std::vector<uint8_t>(36, 0x20));
    FakePdu rest;
    while (t.Read(&rest)) {
    }
  });
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(target));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> buf(4096);
  Task t;
  scsi::Inquiry(t, buf.data(), 4096);
  (*s)->Execute(&t);
  ASSERT_TRUE(t.status.ok()) << t.status.ToString();
  EXPECT_TRUE(t.residual_underflow);
  EXPECT_EQ(t.residual, 4096u - 36u);
  EXPECT_EQ(t.data_in_bytes, 36u);
}

TEST(FakeTarget, CheckConditionCarriesDecodedSense) {
  Status st = ReadThroughFake(
      [](FakeTarget& t) {
        FakePdu cmd;
        ASSERT_TRUE(t.Read(&cmd));
        Bhs rsp = ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(), 2, 64);
        rsp.b[3] = 0x02;
        std::vector<uint8_t> sense = {0, 18, 0x70, 0, 0x03, 0,    0, 0, 0, 10,
                                      0, 0,  0,    0, 0x11, 0x00, 0, 0, 0, 0};
        rsp.set_data_segment_length(static_cast<uint32_t>(sense.size()));
        t.Send(rsp, sense);
        FakePdu rest;
        while (t.Read(&rest)) {
          if (rest.bhs.opcode() == Opcode::kScsiCommand) {
            t.Send(ResponseHeader(Opcode::kScsiResponse, rest.bhs.itt(), t.next_statsn(), 3, 64));
          }
        }
      },
      {}, true);
  ExpectError(st, StatusCode::kIoError, "MEDIUM ERROR: UNRECOVERED READ ERROR");
}

}  // namespace
}  // namespace iser

#include "discovery/discovery.h"

namespace iser {
namespace {

TEST(FakeTarget, LoginRedirectIsFollowed) {
  std::atomic<bool> used{false};
  FakeTarget real({}, [&](FakeTarget& t) {
    used = true;
    FakePdu pdu;
    while (t.Read(&pdu)) {
    }
  });
  FakeTarget::LoginBehavior redirect;
  redirect.status_class = 1;
  redirect.status_detail = 1;
  redirect.status_keys = {"TargetAddress=127.0.0.1:" + std::to_string(real.port()) + ",1"};
  FakeTarget first(redirect, [](FakeTarget&) {});
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(first));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->portal().port, real.port());
  // The target's script starts after it sent the last Login Response: Open may return first.
  for (int i = 0; i < 500 && !used; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(used);
}

TEST(FakeTarget, RedirectWithoutAddressIsAnError) {
  FakeTarget::LoginBehavior redirect;
  redirect.status_class = 1;
  redirect.status_detail = 2;
  FakeTarget first(redirect, [](FakeTarget&) {});
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(first));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("redirect without a TargetAddress"), std::string::npos)
      << s.status().ToString();
}

// SendTargets answered in three Text Responses: F=0 with a TTT twice (a pair split across the
// first two), then F=1. Every continuation request must echo the TTT.
TEST(FakeTarget, SendTargetsContinuation) {
  std::atomic<int> ttt_errors{0};
  const std::string answer = EncodeText({{"TargetName", "iqn.2026-11.example:first"},
                                         {"TargetAddress", "127.0.0.1:3260,1"},
                                         {"TargetName", "iqn.2026-11.example:second"},
                                         {"TargetAddress", "[::1]:3261,2"}});
  FakeTarget target({}, [&](FakeTarget& t) {
    const size_t cut1 = 20, cut2 = 50;
    const std::string parts[3] = {answer.substr(0, cut1), answer.substr(cut1, cut2 - cut1),
                                  answer.substr(cut2)};
    for (int i = 0; i < 3; ++i) {
      FakePdu req;
      if (!t.Read(&req) || req.bhs.opcode() != Opcode::kTextRequest) return;
      if (i > 0 && req.bhs.u32(bhs::kTtt) != 0x100u + static_cast<uint32_t>(i)) ++ttt_errors;
      Bhs rsp = ResponseHeader(Opcode::kTextResponse, req.bhs.itt(), t.next_statsn(), 2, 64);
      rsp.set_flags(i == 2 ? kFinalBit : (i == 0 ? kContinueBit : 0));
      rsp.set_u32(bhs::kTtt, i == 2 ? kReservedTag : 0x101u + static_cast<uint32_t>(i));
      rsp.set_data_segment_length(static_cast<uint32_t>(parts[i].size()));
      t.Send(rsp, std::vector<uint8_t>(parts[i].begin(), parts[i].end()));
    }
    FakePdu logout;
    if (t.Read(&logout) && logout.bhs.opcode() == Opcode::kLogoutRequest) {
      t.Send(ResponseHeader(Opcode::kLogoutResponse, logout.bhs.itt(), t.next_statsn(), 2, 64));
    }
  });
  Result<std::vector<DiscoveredTarget>> targets = DiscoverTargets(OptionsFor(target));
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), 2u);
  EXPECT_EQ((*targets)[1].name, "iqn.2026-11.example:second");
  EXPECT_EQ((*targets)[1].portals[0].portal.host, "::1");
  EXPECT_EQ((*targets)[1].portals[0].tpgt, 2);
  EXPECT_EQ(ttt_errors, 0);
}

// A Data-In PDU that repeats an offset leaves part of the buffer unwritten although the byte
// count adds up: with DataPDUInOrder=Yes every Data-In must continue where the last one ended.
TEST(FakeTarget, DataInRepeatingAnOffsetIsAProtocolError) {
  Status st = ReadThroughFake([](FakeTarget& t) {
    FakePdu cmd;
    ASSERT_TRUE(t.Read(&cmd));
    for (uint32_t sn = 0; sn < 2; ++sn) {
      Bhs din =
          ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), sn == 1 ? t.next_statsn() : 0, 2, 64);
      din.set_flags(sn == 1 ? kFinalBit | kStatusBit : 0);
      din.set_u32(bhs::kDataSN, sn);
      din.set_u32(bhs::kBufferOffset, 0);
      din.set_data_segment_length(2048);
      t.Send(din, std::vector<uint8_t>(2048, 0x42));
    }
    FakePdu rest;
    while (t.Read(&rest)) {
    }
  });
  ExpectError(st, StatusCode::kProtocolError, "offset");
}

// An underflow residual larger than the Expected Data Transfer Length is a count of bytes that
// were never asked for: nothing can be computed from it (REPORT LUNS once sized its answer by
// it and died of bad_alloc).
TEST(FakeTarget, AResidualPastTheTransferLengthIsAProtocolError) {
  FakeTarget target({}, [](FakeTarget& t) {
    FakePdu cmd;
    while (t.Read(&cmd)) {
      if (cmd.bhs.opcode() != Opcode::kScsiCommand) continue;
      Bhs rsp = ResponseHeader(Opcode::kScsiResponse, cmd.bhs.itt(), t.next_statsn(),
                               cmd.bhs.u32(bhs::kCmdSN) + 1, cmd.bhs.u32(bhs::kCmdSN) + 64);
      rsp.set_flags(kFinalBit | kResidualUnderflow);
      rsp.set_u32(bhs::kResidualCount, cmd.bhs.u32(bhs::kExpectedDataTransferLength) + 4096);
      t.Send(rsp);
    }
  });
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(target));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::shared_ptr<Session> session = std::move(*s);
  Result<std::vector<uint64_t>> luns = ReportLuns(*session);
  ASSERT_FALSE(luns.ok());
  ExpectError(luns.status(), StatusCode::kProtocolError, "residual");
  EXPECT_NE(luns.status().message().find("REPORT LUNS"), std::string::npos)
      << luns.status().ToString();
}

// command_timeout's three endings against a target that sits on READs, over TCP: an ABORT TASK
// answered (the READ is sent again and only its second answer counts), an ABORT TASK refused and
// the LUN reset (the READ it covered is sent again once), and every abort answered but never the
// READ (it fails with a timeout and its buffer holds nothing of the target's).
TEST(FakeTarget, AbortLunResetAndTimeoutEachEndTheReadOnce) {
  auto send_data = [](FakeTarget& t, const FakePdu& cmd, uint8_t fill) {
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), t.next_statsn(),
                             cmd.bhs.u32(bhs::kCmdSN) + 1, cmd.bhs.u32(bhs::kCmdSN) + 64);
    din.set_flags(kFinalBit | kStatusBit);
    din.set_data_segment_length(4096);
    t.Send(din, std::vector<uint8_t>(4096, fill));
  };
  FakeTarget target({}, [&](FakeTarget& t) {
    FakePdu cmd, tmf;
    // READ 1: aborted, then answered.
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd) || !ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf))
      return;
    EXPECT_EQ(tmf.bhs.flags() & 0x7f, 1);
    AnswerTaskManagement(t, tmf, 0);
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd)) return;
    send_data(t, cmd, 0x21);
    // READ 2: the abort refused, the LUN reset, then answered.
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd) || !ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf))
      return;
    AnswerTaskManagement(t, tmf, 255);
    if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
    EXPECT_EQ(tmf.bhs.flags() & 0x7f, 5);
    AnswerTaskManagement(t, tmf, 0);
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd)) return;
    send_data(t, cmd, 0x31);
    // READ 3: never answered.
    for (int round = 0; round < 3; ++round) {
      if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
      AnswerTaskManagement(t, tmf, 0);
    }
    FakePdu rest;
    while (t.Read(&rest)) {
    }
  });
  SessionOptions o = OptionsFor(target);
  o.command_timeout = std::chrono::seconds(1);
  o.nop_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto read = [&](std::vector<uint8_t>* buf) {
    buf->assign(4096, 0xee);
    Task t;
    scsi::Read(t, 0, 8, buf->data(), 4096);
    t.lun = 1;
    (*s)->Execute(&t);
    return scsi::TaskStatus(t, "READ");
  };
  std::vector<uint8_t> buf;
  ASSERT_TRUE(read(&buf).ok());
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0x21));
  ASSERT_TRUE(read(&buf).ok());
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0x31));
  Status timed_out = read(&buf);
  EXPECT_EQ(timed_out.code(), StatusCode::kTimeout) << timed_out.ToString();
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0xee));
  EXPECT_TRUE((*s)->healthy()) << "a command's endings cost the connection";
}

// An ABORT TASK whose command was answered before it, refused after the Logout Request went:
// the refusal asks for a LUN reset, but no new request goes on a connection being logged out, and
// the LUN has nothing of ours left to reset.
TEST(FakeTarget, NoLunResetFollowsTheLogoutRequest) {
  std::atomic<int> after_logout{-1};
  std::binary_semaphore looked(0);  // the script has looked past the Logout Request
  FakeTarget target({}, [&](FakeTarget& t) {
    FakePdu cmd, tmf, logout;
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd) || !ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf))
      return;
    Bhs din = ResponseHeader(Opcode::kDataIn, cmd.bhs.itt(), t.next_statsn(),
                             cmd.bhs.u32(bhs::kCmdSN) + 1, cmd.bhs.u32(bhs::kCmdSN) + 64);
    din.set_flags(kFinalBit | kStatusBit);
    din.set_data_segment_length(4096);
    t.Send(din, std::vector<uint8_t>(4096, 0x42));
    if (!ReadUntil(t, Opcode::kLogoutRequest, &logout)) return;
    AnswerTaskManagement(t, tmf, 5);  // Function rejected
    FakePdu next;
    after_logout = t.Readable(1500) && t.Read(&next) ? static_cast<int>(next.bhs.opcode()) : 0;
    looked.release();
    t.Send(ResponseHeader(Opcode::kLogoutResponse, logout.bhs.itt(), t.next_statsn(),
                          logout.bhs.u32(bhs::kCmdSN), logout.bhs.u32(bhs::kCmdSN) + 63));
  });
  SessionOptions o = OptionsFor(target);
  o.command_timeout = std::chrono::seconds(1);
  o.nop_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> buf(4096, 0xee);
  Task t;
  scsi::Read(t, 0, 8, buf.data(), 4096);
  t.lun = 1;
  (*s)->Execute(&t);
  ASSERT_TRUE(scsi::TaskStatus(t, "READ").ok()) << scsi::TaskStatus(t, "READ").ToString();
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0x42));
  (*s)->Close().IgnoreError();
  // Close may return before the script's look ends (the epoll datamover waits out the logout).
  ASSERT_TRUE(looked.try_acquire_for(std::chrono::seconds(10)))
      << "the script never saw the Logout";
  EXPECT_EQ(after_logout.load(), 0)
      << "the initiator sent a PDU with opcode " << after_logout.load()
      << " after its Logout Request (0x02: a Task Management Function Request)";
}

}  // namespace
}  // namespace iser
