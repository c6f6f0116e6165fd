// Opening and closing a session, and submissions it can no longer take, driven over the fake
// datamover.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

using std::chrono::steady_clock;

class SessionLifecycleTest : public SessionTest {
 protected:
  // Open must fail with `words` in the error, at once: a Logout nobody sends is not waited for.
  void ExpectOpenFailsAtOnce(const SessionOptions& o, const std::string& words) {
    const auto start = steady_clock::now();
    Result<std::unique_ptr<Session>> s = Session::Open(o);
    const auto took = steady_clock::now() - start;
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(words), std::string::npos) << s.status().message();
    // A hang bound, not a performance assertion: the wait this guards against is logout_timeout.
    EXPECT_LT(took, std::chrono::seconds(1));
    for (const SentPdu& p : fake_.sent()) EXPECT_NE(p.bhs.opcode(), Opcode::kLogoutRequest);
    EXPECT_EQ(fake_.wakes(), 0) << "nothing should have tried to wake an I/O thread";
    EXPECT_TRUE(fake_.shut_down());
  }
};

// Defect 1: ~Session waited logout_timeout for a Logout no I/O thread would send.
TEST_F(SessionLifecycleTest, OpenFailingInStartReturnsAtOnce) {
  fake_.options().start_status = Status::ResourceExhausted("no I/O thread for the fake");
  SessionOptions o = Options();
  o.logout_timeout = std::chrono::seconds(5);
  ExpectOpenFailsAtOnce(o, "no I/O thread for the fake");
}

TEST_F(SessionLifecycleTest, OpenFailingInEnterFullFeatureReturnsAtOnce) {
  fake_.options().enter_full_feature_status = Status::ConnectionFailed("digests unsupported");
  SessionOptions o = Options();
  o.logout_timeout = std::chrono::seconds(5);
  ExpectOpenFailsAtOnce(o, "digests unsupported");
}

TEST_F(SessionLifecycleTest, AnIserLoginWithoutRDMAExtensionsFailsAtOnce) {
  SessionOptions o = Options();
  o.transport = TransportKind::kIser;
  o.logout_timeout = std::chrono::seconds(5);
  ExpectOpenFailsAtOnce(o, "refused RDMAExtensions=Yes");
}

TEST_F(SessionLifecycleTest, ConnectFailureIsReturned) {
  fake_.options().connect_status = Status::ConnectionFailed("no route to the fake");
  Result<std::unique_ptr<Session>> s = Session::Open(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kConnectionFailed);
  EXPECT_EQ(fake_.connects(), 1);
}

TEST_F(SessionLifecycleTest, LoginAppliesTheNegotiatedParameters) {
  fake_.options().login_keys.push_back("TargetAlias=fake");
  Open();
  EXPECT_TRUE(fake_.started());
  EXPECT_EQ(session_->params().max_burst_length, 262144u);
  EXPECT_FALSE(session_->params().immediate_data);
  EXPECT_TRUE(session_->params().initial_r2t);
  EXPECT_EQ(fake_.connection_params().target_max_recv_data_segment_length, 8192u);
  EXPECT_EQ(session_->max_transfer_bytes(), 1u << 20);
}

// Defect 3: a task submitted after Close was queued for an I/O thread that no longer runs.
TEST_F(SessionLifecycleTest, SubmitAfterCloseCompletesAtOnceWithAnError) {
  Open();
  ASSERT_TRUE(session_->Close().ok());
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.status.code(), StatusCode::kAborted);
  EXPECT_NE(t.task.status.message().find(session_->target_name()), std::string::npos)
      << t.task.status.message();
  EXPECT_NE(t.task.status.message().find("closed"), std::string::npos);
}

TEST_F(SessionLifecycleTest, SubmitAfterTheConnectionFailedAndItsThreadEndedCompletesAtOnce) {
  Open();
  fake_.FailConnection(Status::ConnectionFailed("192.0.2.1:3260: connection reset"));
  fake_.StopIoThread();
  TestTask& t = NewRead(512);
  session_->Submit(&t.task);
  ASSERT_EQ(t.completions, 1);
  EXPECT_EQ(t.task.status.code(), StatusCode::kConnectionFailed);
  EXPECT_NE(t.task.status.message().find("connection reset"), std::string::npos);
}

TEST_F(SessionLifecycleTest, AConnectionErrorFailsEveryUnfinishedTask) {
  fake_.options().login_cmdsn_window = 0;  // one command in the window, the other waits
  Open();
  TestTask& a = NewRead(512);
  TestTask& b = NewRead(512);
  session_->Submit(&a.task);
  session_->Submit(&b.task);
  fake_.FailConnection(Status::ConnectionFailed("192.0.2.1:3260: connection reset"));
  for (TestTask* t : {&a, &b}) {
    ASSERT_EQ(t->completions, 1);
    EXPECT_EQ(t->task.status.code(), StatusCode::kConnectionFailed);
  }
  EXPECT_FALSE(session_->healthy());
  const Status st = session_->Close();
  EXPECT_EQ(st.code(), StatusCode::kOk) << "a failed session is not logged out: " << st.message();
  for (const SentPdu& p : fake_.sent()) EXPECT_NE(p.bhs.opcode(), Opcode::kLogoutRequest);
}

}  // namespace
}  // namespace iser::test
