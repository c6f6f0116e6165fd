// The session's control PDUs, driven over the fake datamover: Reject, Async Message,
// NOP-In/NOP-Out with the keepalive timeout on the fake clock, and Logout.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class SessionControlTest : public SessionTest {
 protected:
  void Reject(const Bhs& rejected, uint8_t reason) {
    Bhs r = fake_.Header(Opcode::kReject, kReservedTag);
    r.b[2] = reason;
    fake_.Deliver(r, std::span<const uint8_t>(rejected.data(), kBhsLength));
  }
  std::vector<SentPdu> Sent(Opcode op) {
    std::vector<SentPdu> out;
    for (const SentPdu& p : fake_.sent()) {
      if (p.bhs.opcode() == op) out.push_back(p);
    }
    return out;
  }
  // Async Message event 1: the target asks for a logout within `within` seconds.
  Bhs LogoutRequested(uint16_t within) {
    Bhs async = fake_.Header(Opcode::kAsyncMessage, kReservedTag);
    async.b[36] = 1;
    async.set_u16(42, within);
    return async;
  }
};

TEST_F(SessionControlTest, ARejectedCommandCompletesThatTaskWithAnError) {
  Open();
  TestTask& a = NewRead(512);
  TestTask& b = NewRead(512);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  Reject(a.task.bhs, 0x04);
  ASSERT_EQ(a.completions, 1);
  EXPECT_EQ(a.task.status.code(), StatusCode::kProtocolError);
  EXPECT_NE(a.task.status.message().find("protocol error"), std::string::npos)
      << a.task.status.message();
  EXPECT_FALSE(fake_.failed());
  EXPECT_EQ(b.completions, 0);
  Respond(b);
  EXPECT_EQ(b.completions, 1);
  EXPECT_TRUE(b.task.status.ok());
}

TEST_F(SessionControlTest, ARejectOfAnythingElseFailsTheConnection) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  Bhs data_out;
  data_out.set_opcode(Opcode::kDataOut, false);
  data_out.set_itt(a.task.itt);
  Reject(data_out, 0x09);
  ASSERT_TRUE(fake_.failed());
  EXPECT_EQ(fake_.failure().code(), StatusCode::kProtocolError);
  EXPECT_NE(fake_.failure().message().find("invalid PDU field"), std::string::npos)
      << fake_.failure().message();
  EXPECT_EQ(a.completions, 1);
  EXPECT_FALSE(a.task.status.ok());
}

TEST_F(SessionControlTest, ARejectWithoutTheRejectedHeaderFailsTheConnection) {
  Open();
  fake_.Deliver(fake_.Header(Opcode::kReject, kReservedTag));
  ASSERT_TRUE(fake_.failed());
  EXPECT_NE(fake_.failure().message().find("without the rejected header"), std::string::npos);
}

TEST_F(SessionControlTest, AsyncEventOneLogsOutOnceTheTasksAreDone) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  const Bhs async = LogoutRequested(3);
  fake_.Deliver(async);
  EXPECT_TRUE(Sent(Opcode::kLogoutRequest).empty()) << "a task is still in flight";
  Respond(a);
  EXPECT_EQ(a.completions, 1);
  ASSERT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u);
  EXPECT_EQ(Sent(Opcode::kLogoutRequest)[0].bhs.flags(), kFinalBit) << "reason: close the session";
}

// A target that asks for a logout and never answers the commands in flight gets it anyway by
// Parameter3 seconds (RFC 7143: the Logout goes no later than that); nothing follows it on the
// connection, and what was outstanding is sent again after the next login.
TEST_F(SessionControlTest, AsyncEventOneLogsOutByParameter3WithTasksStillInFlight) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  const Bhs async = LogoutRequested(3);
  fake_.Deliver(async);
  fake_.Advance(std::chrono::seconds(2));
  fake_.FireTimer();
  EXPECT_TRUE(Sent(Opcode::kLogoutRequest).empty()) << "logged out before Parameter3 passed";
  fake_.Advance(std::chrono::seconds(2));
  fake_.FireTimer();
  ASSERT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u) << "no Logout by Parameter3";
  TestTask& b = NewRead(512);
  session_->Submit(&b.task);
  int commands = 0;
  for (const SentPdu& p : fake_.sent()) commands += p.kind == SentPdu::Kind::kCommand;
  EXPECT_EQ(commands, 1) << "a command followed the Logout Request";
}

// Asking again does not move the deadline: a target that repeats event 1 every second would
// otherwise never get its Logout while it leaves the commands unanswered.
TEST_F(SessionControlTest, AsyncEventOneRepeatedKeepsTheFirstDeadline) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  const Bhs async = LogoutRequested(3);
  for (int second = 0; second < 4; ++second) {
    fake_.Deliver(async);
    fake_.Advance(std::chrono::seconds(1));
    fake_.FireTimer();
  }
  EXPECT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u)
      << "no Logout 4 s after the first request to log out within 3 s";
}

TEST_F(SessionControlTest, OtherAsyncEventsAreOnlyLogged) {
  Open();
  for (uint8_t event : {0, 2, 3, 4, 255}) {
    Bhs async = fake_.Header(Opcode::kAsyncMessage, kReservedTag);
    async.b[36] = event;
    fake_.Deliver(async);
  }
  EXPECT_FALSE(fake_.failed());
  EXPECT_TRUE(fake_.sent().empty());
  EXPECT_TRUE(session_->healthy());
}

TEST_F(SessionControlTest, ATargetNopInWithATttIsAnsweredEchoingIt) {
  Open();
  Bhs nop = fake_.Header(Opcode::kNopIn, kReservedTag);
  nop.set_u32(bhs::kTtt, 0x1234abcd);
  nop.set_lun(EncodeLun(3));
  fake_.Deliver(nop);
  std::vector<SentPdu> out = Sent(Opcode::kNopOut);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bhs.u32(bhs::kTtt), 0x1234abcdu);
  EXPECT_EQ(out[0].bhs.itt(), kReservedTag);
  EXPECT_EQ(out[0].bhs.lun(), EncodeLun(3));
  EXPECT_NE(out[0].bhs.b[0] & kImmediateBit, 0);

  Bhs ping = fake_.Header(Opcode::kNopIn, kReservedTag);
  ping.set_u32(bhs::kTtt, kReservedTag);
  fake_.Deliver(ping);
  EXPECT_EQ(Sent(Opcode::kNopOut).size(), 1u) << "a NOP-In without a TTT wants no answer";
}

TEST_F(SessionControlTest, SilenceLongerThanNopIntervalSendsANopOut) {
  SessionOptions o = Options();
  o.nop_interval = seconds(5);
  o.nop_timeout = seconds(3);
  Open(o);
  fake_.Advance(seconds(4));
  fake_.FireTimer();
  EXPECT_TRUE(Sent(Opcode::kNopOut).empty());
  fake_.Advance(milliseconds(1001));
  fake_.FireTimer();
  std::vector<SentPdu> out = Sent(Opcode::kNopOut);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bhs.itt(), kReservedTag);
  EXPECT_EQ(out[0].bhs.u32(bhs::kTtt), kReservedTag);

  // The answer clears it: no timeout later.
  Bhs answer = fake_.Header(Opcode::kNopIn, out[0].bhs.itt());
  answer.set_u32(bhs::kTtt, kReservedTag);
  fake_.Deliver(answer);
  fake_.Advance(seconds(4));
  fake_.FireTimer();
  EXPECT_FALSE(fake_.failed());
  EXPECT_EQ(Sent(Opcode::kNopOut).size(), 1u);
}

TEST_F(SessionControlTest, NoAnswerToANopOutWithinNopTimeoutFailsTheConnection) {
  SessionOptions o = Options();
  o.nop_interval = seconds(5);
  o.nop_timeout = seconds(3);
  Open(o);
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  fake_.Advance(seconds(6));
  fake_.FireTimer();
  ASSERT_EQ(Sent(Opcode::kNopOut).size(), 1u);
  fake_.Advance(seconds(3));
  fake_.FireTimer();
  EXPECT_FALSE(fake_.failed()) << "not yet past nop_timeout";
  fake_.Advance(milliseconds(1));
  fake_.FireTimer();
  ASSERT_TRUE(fake_.failed());
  EXPECT_EQ(fake_.failure().code(), StatusCode::kTimeout);
  EXPECT_NE(fake_.failure().message().find("NOP-Out"), std::string::npos)
      << fake_.failure().message();
  EXPECT_EQ(a.completions, 1);
  EXPECT_EQ(a.task.status.code(), StatusCode::kTimeout);
  EXPECT_FALSE(session_->healthy());
}

TEST_F(SessionControlTest, CloseLogsOutAfterTheInFlightTasksAndReturnsOnTheLogoutResponse) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  size_t sent_at_completion = 0;
  // The target answers the command while Close waits.
  fake_.options().on_wake = [&] {
    if (a.completions == 0) {
      sent_at_completion = fake_.sent().size();
      Respond(a);
    }
  };
  const Status st = session_->Close();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(a.completions, 1);
  EXPECT_TRUE(a.task.status.ok());
  std::vector<SentPdu> logouts = Sent(Opcode::kLogoutRequest);
  ASSERT_EQ(logouts.size(), 1u);
  EXPECT_EQ(fake_.sent().back().bhs.opcode(), Opcode::kLogoutRequest);
  EXPECT_EQ(sent_at_completion, fake_.sent().size() - 1) << "the Logout went out after the task";
  EXPECT_TRUE(fake_.shut_down());
  EXPECT_TRUE(session_->Close().ok()) << "idempotent";
  EXPECT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u);
}

TEST_F(SessionControlTest, CloseWithoutALogoutResponseTimesOut) {
  fake_.options().answer_logout = false;
  SessionOptions o = Options();
  o.logout_timeout = milliseconds(1);
  Open(o);
  const Status st = session_->Close();
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.message();
  EXPECT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u);
  EXPECT_TRUE(fake_.shut_down());
}

// istgt may close the connection on a Logout Request before its Logout Response goes out: the
// session is over at the target either way, so Close succeeds.
TEST_F(SessionControlTest, CloseSucceedsWhenTheTargetClosesTheConnectionOnTheLogout) {
  fake_.options().answer_logout = false;
  Open();
  fake_.options().on_wake = [&] {
    if (!Sent(Opcode::kLogoutRequest).empty() && fake_.failure().ok()) {
      fake_.FailConnection(Status::ConnectionFailed("the target closed the connection"));
    }
  };
  const Status st = session_->Close();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(Sent(Opcode::kLogoutRequest).size(), 1u);
  EXPECT_FALSE(fake_.failure().ok()) << "the connection was not closed after the Logout";
}

}  // namespace
}  // namespace iser::test
