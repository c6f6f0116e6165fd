// Session recovery over the fake datamover: what is sent again after a lost connection, in which
// order and under which tags, what is not, how long tasks wait (replacement_timeout), and the
// reinstatement login itself. The fake stands in for the target because only it can be stopped
// between PDUs; tests/recovery/ kills real targets.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "initiator/session/scsi_retry.h"
#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

using std::chrono::milliseconds;

class SessionRecoveryTest : public SessionTest {
 protected:
  // Waits (bounded) until pred holds for the session's stats.
  template <typename Pred>
  bool WaitFor(Pred pred, milliseconds limit = milliseconds(10000)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(session_->stats())) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }
  bool WaitForCompletion(const TestTask& t, milliseconds limit = milliseconds(10000)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (t.completions.load() > 0) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }
  void LoseConnection() { fake_.FailConnection(Status::ConnectionFailed("peer reset (test)")); }
  bool WaitForRecoveries(uint64_t n) {
    return WaitFor([n](const SessionStats& s) {
      return s.recoveries >= n && s.state == SessionStats::State::kLoggedIn;
    });
  }
  Bhs CheckCondition(const TestTask& t, uint8_t key, uint8_t asc, uint8_t ascq,
                     std::vector<uint8_t>* data) {
    Bhs r = fake_.Header(Opcode::kScsiResponse, t.task.itt);
    r.b[3] = 0x02;
    // SenseLength, then fixed-format sense data.
    *data = {0, 18, 0x70, 0, key, 0, 0, 0, 0, 10, 0, 0, 0, 0, asc, ascq, 0, 0, 0, 0};
    return r;
  }
};

TEST_F(SessionRecoveryTest, UnfinishedTasksAreSentAgainInOrderWithNewTagsAndCmdSN) {
  Open(RecoveringOptions());
  TestTask& a = NewRead(4096);
  TestTask& b = NewWrite(4096);
  TestTask& c = NewRead(8192);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  session_->Submit(&c.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 3u);
  Respond(b);  // b finished before the loss: it must not be sent again
  ASSERT_EQ(b.completions, 1);

  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1)) << "no recovery";
  EXPECT_EQ(fake_.connects(), 2);
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].task, &a.task);
  EXPECT_EQ(again[1].task, &c.task);
  EXPECT_NE(again[0].bhs.itt(), first[0].bhs.itt());
  EXPECT_NE(again[1].bhs.itt(), first[2].bhs.itt());
  // The new session's first CmdSN is the login's, and the order is kept.
  EXPECT_EQ(again[0].bhs.u32(bhs::kCmdSN), 1u);
  EXPECT_EQ(again[1].bhs.u32(bhs::kCmdSN), 2u);
  EXPECT_EQ(a.completions, 0);
  Respond(a);
  Respond(c);
  EXPECT_EQ(a.completions, 1);
  EXPECT_TRUE(a.task.status.ok()) << a.task.status.message();
  EXPECT_EQ(c.completions, 1);
  EXPECT_EQ(b.completions, 1);
  const SessionStats st = session_->stats();
  EXPECT_EQ(st.recoveries, 1u);
  EXPECT_EQ(st.replayed_tasks, 2u);
  EXPECT_NE(st.last_loss.find("peer reset (test)"), std::string::npos) << st.last_loss;
}

TEST_F(SessionRecoveryTest, TheReinstatementLoginReusesTheISIDWithTSIHZero) {
  Open(RecoveringOptions());
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(fake_.logins().size(), 2u);
  const Bhs& first = fake_.logins()[0];
  const Bhs& second = fake_.logins()[1];
  EXPECT_EQ(std::memcmp(&first.b[8], &second.b[8], 6), 0) << "the ISID changed";
  EXPECT_EQ(second.u16(14), 0) << "a reinstatement login has TSIH 0";
}

TEST_F(SessionRecoveryTest, APartialReadStartsOverFromOffsetZero) {
  Open(RecoveringOptions());
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  Bhs d = fake_.Header(Opcode::kDataIn, r.task.itt);
  d.set_flags(0);
  fake_.Deliver(d, std::vector<uint8_t>(4096, 0x11));
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(TakeCommands().size(), 1u);
  // DataSN 0 at offset 0 again: the first attempt's progress is forgotten.
  Bhs d0 = fake_.Header(Opcode::kDataIn, r.task.itt);
  d0.set_flags(kFinalBit | kStatusBit);
  fake_.Deliver(d0, std::vector<uint8_t>(8192, 0x22));
  ASSERT_EQ(r.completions, 1);
  EXPECT_TRUE(r.task.status.ok()) << r.task.status.message();
  EXPECT_EQ(r.buffer[0], 0x22);
  EXPECT_EQ(r.buffer[8191], 0x22);
}

TEST_F(SessionRecoveryTest, APartialWriteStartsOverAndAnswersTheNewR2TsFromOffsetZero) {
  Open(RecoveringOptions());
  TestTask& w = NewWrite(16384);
  session_->Submit(&w.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  Bhs r2t = fake_.Header(Opcode::kR2T, w.task.itt);
  r2t.set_u32(bhs::kTtt, 7);
  r2t.set_u32(bhs::kBufferOffset, 8192);
  r2t.set_u32(bhs::kDesiredLength, 8192);
  fake_.Deliver(r2t);
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(TakeCommands().size(), 1u);
  Bhs again = fake_.Header(Opcode::kR2T, w.task.itt);
  again.set_u32(bhs::kTtt, 9);
  again.set_u32(bhs::kBufferOffset, 0);
  again.set_u32(bhs::kDesiredLength, 16384);
  fake_.Deliver(again);
  std::vector<SentPdu> sent = fake_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].kind, SentPdu::Kind::kDataOut);
  EXPECT_EQ(sent[0].offset, 0u);
  EXPECT_EQ(sent[0].ttt, 9u);
  EXPECT_EQ(sent[0].data, w.buffer);
  Respond(w);
  EXPECT_EQ(w.completions, 1);
  EXPECT_TRUE(w.task.status.ok());
}

TEST_F(SessionRecoveryTest, CompareAndWriteInFlightFailsInsteadOfBeingReplayed) {
  Open(RecoveringOptions());
  TestTask& caw = NewWrite(1024);
  caw.task.cdb[0] = 0x89;  // COMPARE AND WRITE
  TestTask& read = NewRead(512);
  session_->Submit(&caw.task);
  session_->Submit(&read.task);
  ASSERT_EQ(TakeCommands().size(), 2u);
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(caw.completions, 1);
  EXPECT_FALSE(caw.task.status.ok());
  EXPECT_NE(caw.task.status.message().find("COMPARE AND WRITE"), std::string::npos)
      << caw.task.status.message();
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].task, &read.task);
  Respond(read);
  EXPECT_EQ(read.completions, 1);
}

TEST_F(SessionRecoveryTest, APersistentReserveOutNotYetSentIsSentAfterRecovery) {
  SessionOptions o = RecoveringOptions();
  fake_.options().login_cmdsn_window = 0;  // MaxCmdSN = ExpCmdSN: one command at a time
  Open(o);
  TestTask& first = NewRead(512);
  TestTask& pr = NewWrite(24);
  pr.task.cdb[0] = 0x5f;  // PERSISTENT RESERVE OUT, waiting for the window
  session_->Submit(&first.task);
  session_->Submit(&pr.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].task, &first.task);
  // The answer opens the window for one more.
  fake_.exp_cmdsn = fake_.max_cmdsn = 2;
  Respond(first);
  again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].task, &pr.task);
  EXPECT_EQ(pr.completions, 0);
}

TEST_F(SessionRecoveryTest, TasksFailAfterReplacementTimeoutAndWorkAgainOnceRecovered) {
  SessionOptions o = RecoveringOptions();
  o.replacement_timeout = milliseconds(100);
  // The target is away for the second and third connects, back for the fourth.
  fake_.options().connect_result = [](int n) {
    return n == 2 || n == 3 ? Status::ConnectionFailed("connection refused (test)") : Status::OK();
  };
  Open(o);
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(WaitForCompletion(t)) << "the task did not fail after replacement_timeout";
  EXPECT_EQ(t.task.status.code(), StatusCode::kIoError);
  EXPECT_NE(t.task.status.message().find("replacement_timeout"), std::string::npos)
      << t.task.status.message();
  EXPECT_NE(t.task.status.message().find("peer reset (test)"), std::string::npos)
      << t.task.status.message();

  ASSERT_TRUE(WaitForRecoveries(1)) << "recovery stopped after replacement_timeout";
  EXPECT_EQ(fake_.connects(), 4);
  TestTask& after = NewRead(512);
  session_->Submit(&after.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  Respond(after);
  EXPECT_EQ(after.completions, 1);
  EXPECT_TRUE(after.task.status.ok()) << after.task.status.message();
}

TEST_F(SessionRecoveryTest, NewTasksAreRefusedAtOnceWhileRecoveryIsPastReplacementTimeout) {
  SessionOptions o = RecoveringOptions();
  o.replacement_timeout = milliseconds(0);
  fake_.options().connect_result = [](int n) {
    return n == 1 ? Status::OK() : Status::ConnectionFailed("connection refused (test)");
  };
  Open(o);
  LoseConnection();
  ASSERT_TRUE(
      WaitFor([](const SessionStats& s) { return s.state == SessionStats::State::kFailed; }));
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(t.completions, 1) << "a refused task completes inside Submit";
  EXPECT_NE(t.task.status.message().find("recovery goes on"), std::string::npos)
      << t.task.status.message();
  EXPECT_FALSE(session_->healthy());
}

TEST_F(SessionRecoveryTest, AnotherPortalIsTriedWhenTheFirstStaysAway) {
  SessionOptions o = RecoveringOptions();
  o.alternate_portals = {{"192.0.2.2", 3260}};
  fake_.options().connect_result = [](int n) {
    return n == 2 ? Status::ConnectionFailed("connection refused (test)") : Status::OK();
  };
  Open(o);
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(fake_.portals().size(), 3u);
  EXPECT_EQ(fake_.portals()[1], "192.0.2.1:3260");
  EXPECT_EQ(fake_.portals()[2], "192.0.2.2:3260");
  EXPECT_NE(session_->stats().portal.find("192.0.2.2"), std::string::npos);
}

TEST_F(SessionRecoveryTest, PortalsAddedAfterOpenAreTriedToo) {
  SessionOptions o = RecoveringOptions();
  fake_.options().connect_result = [](int n) {
    return n == 2 ? Status::ConnectionFailed("connection refused (test)") : Status::OK();
  };
  Open(o);
  session_->AddAlternatePortals({{"192.0.2.3", 3261}});
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  ASSERT_EQ(fake_.portals().size(), 3u);
  EXPECT_EQ(fake_.portals()[2], "192.0.2.3:3261");
}

TEST_F(SessionRecoveryTest, CloseDuringRecoveryFailsTheWaitingTasksAndReturns) {
  SessionOptions o = RecoveringOptions();
  fake_.options().connect_result = [](int n) {
    return n == 1 ? Status::OK() : Status::ConnectionFailed("connection refused (test)");
  };
  Open(o);
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  LoseConnection();
  ASSERT_TRUE(
      WaitFor([](const SessionStats& s) { return s.state != SessionStats::State::kLoggedIn; }));
  EXPECT_TRUE(session_->Close().ok());
  EXPECT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.status.code(), StatusCode::kAborted) << t.task.status.message();
  EXPECT_EQ(session_->stats().state, SessionStats::State::kClosed);
}

TEST_F(SessionRecoveryTest, ALogoutTheTargetAskedForIsFollowedByANewLogin) {
  Open(RecoveringOptions());
  Bhs async = fake_.Header(Opcode::kAsyncMessage, kReservedTag);
  async.b[36] = 1;  // the target requests a logout
  fake_.Deliver(async);
  // The fake answers the Logout; the target then closes the connection.
  LoseConnection();
  ASSERT_TRUE(WaitForRecoveries(1));
  EXPECT_EQ(fake_.connects(), 2);
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
}

TEST_F(SessionRecoveryTest, WithoutRecoveryALostConnectionFailsTheTasks) {
  SessionOptions o = RecoveringOptions();
  o.recover = false;
  Open(o);
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  LoseConnection();
  ASSERT_EQ(t.completions, 1);
  EXPECT_FALSE(t.task.status.ok());
  EXPECT_EQ(fake_.connects(), 1);
  EXPECT_EQ(session_->stats().state, SessionStats::State::kFailed);
}

// SCSI-level retries.

TEST_F(SessionRecoveryTest, UnitAttentionIsRetriedUnderANewTag) {
  Open();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 1u);
  std::vector<uint8_t> sense;
  const Bhs ua = CheckCondition(t, 0x06, 0x29, 0x00, &sense);  // power on or reset occurred
  fake_.Deliver(ua, sense);
  EXPECT_EQ(t.completions, 0);
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].bhs.itt(), first[0].bhs.itt());
  Respond(t);
  EXPECT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.scsi_status, 0);
  EXPECT_EQ(session_->stats().retried_commands, 1u);
}

TEST_F(SessionRecoveryTest, CapacityChangedIsCountedForTheFrontends) {
  Open();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  std::vector<uint8_t> sense;
  const Bhs ua = CheckCondition(t, 0x06, 0x2a, 0x09, &sense);
  EXPECT_EQ(session_->capacity_changes(), 0u);
  fake_.Deliver(ua, sense);
  EXPECT_EQ(session_->capacity_changes(), 1u);
  ASSERT_EQ(TakeCommands().size(), 1u);
}

// tgtd raises 3F/0E on every I_T nexus of a target when a LUN is added or deleted: the command
// that gets it is sent again and the frontends are told to read the LUN list again.
TEST_F(SessionRecoveryTest, ReportedLunsChangedIsCountedForTheFrontends) {
  Open();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  std::vector<uint8_t> sense;
  const Bhs ua = CheckCondition(t, 0x06, 0x3f, 0x0e, &sense);
  EXPECT_EQ(session_->luns_changes(), 0u);
  fake_.Deliver(ua, sense);
  EXPECT_EQ(session_->luns_changes(), 1u);
  EXPECT_EQ(session_->capacity_changes(), 0u);
  ASSERT_EQ(TakeCommands().size(), 1u);
  Respond(t);
  EXPECT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.scsi_status, 0);
}

TEST_F(SessionRecoveryTest, BusyIsRetriedAfterABackOffABoundedNumberOfTimes) {
  Open();
  TestTask& t = NewWrite(512);
  session_->Submit(&t.task);
  int sends = 0;
  for (;;) {
    std::vector<SentPdu> sent = TakeCommands();
    if (sent.empty()) {
      // Not sent again before its back-off has passed.
      fake_.Advance(std::chrono::seconds(1));
      fake_.FireTimer();
      sent = TakeCommands();
      if (sent.empty()) break;
    }
    ASSERT_EQ(sent.size(), 1u);
    ++sends;
    ASSERT_LT(sends, 100) << "BUSY retried without bound";
    Respond(t, 0x08);  // BUSY
    if (t.completions > 0) break;
    EXPECT_TRUE(TakeCommands().empty()) << "a BUSY command was sent again without waiting";
  }
  EXPECT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.scsi_status, 0x08) << "the last BUSY is the answer";
  EXPECT_EQ(sends, 1 + kMaxScsiRetries);
}

TEST_F(SessionRecoveryTest, AMediumErrorIsNotRetried) {
  Open();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  std::vector<uint8_t> sense;
  fake_.Deliver(CheckCondition(t, 0x03, 0x11, 0x00, &sense), sense);
  EXPECT_EQ(t.completions, 1);
  EXPECT_TRUE(TakeCommands().empty());
}

// command_timeout: ABORT TASK, then LOGICAL UNIT RESET, then the connection.

class CommandTimeoutTest : public SessionRecoveryTest {
 protected:
  void Open10s() {
    SessionOptions o = Options();
    o.command_timeout = std::chrono::seconds(10);
    o.nop_interval = milliseconds(0);
    Open(o);
  }
  std::vector<SentPdu> TakeTaskManagement() {
    std::vector<SentPdu> out;
    for (SentPdu& p : fake_.TakeSent()) {
      if (p.bhs.opcode() == Opcode::kTaskMgmtRequest) out.push_back(std::move(p));
    }
    return out;
  }
  // Lets command_timeout (10 s) pass and returns the task management requests it sent.
  std::vector<SentPdu> PassCommandTimeout() {
    fake_.Advance(std::chrono::seconds(11));
    fake_.FireTimer();
    return TakeTaskManagement();
  }
  // Submits a read to LUN 2 that stays unanswered until its ABORT TASK times out and the LUN
  // reset leaves: the abort and the reset as sent.
  void StallUntilLunReset(TestTask& t, std::vector<SentPdu>* abort, std::vector<SentPdu>* reset) {
    t.task.lun = 2;
    session_->Submit(&t.task);
    ASSERT_EQ(TakeCommands().size(), 1u);
    *abort = PassCommandTimeout();
    ASSERT_EQ(abort->size(), 1u);
    *reset = PassCommandTimeout();  // the abort timed out: LUN reset
    ASSERT_EQ(reset->size(), 1u);
    ASSERT_EQ((*reset)[0].bhs.flags() & 0x7f, 5);
  }
  // A WRITE (w) and a READ to LUN 0, both past command_timeout: their commands and their ABORT
  // TASKs as sent, in that order.
  void TimeOutAWriteAndARead(TestTask& w, std::vector<SentPdu>* first,
                             std::vector<SentPdu>* aborts) {
    TestTask& r = NewRead(512);
    session_->Submit(&w.task);
    session_->Submit(&r.task);
    *first = TakeCommands();
    ASSERT_EQ(first->size(), 2u);
    *aborts = PassCommandTimeout();
    ASSERT_EQ(aborts->size(), 2u);
  }
  void AnswerTmf(const SentPdu& tmf, uint8_t response) {
    Bhs r = fake_.Header(Opcode::kTaskMgmtResponse, tmf.bhs.itt());
    r.b[2] = response;
    fake_.Deliver(r);
  }
};

TEST_F(CommandTimeoutTest, ASilentCommandIsAbortedAndSentAgain) {
  Open10s();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 1u);
  fake_.Advance(std::chrono::seconds(9));
  fake_.FireTimer();
  EXPECT_TRUE(TakeTaskManagement().empty()) << "aborted before command_timeout";
  fake_.Advance(std::chrono::seconds(2));
  fake_.FireTimer();
  std::vector<SentPdu> tmf = TakeTaskManagement();
  ASSERT_EQ(tmf.size(), 1u);
  EXPECT_EQ(tmf[0].bhs.flags() & 0x7f, 1) << "ABORT TASK";
  EXPECT_EQ(tmf[0].bhs.u32(20), first[0].bhs.itt()) << "Referenced Task Tag";
  EXPECT_EQ(tmf[0].bhs.u32(32), first[0].bhs.u32(bhs::kCmdSN)) << "RefCmdSN";
  AnswerTmf(tmf[0], 0);  // function complete
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].bhs.itt(), first[0].bhs.itt());
  Respond(t);
  EXPECT_EQ(t.completions, 1);
  EXPECT_TRUE(t.task.status.ok());
}

TEST_F(CommandTimeoutTest, AnUnansweredAbortBecomesALunResetAndThenADroppedConnection) {
  Open10s();
  TestTask& t = NewRead(512);
  t.task.lun = 3;
  session_->Submit(&t.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  ASSERT_EQ(PassCommandTimeout().size(), 1u);
  std::vector<SentPdu> reset = PassCommandTimeout();
  ASSERT_EQ(reset.size(), 1u);
  EXPECT_EQ(reset[0].bhs.flags() & 0x7f, 5) << "LOGICAL UNIT RESET";
  EXPECT_EQ(DecodeLun(reset[0].bhs.lun()), 3u);
  fake_.Advance(std::chrono::seconds(21));
  fake_.FireTimer();
  ASSERT_TRUE(fake_.failed()) << "the connection was not dropped";
  EXPECT_NE(fake_.failure().message().find("LOGICAL UNIT RESET"), std::string::npos)
      << fake_.failure().message();
  EXPECT_EQ(t.completions, 1) << "without recovery the dropped connection fails the task";
}

TEST_F(CommandTimeoutTest, ALunResetEndsEveryTaskOfTheLunAndTheyAreSentAgain) {
  Open10s();
  TestTask& a = NewRead(512);
  TestTask& b = NewRead(512);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  ASSERT_EQ(TakeCommands().size(), 2u);
  std::vector<SentPdu> aborts = PassCommandTimeout();
  ASSERT_EQ(aborts.size(), 2u);
  AnswerTmf(aborts[0], 255);  // rejected: escalate
  std::vector<SentPdu> reset = TakeTaskManagement();
  ASSERT_EQ(reset.size(), 1u);
  EXPECT_EQ(reset[0].bhs.flags() & 0x7f, 5);
  AnswerTmf(reset[0], 0);
  std::vector<SentPdu> again = TakeCommands();
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(a.completions + b.completions, 0);
}

TEST_F(CommandTimeoutTest, ACommandAbortedTooOftenFailsWithATimeout) {
  Open10s();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(TakeCommands().size(), 1u) << "round " << round;
    std::vector<SentPdu> tmf = PassCommandTimeout();
    ASSERT_EQ(tmf.size(), 1u);
    AnswerTmf(tmf[0], 0);
  }
  EXPECT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.status.code(), StatusCode::kTimeout) << t.task.status.message();
  EXPECT_TRUE(TakeCommands().empty());
}

// A LUN RESET ends the tasks the target had when it came, and only those: a command to the LUN
// submitted while the reset is outstanding waits for it and is sent once; another LUN's goes on.
TEST_F(CommandTimeoutTest, CommandsSubmittedDuringALunResetWaitForItAndRunOnce) {
  Open10s();
  TestTask& a = NewRead(512);
  a.task.lun = 3;
  session_->Submit(&a.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  std::vector<SentPdu> abort = PassCommandTimeout();
  ASSERT_EQ(abort.size(), 1u);
  AnswerTmf(abort[0], 255);  // rejected: escalate to a LUN reset
  std::vector<SentPdu> reset = TakeTaskManagement();
  ASSERT_EQ(reset.size(), 1u);
  ASSERT_EQ(reset[0].bhs.flags() & 0x7f, 5);

  TestTask& b = NewRead(512);
  b.task.lun = 3;
  TestTask& other = NewRead(512);
  other.task.lun = 4;
  session_->Submit(&b.task);
  session_->Submit(&other.task);
  std::vector<SentPdu> during = TakeCommands();
  ASSERT_EQ(during.size(), 1u)
      << "a command to the LUN being reset was sent before the reset ended";
  EXPECT_EQ(DecodeLun(during[0].bhs.lun()), 4u);

  AnswerTmf(reset[0], 0);
  std::vector<SentPdu> after = TakeCommands();
  ASSERT_EQ(after.size(), 2u) << "the reset's task once more, and the held command once";
  EXPECT_EQ(after[0].task, &a.task) << "the aborted task keeps its place before later ones";
  EXPECT_EQ(after[1].task, &b.task);
  Respond(a);
  Respond(b);
  Respond(other);
  EXPECT_TRUE(TakeCommands().empty()) << "something ran twice";
  EXPECT_EQ(a.completions + b.completions + other.completions, 3);
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// A slow but live target answers an ABORT TASK after we stopped waiting for it (and reset the
// LUN), or answers an abort that a successful reset already covered: both answers are late, not
// a protocol error, and must not cost the connection.
TEST_F(CommandTimeoutTest, LateTaskManagementAnswersAreAcceptedQuietly) {
  Open10s();
  TestTask& t = NewRead(512);
  std::vector<SentPdu> abort, reset;
  ASSERT_NO_FATAL_FAILURE(StallUntilLunReset(t, &abort, &reset));
  AnswerTmf(abort[0], 0);  // the timed-out abort's answer, late
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
  AnswerTmf(reset[0], 0);
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
  std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  Respond(t);
  EXPECT_EQ(t.completions, 1);
  EXPECT_TRUE(t.task.status.ok()) << t.task.status.message();
}

TEST_F(CommandTimeoutTest, AnAbortAnsweredAfterTheResetThatCoveredItIsLate) {
  Open10s();
  TestTask& a = NewRead(512);
  TestTask& b = NewRead(512);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  ASSERT_EQ(TakeCommands().size(), 2u);
  std::vector<SentPdu> aborts = PassCommandTimeout();
  ASSERT_EQ(aborts.size(), 2u);
  AnswerTmf(aborts[0], 255);  // escalates while the second abort is outstanding
  std::vector<SentPdu> reset = TakeTaskManagement();
  ASSERT_EQ(reset.size(), 1u);
  AnswerTmf(reset[0], 0);
  AnswerTmf(aborts[1], 0);  // the covered abort's answer comes after the reset's
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
  EXPECT_EQ(TakeCommands().size(), 2u);
}

// An R2T that crosses the ABORT TASK of its task is not answered: Data-Out queued behind the
// abort would go out after it, and, once the task is resent under a new ITT, reach the target as
// data of a command it no longer has.
Bhs R2TFor(FakeConnection& fake, uint32_t itt, uint32_t r2tsn) {
  Bhs b = fake.Header(Opcode::kR2T, itt);
  b.set_u32(bhs::kTtt, 0x7700 + r2tsn);
  b.set_u32(bhs::kDataSN, r2tsn);
  b.set_u32(bhs::kBufferOffset, 0);
  b.set_u32(bhs::kDesiredLength, 4096);
  return b;
}

std::vector<SentPdu::Kind> Kinds(const std::vector<SentPdu>& sent) {
  std::vector<SentPdu::Kind> kinds;
  for (const SentPdu& p : sent) kinds.push_back(p.kind);
  return kinds;
}

TEST_F(CommandTimeoutTest, AnR2TForATaskBeingAbortedIsNotAnswered) {
  Open10s();
  TestTask& w = NewWrite(65536);
  session_->Submit(&w.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 1u);
  std::vector<SentPdu> abort = PassCommandTimeout();
  ASSERT_EQ(abort.size(), 1u);
  fake_.Deliver(R2TFor(fake_, first[0].bhs.itt(), 0));
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
  std::vector<SentPdu> sent = fake_.TakeSent();
  EXPECT_TRUE(sent.empty()) << "answered an R2T of a task being aborted (" << sent.size()
                            << " PDUs, the first a Data-Out: "
                            << (!sent.empty() && sent[0].kind == SentPdu::Kind::kDataOut) << ")";
  AnswerTmf(abort[0], 0);
  sent = fake_.TakeSent();
  ASSERT_EQ(sent.size(), 1u) << "only the resent command";
  EXPECT_EQ(sent[0].kind, SentPdu::Kind::kCommand);
  EXPECT_NE(sent[0].bhs.itt(), first[0].bhs.itt());
  // The resent command's own R2T is answered.
  fake_.Deliver(R2TFor(fake_, sent[0].bhs.itt(), 0));
  sent = fake_.TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].kind, SentPdu::Kind::kDataOut);
  Respond(w);
  EXPECT_EQ(w.completions, 1);
  EXPECT_TRUE(w.task.status.ok()) << w.task.status.message();
}

// A LUN reset is different: RFC 7143 (4.2.3.3) has the target wait for the Data-Out of the R2Ts
// it issued before the reset, so an R2T that crossed the reset is answered, and the task is sent
// again only once the reset is answered.
TEST_F(CommandTimeoutTest, AnR2TForATaskCoveredByALunResetIsAnsweredBeforeTheResetEnds) {
  Open10s();
  TestTask& w = NewWrite(65536);
  session_->Submit(&w.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 1u);
  std::vector<SentPdu> abort = PassCommandTimeout();
  ASSERT_EQ(abort.size(), 1u);
  AnswerTmf(abort[0], 255);  // rejected: escalate to a LUN reset
  std::vector<SentPdu> reset = TakeTaskManagement();
  ASSERT_EQ(reset.size(), 1u);
  ASSERT_EQ(reset[0].bhs.flags() & 0x7f, 5);
  fake_.Deliver(R2TFor(fake_, first[0].bhs.itt(), 0));
  std::vector<SentPdu> sent = fake_.TakeSent();
  ASSERT_EQ(Kinds(sent), std::vector<SentPdu::Kind>{SentPdu::Kind::kDataOut});
  EXPECT_EQ(sent[0].bhs.itt(), first[0].bhs.itt());
  AnswerTmf(reset[0], 0);
  sent = fake_.TakeSent();
  ASSERT_EQ(Kinds(sent), std::vector<SentPdu::Kind>{SentPdu::Kind::kCommand});
  EXPECT_NE(sent[0].bhs.itt(), first[0].bhs.itt());
  Respond(w);
  EXPECT_EQ(w.completions, 1);
}

// An R2T left unanswered while its task was being aborted is answered once the abort gives way
// to a LUN reset: the target completes the reset only after the Data-Out of every R2T it issued
// (RFC 7143 4.2.3.3), so leaving it unanswered would cost the connection when the reset times
// out.
TEST_F(CommandTimeoutTest, AnR2THeldDuringTheAbortIsAnsweredWhenTheLunResetGoes) {
  Open10s();
  TestTask& w = NewWrite(65536);
  session_->Submit(&w.task);
  std::vector<SentPdu> first = TakeCommands();
  ASSERT_EQ(first.size(), 1u);
  std::vector<SentPdu> abort = PassCommandTimeout();
  ASSERT_EQ(abort.size(), 1u);
  fake_.Deliver(R2TFor(fake_, first[0].bhs.itt(), 0));
  ASSERT_TRUE(fake_.TakeSent().empty()) << "answered an R2T of a task being aborted";
  fake_.Advance(std::chrono::seconds(11));  // the abort times out: LUN reset
  fake_.FireTimer();
  bool reset = false;
  bool data_out = false;
  for (const SentPdu& p : fake_.TakeSent()) {
    if (p.kind == SentPdu::Kind::kDataOut) {
      data_out = true;
      EXPECT_EQ(p.bhs.itt(), first[0].bhs.itt());
      EXPECT_EQ(p.ttt, 0x7700u);
      EXPECT_EQ(p.length, 4096u);
    } else {
      reset |= (p.bhs.flags() & 0x7f) == 5;
    }
  }
  ASSERT_TRUE(reset) << "no LUN reset after the abort timed out";
  EXPECT_TRUE(data_out) << "the R2T held during the abort was not answered with the reset";
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// Not while its own ABORT TASK still waits for an answer, though: another task's abort refused
// starts the LUN reset, but the target may have aborted this task already, and Data-Out for a
// task it no longer has costs the connection (tgtd drops it).
TEST_F(CommandTimeoutTest, AnR2TWhoseAbortIsStillOutstandingStaysUnansweredWhenTheLunResetGoes) {
  Open10s();
  TestTask& w = NewWrite(65536);
  std::vector<SentPdu> first, aborts;
  ASSERT_NO_FATAL_FAILURE(TimeOutAWriteAndARead(w, &first, &aborts));
  fake_.Deliver(R2TFor(fake_, first[0].bhs.itt(), 0));
  ASSERT_TRUE(fake_.TakeSent().empty()) << "answered an R2T of a task being aborted";
  AnswerTmf(aborts[1], 255);  // the read's abort refused: LUN reset, the write's abort pending
  const std::vector<SentPdu> sent = fake_.TakeSent();
  ASSERT_EQ(Kinds(sent), std::vector<SentPdu::Kind>{SentPdu::Kind::kControl})
      << "the R2T of a task whose ABORT TASK is outstanding was answered with the LUN reset";
  EXPECT_EQ(sent[0].bhs.flags() & 0x7f, 5);
  AnswerTmf(aborts[0], 0);  // the write is gone: its R2T with it
  AnswerTmf(sent[0], 0);
  EXPECT_EQ(TakeCommands().size(), 2u);
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// The LUN reset marks the tasks it covers, the one whose ABORT TASK is still outstanding too: an
// R2T of that task arriving after the reset went stays unanswered all the same, and is answered
// once its abort has timed out (the reset then waits for that Data-Out, RFC 7143 4.2.3.3). Before,
// the first was answered at once and the second never, so the reset timed out.
TEST_F(CommandTimeoutTest, AnR2TAfterTheResetWaitsForItsTasksAbortToEnd) {
  Open10s();
  TestTask& w = NewWrite(65536);
  std::vector<SentPdu> first, aborts;
  ASSERT_NO_FATAL_FAILURE(TimeOutAWriteAndARead(w, &first, &aborts));
  AnswerTmf(aborts[1], 255);  // the read's abort refused: LUN reset, the write's abort pending
  std::vector<SentPdu> reset = TakeTaskManagement();
  ASSERT_EQ(reset.size(), 1u);
  ASSERT_EQ(reset[0].bhs.flags() & 0x7f, 5);
  fake_.Deliver(R2TFor(fake_, first[0].bhs.itt(), 0));
  EXPECT_TRUE(fake_.TakeSent().empty())
      << "an R2T of a task whose ABORT TASK is outstanding was answered after the LUN reset went";
  fake_.Advance(std::chrono::seconds(11));  // the write's abort times out; the reset does not yet
  fake_.FireTimer();
  const std::vector<SentPdu> sent = fake_.TakeSent();
  ASSERT_EQ(Kinds(sent), std::vector<SentPdu::Kind>{SentPdu::Kind::kDataOut})
      << "the R2T held while the abort was outstanding was not answered once it timed out";
  EXPECT_EQ(sent[0].bhs.itt(), first[0].bhs.itt());
  AnswerTmf(reset[0], 0);
  EXPECT_EQ(TakeCommands().size(), 2u);
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// Task management requests need a receive like commands do (on iWARP a SEND that finds no
// posted receive ends the connection), so commands never take the last one: with the target's
// window wide open and every command stalled, an ABORT TASK still leaves, one at a time, and
// the aborted command goes again. Before the receive was kept, 4 commands held the 4 receives
// and no abort ever left.
TEST_F(CommandTimeoutTest, AStalledCommandIsAbortedWhenCommandsHoldEveryOtherReceive) {
  fake_.options().login_cmdsn_window = 1000;
  fake_.options().max_outstanding_commands = 4;
  Open10s();
  fake_.max_cmdsn = 1000;
  std::vector<TestTask*> t;
  for (int i = 0; i < 4; ++i) t.push_back(&NewRead(512));
  for (TestTask* x : t) session_->Submit(&x->task);
  ASSERT_EQ(TakeCommands().size(), 3u) << "commands took the receive kept for task management";
  std::vector<SentPdu> aborts = PassCommandTimeout();
  ASSERT_EQ(aborts.size(), 1u) << "one receive free: one ABORT TASK at a time";
  AnswerTmf(aborts[0], 0);
  // The aborted command goes again in the receive its abort's answer freed.
  EXPECT_EQ(TakeCommands().size(), 1u);
  fake_.FireTimer();
  EXPECT_EQ(TakeTaskManagement().size(), 1u) << "the next stalled command is aborted in turn";
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// An ABORT TASK that timed out may still be answered until its LUN's reset is (a target answers
// task management in order), and its answer needs a receive too: commands leave it one. With 4
// receives, one kept for task management, a stalled read and its LUN reset, the late abort's
// answer takes the last receive commands could have had.
TEST_F(CommandTimeoutTest, ALateAbortAnswerThatMayStillComeKeepsItsReceiveFromCommands) {
  fake_.options().login_cmdsn_window = 1000;
  fake_.options().max_outstanding_commands = 4;
  Open10s();
  fake_.max_cmdsn = 1000;
  TestTask& stalled = NewRead(512);
  std::vector<SentPdu> abort, reset;
  ASSERT_NO_FATAL_FAILURE(StallUntilLunReset(stalled, &abort, &reset));
  TestTask& other = NewRead(512);
  session_->Submit(&other.task);
  EXPECT_TRUE(TakeCommands().empty())
      << "a command took the receive the late ABORT TASK answer may still need (1 command, the "
         "LUN reset and that answer in 3 receives)";
  AnswerTmf(abort[0], 0);  // late: its receive is free again
  EXPECT_EQ(TakeCommands().size(), 1u);
  AnswerTmf(reset[0], 0);
  EXPECT_EQ(TakeCommands().size(), 1u) << "the stalled read, sent again after its reset";
  EXPECT_FALSE(fake_.failed()) << fake_.failure().message();
}

// Every way a sent task ends tells the datamover first (Datamover::Retire), so that an iSER
// connection revokes the task's STag before its ITT is reused or its buffer handed back.
TEST_F(CommandTimeoutTest, EveryEndingRetiresTheTaskFromTheDatamover) {
  Open10s();
  TestTask& rejected = NewRead(512);
  session_->Submit(&rejected.task);
  std::vector<SentPdu> sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  Bhs reject = fake_.Header(Opcode::kReject, kReservedTag);
  reject.b[2] = 0x09;
  fake_.Deliver(reject, {sent[0].bhs.b.begin(), sent[0].bhs.b.end()});
  ASSERT_EQ(rejected.completions, 1);
  EXPECT_EQ(fake_.retired(), std::vector<uint32_t>{sent[0].bhs.itt()});

  TestTask& aborted = NewRead(512);
  session_->Submit(&aborted.task);
  sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  std::vector<SentPdu> abort = PassCommandTimeout();
  ASSERT_EQ(abort.size(), 1u);
  AnswerTmf(abort[0], 0);
  ASSERT_EQ(TakeCommands().size(), 1u);
  EXPECT_EQ(fake_.retired().back(), sent[0].bhs.itt()) << "resent before its old tag was retired";

  Respond(aborted);
  EXPECT_EQ(fake_.retired().size(), 3u) << "a normal response retires the task too";
}

}  // namespace
}  // namespace iser::test
