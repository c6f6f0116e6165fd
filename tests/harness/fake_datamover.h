// FakeConnection and FakeDatamover: a Datamover with no socket and no thread, so that a test (or
// a fuzzer) drives a Session's logic deterministically on its own thread. It is a mock by
// necessity: a real transport cannot be stepped PDU by PDU, nor its clock moved by hand.
//
// The test owns a FakeConnection (the target's side of the wire) and passes its Factory() in
// SessionOptions::datamover_factory; each datamover the factory makes is bound to it. Then:
//  - Login runs for real: the fake answers Login Requests with Login Responses carrying
//    options().login_keys (what the target "negotiates").
//  - Start records the session's DatamoverEvents; from then on the test's thread is the I/O
//    thread (OnIoThread() is true) until Shutdown or StopIoThread.
//  - Everything the session sends is recorded in sent(): SCSI Commands with their immediate
//    data, Data-Out answers to R2Ts with their bytes, control PDUs. A Logout Request is answered
//    with a Logout Response when options().answer_logout is set.
//  - The test plays the target with Deliver (PlaceDataIn, the copy, then OnPdu, as TCP does),
//    FireTimer, FailConnection, and moves the clock with Advance.
//  - Wake runs OnWake at once, then options().on_wake (the target's reaction while a caller
//    waits, e.g. in Close).
//  - Reconnects: every Connect starts a new connection (the failure and the shutdown of the
//    last one are forgotten); a recovering session connects, logs in and starts from its
//    recovery thread, so a test touches the fake again only after the session reports the
//    recovery done (Session::stats()).
// Events never nest: what the session causes from inside an event (Abort, the auto-answered
// Logout) runs after the event returns, as an I/O loop would run it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/pdu/bhs.h"
#include "initiator/session/datamover_factory.h"
#include "initiator/task/task.h"
#include "initiator/transport/datamover.h"
#include "tests/harness/target_login_keys.h"

namespace iser::test {

struct FakeConnectionOptions {
  Status connect_status;
  // When set, decides each connect instead of connect_status; n counts connects from 1. Set it
  // before Open: a recovering session connects from its own thread.
  std::function<Status(int n)> connect_result;
  Status enter_full_feature_status;
  Status start_status;
  // The target's answers in the operational stage of login.
  std::vector<std::string> login_keys = DefaultTargetLoginKeys();
  // MaxCmdSN in the final Login Response is its ExpCmdSN plus this.
  uint32_t login_cmdsn_window = 63;
  uint32_t max_transfer_bytes = 1 << 20;
  // Datamover::MaxOutstandingCommands: the receives an RDMA transport would have posted.
  uint32_t max_outstanding_commands = UINT32_MAX;
  bool answer_logout = true;
  std::function<void()> on_wake;
};

// One PDU the session sent.
struct SentPdu {
  enum class Kind { kCommand, kDataOut, kControl };
  Kind kind = Kind::kControl;
  Bhs bhs;                         // the header (for kDataOut: that of the task's command)
  std::vector<uint8_t> data;       // immediate data, the Data-Out bytes, or the control data
  Task* task = nullptr;            // kCommand, kDataOut
  uint32_t unsolicited_bytes = 0;  // kCommand: unsolicited Data-Out after it
  uint32_t ttt = 0, offset = 0, length = 0;  // kDataOut
};

class FakeConnection {
 public:
  explicit FakeConnection(FakeConnectionOptions options = {});

  FakeConnectionOptions& options() { return options_; }
  DatamoverFactory Factory();

  // The target's side. Deliver frames the PDU (DataSegmentLength is data's size) and does
  // nothing once the connection has failed (no PDU follows a connection error).
  void Deliver(const Bhs& bhs, std::span<const uint8_t> data = {});
  // OnPdu alone, skipping PlaceDataIn even for a Data-In with data: a datamover that breaks its
  // contract, a fault no real transport here can produce, to show the session survives it.
  void DeliverUnplaced(const Bhs& bhs, std::span<const uint8_t> data);
  void FireTimer();
  void FailConnection(const Status& status);
  // The I/O thread ends: Wake no longer runs anything and OnIoThread() is false.
  void StopIoThread();
  void Advance(Clock::duration d) { now_ += d; }
  Clock::time_point Now() const { return now_; }

  // A response header with F set, the next StatSN and the target's ExpCmdSN/MaxCmdSN.
  Bhs Header(Opcode op, uint32_t itt);
  uint32_t exp_cmdsn = 1;
  uint32_t max_cmdsn = 64;

  // What happened.
  std::vector<SentPdu>& sent() { return sent_; }
  std::vector<SentPdu> TakeSent();
  int connects() const { return connects_.load(); }
  int wakes() const { return wakes_; }
  // The first Login Request of every login, in order (ISID, TSIH).
  const std::vector<Bhs>& logins() const { return logins_; }
  // The portal of every Connect, in order ("192.0.2.1:3260").
  const std::vector<std::string>& portals() const { return portals_; }
  bool started() const { return events_ != nullptr; }
  bool shut_down() const { return shut_down_; }
  // The status the connection failed with (Abort or FailConnection); OK while it runs.
  const Status& failure() const { return failure_; }
  bool failed() const { return failed_; }
  // The ITT of every task the session retired (Datamover::Retire), in order.
  const std::vector<uint32_t>& retired() const { return retired_; }
  const ConnectionParams& connection_params() const { return params_; }

 private:
  friend class FakeDatamover;

  // Runs an event, then what was posted while it ran.
  void Run(const std::function<void()>& event);
  void Post(std::function<void()> event);
  void Fail(const Status& status);
  void AnswerLogin(const Bhs& request);

  FakeConnectionOptions options_;
  Clock::time_point now_;
  uint32_t statsn_ = 1;
  DatamoverEvents* events_ = nullptr;
  ConnectionParams params_;
  int depth_ = 0;
  std::deque<std::function<void()>> posted_;
  std::deque<std::pair<Bhs, std::vector<uint8_t>>> login_responses_;
  std::vector<SentPdu> sent_;
  std::vector<uint32_t> retired_;
  std::atomic<int> connects_{0};
  int wakes_ = 0;
  std::vector<std::string> portals_;
  std::vector<Bhs> logins_;
  bool shut_down_ = false;
  bool io_thread_stopped_ = false;
  bool failed_ = false;
  Status failure_;
};

}  // namespace iser::test
