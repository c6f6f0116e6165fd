// The session's CmdSN window and ITT table, driven over the fake datamover.
#include <gtest/gtest.h>

#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

TEST_F(SessionTest, CommandsPastMaxCmdSNWaitInOrderAndGoWhenTheWindowGrows) {
  fake_.options().login_cmdsn_window = 1;  // login ends with ExpCmdSN 1, MaxCmdSN 2
  Open();
  std::vector<TestTask*> t;
  for (int i = 0; i < 5; ++i) t.push_back(&NewRead(512));
  for (TestTask* x : t) session_->Submit(&x->task);
  std::vector<SentPdu> sent = TakeCommands();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].bhs.u32(bhs::kCmdSN), 1u);
  EXPECT_EQ(sent[1].bhs.u32(bhs::kCmdSN), 2u);
  EXPECT_EQ(sent[0].task, &t[0]->task);
  EXPECT_EQ(sent[1].task, &t[1]->task);

  // A response that does not move MaxCmdSN sends nothing more, and fails nobody.
  fake_.exp_cmdsn = 2;
  fake_.max_cmdsn = 2;
  Respond(*t[0]);
  EXPECT_EQ(t[0]->completions, 1);
  EXPECT_TRUE(TakeCommands().empty());
  for (int i = 2; i < 5; ++i) EXPECT_EQ(t[i]->completions, 0);

  fake_.exp_cmdsn = 3;
  fake_.max_cmdsn = 4;
  Respond(*t[1]);
  sent = TakeCommands();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].task, &t[2]->task);
  EXPECT_EQ(sent[0].bhs.u32(bhs::kCmdSN), 3u);
  EXPECT_EQ(sent[1].task, &t[3]->task);
  EXPECT_EQ(sent[1].bhs.u32(bhs::kCmdSN), 4u);

  // A NOP-In may open the window too.
  fake_.max_cmdsn = 5;
  Bhs nop = fake_.Header(Opcode::kNopIn, kReservedTag);
  nop.set_u32(bhs::kTtt, kReservedTag);
  fake_.Deliver(nop);
  sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].task, &t[4]->task);
  EXPECT_EQ(sent[0].bhs.u32(bhs::kCmdSN), 5u);
  for (int i = 2; i < 5; ++i) Respond(*t[i]);
  for (TestTask* x : t) {
    EXPECT_EQ(x->completions, 1);
    EXPECT_TRUE(x->task.status.ok()) << x->task.status.message();
  }
  EXPECT_TRUE(session_->healthy());
}

// A target's window wider than the receives an RDMA datamover posted (tgt's 128 against a
// small device, any target's 1023 against our 152): the session keeps no more commands, with
// the task management requests, waiting for answers than the datamover can receive, and one
// receive free for task management (CommandTimeoutTest has it used).
TEST_F(SessionTest, CommandsWaitForTheDatamoversReceivesWhateverTheWindow) {
  fake_.options().login_cmdsn_window = 1000;
  fake_.options().max_outstanding_commands = 3;
  SessionOptions o = Options();
  o.command_timeout = std::chrono::seconds(10);
  o.nop_interval = std::chrono::milliseconds(0);
  Open(o);
  fake_.max_cmdsn = 1000;
  std::vector<TestTask*> t;
  for (int i = 0; i < 6; ++i) t.push_back(&NewRead(512));
  for (TestTask* x : t) session_->Submit(&x->task);
  std::vector<SentPdu> sent = TakeCommands();
  ASSERT_EQ(sent.size(), 2u) << "commands took the receive kept for task management";
  Respond(*t[0]);
  sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].task, &t[2]->task);
  Respond(*t[1]);
  Respond(*t[2]);
  ASSERT_EQ(TakeCommands().size(), 2u);
  Respond(*t[3]);
  ASSERT_EQ(TakeCommands().size(), 1u);
  Respond(*t[4]);
  Respond(*t[5]);
  for (TestTask* x : t) EXPECT_EQ(x->completions, 1);
  EXPECT_TRUE(session_->healthy());
}

TEST_F(SessionTest, AMaxCmdSNBelowExpCmdSNMinusOneIsIgnored) {
  fake_.options().login_cmdsn_window = 0;  // MaxCmdSN 1: one command
  Open();
  TestTask& a = NewRead(512);
  TestTask& b = NewRead(512);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  fake_.exp_cmdsn = 10;
  fake_.max_cmdsn = 5;  // invalid: below ExpCmdSN - 1
  Respond(a);
  EXPECT_TRUE(TakeCommands().empty());
  EXPECT_EQ(b.completions, 0);
}

TEST_F(SessionTest, ACompletedTasksIttSlotIsReusedWithANewGeneration) {
  Open();
  TestTask& a = NewRead(512);
  session_->Submit(&a.task);
  const uint32_t first = a.task.itt;
  Respond(a);
  ASSERT_EQ(a.completions, 1);
  TestTask& b = NewRead(512);
  session_->Submit(&b.task);
  EXPECT_NE(b.task.itt, first);
  EXPECT_EQ(b.task.itt & 1023, first & 1023) << "the freed slot is taken again";
  EXPECT_NE(b.task.itt, kReservedTag);

  // A late PDU for the old ITT names it and fails the connection; it completes nothing else.
  Respond(a);
  EXPECT_EQ(a.completions, 1);
  ASSERT_TRUE(fake_.failed());
  EXPECT_EQ(fake_.failure().code(), StatusCode::kProtocolError);
  EXPECT_NE(fake_.failure().message().find("unknown ITT"), std::string::npos)
      << fake_.failure().message();
  EXPECT_EQ(b.completions, 1);
  EXPECT_FALSE(b.task.status.ok());
}

TEST_F(SessionTest, TasksWaitForAFreeIttSlot) {
  fake_.options().login_cmdsn_window = 5000;
  Open();
  std::vector<TestTask*> t;
  for (int i = 0; i < 1024; ++i) t.push_back(&NewRead(512));
  for (TestTask* x : t) session_->Submit(&x->task);
  std::vector<SentPdu> sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1023u) << "slot 0 is for NOP-Out and Logout";
  EXPECT_EQ(t[1023]->completions, 0);
  Respond(*t[17]);
  sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].task, &t[1023]->task);
  EXPECT_EQ(t[1023]->task.itt & 1023, t[17]->task.itt & 1023);
}

}  // namespace
}  // namespace iser::test
