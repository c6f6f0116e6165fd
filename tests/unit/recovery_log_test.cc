// What session recovery tells the user (docs/recovery.md, "What recovery logs"): every lost
// connection and every login attempt as a warning with its cause and its number, and, once I/O
// fails past replacement_timeout, a RecoveryFailure with the cause's code: the common failure of
// the login attempts when they all failed alike, else the first loss. Over the fake datamover,
// which decides how each connect ends.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/log.h"
#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

using std::chrono::milliseconds;

std::mutex g_log_mu;
std::condition_variable g_log_cv;
std::vector<std::string> g_warnings;

void CaptureWarnings(LogLevel level, const std::string& message) {
  if (level != LogLevel::kWarning) return;
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_warnings.push_back(message);
  g_log_cv.notify_all();
}

class RecoveryLogTest : public SessionTest {
 protected:
  void SetUp() override {
    {
      std::lock_guard<std::mutex> lock(g_log_mu);
      g_warnings.clear();
    }
    SetLogSink(&CaptureWarnings, LogLevel::kDebug);
  }
  void TearDown() override {
    if (session_) session_->Close().IgnoreError();
    SetLogSink(nullptr, LogLevel::kWarning);
  }
  template <typename Pred>
  bool WaitFor(Pred pred) {
    const auto end = std::chrono::steady_clock::now() + milliseconds(10000);
    while (std::chrono::steady_clock::now() < end) {
      if (pred(session_->stats())) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }
  // The warning that contains every one of these pieces, or "" if none is logged within a
  // generous bound. Waits on the log itself: the session logs a recovery after its stats show
  // it, so a test that saw the stats may still be ahead of the line.
  static std::string Warning(const std::vector<std::string>& pieces) {
    std::unique_lock<std::mutex> lock(g_log_mu);
    std::string found;
    g_log_cv.wait_for(lock, std::chrono::seconds(30), [&] {
      for (const std::string& w : g_warnings) {
        bool all = true;
        for (const std::string& p : pieces) all = all && w.find(p) != std::string::npos;
        if (all) {
          found = w;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  static std::string AllWarnings() {
    std::lock_guard<std::mutex> lock(g_log_mu);
    std::string s;
    for (const std::string& w : g_warnings) s += w + "\n";
    return s;
  }
};

TEST_F(RecoveryLogTest, EveryLossAndEveryAttemptIsAWarningWithItsCauseAndNumber) {
  // The second connect is refused, the third logs in.
  fake_.options().connect_result = [](int n) {
    return n == 2 ? Status::ConnectionFailed("connection refused (test)") : Status::OK();
  };
  Open(RecoveringOptions());
  fake_.FailConnection(Status::ConnectionFailed("peer reset (test)"));
  ASSERT_TRUE(WaitFor([](const SessionStats& s) {
    return s.recoveries == 1 && s.state == SessionStats::State::kLoggedIn;
  }));
  EXPECT_NE(Warning({"session to iqn.2026-11.io.iser-connect.test:disk", " lost: peer reset (test)",
                     "(loss 1 in a row)"}),
            "")
      << AllWarnings();
  EXPECT_NE(Warning({"attempt 1 at 192.0.2.1:3260 failed: connection refused (test)"}), "")
      << AllWarnings();
  EXPECT_NE(Warning({"recovered the session to", "at attempt 2,"}), "") << AllWarnings();
  EXPECT_TRUE(session_->RecoveryFailure().ok());

  // A second loss right away, before the new connection did anything: loss 2 of the same run.
  fake_.FailConnection(Status::ConnectionFailed("peer reset again (test)"));
  ASSERT_TRUE(WaitFor([](const SessionStats& s) {
    return s.recoveries == 2 && s.state == SessionStats::State::kLoggedIn;
  }));
  EXPECT_NE(Warning({" lost: peer reset again (test)", "(loss 2 in a row)"}), "") << AllWarnings();
  EXPECT_NE(Warning({"recovered the session to", "at attempt 3,"}), "") << AllWarnings();
}

TEST_F(RecoveryLogTest, LoginsThatAllFailAlikeAreTheReportedCause) {
  SessionOptions o = RecoveringOptions();
  o.replacement_timeout = milliseconds(100);
  fake_.options().connect_result = [](int n) {
    return n == 1 ? Status::OK() : Status::AuthFailed("CHAP refused (test)");
  };
  Open(o);
  fake_.FailConnection(Status::ConnectionFailed("peer reset (test)"));
  ASSERT_TRUE(
      WaitFor([](const SessionStats& s) { return s.state == SessionStats::State::kFailed; }));
  const Status why = session_->RecoveryFailure();
  EXPECT_EQ(why.code(), StatusCode::kAuthFailed) << why.ToString();
  EXPECT_NE(why.message().find("peer reset (test)"), std::string::npos) << why.message();
  EXPECT_NE(why.message().find("failed: CHAP refused (test)"), std::string::npos) << why.message();
}

TEST_F(RecoveryLogTest, LoginsThatFailDifferentlyLeaveTheFirstLossAsTheCause) {
  SessionOptions o = RecoveringOptions();
  o.replacement_timeout = milliseconds(600);
  fake_.options().connect_result = [](int n) {
    if (n == 1) return Status::OK();
    return n % 2 == 0 ? Status::AuthFailed("CHAP refused (test)")
                      : Status::Timeout("no answer (test)");
  };
  Open(o);
  fake_.FailConnection(Status::ProtocolError("a bad PDU (test)"));
  ASSERT_TRUE(
      WaitFor([](const SessionStats& s) { return s.state == SessionStats::State::kFailed; }));
  const Status why = session_->RecoveryFailure();
  EXPECT_EQ(why.code(), StatusCode::kProtocolError) << why.ToString();
  EXPECT_NE(why.message().find("a bad PDU (test)"), std::string::npos) << why.message();
}

}  // namespace
}  // namespace iser::test
