// Session: a logged-in iSCSI Normal session, in full feature phase, that outlives its
// connections.
//
// Open connects (following login redirects), logs in and starts the connection's I/O thread.
// Submit may be called from any thread; each Task completes exactly once through its
// on_complete: on the I/O thread; or at once on the submitting thread, inside Submit, when the
// session cannot take the task (it was closed, or it has been recovering for longer than
// replacement_timeout); or on the recovery thread (a task that may not be replayed, that waited
// past replacement_timeout, or that CollectForReplay fails); or on Close's thread for the tasks
// still unfinished when Close stops the session. The session keeps the CmdSN window (commands past
// MaxCmdSN wait, in order, and are never failed for it), the ITT table (1023 commands in flight at
// most), immediate and unsolicited data per FirstBurstLength, R2T → Data-Out, Data-In with
// phase-collapsed status, residuals and sense, NOP-In/NOP-Out in both directions with a keepalive
// timeout, Async Messages, Rejects, Task Management (ABORT TASK and LOGICAL UNIT RESET for a
// command past command_timeout; a LUN reset holds the LUN's later commands until it is answered,
// and only the tasks it covered are sent again) and Logout; SCSI outcomes that mean "try again" are
// retried (scsi_retry.h). However a sent task ends, the datamover retires it (Datamover::Retire)
// before its ITT is reused or it completes. An underflow residual larger than the transfer length
// fails the task; Data-In must arrive in order.
//
// Recovery at ErrorRecoveryLevel 0 (docs/recovery.md): when the connection is lost, whatever the
// cause, the recovery thread shuts it down (so an iSER connection's STags are revoked before any
// task's memory is reused or handed back), waits DefaultTime2Wait and logs in again with the same
// ISID — session reinstatement — on each known portal in turn, backing off between rounds. Then
// every unfinished task is sent again in its original order with a new ITT and CmdSN; a task
// that is not safe to repeat (COMPARE AND WRITE, PERSISTENT RESERVE OUT) fails instead. Tasks wait
// meanwhile, up to replacement_timeout; then they and new ones fail, and recovery goes on.
//
// Close() logs out (bounded by a timeout) after the in-flight tasks have completed; a session whose
// Open failed after login has no I/O thread to log out with, and is closed at once.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/login/login.h"
#include "initiator/session/serial.h"
#include "initiator/session/session_options.h"
#include "initiator/task/executor.h"
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
  uint64_t commands = 0;          // SCSI commands completed with a status (after any retries)
  uint64_t bytes_read = 0;        // data moved by those with GOOD status, less the residual
  uint64_t bytes_written = 0;
  std::chrono::milliseconds longest_recovery{0};  // from the loss to full feature phase again
  std::string portal;                             // where the session is (or was) logged in
  Portal current_portal;                          // the same, as an address and port
  std::optional<uint16_t> current_tpgt;           // its TargetPortalGroupTag
  std::string last_loss;                          // why the connection was last lost
  // While recovering: when the losses it is still recovering from began (losses of connections
  // that completed nothing count as one), which replacement_timeout counts from.
  std::chrono::steady_clock::time_point recovering_since;
  std::string datamover;  // how the connection moves data (Datamover::Mechanism)
};
const char* SessionStateName(SessionStats::State state);

class Session final : public Executor, private DatamoverEvents {
 public:
  static Result<std::unique_ptr<Session>> Open(const SessionOptions& options);
  ~Session() override;

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // After Close, or while recovery has lasted past replacement_timeout, the task completes at
  // once with an error.
  void Submit(Task* task);
  // Submits and waits. Not from the I/O thread.
  void Execute(Task* task) override;
  // Logs out and stops the I/O thread; idempotent. In-flight tasks should have completed.
  Status Close();

  // As negotiated by the first login (a recovery that negotiated otherwise is logged).
  const NegotiatedParams& params() const { return first_params_; }
  // Where Open logged in, after redirects; stats().portal says where the session is now.
  const Portal& portal() const { return portal_; }
  const std::string& target_name() const { return options_.target_name; }
  std::string Describe() const;
  // The most data one SCSI command may carry on this session (transport limits).
  uint32_t max_transfer_bytes() const override { return max_transfer_bytes_; }
  // Logged in now (not recovering, not failed, not closed).
  bool healthy() const { return !failed_.load(); }
  SessionStats stats() const;
  // More portals of this target for recovery to try, after SessionOptions::alternate_portals
  // (e.g. what a SendTargets discovery reported once the session was up). Any thread.
  void AddAlternatePortals(const std::vector<Portal>& portals);
  // Counts UNIT ATTENTIONs "capacity data has changed": a frontend that caches the LUN's size
  // reads it again when this moves.
  uint64_t capacity_changes() const { return capacity_changes_.load(); }
  // Counts UNIT ATTENTIONs "reported LUNs data has changed" (3F/0E): LUNs were added or removed
  // (tgtd also raises it for a LUN deleted and added again, e.g. with a larger backing file).
  uint64_t luns_changes() const { return luns_changes_.load(); }
  // Moves whenever either of the two does (both only grow): a LUN may have another size, or be
  // another LUN under its number, since it last had this value.
  uint64_t lun_changes() const { return luns_changes() + capacity_changes(); }
  // Counts UNIT ATTENTIONs 2A/06 and 2A/07: the LUNs' ALUA states changed (initiator/paths reads
  // them again when this moves).
  uint64_t alua_changes() const { return alua_changes_.load(); }
  // With a handoff (SessionOptions::handoff): while the session has no connection, offers it the
  // tasks it holds that are safe to run elsewhere, again (another path became usable since they
  // were first offered). Any thread; the recovery thread does the offering.
  void OfferWaiting();
  // While I/O fails because recovery has lasted past replacement_timeout: why, with the code of
  // the cause (what every login attempt failed with, if they all failed the same way, else the
  // first loss of the connection), for a one-shot command to exit with. OK otherwise.
  Status RecoveryFailure() const;

 private:
  explicit Session(const SessionOptions& options);

  // DatamoverEvents (I/O thread).
  void OnWake() override;
  void OnTimer() override;
  void OnControlPosted(const Bhs& bhs) override;
  void OnCommandPosted(Task* task) override;
  Status PlaceDataIn(const Bhs& bhs, uint8_t** destination) override;
  void OnPdu(const Bhs& bhs, std::span<const uint8_t> data) override;
  void OnConnectionError(const Status& status) override;
  // Commands in slots: sent, waiting for their final responses.
  uint32_t CommandsAwaitingResponse() const override {
    return static_cast<uint32_t>(kSlots - 1 - free_slots_.size());
  }

  // Submit refuses tasks from now on with the first reason given.
  void StopAccepting(const Status& why);
  void Enqueue(Task* task);
  void PushFront(Task* task);
  void Dispatch();
  void SendTask(Task* task);
  Task* LookupTask(uint32_t itt) const;
  // Frees the task's ITT slot; Complete then runs on_complete.
  void Release(Task* task);
  void Complete(Task* task);
  // A task with a SCSI status: completes it, or sends it again (scsi_retry.h).
  void Finish(Task* task);
  void Retry(Task* task, std::chrono::milliseconds delay);
  // Counts a command that completes with a SCSI status into stats().
  void CountCompleted(const Task& task);
  void FailAll(const Status& status);
  // Completes every task of a queue linked through Task::next with this status.
  static void FailQueue(Task* head, const Status& status);
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
  // Describe() for a caller that holds submit_mu_.
  std::string DescribeLocked() const ISER_REQUIRES(submit_mu_);

  // Task management (task_management.cc), I/O thread: command_timeout's escalation.
  void CheckCommandTimeouts(Clock::time_point now);
  void SendTaskManagement(uint8_t function, uint64_t lun, Task* referenced);
  // Sends a LOGICAL UNIT RESET unless one to the LUN is outstanding; the LUN's tasks in flight
  // are the ones it covers, and the LUN's other commands wait until it is answered.
  void StartLunReset(uint64_t lun);
  // An ABORT TASK for this sent task is outstanding.
  bool BeingAborted(const Task* task) const;
  // A LOGICAL UNIT RESET to this LUN is outstanding, or waits for room to be sent.
  bool LunBeingReset(uint64_t lun) const;
  // An ABORT TASK for the task with this ITT waits for its answer.
  bool AbortOutstanding(uint32_t itt) const;
  // Whether the slot's command is in command_timeout's escalation: its ABORT TASK, or a LUN
  // reset that covers it, is under way.
  bool EscalationStarted(uint32_t slot) const;
  // Another task management request fits in the datamover's receives (Dispatch's gate).
  bool RoomForTaskManagement() const;
  // No longer waits for the answer to this function: an answer that still comes is late, not a
  // protocol error.
  void ForgetTaskManagement(uint32_t itt);
  void HandleTaskManagementResponse(const Bhs& bhs);
  // The task was aborted by the target: it is sent again, or fails once it has been aborted too
  // often.
  void RetryAborted(Task* task, const std::string& how);

  // Recovery (recovery.cc), recovery thread.
  void RecoveryMain();
  void Recover();
  // Takes every unfinished task, in the order it was first sent, into pending_; fails those
  // that may not be sent twice, and those past command_timeout since first sent or replayed too
  // often when the lost connection completed nothing (progress false) or they were in their
  // escalation (an ABORT TASK, or a LUN reset covering them, under way), and, whatever progress
  // says, those in flight at their 8th connection loss (Task::losses_in_flight). Returns how
  // many will be replayed.
  uint64_t CollectForReplay(const std::string& cause, bool progress);
  // Commands in flight, waiting, or submitted: a loss with any of them is not an idle one.
  bool Outstanding() const;
  Status Reconnect(const Portal& portal, uint64_t replayed, Clock::time_point lost_at);
  // Recovery thread, without a connection: gives options_.handoff the tasks it takes among
  // those waiting (task_handoff.h says which are offered). Returns how many of those had been
  // sent (and would have been replayed).
  uint64_t OfferMovable();
  // Whether any task waiting for the next connection was sent on the lost one and is not safe to
  // run elsewhere (its replay waits for a reinstating login), or failed and waits for that login
  // to be reported (unfenced_failures_).
  bool HoldsSentWrites() const;
  // Completes the tasks of unfenced_failures_ with the status each holds: the lost session has
  // ended, or never will (Close, or a give-up with no fence possible).
  void EndUnfenced();
  // Fails the tasks that end with their connection (Task::ends_with_connection) among those
  // waiting for the next one, and in the submit queue. Returns how many of them had been sent.
  uint64_t FailConnectionBound(const std::string& cause);
  // Fails every task waiting for the next connection (after a give-up).
  void FailPending(const Status& why);
  // What submissions are refused with after a give-up.
  Status RefusalAfterGiveUp() const;
  // With a handoff: logs in with this session's ISID through a portal another path reaches (of
  // the same portal group), which makes the target end the lost session and its tasks, and drops
  // that connection at once. True when a login did: the lost session's writes may then go by any
  // path (fenced_).
  bool Fence();
  // I/O fails from now on. With a handoff, sent writes stay until fence_until_ for a fence that
  // Recover tries every round: they may still run on the target, and failing them now would let
  // the caller's next write of their blocks go by another path ahead of them.
  void GiveUp();
  // Ends the recovery thread (Close); tasks it held are left for Close to fail.
  void StopRecovery();

  SessionOptions options_;
  const std::array<uint8_t, 6> isid_;
  NegotiatedParams first_params_;
  Portal portal_;

  // The current connection. Its I/O thread uses dm_ freely; other threads only under submit_mu_,
  // because the recovery thread replaces it (under submit_mu_, while no I/O thread runs).
  std::unique_ptr<Datamover> dm_;
  uint32_t max_transfer_bytes_ = 0;

  // Submissions from other threads, whether the session takes them (refusal_ says why not), and
  // the state shared with the recovery thread.
  mutable Mutex submit_mu_;
  Task* submit_head_ ISER_GUARDED_BY(submit_mu_) = nullptr;
  Task* submit_tail_ ISER_GUARDED_BY(submit_mu_) = nullptr;
  bool wake_pending_ ISER_GUARDED_BY(submit_mu_) = false;
  bool accepting_ ISER_GUARDED_BY(submit_mu_) = true;
  Status refusal_ ISER_GUARDED_BY(submit_mu_);
  CondVar recovery_cv_;
  bool recovery_requested_ ISER_GUARDED_BY(submit_mu_) = false;
  bool stopping_ ISER_GUARDED_BY(submit_mu_) = false;  // Close has begun
  Status loss_ ISER_GUARDED_BY(submit_mu_);            // why the connection was lost
  std::chrono::seconds loss_time2wait_ ISER_GUARDED_BY(submit_mu_){0};
  SessionStats stats_ ISER_GUARDED_BY(submit_mu_);
  std::vector<Portal> added_portals_ ISER_GUARDED_BY(submit_mu_);
  bool offer_requested_ ISER_GUARDED_BY(submit_mu_) = false;  // OfferWaiting
  Status recovery_failure_ ISER_GUARDED_BY(submit_mu_);       // RecoveryFailure()
  // Started at the first loss of the connection: a daemon with hundreds of sessions that never
  // lose one has no thread waiting for it.
  std::thread recovery_thread_ ISER_GUARDED_BY(submit_mu_);

  // I/O thread state (the recovery thread's while no I/O thread runs).
  NegotiatedParams params_;
  bool connected_ = false;
  CmdWindow window_;
  uint32_t exp_statsn_ = 0;
  Task* pending_head_ = nullptr;  // waiting for the window or an ITT slot, in order
  Task* pending_tail_ = nullptr;
  struct Delayed {
    Clock::time_point due;
    Task* task;
  };
  std::vector<Delayed> delayed_;  // retries waiting for their back-off
  static constexpr uint32_t kSlotBits = 10;
  static constexpr uint32_t kSlots = 1u << kSlotBits;  // slot 0: NOP-Out, Logout, TMF
  std::vector<Task*> slots_;
  std::vector<uint32_t> slot_generation_;
  std::vector<Clock::time_point> slot_sent_at_;
  // Whether the slot's command has left for the target (PostsCommandsLater): one still held by
  // the datamover is unknown to the target, so it is neither timed out, aborted nor reset.
  std::vector<uint8_t> slot_posted_;
  // A command's life across replays and reconnects: when it was first sent, and how often a lost
  // connection that completed nothing made it start over. Sending it again after an abort or a
  // SCSI retry, on a live connection, starts both afresh.
  std::vector<Clock::time_point> slot_first_sent_;
  std::vector<uint8_t> slot_replays_;
  struct ReplayLife {
    Task* task;
    Clock::time_point first_sent;
    uint8_t replays;
    // It was in its escalation (EscalationStarted) when the connection was lost.
    bool escalated = false;
  };
  // Those of the tasks waiting to be replayed, until SendTask takes them back into a slot.
  std::vector<ReplayLife> replay_lives_;
  std::vector<uint8_t> slot_abort_;  // 0, or the TMF function sent for the slot's task
  std::vector<uint32_t> free_slots_;
  struct TaskManagement {
    uint32_t itt;
    uint8_t function;
    uint64_t lun;
    uint32_t referenced_itt;
    Clock::time_point sent_at;
  };
  std::vector<TaskManagement> tmfs_;
  std::vector<uint64_t> resets_waiting_;  // LUN resets decided, waiting for a receive
  // R2Ts of tasks being aborted, left unanswered: a LUN reset that follows answers them.
  struct HeldR2T {
    uint32_t itt;
    uint32_t ttt;
    uint32_t offset;
    uint32_t length;
  };
  std::vector<HeldR2T> r2ts_unanswered_;
  std::vector<uint32_t> late_tmf_itts_;  // ForgetTaskManagement's, oldest first, bounded
  // ABORT TASKs that timed out, whose answers may still come until their LUN's reset is
  // answered (a target answers task management in order): commands leave their receives free.
  struct AnswerDue {
    uint32_t itt;
    uint64_t lun;
  };
  std::vector<AnswerDue> answers_due_;
  uint32_t control_itt_ = 0;
  Clock::time_point connected_at_;
  Clock::time_point last_receive_;
  bool nop_outstanding_ = false;
  Clock::time_point nop_sent_;
  std::atomic<bool> failed_{false};
  Status failure_;
  bool logout_sent_ = false;
  // Async Message event 1: the target wants a Logout by then, outstanding commands or not.
  bool logout_deadline_set_ = false;
  Clock::time_point logout_deadline_;
  // A command completed on the current connection: a later loss starts a new recovery episode.
  std::atomic<bool> progress_{false};
  std::atomic<uint64_t> capacity_changes_{0};
  std::atomic<uint64_t> luns_changes_{0};
  std::atomic<uint64_t> alua_changes_{0};
  std::atomic<uint64_t> retried_commands_{0};
  std::atomic<uint64_t> commands_{0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> bytes_written_{0};

  // Recovery thread state. The lost session has been ended at the target by Fence since the
  // last loss: every task is safe to hand over.
  bool fenced_ = false;
  // With a handoff: tasks that change the medium, were sent on the lost connection and failed
  // there (not safe to repeat, or past their command_timeout or replays), status set. They are
  // completed only once the lost session has ended (fence, reinstating login), as a write the
  // target may still run must not complete before it can no longer land: the caller's next
  // write of its blocks would go by another path at once.
  std::vector<Task*> unfenced_failures_;
  Clock::time_point fence_until_;
  // An episode is the losses, one after the other, of connections that
  // completed nothing (an idle connection that lived long ends one): they share a
  // replacement_timeout and a growing back-off.
  bool in_episode_ = false;
  Clock::time_point episode_start_;
  std::chrono::milliseconds backoff_{0};
  bool gave_up_ = false;
  // Numbered in the log within an episode: connections lost and login attempts.
  int losses_ = 0;
  int attempts_ = 0;
  Status first_loss_;
  // How every login attempt of the episode failed, while they all failed the same way.
  Status attempt_failure_;
  bool attempts_agree_ = true;

  // Close() waits on this for the Logout Response or a failure.
  Mutex close_mu_;
  CondVar close_cv_;
  bool logout_done_ ISER_GUARDED_BY(close_mu_) = false;
  // The connection ended after our Logout Request went out, with no Logout Response: some
  // targets (istgt) close at once on a Logout. The session is over at the target either way.
  bool closed_after_logout_ ISER_GUARDED_BY(close_mu_) = false;
  std::atomic<bool> logout_requested_{false};
  // Start succeeded: there is an I/O thread to log out with. Set in Open, read in Close.
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace iser
