// Session recovery against a lying target: after the connection is lost, every later login is
// refused, or redirected in a loop between two portals, or accepted and dropped at once, over and
// over; and a target that refuses for a while and then comes back. tgtd cannot be made to do any
// of this on demand, so a scripted fake target (FakePortal, tests/integration/fake_target.h) plays
// it over a real TCP socket.
//
// While the trouble lasts, an I/O must fail within a bounded time after replacement_timeout with
// an error naming the cause, recovery attempts must stay few (no busy loop, little CPU), and
// Close() must return promptly. A target that comes back gets the waiting task replayed.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using namespace std::chrono_literals;
using test::FakeConnection;
using test::FakeLoginBehavior;
using test::FakePdu;
using test::FakePortal;
using test::FakeTarget;
using test::RefusingLogin;
using test::ResponseHeader;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kReplacementTimeout = 1500ms;
// How late past replacement_timeout a waiting task may fail.
constexpr auto kFailSlack = 1000ms;
// The window over which recovery attempts are counted, and the most connections a session may
// open in it per attempt's worth of logins: a retry every 0.4 s on average at the most.
constexpr auto kCountWindow = 3s;
constexpr int kMaxAttemptsInWindow = 8;
// A session that retries without spinning uses a few milliseconds of CPU in the window.
constexpr double kMaxCpuSecondsInWindow = 0.5;
constexpr uint64_t kLba = 8;
constexpr uint32_t kReadBytes = 4096;

FakeLoginBehavior LoginWithTime2Wait(uint32_t seconds) {
  FakeLoginBehavior login;
  for (std::string& k : login.operational_keys) {
    if (k.starts_with("DefaultTime2Wait=")) k = "DefaultTime2Wait=" + std::to_string(seconds);
  }
  return login;
}

SessionOptions OptionsFor(uint16_t port, uint32_t time2wait) {
  SessionOptions o = test::LoopbackOptions(port, "iqn.2026-11.io.iser-connect.test:fake");
  o.login_timeout = 2s;
  o.logout_timeout = 200ms;
  o.nop_interval = 0ms;  // the fakes do not answer NOP-Outs
  o.recover = true;
  o.replacement_timeout = kReplacementTimeout;
  o.offer.default_time2wait = time2wait;
  return o;
}

uint8_t Pattern(size_t i) {
  return static_cast<uint8_t>(i * 7 + kLba);
}

// A READ submitted asynchronously, with the time it completed.
struct PendingRead {
  Task task;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kReadBytes);
  std::binary_semaphore done{0};
  SteadyClock::time_point completed;

  void Submit(Session& s, uint64_t lun = 1) {
    scsi::Read(task, kLba, kReadBytes / 512, buf.data(), kReadBytes);
    task.lun = lun;
    task.context = this;
    task.on_complete = [](Task* t) {
      auto* self = static_cast<PendingRead*>(t->context);
      self->completed = SteadyClock::now();
      self->done.release();
    };
    s.Submit(&task);
  }
  bool Wait(SteadyClock::duration d) { return done.try_acquire_for(d); }
  bool PatternIntact() const {
    for (size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] != Pattern(i)) return false;
    }
    return true;
  }
};

// Answers a READ with the pattern and GOOD status in one Data-In.
void SendReadData(FakeConnection& c, const FakePdu& command) {
  const uint32_t cmdsn = command.bhs.u32(bhs::kCmdSN);
  const uint32_t length = command.bhs.u32(bhs::kExpectedDataTransferLength);
  std::vector<uint8_t> data(length);
  for (size_t i = 0; i < data.size(); ++i) data[i] = Pattern(i);
  Bhs din =
      ResponseHeader(Opcode::kDataIn, command.bhs.itt(), c.next_statsn(), cmdsn + 1, cmdsn + 64);
  din.set_flags(kFinalBit | kStatusBit);
  din.set_u32(bhs::kTtt, kReservedTag);
  din.set_data_segment_length(length);
  c.Send(din, data);
}

// Answers a NOP-Out that asks for an answer (one with an ITT); false for any other PDU.
bool AnswerNopOut(FakeConnection& c, const FakePdu& pdu) {
  if (pdu.bhs.opcode() != Opcode::kNopOut || pdu.bhs.itt() == kReservedTag) return false;
  const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
  Bhs nop = ResponseHeader(Opcode::kNopIn, pdu.bhs.itt(), c.next_statsn(), cmdsn, cmdsn + 64);
  nop.set_u32(bhs::kTtt, kReservedTag);
  c.Send(nop);
  return true;
}

// Serves a logged-in connection: READs get the pattern, other commands GOOD, Logout its answer.
void Serve(FakeConnection& c) {
  FakePdu pdu;
  while (c.Read(&pdu)) {
    const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
    if (pdu.bhs.opcode() == Opcode::kLogoutRequest) {
      c.Send(ResponseHeader(Opcode::kLogoutResponse, pdu.bhs.itt(), c.next_statsn(), cmdsn,
                            cmdsn + 64));
      return;
    }
    if (pdu.bhs.opcode() != Opcode::kScsiCommand) continue;
    const uint8_t op = pdu.bhs.b[bhs::kCdb];
    if (op == scsi::opcode::kRead10 || op == scsi::opcode::kRead16) {
      SendReadData(c, pdu);
    } else {
      c.Send(ResponseHeader(Opcode::kScsiResponse, pdu.bhs.itt(), c.next_statsn(), cmdsn + 1,
                            cmdsn + 64));
    }
  }
}

// The connection the session opens with: logged in, then dropped when the first command
// arrives, unanswered, so that the command is in flight at the loss.
struct FirstConnection {
  FakeLoginBehavior login;
  std::atomic<bool> lost{false};
  // Written before `lost` is set.
  SteadyClock::time_point lost_at;
  Bhs login_request;

  FakePortal::Handler Handler() {
    return [this](FakeConnection& c) {
      if (!c.Login(login)) return;
      login_request = c.first_login_request();
      FakePdu pdu;
      while (c.Read(&pdu)) {
        if (pdu.bhs.opcode() != Opcode::kScsiCommand) continue;
        lost_at = SteadyClock::now();
        lost = true;
        c.Close();
        return;
      }
    };
  }
  // Waits (bounded) until the connection has been dropped.
  bool WaitLost() {
    const auto deadline = SteadyClock::now() + 5s;
    while (!lost && SteadyClock::now() < deadline) std::this_thread::sleep_for(5ms);
    return lost;
  }
};

double ProcessCpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double Seconds(SteadyClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Trouble {
  // The connections the session opens after the loss (the first one is FirstConnection's).
  FakePortal::Handler later;
  uint32_t time2wait = 1;
  int max_redirects = 4;
  // Connections per recovery attempt at most (a redirect costs one more).
  int connections_per_attempt = 1;
  // Words one of which the failed I/O's error must contain.
  std::vector<std::string> cause_words;
  // More portals whose connections count as attempts too (a redirect loop's other end).
  const FakePortal* other = nullptr;
};

// Opens a session to `portal`, loses its connection with a READ in flight, submits another READ
// during the trouble, and checks the failures, the rate of attempts and Close.
void ExpectBoundedTrouble(FakePortal& portal, FirstConnection& first, const Trouble& trouble) {
  SessionOptions o = OptionsFor(portal.port(), trouble.time2wait);
  o.max_redirects = trouble.max_redirects;
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& s = **opened;
  portal.set_handler(trouble.later);
  auto connections = [&] {
    return portal.accepted() + (trouble.other ? trouble.other->accepted() : 0);
  };

  PendingRead in_flight;
  in_flight.Submit(s);
  ASSERT_TRUE(first.WaitLost());
  std::this_thread::sleep_for(200ms);
  PendingRead during;
  during.Submit(s);

  for (PendingRead* r : {&in_flight, &during}) {
    ASSERT_TRUE(r->Wait(kReplacementTimeout + kFailSlack + 2s))
        << "a task waited for a recovery that does not come far past replacement_timeout";
    const auto after = r->completed - first.lost_at;
    EXPECT_FALSE(r->task.status.ok());
    EXPECT_EQ(r->task.status.code(), StatusCode::kIoError) << r->task.status.ToString();
    bool named = false;
    for (const std::string& w : trouble.cause_words) {
      named = named || r->task.status.message().find(w) != std::string::npos;
    }
    EXPECT_TRUE(named) << "the error does not name the cause: " << r->task.status.ToString();
    EXPECT_GE(after, kReplacementTimeout) << "failed after " << Seconds(after) << " s";
    EXPECT_LE(after, kReplacementTimeout + kFailSlack) << "failed after " << Seconds(after) << " s";
    std::printf("task failed %.2f s after the loss: %s\n", Seconds(after),
                r->task.status.ToString().c_str());
  }
  EXPECT_EQ(s.stats().state, SessionStats::State::kFailed);

  // Past replacement_timeout a new task fails at once.
  PendingRead late;
  const auto submitted = SteadyClock::now();
  late.Submit(s);
  ASSERT_TRUE(late.Wait(2s));
  EXPECT_LE(late.completed - submitted, 500ms);
  EXPECT_EQ(late.task.status.code(), StatusCode::kIoError) << late.task.status.ToString();

  // Recovery goes on in the background: at least one more connection comes...
  const auto deadline = first.lost_at + std::chrono::seconds(trouble.time2wait) + 5s;
  while (connections() < 2 && SteadyClock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_GE(connections(), 2) << "no recovery attempt within Time2Wait + 5 s of the loss";
  // ...but not many, and without spinning.
  const int before = connections();
  const double cpu_before = ProcessCpuSeconds();
  std::this_thread::sleep_for(kCountWindow);
  const int attempts = connections() - before;
  const double cpu = ProcessCpuSeconds() - cpu_before;
  std::printf("%d connections and %.3f s of CPU in %.0f s of failing recovery\n", attempts, cpu,
              Seconds(kCountWindow));
  EXPECT_LE(attempts, kMaxAttemptsInWindow * trouble.connections_per_attempt);
  EXPECT_LE(cpu, kMaxCpuSecondsInWindow);
  EXPECT_FALSE(s.stats().last_loss.empty());

  const auto close_start = SteadyClock::now();
  s.Close().IgnoreError();  // there is no connection to log out on: Close may report it
  const auto close_took = SteadyClock::now() - close_start;
  EXPECT_LE(close_took, 1500ms) << "Close took " << Seconds(close_took) << " s";
  EXPECT_EQ(s.stats().state, SessionStats::State::kClosed);
}

// The words of the loss (the fake closed the connection) and of the recovery's trouble.
std::vector<std::string> CauseWords(std::vector<std::string> more) {
  more.push_back("closed the connection");
  return more;
}

TEST(RecoveryFakeTarget, EveryLaterLoginRefusedWithTargetError) {
  FirstConnection first;
  first.login = LoginWithTime2Wait(1);
  FakePortal portal(first.Handler());
  Trouble t;
  // 0x0300: target error, which a later login may get past.
  t.later = [](FakeConnection& c) { c.Login(RefusingLogin(3, 0)); };
  t.cause_words = CauseWords({"0x0300", "refused", "target error"});
  ExpectBoundedTrouble(portal, first, t);
}

TEST(RecoveryFakeTarget, EveryLaterLoginRefusedWithAuthenticationFailure) {
  FirstConnection first;
  first.login = LoginWithTime2Wait(1);
  FakePortal portal(first.Handler());
  Trouble t;
  // 0x0201: authentication failure, although the same credentials were accepted before.
  t.later = [](FakeConnection& c) { c.Login(RefusingLogin(2, 1)); };
  t.cause_words = CauseWords({"0x0201", "refused", "authentication"});
  ExpectBoundedTrouble(portal, first, t);
}

TEST(RecoveryFakeTarget, LaterLoginsRedirectedInALoopBetweenTwoPortals) {
  FirstConnection first;
  first.login = LoginWithTime2Wait(1);
  FakePortal a(first.Handler());
  FakePortal b([&](FakeConnection& c) {
    c.Login(RefusingLogin(1, 1, {"TargetAddress=127.0.0.1:" + std::to_string(a.port()) + ",1"}));
  });
  Trouble t;
  t.later = [&](FakeConnection& c) {
    c.Login(RefusingLogin(1, 1, {"TargetAddress=127.0.0.1:" + std::to_string(b.port()) + ",1"}));
  };
  t.other = &b;
  t.max_redirects = 2;
  t.connections_per_attempt = 1 + t.max_redirects;
  t.cause_words = CauseWords({"redirect"});
  ExpectBoundedTrouble(a, first, t);
}

// Each accepted login is a replacement that dies at once: the tasks replayed on it must not keep
// the session from failing them at replacement_timeout after the first loss.
void ExpectBoundedDropsAtOnce(uint32_t time2wait) {
  FirstConnection first;
  first.login = LoginWithTime2Wait(time2wait);
  FakePortal portal(first.Handler());
  Trouble t;
  t.time2wait = time2wait;
  t.later = [&](FakeConnection& c) {
    if (c.Login(first.login)) c.Close();
  };
  t.cause_words = CauseWords({});
  ExpectBoundedTrouble(portal, first, t);
}

TEST(RecoveryFakeTarget, LaterLoginsAcceptedThenDroppedAtOnce) {
  ExpectBoundedDropsAtOnce(1);
}

// DefaultTime2Wait 0 lets the session reconnect at once: only its own back-off keeps a target
// that drops every new connection from drawing it into a loop.
TEST(RecoveryFakeTarget, LaterLoginsAcceptedThenDroppedAtOnceWithTime2WaitZero) {
  ExpectBoundedDropsAtOnce(0);
}

TEST(RecoveryFakeTarget, TargetBackAfterRefusalsGetsTheWaitingTaskReplayed) {
  FirstConnection first;
  first.login = LoginWithTime2Wait(1);
  FakePortal portal(first.Handler());
  std::atomic<bool> back{false};
  std::mutex mu;
  std::vector<Bhs> recovery_logins;
  SessionOptions o = OptionsFor(portal.port(), 1);
  o.replacement_timeout = 30s;
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& s = **opened;
  portal.set_handler([&](FakeConnection& c) {
    if (!back) {
      c.Login(RefusingLogin(3, 0));
      return;
    }
    const bool in = c.Login(first.login);
    {
      std::lock_guard<std::mutex> lock(mu);
      recovery_logins.push_back(c.first_login_request());
    }
    if (in) Serve(c);
  });

  PendingRead in_flight;
  in_flight.Submit(s);
  ASSERT_TRUE(first.WaitLost());
  const auto refusal_deadline = SteadyClock::now() + 6s;
  while (portal.accepted() < 2 && SteadyClock::now() < refusal_deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(portal.accepted(), 2) << "no recovery attempt within Time2Wait + 5 s of the loss";
  EXPECT_EQ(s.stats().state, SessionStats::State::kRecovering);
  back = true;

  ASSERT_TRUE(in_flight.Wait(10s)) << "the waiting task did not complete once the target was back";
  EXPECT_TRUE(in_flight.task.status.ok()) << in_flight.task.status.ToString();
  EXPECT_TRUE(in_flight.PatternIntact());
  const SessionStats stats = s.stats();
  EXPECT_EQ(stats.state, SessionStats::State::kLoggedIn);
  EXPECT_EQ(stats.recoveries, 1u);
  EXPECT_GE(stats.replayed_tasks, 1u);
  EXPECT_FALSE(stats.last_loss.empty());
  {
    // Session reinstatement: the recovery login carries the first session's ISID and TSIH 0.
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(recovery_logins.size(), 1u);
    const Bhs& original = first.login_request;
    EXPECT_TRUE(std::equal(&recovery_logins[0].b[8], &recovery_logins[0].b[14], &original.b[8]));
    EXPECT_EQ(recovery_logins[0].u16(14), 0u);
  }

  PendingRead after;
  after.Submit(s);
  ASSERT_TRUE(after.Wait(5s));
  EXPECT_TRUE(after.task.status.ok()) << after.task.status.ToString();
  EXPECT_TRUE(after.PatternIntact());
  const auto close_start = SteadyClock::now();
  EXPECT_TRUE(s.Close().ok());
  EXPECT_LE(SteadyClock::now() - close_start, 1s);
}

// An R2T that crosses the ABORT TASK of its WRITE (issue 29, item 1): the session must not
// answer it, because the Data-Out would go out behind the abort and, once the abort is answered
// and the WRITE resent under a new ITT, reach the target as Data-Out of no command it knows
// (tgtd drops the connection for it). Over the real TCP datamover: the Data-Out is built when
// it is written, not when it is queued.
TEST(RecoveryFakeTarget, AnR2TAfterItsAbortTaskIsNotAnsweredAndTheResentWriteIsWellFormed) {
  constexpr uint32_t kWriteBytes = 8192;
  constexpr uint32_t kStaleTtt = 0x1111;
  constexpr uint32_t kFreshTtt = 0x2222;
  constexpr uint32_t kPingTtt = 0x4242;
  std::mutex mu;
  std::vector<FakePdu> before_resend;  // what came between the abort and the resent WRITE
  FakePdu first_command, resent, data_out;
  bool script_done = false;
  FakeTarget target(FakeLoginBehavior{}, [&](FakeTarget& t) {
    FakePdu cmd, tmf, pdu;
    if (!ReadUntil(t, Opcode::kScsiCommand, &cmd)) return;
    if (!ReadUntil(t, Opcode::kTaskMgmtRequest, &tmf)) return;
    const uint32_t cmdsn = cmd.bhs.u32(bhs::kCmdSN);
    Bhs r2t = ResponseHeader(Opcode::kR2T, cmd.bhs.itt(), 0, cmdsn + 1, cmdsn + 64);
    r2t.set_u32(bhs::kTtt, kStaleTtt);
    r2t.set_u32(bhs::kDataSN, 0);
    r2t.set_u32(bhs::kBufferOffset, 0);
    r2t.set_u32(bhs::kDesiredLength, kWriteBytes);
    t.Send(r2t);
    // A ping after the R2T: once its echo is here, a Data-Out answering the R2T has been sent.
    Bhs ping = ResponseHeader(Opcode::kNopIn, kReservedTag, 0, cmdsn + 1, cmdsn + 64);
    ping.set_u32(bhs::kTtt, kPingTtt);
    t.Send(ping);
    std::vector<FakePdu> seen;
    bool echoed = false;
    while (!echoed && t.Read(&pdu)) {
      echoed = pdu.bhs.opcode() == Opcode::kNopOut && pdu.bhs.u32(bhs::kTtt) == kPingTtt;
      seen.push_back(pdu);
    }
    AnswerTaskManagement(t, tmf, 0);
    bool got_resent = false;
    while (!got_resent && t.Read(&pdu)) {
      got_resent = pdu.bhs.opcode() == Opcode::kScsiCommand;
      if (!got_resent) seen.push_back(pdu);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      first_command = cmd;
      before_resend = seen;
      resent = pdu;
    }
    if (!got_resent) return;
    const uint32_t resent_cmdsn = pdu.bhs.u32(bhs::kCmdSN);
    r2t = ResponseHeader(Opcode::kR2T, pdu.bhs.itt(), 0, resent_cmdsn + 1, resent_cmdsn + 64);
    r2t.set_u32(bhs::kTtt, kFreshTtt);
    r2t.set_u32(bhs::kDataSN, 0);
    r2t.set_u32(bhs::kBufferOffset, 0);
    r2t.set_u32(bhs::kDesiredLength, kWriteBytes);
    t.Send(r2t);
    FakePdu out;
    if (!t.Read(&out)) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      data_out = out;
      script_done = true;
    }
    t.Send(ResponseHeader(Opcode::kScsiResponse, pdu.bhs.itt(), t.next_statsn(), resent_cmdsn + 1,
                          resent_cmdsn + 64));
    if (ReadUntil(t, Opcode::kLogoutRequest, &pdu)) {
      const uint32_t c = pdu.bhs.u32(bhs::kCmdSN);
      t.Send(ResponseHeader(Opcode::kLogoutResponse, pdu.bhs.itt(), t.next_statsn(), c, c + 64));
    }
  });
  // Before the session: a session closed on a failed assertion still completes the task.
  std::vector<uint8_t> buf(kWriteBytes);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = Pattern(i);
  Task task;
  scsi::Write(task, kLba, kWriteBytes / 512, buf.data(), kWriteBytes, false);
  std::binary_semaphore done{0};
  SessionOptions o = OptionsFor(target.port(), 0);
  o.command_timeout = 1s;
  o.recover = false;
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& s = **opened;

  task.context = &done;
  task.on_complete = [](Task* t) { static_cast<std::binary_semaphore*>(t->context)->release(); };
  s.Submit(&task);
  ASSERT_TRUE(done.try_acquire_for(20s)) << "the WRITE did not complete";
  EXPECT_TRUE(task.status.ok()) << task.status.ToString();

  std::lock_guard<std::mutex> lock(mu);
  for (const FakePdu& p : before_resend) {
    EXPECT_NE(p.bhs.opcode(), Opcode::kDataOut)
        << "Data-Out (ITT " << p.bhs.itt() << ", TTT " << p.bhs.u32(bhs::kTtt)
        << ") answered the R2T of the task being aborted (ITT " << first_command.bhs.itt() << ")";
  }
  ASSERT_EQ(resent.bhs.opcode(), Opcode::kScsiCommand);
  EXPECT_NE(resent.bhs.itt(), first_command.bhs.itt());
  ASSERT_TRUE(script_done);
  ASSERT_EQ(data_out.bhs.opcode(), Opcode::kDataOut);
  EXPECT_EQ(data_out.bhs.itt(), resent.bhs.itt());
  EXPECT_EQ(data_out.bhs.u32(bhs::kTtt), kFreshTtt);
  EXPECT_EQ(data_out.bhs.u32(bhs::kBufferOffset), 0u);
  EXPECT_EQ(data_out.data, buf);
  EXPECT_TRUE(s.Close().ok());
}

// Targets that accept every login and then never let a command finish (issue 29, item 7). Each
// connection lives longer than the 10 s after which a connection counted as stable, so only the
// command's own age and the losses "in a row" of connections that completed nothing can end it:
// the command fails naming the last loss, the next one too, and replacement_timeout fires.
std::mutex g_warnings_mu;
std::vector<std::string> g_warnings;

void CaptureWarnings(LogLevel level, const std::string& message) {
  if (level < LogLevel::kWarning) return;
  std::lock_guard<std::mutex> lock(g_warnings_mu);
  g_warnings.push_back(message);
}

bool Warned(const std::string& words) {
  std::lock_guard<std::mutex> lock(g_warnings_mu);
  return std::any_of(g_warnings.begin(), g_warnings.end(),
                     [&](const std::string& w) { return w.find(words) != std::string::npos; });
}

// Logs in, then answers nothing, not even NOP-Out.
void LoginThenSilence(FakeConnection& c) {
  if (!c.Login(LoginWithTime2Wait(0))) return;
  FakePdu pdu;
  while (c.Read(&pdu)) {
  }
}

// Answers the command with CHECK CONDITION, UNIT ATTENTION "power on or reset occurred".
void SendUnitAttention(FakeConnection& c, const FakePdu& command) {
  const uint32_t cmdsn = command.bhs.u32(bhs::kCmdSN);
  Bhs ua = ResponseHeader(Opcode::kScsiResponse, command.bhs.itt(), c.next_statsn(), cmdsn + 1,
                          cmdsn + 64);
  ua.b[3] = 0x02;  // CHECK CONDITION
  // SenseLength, then fixed-format sense: UNIT ATTENTION, 29/00.
  const std::vector<uint8_t> sense = {0, 18, 0x70, 0, 0x06, 0, 0, 0, 0, 10,
                                      0, 0,  0,    0, 0x29, 0, 0, 0, 0, 0};
  ua.set_data_segment_length(static_cast<uint32_t>(sense.size()));
  c.Send(ua, sense);
}

// Logs in, answers NOP-Outs, and every SCSI Command with a PDU no target may send; with
// `unit_attention_first`, the first command of each connection gets CHECK CONDITION, UNIT
// ATTENTION "power on or reset occurred" first, as after a reset. Its connections die young: the
// losses were "in a row" before too, and this guards that; a retried unit attention is no
// progress, so they still are with it.
void LoginThenMalformedAnswers(FakeConnection& c, bool unit_attention_first) {
  if (!c.Login(LoginWithTime2Wait(0))) return;
  bool first_command = true;
  FakePdu pdu;
  while (c.Read(&pdu)) {
    if (AnswerNopOut(c, pdu) || pdu.bhs.opcode() != Opcode::kScsiCommand) continue;
    if (std::exchange(first_command, false) && unit_attention_first) {
      SendUnitAttention(c, pdu);
      continue;
    }
    Bhs garbage;
    garbage.b[0] = 0x01;
    c.Send(garbage);
  }
}

// Logs in, asks for a logout at once (Async Message event 1), answers NOP-Outs and a Logout,
// leaves SCSI Commands and task management unanswered.
void LoginThenAskForLogout(FakeConnection& c) {
  if (!c.Login(LoginWithTime2Wait(0))) return;
  Bhs async = ResponseHeader(Opcode::kAsyncMessage, kReservedTag, c.next_statsn(), 1, 64);
  async.b[36] = 1;       // AsyncEvent: logout requested
  async.set_u16(42, 2);  // Parameter3: within 2 s
  c.Send(async);
  FakePdu pdu;
  while (c.Read(&pdu)) {
    const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
    if (AnswerNopOut(c, pdu)) continue;
    if (pdu.bhs.opcode() == Opcode::kLogoutRequest) {
      c.Send(ResponseHeader(Opcode::kLogoutResponse, pdu.bhs.itt(), c.next_statsn(), cmdsn,
                            cmdsn + 64));
      return;
    }
  }
}

void ExpectTheCommandEndsAcrossReplays(const FakePortal::Handler& handler,
                                       const std::string& cause) {
  {
    std::lock_guard<std::mutex> lock(g_warnings_mu);
    g_warnings.clear();
  }
  SetLogSink(&CaptureWarnings, LogLevel::kWarning);
  FakePortal portal(handler);
  SessionOptions o = OptionsFor(portal.port(), 0);
  o.nop_interval = 5s;
  o.nop_timeout = 6s;
  o.command_timeout = 3s;
  // Before the session: a session closed on a failed assertion still completes them.
  PendingRead first;
  PendingRead second;
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& s = **opened;

  // Fails at the first loss after command_timeout: within a connection's life, 12 s here.
  const auto start = SteadyClock::now();
  first.Submit(s);
  ASSERT_TRUE(first.Wait(30s)) << "the command outlived command_timeout by far, replayed over and "
                                  "over";
  std::printf("the first command failed after %.1f s: %s\n", Seconds(first.completed - start),
              first.task.status.ToString().c_str());
  EXPECT_FALSE(first.task.status.ok());
  EXPECT_EQ(first.task.status.code(), StatusCode::kIoError) << first.task.status.ToString();
  EXPECT_NE(first.task.status.message().find(cause), std::string::npos)
      << first.task.status.ToString();

  // The next command meets the same target: its loss follows a recovery that completed nothing,
  // so it is one more loss in a row, and replacement_timeout (counted from the first) fires.
  second.Submit(s);
  ASSERT_TRUE(second.Wait(40s)) << "the second command outlived its command_timeout by far";
  EXPECT_FALSE(second.task.status.ok());
  EXPECT_NE(second.task.status.message().find(cause), std::string::npos)
      << second.task.status.ToString();
  EXPECT_TRUE(Warned("(loss 2 in a row)"));
  // The recovery thread gives up just after it failed the command, on its own time: waited for.
  const auto gave_up_by = SteadyClock::now() + 10s;
  while (!Warned("gave up waiting for the session") && SteadyClock::now() < gave_up_by) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(Warned("gave up waiting for the session"));
  s.Close().IgnoreError();
  SetLogSink(nullptr, LogLevel::kWarning);
}

TEST(RecoveryFakeTarget, ACommandToATargetThatAnswersNothingEndsAcrossReplays) {
  ExpectTheCommandEndsAcrossReplays(LoginThenSilence, "no answer to NOP-Out");
}

TEST(RecoveryFakeTarget, ACommandAnsweredWithAMalformedPduEndsAcrossReplays) {
  ExpectTheCommandEndsAcrossReplays([](FakeConnection& c) { LoginThenMalformedAnswers(c, false); },
                                    "unknown opcode 0x01");
}

TEST(RecoveryFakeTarget, ACommandAnsweredWithAUnitAttentionThenAMalformedPduEndsAcrossReplays) {
  ExpectTheCommandEndsAcrossReplays([](FakeConnection& c) { LoginThenMalformedAnswers(c, true); },
                                    "unknown opcode 0x01");
}

TEST(RecoveryFakeTarget, ACommandToATargetThatAsksForALogoutAfterEveryLoginEndsAcrossReplays) {
  ExpectTheCommandEndsAcrossReplays(LoginThenAskForLogout, "asked us to log out");
}

// Logs in and answers NOP-Outs; the first command of each connection gets CHECK CONDITION, UNIT
// ATTENTION "power on or reset occurred" (as after the LUN reset and reconnect before), then
// LUN 0's READs their data, while LUN 1's commands stay unanswered: a LUN that stalls behind a
// target that is otherwise well (issue 29, item 7, as reviews found it: a retried unit
// attention, or another LUN's traffic, counted as the stalled command's progress). Task
// management goes unanswered, or with kDropOnAbort an ABORT TASK drops the connection, as some
// targets do. With kDropAfterLunOne a command to LUN 1 drops the connection once a LUN 0 READ
// was answered after it (a CDB that crashes the target's handler, while the connection still
// completes other commands), and no unit attention is raised (its retries would end the command
// with CHECK CONDITION first).
// kDropAfterLunOne: a LUN 0 read answered after a LUN 1 command arrived drops the connection.
// kUnitAttentionThenDrop: the same, and the first LUN 1 command of each connection gets a UNIT
// ATTENTION, so that the command is retried (sent again afresh) on each connection.
enum class LunOne { kStalled, kDropOnAbort, kDropAfterLunOne, kUnitAttentionThenDrop };

void StalledLunOne(FakeConnection& c, LunOne mode) {
  if (!c.Login(LoginWithTime2Wait(0))) return;
  bool first_command = true;
  bool lun1_seen = false;
  bool lun1_attention_due = mode == LunOne::kUnitAttentionThenDrop;
  FakePdu pdu;
  while (c.Read(&pdu)) {
    if (mode == LunOne::kDropOnAbort && pdu.bhs.opcode() == Opcode::kTaskMgmtRequest) {
      c.Close();
      return;
    }
    if (AnswerNopOut(c, pdu) || pdu.bhs.opcode() != Opcode::kScsiCommand) continue;
    const bool drops = mode == LunOne::kDropAfterLunOne || mode == LunOne::kUnitAttentionThenDrop;
    if (std::exchange(first_command, false) && !drops) {
      SendUnitAttention(c, pdu);
      continue;
    }
    if (pdu.bhs.lun() != EncodeLun(0)) {
      if (std::exchange(lun1_attention_due, false)) {
        SendUnitAttention(c, pdu);
        continue;
      }
      lun1_seen = true;
      continue;
    }
    SendReadData(c, pdu);
    if (drops && lun1_seen) {
      c.Close();
      return;
    }
  }
}

// A command to the stalled LUN ends through its own escalation (abort, LUN reset, reconnect,
// EIO) whatever else completes: with `lun0_reads`, a reader keeps LUN 0 busy meanwhile. The
// error names `cause`, the loss that ended it.
void ExpectTheStalledLunsCommandEnds(bool lun0_reads, LunOne mode, const std::string& cause) {
  FakePortal portal([mode](FakeConnection& c) { StalledLunOne(c, mode); });
  SessionOptions o = OptionsFor(portal.port(), 0);
  o.nop_interval = 5s;
  o.nop_timeout = 6s;
  o.command_timeout = 2s;
  o.replacement_timeout = 60s;
  PendingRead stalled;
  std::atomic<bool> stop{false};
  std::atomic<int> lun0_done{0};
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& s = **opened;
  std::thread reader([&] {
    while (lun0_reads && !stop) {
      PendingRead r;
      r.Submit(s, 0);
      if (!r.Wait(60s)) return;
      if (r.task.status.ok()) ++lun0_done;
      std::this_thread::sleep_for(100ms);
    }
  });
  const auto start = SteadyClock::now();
  stalled.Submit(s);
  // Escalation: 2 s to the abort, 2 s to the LUN reset, 4 s to the reconnect.
  const bool ended = stalled.Wait(40s);
  stop = true;
  reader.join();
  ASSERT_TRUE(ended) << "the stalled LUN's command was replayed over and over (" << lun0_done.load()
                     << " LUN 0 reads completed meanwhile)";
  std::printf("the stalled command failed after %.1f s (%d LUN 0 reads meanwhile): %s\n",
              Seconds(stalled.completed - start), lun0_done.load(),
              stalled.task.status.ToString().c_str());
  EXPECT_EQ(stalled.task.status.code(), StatusCode::kIoError) << stalled.task.status.ToString();
  EXPECT_NE(stalled.task.status.message().find(cause), std::string::npos)
      << stalled.task.status.ToString();
  if (lun0_reads) {
    EXPECT_GT(lun0_done.load(), 0) << "LUN 0 was never read: the test proves less";
  }
  s.Close().IgnoreError();
}

TEST(RecoveryFakeTarget, AStalledCommandEndsThoughEachLoginRetriesAUnitAttention) {
  ExpectTheStalledLunsCommandEnds(false, LunOne::kStalled, "LOGICAL UNIT RESET");
}

TEST(RecoveryFakeTarget, AStalledCommandEndsThoughAnotherLunMakesProgress) {
  ExpectTheStalledLunsCommandEnds(true, LunOne::kStalled, "LOGICAL UNIT RESET");
}

TEST(RecoveryFakeTarget, AStalledCommandEndsThoughEachAbortDropsTheConnection) {
  ExpectTheStalledLunsCommandEnds(true, LunOne::kDropOnAbort, "closed");
}

// Each connection completes LUN 0's reads and is lost before the LUN 1 command's timeout, so
// its escalation never starts: before, it was replayed until the test's 40 s bound; now it ends
// after 8 losses with it in flight.
TEST(RecoveryFakeTarget, ACommandInFlightAtEveryLossEndsThoughOtherCommandsComplete) {
  ExpectTheStalledLunsCommandEnds(true, LunOne::kDropAfterLunOne,
                                  "on 8 connections, each lost while it was in flight");
}

// The same, with the command retried for a UNIT ATTENTION on each connection before the loss:
// before, each retry started its count of losses afresh, and the command ended only when its
// SCSI retries ran out, as a CHECK CONDITION (status OK) instead of the error saying why.
TEST(RecoveryFakeTarget, ACommandInFlightAtEveryLossEndsThoughEachConnectionRetriesIt) {
  ExpectTheStalledLunsCommandEnds(true, LunOne::kUnitAttentionThenDrop,
                                  "on 8 connections, each lost while it was in flight");
}

}  // namespace
}  // namespace iser
