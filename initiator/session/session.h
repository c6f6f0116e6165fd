// Session: a logged-in iSCSI Normal session over one connection, in full feature phase.
//
// Open connects (following login redirects), logs in and starts the connection's I/O thread.
// Submit may be called from any thread; each Task completes exactly once through its
// on_complete: on the I/O thread, or at once on the submitting thread, inside Submit, when the
// session can no longer take the task (it was closed, or its connection failed), or on Close's
// thread for the tasks still unfinished when Close stops the I/O thread. The session keeps the
// CmdSN window (commands past MaxCmdSN wait, in order, and are never failed for it), the ITT table
// (1023 commands in flight at most), immediate and unsolicited data per FirstBurstLength, R2T →
// Data-Out, Data-In with phase-collapsed status, residuals and sense, NOP-In/NOP-Out in both
// directions with a keepalive timeout, Async Messages, Rejects and Logout.
//
// When the connection fails every unfinished task completes with an error naming the portal and
// the cause, promptly; later submissions fail at once. Close() logs out (bounded by a timeout)
// after the in-flight tasks have completed; a session whose Open failed after login has no I/O
// thread to log out with, and is closed at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/login/login.h"
#include "initiator/session/serial.h"
#include "initiator/session/session_options.h"
#include "initiator/task/task.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/portal.h"

namespace iser {

// What a session has been through, for status displays and benchmarks.
struct SessionStats {
  enum class State : uint8_t {
    kLoggedIn,    // full feature phase
    kRecovering,  // the connection was lost; tasks wait for a new one
    kFailed,      // recovering past replacement_timeout (tasks fail), or a lost session that
                  // does not recover (SessionOptions::recover false)
    kClosed,
  };
  State state = State::kLoggedIn;
  uint64_t recoveries = 0;        // connections replaced successfully
  uint64_t replayed_tasks = 0;    // tasks sent again on a replacement
  uint64_t retried_commands = 0;  // SCSI-level retries (BUSY, UNIT ATTENTION, ...) and aborts
  std::chrono::milliseconds longest_recovery{0};  // from the loss to full feature phase again
  std::string portal;                             // where the session is (or was) logged in
  std::string last_loss;                          // why the connection was last lost
};
const char* SessionStateName(SessionStats::State state);

class Session final : private DatamoverEvents {
 public:
  static Result<std::unique_ptr<Session>> Open(const SessionOptions& options);
  ~Session() override;

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // After Close, or once the connection failed, the task completes at once with an error.
  void Submit(Task* task);
  // Submits and waits. Not from the I/O thread.
  void Execute(Task* task);
  // Logs out and stops the I/O thread; idempotent. In-flight tasks should have completed.
  Status Close();

  const NegotiatedParams& params() const { return outcome_.params; }
  const Portal& portal() const { return portal_; }
  const std::string& target_name() const { return options_.target_name; }
  std::string Describe() const;
  // The most data one SCSI command may carry on this session (transport limits).
  uint32_t max_transfer_bytes() const { return max_transfer_bytes_; }
  bool healthy() const { return !failed_.load(); }
  SessionStats stats() const;

 private:
  explicit Session(const SessionOptions& options);

  // DatamoverEvents (I/O thread).
  void OnWake() override;
  void OnTimer() override;
  Status PlaceDataIn(const Bhs& bhs, uint8_t** destination) override;
  void OnPdu(const Bhs& bhs, std::span<const uint8_t> data) override;
  void OnConnectionError(const Status& status) override;

  // Submit refuses tasks from now on with the first reason given.
  void StopAccepting(const Status& why);
  void Enqueue(Task* task);
  void Dispatch();
  void SendTask(Task* task);
  Task* LookupTask(uint32_t itt) const;
  void Complete(Task* task);
  void FailAll(const Status& status);
  void UpdateSequence(const Bhs& bhs, bool has_statsn);
  void HandleScsiResponse(const Bhs& bhs, std::span<const uint8_t> data);
  void HandleDataIn(const Bhs& bhs, std::span<const uint8_t> data);
  void HandleR2T(const Bhs& bhs);
  void HandleNopIn(const Bhs& bhs, std::span<const uint8_t> data);
  void HandleAsync(const Bhs& bhs, std::span<const uint8_t> data);
  void HandleReject(const Bhs& bhs, std::span<const uint8_t> data);
  void HandleLogoutResponse(const Bhs& bhs);
  void SendNopOut();
  void SendLogout();
  // Close's wait for the Logout Response, the connection's failure, or the logout timeout.
  Status AwaitLogout();
  void ProtocolFailure(const std::string& what);

  SessionOptions options_;
  Portal portal_;
  LoginOutcome outcome_;
  std::unique_ptr<Datamover> dm_;
  uint32_t max_transfer_bytes_ = 0;

  // Submissions from other threads, and whether the session still takes them (refusal_ says
  // why not).
  Mutex submit_mu_;
  Task* submit_head_ ISER_GUARDED_BY(submit_mu_) = nullptr;
  Task* submit_tail_ ISER_GUARDED_BY(submit_mu_) = nullptr;
  bool wake_pending_ ISER_GUARDED_BY(submit_mu_) = false;
  bool accepting_ ISER_GUARDED_BY(submit_mu_) = true;
  Status refusal_ ISER_GUARDED_BY(submit_mu_);

  // I/O thread state.
  CmdWindow window_;
  uint32_t exp_statsn_ = 0;
  Task* pending_head_ = nullptr;  // waiting for the window or an ITT slot, in order
  Task* pending_tail_ = nullptr;
  static constexpr uint32_t kSlotBits = 10;
  static constexpr uint32_t kSlots = 1u << kSlotBits;  // slot 0: NOP-Out and Logout
  std::vector<Task*> slots_;
  std::vector<uint32_t> slot_generation_;
  std::vector<uint32_t> free_slots_;
  uint32_t control_itt_ = 0;
  Clock::time_point last_receive_;
  bool nop_outstanding_ = false;
  Clock::time_point nop_sent_;
  std::atomic<bool> failed_{false};
  Status failure_;
  bool logout_sent_ = false;

  // Close() waits on this for the Logout Response or a failure.
  Mutex close_mu_;
  CondVar close_cv_;
  bool logout_done_ ISER_GUARDED_BY(close_mu_) = false;
  std::atomic<bool> logout_requested_{false};
  // Start succeeded: there is an I/O thread to log out with. Set in Open, read in Close.
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace iser
