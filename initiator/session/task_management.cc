// command_timeout's escalation, the I/O thread's half of Session: a command unanswered for
// command_timeout gets ABORT TASK; an abort unanswered gets LOGICAL UNIT RESET; a reset
// unanswered or refused drops the connection, and recovery fails the commands the reset covered
// that are past command_timeout (kIoError) and replays the rest. This is the order Linux's SCSI
// error handler uses over open-iscsi (docs/recovery.md).
#include <algorithm>

#include "initiator/base/log.h"
#include "initiator/session/log_text.h"
#include "initiator/session/session.h"

namespace iser {

namespace {

constexpr uint8_t kAbortTask = 1;
constexpr uint8_t kLogicalUnitReset = 5;
constexpr size_t kReferencedTaskTag = 20;
constexpr size_t kRefCmdSN = 32;
// Times a command is aborted and sent again before its timeout is its answer.
constexpr uint8_t kMaxAborts = 2;
// Answers to functions we stopped waiting for that are still welcome: far more than the aborts
// one timeout round can send.
constexpr size_t kLateAnswers = 2048;

const char* FunctionName(uint8_t function) {
  return function == kAbortTask ? "ABORT TASK" : "LOGICAL UNIT RESET";
}

// open-iscsi waits 15 s for an abort and 30 s for a LUN reset; a shorter command_timeout
// shortens them too, so that a user who asked for quick failure gets it.
std::chrono::milliseconds AnswerTimeout(uint8_t function, std::chrono::milliseconds command) {
  return function == kAbortTask ? std::min(command, std::chrono::milliseconds(15000))
                                : std::min(command * 2, std::chrono::milliseconds(30000));
}

}  // namespace

void Session::SendTaskManagement(uint8_t function, uint64_t lun, Task* referenced) {
  TaskManagement m{++slot_generation_[0] << kSlotBits, function, lun,
                   referenced ? referenced->itt : kReservedTag, dm_->Now()};
  Bhs b;
  b.set_opcode(Opcode::kTaskMgmtRequest, true);
  b.set_flags(kFinalBit | function);
  b.set_lun(EncodeLun(lun));
  b.set_itt(m.itt);
  b.set_u32(kReferencedTaskTag, m.referenced_itt);
  b.set_u32(bhs::kCmdSN, window_.next());
  b.set_u32(bhs::kExpStatSN, exp_statsn_);
  if (referenced) b.set_u32(kRefCmdSN, referenced->cmdsn);
  tmfs_.push_back(m);
  dm_->SendControl(b, {});
}

bool Session::BeingAborted(const Task* task) const {
  // A LUN reset overwrites the mark of a task whose ABORT TASK is still outstanding.
  return slot_abort_[task->itt & (kSlots - 1)] == kAbortTask || AbortOutstanding(task->itt);
}

bool Session::AbortOutstanding(uint32_t itt) const {
  return std::any_of(tmfs_.begin(), tmfs_.end(), [&](const TaskManagement& m) {
    return m.function == kAbortTask && m.referenced_itt == itt;
  });
}

bool Session::EscalationStarted(uint32_t slot) const {
  return slot_abort_[slot] != 0;
}

bool Session::LunBeingReset(uint64_t lun) const {
  return std::any_of(tmfs_.begin(), tmfs_.end(),
                     [&](const TaskManagement& m) {
                       return m.function == kLogicalUnitReset && m.lun == lun;
                     }) ||
         std::find(resets_waiting_.begin(), resets_waiting_.end(), lun) != resets_waiting_.end();
}

// The answer to a task management request needs a receive like a command's: over iWARP a SEND
// that finds none posted ends the connection.
bool Session::RoomForTaskManagement() const {
  return CommandsAwaitingResponse() + tmfs_.size() < dm_->MaxOutstandingCommands();
}

void Session::StartLunReset(uint64_t lun) {
  // After the Logout Request no new request goes on the closing connection (a refused ABORT
  // TASK answered late gets here then). Commands still outstanding, where the target asked for
  // the logout and its deadline passed, are replayed on the next connection.
  if (logout_sent_) return;
  const bool sent = std::any_of(tmfs_.begin(), tmfs_.end(), [&](const TaskManagement& m) {
    return m.function == kLogicalUnitReset && m.lun == lun;
  });
  if (!sent) {
    // Waiting for room already: CheckCommandTimeouts sends it at a later tick.
    if (LunBeingReset(lun)) return;
    if (!RoomForTaskManagement()) {
      // The LUN's new commands wait meanwhile.
      resets_waiting_.push_back(lun);
      return;
    }
    SendTaskManagement(kLogicalUnitReset, lun, nullptr);
    for (uint32_t s = 1; s < kSlots; ++s) {
      // A command still held by the datamover reaches the target after the reset, as a new one.
      if (slots_[s] && slots_[s]->lun == lun && slot_posted_[s]) slot_abort_[s] = kLogicalUnitReset;
    }
  }
  // The target completes the reset once the R2Ts it issued are answered (RFC 7143 4.2.3.3),
  // those left unanswered while their tasks were being aborted included, once we stopped
  // waiting for the abort: when the reset goes, and when an ABORT TASK still outstanding then
  // times out or is refused (both call here). One whose ABORT TASK is still outstanding stays
  // unanswered: the target may have aborted the task already, and Data-Out for a task it no
  // longer has ends the connection.
  std::erase_if(r2ts_unanswered_, [&](const HeldR2T& r) {
    Task* t = LookupTask(r.itt);
    if (t == nullptr) return true;
    if (t->lun != lun || AbortOutstanding(r.itt)) return false;
    dm_->SendDataOut(t, r.ttt, r.offset, r.length);
    return true;
  });
}

void Session::ForgetTaskManagement(uint32_t itt) {
  if (late_tmf_itts_.size() == kLateAnswers) late_tmf_itts_.erase(late_tmf_itts_.begin());
  late_tmf_itts_.push_back(itt);
}

void Session::CheckCommandTimeouts(Clock::time_point now) {
  const std::chrono::milliseconds timeout = options_.command_timeout;
  std::vector<uint64_t> reset_luns;
  for (size_t i = 0; i < tmfs_.size();) {
    const TaskManagement m = tmfs_[i];
    const std::chrono::milliseconds limit = AnswerTimeout(m.function, timeout);
    if (now - m.sent_at <= limit) {
      ++i;
      continue;
    }
    if (m.function == kLogicalUnitReset) {
      dm_->Abort(Status::Timeout("no answer to LOGICAL UNIT RESET of LUN " + std::to_string(m.lun) +
                                 " within " + SecondsText(limit) +
                                 ": dropping the connection to recover"));
      return;
    }
    Log(LogLevel::kWarning, Describe() + ": no answer to ABORT TASK within " + SecondsText(limit) +
                                "; resetting LUN " + std::to_string(m.lun));
    tmfs_.erase(tmfs_.begin() + static_cast<ptrdiff_t>(i));
    ForgetTaskManagement(m.itt);
    answers_due_.push_back({m.itt, m.lun});
    if (std::find(reset_luns.begin(), reset_luns.end(), m.lun) == reset_luns.end()) {
      reset_luns.push_back(m.lun);
    }
  }
  std::vector<uint64_t> waiting;
  waiting.swap(resets_waiting_);
  for (uint64_t lun : waiting) StartLunReset(lun);
  for (uint64_t lun : reset_luns) StartLunReset(lun);
  for (uint32_t s = 1; s < kSlots; ++s) {
    Task* t = slots_[s];
    if (t == nullptr || slot_abort_[s] != 0 || !slot_posted_[s] ||
        now - slot_sent_at_[s] <= timeout) {
      continue;
    }
    // Not while its LUN's reset is under way or waiting for room: one sent covers the commands
    // that had left when it went, and the others (held by the datamover then) are aborted once
    // it is answered. An ABORT TASK sent meanwhile would be forgotten by the reset's answer
    // without ending a command it does not cover, which would then wait for ever.
    if (LunBeingReset(t->lun)) continue;
    // The other aborts wait for room like commands do; the next tick tries again.
    if (!RoomForTaskManagement()) break;
    Log(LogLevel::kWarning, Describe() + ": no answer to CDB opcode " + HexByte(t->cdb[0]) +
                                " (CmdSN " + std::to_string(t->cmdsn) + ") on LUN " +
                                std::to_string(t->lun) + " within " + SecondsText(timeout) +
                                "; aborting it");
    slot_abort_[s] = kAbortTask;
    SendTaskManagement(kAbortTask, t->lun, t);
  }
}

void Session::RetryAborted(Task* t, const std::string& how) {
  Release(t);
  if (t->aborts >= kMaxAborts) {
    t->status = Status::Timeout("no answer within command_timeout (" +
                                SecondsText(options_.command_timeout) + ") from " + Describe() +
                                ", " + std::to_string(t->aborts + 1) + " times; last " + how);
    t->on_complete(t);
    return;
  }
  ++t->aborts;
  retried_commands_.fetch_add(1);
  PushFront(t);
}

void Session::HandleTaskManagementResponse(const Bhs& bhs) {
  const auto it = std::find_if(tmfs_.begin(), tmfs_.end(),
                               [&](const TaskManagement& m) { return m.itt == bhs.itt(); });
  if (it == tmfs_.end()) {
    const auto late = std::find(late_tmf_itts_.begin(), late_tmf_itts_.end(), bhs.itt());
    if (late == late_tmf_itts_.end()) {
      ProtocolFailure("Task Management Function Response for unknown ITT " + HexTag(bhs.itt()));
      return;
    }
    // A slow target's answer to a function we stopped waiting for (it timed out, or a LUN reset
    // covered it): what it ended has been dealt with since.
    late_tmf_itts_.erase(late);
    std::erase_if(answers_due_, [&](const AnswerDue& d) { return d.itt == bhs.itt(); });
    UpdateSequence(bhs, true);
    Log(LogLevel::kDebug, Describe() + ": late Task Management answer (ITT " + HexTag(bhs.itt()) +
                              ", response " + std::to_string(bhs.b[2]) + ") ignored");
    return;
  }
  UpdateSequence(bhs, true);
  const TaskManagement m = *it;
  tmfs_.erase(it);
  // 0: function complete; 1: the task does not exist (it completed, or the target lost it).
  const uint8_t response = bhs.b[2];
  if (m.function == kAbortTask) {
    Task* t = LookupTask(m.referenced_itt);
    if (response == 0 || response == 1) {
      if (t) RetryAborted(t, "aborted by ABORT TASK");
      return;
    }
    Log(LogLevel::kWarning, Describe() + " answered ABORT TASK with response " +
                                std::to_string(response) + "; resetting LUN " +
                                std::to_string(m.lun));
    StartLunReset(m.lun);
    return;
  }
  if (response != 0) {
    dm_->Abort(Status::IoError(std::string(FunctionName(m.function)) + " of LUN " +
                               std::to_string(m.lun) + " answered with response " +
                               std::to_string(response) + ": dropping the connection to recover"));
    return;
  }
  // The reset ended the tasks the LUN had when it was sent (commands to the LUN have waited
  // since): their answers will never come, and those of their aborts are late if they do.
  std::erase_if(answers_due_, [&](const AnswerDue& d) { return d.lun == m.lun; });
  std::erase_if(tmfs_, [&](const TaskManagement& x) {
    if (x.lun != m.lun) return false;
    ForgetTaskManagement(x.itt);
    return true;
  });
  std::vector<Task*> covered;
  for (uint32_t s = 1; s < kSlots; ++s) {
    if (slots_[s] && slots_[s]->lun == m.lun && slot_abort_[s] == kLogicalUnitReset) {
      covered.push_back(slots_[s]);
    }
  }
  std::sort(covered.begin(), covered.end(),
            [](const Task* a, const Task* b) { return SerialLess(a->cmdsn, b->cmdsn); });
  // Each goes to the front of the queue: the last first, so that they keep their order.
  for (auto t = covered.rbegin(); t != covered.rend(); ++t) {
    RetryAborted(*t, "ended by a LUN reset");
  }
}

}  // namespace iser
