// The one-shot commands (ls, discover) against a target that breaks the protocol right after
// every login: they must answer within the login timeout (ls: replacement_timeout defaults to
// it), say on stderr at warning level every time the connection is lost and every time recovery
// tries again (with the cause and the number), and exit with the cause. tgtd never sends a
// malformed PDU, so a scripted fake target (FakePortal, fake_target.h) plays that part over a
// real TCP socket, and the test runs the real iser-connect binary against it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using namespace std::chrono_literals;
using test::FakeConnection;
using test::FakeLoginBehavior;
using test::FakePortal;
using test::RefusingLogin;

constexpr int kLoginTimeoutSeconds = 3;
// "Answers within the login timeout", with room for a slow, shared CI machine.
constexpr auto kAnswerBound = std::chrono::seconds(kLoginTimeoutSeconds + 10);
constexpr const char* kTarget = "iqn.2026-11.io.iser-connect.test:broken";

// After the login, a PDU with an initiator's opcode (SCSI Command), which no target may send:
// the initiator must drop the connection. The pause lets the initiator read it before the close, so
// the cause it logs is this PDU rather than a reset.
void LoginThenBreak(FakeConnection& c) {
  if (!c.Login(FakeLoginBehavior{})) return;
  Bhs garbage;
  garbage.b[0] = 0x01;
  c.Send(garbage);
  std::this_thread::sleep_for(200ms);
}

struct CliRun {
  int rc = -1;
  std::string out;
  std::string err;
  std::chrono::steady_clock::duration took{};
};

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs iser-connect with these arguments (bounded by timeout(1), so that a regression fails
// the test instead of hanging it), stdout and stderr captured.
CliRun RunCli(const std::string& args) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("oneshot-cli-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string cmd = "timeout 60 " + std::string(ISER_CONNECT_BINARY) + " " + args + " >" +
                          (dir / "out").string() + " 2>" + (dir / "err").string();
  CliRun r;
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  r.took = std::chrono::steady_clock::now() - start;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(dir / "out");
  r.err = ReadAll(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

std::string Url(uint16_t port) {
  return "iscsi://127.0.0.1:" + std::to_string(port) + "/" + kTarget;
}

std::string Timeouts() {
  return " --login-timeout " + std::to_string(kLoginTimeoutSeconds);
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

#define EXPECT_CONTAINS(haystack, needle)                                                    \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "no \"" << (needle) << "\" in:\n" \
                                                        << (haystack)

TEST(OneShotCliTest, LsAnswersWithinTheLoginTimeoutAndLogsEveryLossAndAttempt) {
  FakePortal portal(LoginThenBreak);
  const CliRun r = RunCli("ls " + Url(portal.port()) + Timeouts());
  EXPECT_LT(r.took, kAnswerBound) << "ls answered after " << Seconds(r.took) << " s";
  // A protocol error is iscsiadm's generic failure.
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string cause = "target sent a PDU with unknown opcode 0x01";
  EXPECT_CONTAINS(r.err, "warning: session to " + std::string(kTarget) + " at ");
  EXPECT_CONTAINS(r.err, " lost: connection TCP 127.0.0.1:" + std::to_string(portal.port()) + ": " +
                             cause + "; recovering (loss 1 in a row)");
  // Each recovery logs in, and loses the new connection the same way.
  EXPECT_CONTAINS(r.err, "at attempt 1,");
  EXPECT_CONTAINS(r.err, cause + "; recovering (loss 2 in a row)");
  // The answer names the cause and the replacement_timeout it was given: the login timeout.
  EXPECT_CONTAINS(r.out, cause);
  EXPECT_CONTAINS(r.out, "replacement_timeout (3.0 s)");
}

TEST(OneShotCliTest, LsReplacementTimeoutIsStillAnOption) {
  FakePortal portal(LoginThenBreak);
  const CliRun r = RunCli("ls " + Url(portal.port()) + Timeouts() + " --replacement-timeout 1");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_CONTAINS(r.out, "replacement_timeout (1.0 s)");
  const CliRun url = RunCli("ls '" + Url(portal.port()) + "?replacement_timeout=1'" + Timeouts());
  EXPECT_EQ(url.rc, 1) << url.err;
  EXPECT_CONTAINS(url.out, "replacement_timeout (1.0 s)");
}

// The first login works and its connection breaks; every login after it is refused for CHAP
// (as a target that restarted without our account would): ls exits 24 with that cause.
TEST(OneShotCliTest, LsReportsTheCauseEveryRecoveryLoginFailsWith) {
  std::atomic<int> connections{0};
  FakePortal portal([&connections](FakeConnection& c) {
    if (connections++ == 0) {
      LoginThenBreak(c);
    } else {
      c.Login(RefusingLogin(2, 1));
    }
  });
  const CliRun r = RunCli("ls " + Url(portal.port()) + Timeouts());
  EXPECT_LT(r.took, kAnswerBound) << "ls answered after " << Seconds(r.took) << " s";
  EXPECT_EQ(r.rc, 24) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "recovering (loss 1 in a row)");
  EXPECT_CONTAINS(r.err, "warning: recovering the session to " + std::string(kTarget) +
                             ": attempt 1 at 127.0.0.1:" + std::to_string(portal.port()) +
                             " failed: ");
  EXPECT_CONTAINS(r.err, ": attempt 2 at ");
  EXPECT_CONTAINS(r.out, "login attempts all failed: ");
  EXPECT_CONTAINS(r.out, "Authentication failure");
}

// Targets that accept every login and then never let a command finish (issue 29, item 7): each
// recovery comes back, and the command is replayed on the new connection. A command's age and
// its replays count across connections, so ls still ends within the login timeout plus one
// command timeout (the slack covers the loss that reveals it: NOP-Out's interval and timeout).
constexpr int kCommandTimeoutSeconds = 5;
constexpr auto kHostileBound =
    std::chrono::seconds(kLoginTimeoutSeconds + kCommandTimeoutSeconds + 10);

// Logs in, then answers nothing, not even NOP-Out, until the initiator closes the connection.
void LoginThenSilence(FakeConnection& c) {
  if (!c.Login(FakeLoginBehavior{})) return;
  test::FakePdu pdu;
  while (c.Read(&pdu)) {
  }
}

// Logs in, answers NOP-Outs, and answers every SCSI Command with a PDU no target may send.
void LoginThenMalformedAnswers(FakeConnection& c) {
  if (!c.Login(FakeLoginBehavior{})) return;
  test::FakePdu pdu;
  while (c.Read(&pdu)) {
    const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
    if (pdu.bhs.opcode() == Opcode::kNopOut && pdu.bhs.itt() != kReservedTag) {
      Bhs nop =
          test::ResponseHeader(Opcode::kNopIn, pdu.bhs.itt(), c.next_statsn(), cmdsn, cmdsn + 64);
      nop.set_u32(bhs::kTtt, kReservedTag);
      c.Send(nop);
    } else if (pdu.bhs.opcode() == Opcode::kScsiCommand) {
      Bhs garbage;
      garbage.b[0] = 0x01;
      c.Send(garbage);
    }
  }
}

// Logs in, asks for a logout at once (Async Message event 1), answers NOP-Outs and the Logout,
// and leaves SCSI Commands unanswered.
void LoginThenAskForLogout(FakeConnection& c) {
  if (!c.Login(FakeLoginBehavior{})) return;
  Bhs async = test::ResponseHeader(Opcode::kAsyncMessage, kReservedTag, c.next_statsn(), 1, 64);
  async.b[36] = 1;       // AsyncEvent: logout requested
  async.set_u16(42, 2);  // Parameter3: log out within 2 s
  c.Send(async);
  test::FakePdu pdu;
  while (c.Read(&pdu)) {
    const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
    if (pdu.bhs.opcode() == Opcode::kNopOut && pdu.bhs.itt() != kReservedTag) {
      Bhs nop =
          test::ResponseHeader(Opcode::kNopIn, pdu.bhs.itt(), c.next_statsn(), cmdsn, cmdsn + 64);
      nop.set_u32(bhs::kTtt, kReservedTag);
      c.Send(nop);
    } else if (pdu.bhs.opcode() == Opcode::kLogoutRequest) {
      c.Send(test::ResponseHeader(Opcode::kLogoutResponse, pdu.bhs.itt(), c.next_statsn(), cmdsn,
                                  cmdsn + 64));
      return;
    }
  }
}

struct HostileCase {
  const char* name;
  FakePortal::Handler handler;
  const char* cause;  // in the answer
};

void ExpectLsEndsWithTheCause(const HostileCase& h) {
  SCOPED_TRACE(h.name);
  FakePortal portal(h.handler);
  const CliRun r = RunCli("ls " + Url(portal.port()) + Timeouts() + " --command-timeout " +
                          std::to_string(kCommandTimeoutSeconds));
  EXPECT_LT(r.took, kHostileBound) << "ls answered after " << Seconds(r.took) << " s";
  EXPECT_NE(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.rc, 124) << "ls was still running after 60 s:\n" << r.err;
  EXPECT_CONTAINS(r.out + r.err, h.cause);
  std::printf("%s: ls answered after %.1f s with %d\n", h.name, Seconds(r.took), r.rc);
}

TEST(OneShotCliTest, LsAgainstATargetThatAnswersNothingEndsWithTheCause) {
  ExpectLsEndsWithTheCause({"silent", LoginThenSilence, "no answer to NOP-Out"});
}

TEST(OneShotCliTest, LsAgainstATargetThatAnswersEveryCommandWithAMalformedPduEndsWithTheCause) {
  ExpectLsEndsWithTheCause(
      {"malformed", LoginThenMalformedAnswers, "target sent a PDU with unknown opcode 0x01"});
}

TEST(OneShotCliTest, LsAgainstATargetThatAsksForALogoutAfterEveryLoginEndsWithTheCause) {
  ExpectLsEndsWithTheCause({"logout", LoginThenAskForLogout, "log out"});
}

// A Discovery session does not recover: discover answers at once, with the cause.
TEST(OneShotCliTest, DiscoverAnswersAtOnceWithTheCause) {
  FakePortal portal(LoginThenBreak);
  const CliRun r = RunCli("discover -p 127.0.0.1:" + std::to_string(portal.port()) + Timeouts());
  EXPECT_LT(r.took, kAnswerBound) << "discover answered after " << Seconds(r.took) << " s";
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_CONTAINS(r.err, "unknown opcode 0x01");
}

}  // namespace
}  // namespace iser
