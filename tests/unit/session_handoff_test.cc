// A session that is one path of several (SessionOptions::handoff, task_handoff.h), over the fake
// datamover: when its connection is lost it hands over what is safe to run elsewhere (reads, and
// tasks the target never saw) and keeps every write that reached the target until its
// reinstating login; it offers again when asked; it reports each change of its connection.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

using std::chrono::milliseconds;

// Stands in for the path set: takes what it is offered while `take` is set, and completes it
// as another path would.
class RecordingHandoff : public TaskHandoff {
 public:
  bool TakeOver(Task* task) override {
    if (!take) return false;
    {
      std::lock_guard lock(mu);
      taken.push_back(task);
    }
    task->status = Status::OK();
    task->scsi_status = 0;
    task->on_complete(task);
    return true;
  }
  void ConnectionChanged() override { ++changes; }
  std::vector<Portal> ReachablePortals() override {
    return reachable_now ? reachable : std::vector<Portal>{};
  }
  bool MayRecoverElsewhere() override { return false; }

  bool Took(const Task* t) {
    std::lock_guard lock(mu);
    return std::find(taken.begin(), taken.end(), t) != taken.end();
  }

  std::vector<Portal> reachable;          // set before the session opens
  std::atomic<bool> reachable_now{true};  // whether another path is logged in to them now
  std::atomic<bool> take{true};
  std::atomic<int> changes{0};
  std::mutex mu;
  std::vector<Task*> taken;
};

class SessionHandoffTest : public SessionTest {
 protected:
  // The session ends (its recovery thread joined) before the handoff it calls is gone.
  ~SessionHandoffTest() override { session_.reset(); }

  SessionOptions HandoffOptions() {
    SessionOptions o = RecoveringOptions();
    // The first login succeeds; reconnects fail until the test lets them through.
    fake_.options().connect_result = [this](int n) {
      return n == 1 || reconnect_ ? Status::OK() : Status::ConnectionFailed("refused (test)");
    };
    o.handoff = &handoff_;
    return o;
  }
  template <typename Pred>
  static bool Eventually(Pred pred, milliseconds limit = milliseconds(10000)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }
  void LoseConnection() { fake_.FailConnection(Status::ConnectionFailed("peer reset (test)")); }

  RecordingHandoff handoff_;
  std::atomic<bool> reconnect_{false};
};

TEST_F(SessionHandoffTest, ReadsAndNewTasksMoveAtOnceASentWriteWaitsForTheReinstatement) {
  Open(HandoffOptions());
  TestTask& read = NewRead(4096);
  TestTask& write = NewWrite(4096);
  session_->Submit(&read.task);
  session_->Submit(&write.task);
  ASSERT_EQ(TakeCommands().size(), 2u);

  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return handoff_.Took(&read.task); }))
      << "the read in flight was not handed over";
  EXPECT_EQ(read.completions, 1);
  EXPECT_FALSE(handoff_.Took(&write.task)) << "a write the target may still run was moved";
  EXPECT_GE(handoff_.changes, 1) << "the loss was not reported";

  // Submitted while recovering: it never reached the target, so another path takes it.
  TestTask& later = NewWrite(4096);
  session_->Submit(&later.task);
  EXPECT_TRUE(handoff_.Took(&later.task));

  reconnect_ = true;
  // Reported after the replay was sent.
  ASSERT_TRUE(Eventually([&] { return handoff_.changes >= 2; })) << "no recovery reported";
  const std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u) << "only the write is sent again, after the reinstating login";
  EXPECT_EQ(again[0].task, &write.task);
  EXPECT_EQ(write.completions, 0);
  Respond(write);
  EXPECT_EQ(write.completions, 1);
  EXPECT_TRUE(write.task.status.ok()) << write.task.status.ToString();
  EXPECT_FALSE(handoff_.Took(&write.task));
}

TEST_F(SessionHandoffTest, WithNoOtherPathTasksStayUntilOfferedAgain) {
  Open(HandoffOptions());
  handoff_.take = false;
  TestTask& read = NewRead(4096);
  session_->Submit(&read.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return handoff_.changes >= 1; }));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(read.completions, 0) << "no path could take it, so it waits";

  // Another path came back: the set asks the recovering session to offer again.
  handoff_.take = true;
  session_->OfferWaiting();
  ASSERT_TRUE(Eventually([&] { return handoff_.Took(&read.task); }))
      << "the waiting read was not offered again";
  EXPECT_EQ(read.completions, 1);

  reconnect_ = true;
  ASSERT_TRUE(Eventually([&] { return session_->stats().recoveries >= 1; }));
  EXPECT_TRUE(TakeCommands().empty()) << "a task handed over is not sent here too";
}

// A path that holds a sent write logs in with its ISID through a portal another path reaches (the
// fence login, TSIH 0), drops that connection, and then hands the write over: it need not wait
// for its own portal.
TEST_F(SessionHandoffTest, AFenceLoginThroughAnotherPortalLetsASentWriteMove) {
  SessionOptions o = HandoffOptions();
  handoff_.reachable = {{"192.0.2.9", 3260}};
  // The first login, then the fence login; the path's own portal stays away.
  fake_.options().connect_result = [](int n) {
    return n <= 2 ? Status::OK() : Status::ConnectionFailed("refused (test)");
  };
  Open(o);
  TestTask& write = NewWrite(4096);
  session_->Submit(&write.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return handoff_.Took(&write.task); }))
      << "the write was not handed over after the fence login";
  EXPECT_EQ(write.completions, 1);
  ASSERT_GE(fake_.logins().size(), 2u);
  const Bhs& first = fake_.logins()[0];
  const Bhs& fence = fake_.logins()[1];
  EXPECT_EQ(std::memcmp(&first.b[8], &fence.b[8], 6), 0) << "the fence login has another ISID";
  EXPECT_EQ(fence.u16(14), 0) << "a reinstating login has TSIH 0";
  EXPECT_TRUE(TakeCommands().empty());
}

// No portal reachable through another path: the write stays for this session's own replay.
TEST_F(SessionHandoffTest, WithoutAReachablePortalASentWriteIsReplayedHere) {
  Open(HandoffOptions());
  TestTask& write = NewWrite(4096);
  session_->Submit(&write.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return handoff_.changes >= 1; }));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(handoff_.Took(&write.task));
  reconnect_ = true;
  ASSERT_TRUE(Eventually([&] { return handoff_.changes >= 2; }));
  const std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].task, &write.task);
  Respond(write);
  EXPECT_EQ(write.completions, 1);
}

// A sent write that fails at the loss (here a COMPARE AND WRITE, never repeated; so do commands
// past command_timeout or their replays) may still run on the target: with a handoff its failure
// is reported only once the lost session has ended, or the caller's next write of those blocks
// could go by another path and be overwritten by it. Here by the reinstating login at its own
// portal.
TEST_F(SessionHandoffTest, AFailedSentWriteIsReportedOnlyOnceTheLostSessionHasEnded) {
  SessionOptions o = HandoffOptions();
  std::atomic<int> connects{0};
  fake_.options().connect_result = [this, &connects](int n) {
    connects = n;
    return n == 1 || reconnect_ ? Status::OK() : Status::ConnectionFailed("refused (test)");
  };
  Open(o);
  TestTask& caw = NewWrite(4096);
  caw.task.cdb[0] = 0x89;  // COMPARE AND WRITE
  session_->Submit(&caw.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  // A reconnect was tried: the recovery collected the task before it.
  ASSERT_TRUE(Eventually([&] { return connects.load() >= 2; }));
  EXPECT_EQ(caw.completions, 0) << "failed while the target may still run it";
  reconnect_ = true;
  ASSERT_TRUE(Eventually([&] { return caw.completions.load() == 1; }))
      << "not reported after the reinstating login";
  EXPECT_FALSE(caw.task.status.ok());
  EXPECT_NE(caw.task.status.message().find("not safe to repeat"), std::string::npos)
      << caw.task.status.ToString();
  EXPECT_FALSE(handoff_.Took(&caw.task));
  EXPECT_TRUE(TakeCommands().empty()) << "a COMPARE AND WRITE is never sent twice";
}

// replacement_timeout=0 gives up at the loss, but a sent write waits for the fence another path
// makes possible (then moves) instead of failing while the target may still run it.
TEST_F(SessionHandoffTest, GivingUpAtOnceStillHoldsASentWriteForTheFence) {
  SessionOptions o = HandoffOptions();
  o.replacement_timeout = milliseconds(0);
  handoff_.reachable = {{"192.0.2.9", 3260}};
  fake_.options().connect_result = [](int n) {
    return n <= 2 ? Status::OK() : Status::ConnectionFailed("refused (test)");
  };
  Open(o);
  TestTask& read = NewRead(4096);
  TestTask& write = NewWrite(4096);
  session_->Submit(&read.task);
  session_->Submit(&write.task);
  ASSERT_EQ(TakeCommands().size(), 2u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return write.completions.load() == 1; }));
  EXPECT_TRUE(handoff_.Took(&write.task)) << "failed: " << write.task.status.ToString();
  ASSERT_GE(fake_.logins().size(), 2u) << "no fence login";
  EXPECT_EQ(read.completions, 1);
}

// The same when no other path is logged in at the give-up, but one logs in soon after (two
// paths lost in one blip): the write waits for that fence instead of failing at the give-up.
TEST_F(SessionHandoffTest, AfterAGiveUpASentWriteWaitsForAPathThatComesBack) {
  SessionOptions o = HandoffOptions();
  o.replacement_timeout = milliseconds(0);
  handoff_.reachable = {{"192.0.2.9", 3260}};
  handoff_.reachable_now = false;
  fake_.options().connect_result = [this](int n) {
    return n == 1 || handoff_.reachable_now ? Status::OK()
                                            : Status::ConnectionFailed("refused (test)");
  };
  Open(o);
  TestTask& write = NewWrite(4096);
  session_->Submit(&write.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return session_->stats().state == SessionStats::State::kFailed; }))
      << "no give-up";
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(write.completions, 0) << "failed at the give-up: " << write.task.status.ToString();
  handoff_.reachable_now = true;
  ASSERT_TRUE(Eventually([&] { return write.completions.load() == 1; }));
  EXPECT_TRUE(handoff_.Took(&write.task)) << "failed: " << write.task.status.ToString();
}

// A command that ends with its connection (a path set's probe of this path) fails with the loss
// instead of waiting for the session's recovery, and is refused while the session recovers.
TEST_F(SessionHandoffTest, ACommandBoundToItsConnectionFailsWithTheLoss) {
  Open(HandoffOptions());
  handoff_.take = false;
  TestTask& probe = NewRead(4096);
  probe.task.ends_with_connection = true;
  TestTask& read = NewRead(4096);
  session_->Submit(&probe.task);
  session_->Submit(&read.task);
  ASSERT_EQ(TakeCommands().size(), 2u);
  LoseConnection();
  ASSERT_TRUE(Eventually([&] { return probe.completions.load() == 1; }))
      << "the probe waits for the recovery";
  EXPECT_EQ(probe.task.status.code(), StatusCode::kConnectionFailed)
      << probe.task.status.ToString();
  EXPECT_EQ(read.completions, 0) << "an ordinary read waits for a path";

  TestTask& later = NewRead(4096);
  later.task.ends_with_connection = true;
  ASSERT_TRUE(Eventually([&] { return !session_->healthy(); }));
  session_->Submit(&later.task);
  EXPECT_EQ(later.completions, 1) << "taken while the session has no connection";
  EXPECT_EQ(later.task.status.code(), StatusCode::kConnectionFailed);

  reconnect_ = true;
  ASSERT_TRUE(Eventually([&] { return session_->stats().recoveries >= 1; }));
  const std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 1u) << "only the ordinary read is sent again";
  EXPECT_EQ(again[0].task, &read.task);
}

// Without a handoff nothing changes: the read waits for the session's own recovery, and so does
// a task submitted while the session recovers (the recovery thread must not take it from the
// submit queue).
TEST_F(SessionHandoffTest, WithoutAHandoffEverythingIsReplayedHere) {
  SessionOptions o = HandoffOptions();
  o.handoff = nullptr;
  Open(o);
  TestTask& read = NewRead(4096);
  session_->Submit(&read.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  LoseConnection();
  // Once the recovery thread runs (its first attempt fails), a task submitted waits in the
  // submit queue; asking for an offer must leave it there.
  std::this_thread::sleep_for(milliseconds(50));
  TestTask& later = NewRead(4096);
  session_->Submit(&later.task);
  session_->OfferWaiting();
  std::this_thread::sleep_for(milliseconds(50));
  reconnect_ = true;
  // Counted after the replay was sent.
  ASSERT_TRUE(Eventually([&] { return session_->stats().recoveries >= 1; }));
  const std::vector<SentPdu> again = TakeCommands();
  ASSERT_EQ(again.size(), 2u) << "the read in flight and the one submitted while recovering";
  EXPECT_EQ(again[0].task, &read.task);
  EXPECT_EQ(again[1].task, &later.task);
  Respond(read);
  Respond(later);
  EXPECT_EQ(later.completions, 1);
  EXPECT_EQ(handoff_.changes, 0);
}

}  // namespace
}  // namespace iser::test
