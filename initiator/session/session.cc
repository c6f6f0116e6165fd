#include "initiator/session/session.h"

#include <algorithm>
#include <cstring>
#include <system_error>

#include "initiator/base/log.h"
#include "initiator/base/notification.h"
#include "initiator/scsi/sense.h"
#include "initiator/session/connect_login.h"
#include "initiator/session/log_text.h"
#include "initiator/session/scsi_retry.h"

namespace iser {

namespace {

constexpr uint8_t kTaskAttrSimple = 1;

const char* RejectReasonName(uint8_t reason) {
  switch (reason) {
    case 0x02:
      return "data (payload) digest error";
    case 0x03:
      return "SNACK reject";
    case 0x04:
      return "protocol error";
    case 0x05:
      return "command not supported";
    case 0x06:
      return "immediate command reject (too many immediate commands)";
    case 0x07:
      return "task in progress";
    case 0x08:
      return "invalid data ACK";
    case 0x09:
      return "invalid PDU field";
    case 0x0a:
      return "long operation reject (out of resources)";
    case 0x0b:
      return "negotiation reset";
    case 0x0c:
      return "waiting for logout";
  }
  return "unknown reason";
}

// An underflow residual counts bytes of the Expected Data Transfer Length that did not move: one
// larger than that length is no count at all, and nothing may be computed from it.
Status CheckResidual(const Task& t) {
  if (!t.residual_underflow || t.residual <= t.transfer_length) return Status::OK();
  return Status::ProtocolError("the target reported an underflow residual of " +
                               std::to_string(t.residual) +
                               " bytes for a command whose Expected Data Transfer Length is " +
                               std::to_string(t.transfer_length));
}

}  // namespace

Session::Session(const SessionOptions& options)
    : options_(options),
      isid_(RandomIsid()),
      slots_(kSlots, nullptr),
      slot_generation_(kSlots, 0),
      slot_sent_at_(kSlots),
      slot_posted_(kSlots, 0),
      slot_first_sent_(kSlots),
      slot_replays_(kSlots, 0),
      slot_abort_(kSlots, 0) {
  free_slots_.reserve(kSlots);
  for (uint32_t s = kSlots - 1; s >= 1; --s) free_slots_.push_back(s);
}

const char* SessionStateName(SessionStats::State state) {
  switch (state) {
    case SessionStats::State::kLoggedIn:
      return "logged in";
    case SessionStats::State::kRecovering:
      return "recovering";
    case SessionStats::State::kFailed:
      return "failed";
    case SessionStats::State::kClosed:
      return "closed";
  }
  return "unknown";
}

Result<std::unique_ptr<Session>> Session::Open(const SessionOptions& options) {
  std::unique_ptr<Session> s(new Session(options));
  LoginOutcome outcome;
  ISER_RETURN_IF_ERROR(
      ConnectAndLogin(options, SessionType::kNormal, s->isid_, &s->dm_, &outcome, &s->portal_));
  if (options.transport == TransportKind::kIser && !outcome.params.rdma_extensions) {
    return Status::LoginFailed("the target at " + s->portal_.ToString() +
                               " refused RDMAExtensions=Yes: it serves this target over iSCSI/TCP "
                               "only (use an iscsi:// URL)");
  }
  ISER_RETURN_IF_ERROR(s->dm_->EnterFullFeature(ConnectionParamsOf(outcome.params)));
  s->first_params_ = s->params_ = outcome.params;
  // Login PDUs are immediate: the first command reuses the login's CmdSN.
  s->window_.Reset(1, outcome.exp_cmdsn, outcome.max_cmdsn);
  s->exp_statsn_ = outcome.exp_statsn;
  s->max_transfer_bytes_ = s->dm_->MaxTransferBytes();
  s->last_receive_ = s->dm_->Now();
  s->connected_at_ = Clock::now();
  s->connected_ = true;
  {
    MutexLock lock(&s->submit_mu_);
    s->stats_.portal = s->dm_->Describe();
    s->stats_.current_portal = s->portal_;
    s->stats_.current_tpgt = outcome.params.target_portal_group_tag;
    s->stats_.datamover = s->dm_->Mechanism();
  }
  s->dm_->SetTimerPeriod(TimerPeriodFor(options));
  ISER_RETURN_IF_ERROR(s->dm_->Start(s.get()));
  s->started_ = true;
  Log(LogLevel::kDebug, "logged in to " + s->Describe() + ", TSIH " + std::to_string(outcome.tsih));
  return s;
}

// A caller that wants Close's outcome calls it first; here it has been logged already.
Session::~Session() {
  Close().IgnoreError();
}

std::string Session::Describe() const {
  MutexLock lock(&submit_mu_);
  return DescribeLocked();
}

std::string Session::DescribeLocked() const {
  return options_.target_name + " at " +
         (stats_.portal.empty() ? options_.portal.ToString() : stats_.portal);
}

SessionStats Session::stats() const {
  MutexLock lock(&submit_mu_);
  SessionStats s = stats_;
  s.retried_commands = retried_commands_.load();
  s.commands = commands_.load();
  s.bytes_read = bytes_read_.load();
  s.bytes_written = bytes_written_.load();
  return s;
}

void Session::Submit(Task* task) {
  task->next = nullptr;
  task->status = Status::OK();
  task->retries = 0;
  task->aborts = 0;
  task->losses_in_flight = 0;
  bool on_io_thread = false;
  bool refused = false;
  if (options_.handoff && !task->ends_with_connection) {
    bool recovering;
    {
      MutexLock lock(&submit_mu_);
      recovering = accepting_ && stats_.state == SessionStats::State::kRecovering;
    }
    // Another path may take it now rather than after this one's recovery.
    if (recovering && options_.handoff->TakeOver(task)) return;
  }
  {
    MutexLock lock(&submit_mu_);
    if (!accepting_) {
      task->status = refusal_;
      refused = true;
    } else if (task->ends_with_connection && stats_.state != SessionStats::State::kLoggedIn) {
      task->status = Status::ConnectionFailed("the session to " + options_.target_name + " at " +
                                              options_.portal.ToString() + " has no connection");
      refused = true;
    } else if (dm_ && dm_->OnIoThread()) {
      // The I/O thread's datamover is not replaced while that thread runs.
      on_io_thread = true;
    } else {
      if (submit_tail_) {
        submit_tail_->next = task;
      } else {
        submit_head_ = task;
      }
      submit_tail_ = task;
      // While recovering nothing is woken: the recovery thread wakes the next connection. A
      // path that came back since the handoff refused this task is offered it again.
      if (!wake_pending_ && stats_.state == SessionStats::State::kLoggedIn) {
        wake_pending_ = true;
        dm_->Wake();
      } else if (options_.handoff && stats_.state == SessionStats::State::kRecovering) {
        offer_requested_ = true;
        recovery_cv_.SignalAll();
      }
    }
  }
  if (on_io_thread) {
    Enqueue(task);
    Dispatch();
  } else if (refused) {
    // Nothing would ever pick the task up: the session takes no tasks any more.
    task->on_complete(task);
  }
}

void Session::StopAccepting(const Status& why) {
  MutexLock lock(&submit_mu_);
  if (accepting_) {
    accepting_ = false;
    refusal_ = why;
  }
}

void Session::Execute(Task* task) {
  Notification done;
  task->context = &done;
  task->on_complete = [](Task* t) { static_cast<Notification*>(t->context)->Notify(); };
  Submit(task);
  done.Wait();
}

void Session::OnWake() {
  Task* list;
  {
    MutexLock lock(&submit_mu_);
    list = submit_head_;
    submit_head_ = submit_tail_ = nullptr;
    wake_pending_ = false;
  }
  while (list) {
    Task* next = list->next;
    Enqueue(list);
    list = next;
  }
  Dispatch();
}

void Session::PushFront(Task* task) {
  task->next = pending_head_;
  pending_head_ = task;
  if (!pending_tail_) pending_tail_ = task;
}

void Session::Enqueue(Task* task) {
  task->next = nullptr;
  if (pending_tail_) {
    pending_tail_->next = task;
  } else {
    pending_head_ = task;
  }
  pending_tail_ = task;
}

void Session::Dispatch() {
  // Nothing follows a Logout Request on its connection; what waits goes on the next one.
  if (!connected_ || logout_sent_) return;
  if (!delayed_.empty()) {
    // Due retries go first, in the order they were delayed.
    const Clock::time_point now = dm_->Now();
    for (size_t i = delayed_.size(); i-- > 0;) {
      if (delayed_[i].due <= now) {
        PushFront(delayed_[i].task);
        delayed_.erase(delayed_.begin() + static_cast<ptrdiff_t>(i));
      }
    }
  }
  // A command to a LUN that is being reset waits for the reset: the reset must not end it
  // (it came after), and it must not run before the tasks the reset ended are sent again.
  Task* held_after = nullptr;  // the last task left in the queue
  Task** link = &pending_head_;
  // As many commands as the target's window and the datamover's receives allow, counting the
  // task management requests that also wait for an answer and the late answers that may still
  // come, less one receive kept for task management: commands holding them all would keep the
  // abort or the LUN reset of a stalled command from ever leaving (RoomForTaskManagement).
  const uint32_t most = dm_->MaxOutstandingCommands();
  const uint32_t for_commands = most > 1 ? most - 1 : most;
  while (*link && !free_slots_.empty() && window_.Open() &&
         CommandsAwaitingResponse() + tmfs_.size() + answers_due_.size() < for_commands) {
    Task* t = *link;
    if ((!tmfs_.empty() || !resets_waiting_.empty()) && LunBeingReset(t->lun)) {
      held_after = t;
      link = &t->next;
      continue;
    }
    *link = t->next;
    if (pending_tail_ == t) pending_tail_ = held_after;
    SendTask(t);
  }
  if (logout_requested_ && !logout_sent_ && pending_head_ == nullptr && delayed_.empty() &&
      free_slots_.size() == kSlots - 1) {
    SendLogout();
  }
}

void Session::SendTask(Task* t) {
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  uint32_t itt;
  do {
    itt = ++slot_generation_[slot] << kSlotBits | slot;
  } while (itt == kReservedTag);
  slots_[slot] = t;
  slot_abort_[slot] = 0;
  slot_posted_[slot] = !dm_->PostsCommandsLater();
  // The first send's time matters only to command_timeout (CollectForReplay's expiry too).
  if (options_.command_timeout.count() > 0) {
    slot_sent_at_[slot] = slot_first_sent_[slot] = dm_->Now();
  }
  slot_replays_[slot] = 0;
  if (!replay_lives_.empty()) {
    // A replayed command keeps its age and its count of replays (CollectForReplay).
    const auto life = std::find_if(replay_lives_.begin(), replay_lives_.end(),
                                   [t](const ReplayLife& l) { return l.task == t; });
    if (life != replay_lives_.end()) {
      slot_first_sent_[slot] = life->first_sent;
      slot_replays_[slot] = life->replays;
      replay_lives_.erase(life);
    }
  }
  t->itt = itt;
  t->cmdsn = window_.Take();
  t->data_in_bytes = 0;
  t->next_data_sn = 0;
  t->next_r2t_sn = 0;
  t->immediate_bytes = 0;
  t->unsolicited_bytes = 0;
  t->scsi_status = 0;
  t->sense_length = 0;
  t->residual = 0;
  t->residual_overflow = t->residual_underflow = false;

  const NegotiatedParams& p = params_;
  uint8_t flags = kTaskAttrSimple;
  if (t->direction == DataDirection::kRead) flags |= kReadBit;
  if (t->direction == DataDirection::kWrite && t->transfer_length > 0) {
    flags |= kWriteBit;
    const uint32_t first_burst = std::min(p.first_burst_length, t->transfer_length);
    if (p.immediate_data) {
      const uint32_t segment = p.rdma_extensions ? p.target_recv_data_segment_length
                                                 : p.target_max_recv_data_segment_length;
      t->immediate_bytes = std::min(first_burst, segment);
    }
    if (!p.initial_r2t) t->unsolicited_bytes = first_burst - t->immediate_bytes;
  }
  if (t->unsolicited_bytes == 0) flags |= kFinalBit;
  Bhs& b = t->bhs;
  b.Clear();
  b.set_opcode(Opcode::kScsiCommand, false);
  b.set_flags(flags);
  b.set_data_segment_length(t->immediate_bytes);
  b.set_lun(EncodeLun(t->lun));
  b.set_itt(itt);
  b.set_u32(bhs::kExpectedDataTransferLength, t->transfer_length);
  b.set_u32(bhs::kCmdSN, t->cmdsn);
  b.set_u32(bhs::kExpStatSN, exp_statsn_);
  std::memcpy(&b.b[bhs::kCdb], t->cdb, std::min<size_t>(t->cdb_length, 16));
  dm_->SendCommand(t);
}

Task* Session::LookupTask(uint32_t itt) const {
  const uint32_t slot = itt & (kSlots - 1);
  if (slot == 0) return nullptr;
  Task* t = slots_[slot];
  return t && t->itt == itt ? t : nullptr;
}

void Session::Release(Task* t) {
  const uint32_t slot = t->itt & (kSlots - 1);
  slots_[slot] = nullptr;
  slot_abort_[slot] = 0;
  free_slots_.push_back(slot);
  if (!r2ts_unanswered_.empty()) {
    std::erase_if(r2ts_unanswered_, [t](const HeldR2T& r) { return r.itt == t->itt; });
  }
  // Before the caller completes the task or sends it again, so that no transport access to its
  // buffer survives it. A Retire that fails the connection reports it only once the handler
  // running now has returned (datamover.h).
  dm_->Retire(t);
}

void Session::Complete(Task* t) {
  Release(t);
  t->on_complete(t);
}

void Session::Finish(Task* t) {
  if (t->scsi_status != 0) {
    const RetryDecision d = DecideScsiRetry(*t);
    if (d.capacity_changed) capacity_changes_.fetch_add(1);
    if (d.luns_changed) luns_changes_.fetch_add(1);
    if (d.alua_changed) alua_changes_.fetch_add(1);
    if (d.retry) {
      Log(t->scsi_status == scsi_status::kCheckCondition ? LogLevel::kInfo : LogLevel::kDebug,
          Describe() + ": " + d.reason + (d.sense.valid ? " (" + d.sense.ToString() + ")" : "") +
              " for CDB opcode " + HexByte(t->cdb[0]) + " on LUN " + std::to_string(t->lun) +
              "; sending it again");
      Release(t);
      Retry(t, d.delay);
      return;
    }
  }
  // Only an answer that ends a command is progress: a unit attention retried after each login,
  // as a target gives after a reset, is not.
  progress_ = true;
  CountCompleted(*t);
  Complete(t);
}

void Session::CountCompleted(const Task& t) {
  commands_.fetch_add(1, std::memory_order_relaxed);
  if (t.scsi_status != scsi_status::kGood || t.direction == DataDirection::kNone) return;
  const uint64_t moved = TransferredBytes(t);
  (t.direction == DataDirection::kRead ? bytes_read_ : bytes_written_)
      .fetch_add(moved, std::memory_order_relaxed);
}

void Session::Retry(Task* t, std::chrono::milliseconds delay) {
  ++t->retries;
  retried_commands_.fetch_add(1);
  if (delay.count() == 0) {
    PushFront(t);
  } else {
    delayed_.push_back({dm_->Now() + delay, t});
  }
}

void Session::UpdateSequence(const Bhs& bhs, bool has_statsn) {
  window_.Update(bhs.u32(bhs::kExpCmdSN), bhs.u32(bhs::kMaxCmdSN));
  if (has_statsn) {
    const uint32_t next = bhs.u32(bhs::kStatSN) + 1;
    if (SerialGreater(next, exp_statsn_)) exp_statsn_ = next;
  }
}

void Session::ProtocolFailure(const std::string& what) {
  dm_->Abort(Status::ProtocolError(what));
}

Status Session::PlaceDataIn(const Bhs& bhs, uint8_t** destination) {
  Task* t = LookupTask(bhs.itt());
  if (t == nullptr) return Status::ProtocolError("Data-In for unknown ITT " + HexTag(bhs.itt()));
  if (t->direction != DataDirection::kRead) {
    return Status::ProtocolError("Data-In for a command that reads no data (ITT " +
                                 HexTag(bhs.itt()) + ")");
  }
  const uint32_t data_sn = bhs.u32(bhs::kDataSN);
  if (data_sn != t->next_data_sn) {
    return Status::ProtocolError("Data-In DataSN " + std::to_string(data_sn) + ", expected " +
                                 std::to_string(t->next_data_sn) + " (ITT " + HexTag(t->itt) + ")");
  }
  const uint64_t offset = bhs.u32(bhs::kBufferOffset);
  const uint64_t len = bhs.data_segment_length();
  if (offset + len > t->transfer_length) {
    return Status::ProtocolError("Data-In at offset " + std::to_string(offset) + " length " +
                                 std::to_string(len) + " beyond the expected transfer length " +
                                 std::to_string(t->transfer_length));
  }
  // DataPDUInOrder and DataSequenceInOrder are Yes (we offer Yes and both are ORed): each Data-In
  // continues where the last ended, so that the bytes counted are the bytes covered.
  if (len > 0 && offset != t->data_in_bytes) {
    return Status::ProtocolError("Data-In at buffer offset " + std::to_string(offset) +
                                 ", expected " + std::to_string(t->data_in_bytes) +
                                 " (the data must arrive in order; ITT " + HexTag(t->itt) + ")");
  }
  *destination = t->buffer + offset;
  return Status::OK();
}

void Session::OnPdu(const Bhs& bhs, std::span<const uint8_t> data) {
  last_receive_ = dm_->Now();
  switch (bhs.opcode()) {
    case Opcode::kScsiResponse:
      HandleScsiResponse(bhs, data);
      break;
    case Opcode::kDataIn:
      HandleDataIn(bhs, data);
      break;
    case Opcode::kR2T:
      HandleR2T(bhs);
      break;
    case Opcode::kNopIn:
      HandleNopIn(bhs, data);
      break;
    case Opcode::kAsyncMessage:
      HandleAsync(bhs, data);
      break;
    case Opcode::kReject:
      HandleReject(bhs, data);
      break;
    case Opcode::kLogoutResponse:
      HandleLogoutResponse(bhs);
      break;
    case Opcode::kTaskMgmtResponse:
      HandleTaskManagementResponse(bhs);
      break;
    default:
      ProtocolFailure(std::string("unexpected ") + OpcodeName(bhs.opcode()) +
                      " in full feature phase");
      return;
  }
  Dispatch();
}

void Session::HandleScsiResponse(const Bhs& bhs, std::span<const uint8_t> data) {
  Task* t = LookupTask(bhs.itt());
  if (t == nullptr) {
    ProtocolFailure("SCSI Response for unknown ITT " + HexTag(bhs.itt()));
    return;
  }
  UpdateSequence(bhs, true);
  const uint8_t response = bhs.b[2];
  if (response != 0) {
    t->status = Status::IoError("the target could not complete the command (iSCSI response " +
                                HexByte(response) + ")");
    Complete(t);
    return;
  }
  t->scsi_status = bhs.b[3];
  if (data.size() >= 2) {
    const size_t len = std::min<size_t>({LoadBe16(data.data()), data.size() - 2, kMaxSenseLength});
    std::memcpy(t->sense, data.data() + 2, len);
    t->sense_length = static_cast<uint8_t>(len);
  }
  t->residual_overflow = bhs.flags() & kResidualOverflow;
  t->residual_underflow = bhs.flags() & kResidualUnderflow;
  if (t->residual_overflow || t->residual_underflow) t->residual = bhs.u32(bhs::kResidualCount);
  if (Status bad = CheckResidual(*t); !bad.ok()) {
    t->status = bad;
    Complete(t);
    return;
  }
  // Only where Data-In PDUs carry the data can the session tell a short read from a lie.
  if (t->direction == DataDirection::kRead && t->scsi_status == 0 &&
      dm_->data_in_accounting() == DataInAccounting::kCountedFromPdus) {
    const uint32_t expected = TransferredBytes(*t);
    if (t->data_in_bytes < expected) {
      // A target that claims data it never sent cannot be trusted with the next command.
      const Status lie = Status::ProtocolError("the target reported success but sent " +
                                               std::to_string(t->data_in_bytes) + " of " +
                                               std::to_string(expected) + " bytes");
      t->status = lie;
      Complete(t);
      dm_->Abort(lie);
      return;
    }
  }
  Finish(t);
}

void Session::HandleDataIn(const Bhs& bhs, std::span<const uint8_t> data) {
  // The datamover checked a Data-In that carries data in PlaceDataIn; one with status only is
  // checked here the same way.
  if (data.empty()) {
    uint8_t* unused;
    Status st = PlaceDataIn(bhs, &unused);
    if (!st.ok()) {
      dm_->Abort(st);
      return;
    }
  }
  Task* t = LookupTask(bhs.itt());
  if (t == nullptr) {
    ProtocolFailure("Data-In for unknown ITT " + HexTag(bhs.itt()));
    return;
  }
  ++t->next_data_sn;
  t->data_in_bytes += static_cast<uint32_t>(data.size());
  const bool has_status = bhs.flags() & kStatusBit;
  UpdateSequence(bhs, has_status);
  if (!has_status) return;
  t->scsi_status = bhs.b[3];
  t->residual_overflow = bhs.flags() & kResidualOverflow;
  t->residual_underflow = bhs.flags() & kResidualUnderflow;
  if (t->residual_overflow || t->residual_underflow) t->residual = bhs.u32(bhs::kResidualCount);
  if (Status bad = CheckResidual(*t); !bad.ok()) {
    t->status = bad;
    Complete(t);
    return;
  }
  const uint32_t expected = TransferredBytes(*t);
  if (t->scsi_status == 0 && t->data_in_bytes < expected) {
    const Status lie = Status::ProtocolError("the target reported success but sent " +
                                             std::to_string(t->data_in_bytes) + " of " +
                                             std::to_string(expected) + " bytes");
    t->status = lie;
    Complete(t);
    dm_->Abort(lie);
    return;
  }
  Finish(t);
}

void Session::HandleR2T(const Bhs& bhs) {
  Task* t = LookupTask(bhs.itt());
  if (t == nullptr) {
    ProtocolFailure("R2T for unknown ITT " + HexTag(bhs.itt()));
    return;
  }
  if (t->direction != DataDirection::kWrite) {
    ProtocolFailure("R2T for a command that writes no data (ITT " + HexTag(t->itt) + ")");
    return;
  }
  const uint32_t r2t_sn = bhs.u32(bhs::kDataSN);
  if (r2t_sn != t->next_r2t_sn) {
    ProtocolFailure("R2TSN " + std::to_string(r2t_sn) + ", expected " +
                    std::to_string(t->next_r2t_sn));
    return;
  }
  const uint64_t offset = bhs.u32(bhs::kBufferOffset);
  const uint64_t len = bhs.u32(bhs::kDesiredLength);
  if (offset + len > t->transfer_length || len > params_.max_burst_length) {
    ProtocolFailure("R2T for offset " + std::to_string(offset) + " length " + std::to_string(len) +
                    " outside the command's " + std::to_string(t->transfer_length) +
                    " bytes or above MaxBurstLength");
    return;
  }
  ++t->next_r2t_sn;
  UpdateSequence(bhs, false);
  // An R2T that crossed the task's ABORT TASK is left unanswered: Data-Out sent now would follow
  // the abort, and once the abort is answered and the task sent again under a new ITT it would
  // reach the target as data for a command it no longer has (tgtd drops the connection for
  // it). Tasks covered by a LOGICAL UNIT RESET still get their Data-Out: RFC 7143 (4.2.3.3) has
  // the target wait for the answers to the R2Ts it issued before it completes the reset.
  if (BeingAborted(t)) {
    Log(LogLevel::kDebug, Describe() + ": R2T for ITT " + HexTag(t->itt) +
                              " while it is being aborted; not answered");
    // Answered after all if the abort gives way to a LUN reset (StartLunReset).
    r2ts_unanswered_.push_back(
        {t->itt, bhs.u32(bhs::kTtt), static_cast<uint32_t>(offset), static_cast<uint32_t>(len)});
    return;
  }
  dm_->SendDataOut(t, bhs.u32(bhs::kTtt), static_cast<uint32_t>(offset),
                   static_cast<uint32_t>(len));
}

void Session::HandleNopIn(const Bhs& bhs, std::span<const uint8_t>) {
  if (bhs.itt() != kReservedTag) {
    if (bhs.itt() != control_itt_ || !nop_outstanding_) {
      ProtocolFailure("NOP-In for unknown ITT " + HexTag(bhs.itt()));
      return;
    }
    UpdateSequence(bhs, true);
    nop_outstanding_ = false;
    return;
  }
  UpdateSequence(bhs, false);
  const uint32_t ttt = bhs.u32(bhs::kTtt);
  if (ttt == kReservedTag) return;  // unsolicited, needs no answer (tgt over iSER)
  // A ping that crossed our Logout Request: nothing more goes on this connection.
  if (logout_sent_) return;
  Bhs reply;
  reply.set_opcode(Opcode::kNopOut, true);
  reply.set_flags(kFinalBit);
  reply.set_lun(bhs.lun());
  reply.set_itt(kReservedTag);
  reply.set_u32(bhs::kTtt, ttt);
  reply.set_u32(bhs::kCmdSN, window_.next());
  reply.set_u32(bhs::kExpStatSN, exp_statsn_);
  dm_->SendControl(reply, {});
}

void Session::HandleAsync(const Bhs& bhs, std::span<const uint8_t> data) {
  UpdateSequence(bhs, true);
  const uint8_t event = bhs.b[36];
  const std::string who = Describe();
  switch (event) {
    case 0: {
      Sense sense;
      if (data.size() >= 2) {
        const size_t len = std::min<size_t>(LoadBe16(data.data()), data.size() - 2);
        sense = DecodeSense(data.subspan(2, len));
      }
      Log(LogLevel::kInfo, who + " reported a SCSI asynchronous event: " + sense.ToString());
      break;
    }
    case 1:
      Log(LogLevel::kWarning,
          who + " asks us to log out within " + std::to_string(bhs.u16(42)) + " s; logging out");
      logout_requested_ = true;
      // Parameter3: the Logout goes by then even if commands are still outstanding (they are
      // sent again on the next connection), or a target that never answers them would keep
      // the connection, and them, waiting for ever. A target that asks again moves no
      // deadline already set later: asking every few seconds must not keep it away.
      {
        const Clock::time_point by = dm_->Now() + std::chrono::seconds(bhs.u16(42));
        if (!logout_deadline_set_ || by < logout_deadline_) logout_deadline_ = by;
        logout_deadline_set_ = true;
      }
      break;
    case 2:
    case 3: {
      // Parameter2: how long the target wants us to wait before logging in again.
      const uint16_t time2wait = bhs.u16(40);
      Log(LogLevel::kWarning, who + " announced that it will drop the " +
                                  (event == 2 ? "connection" : "session") + " (Async event " +
                                  std::to_string(event) + ", Time2Wait " +
                                  std::to_string(time2wait) + " s)");
      MutexLock lock(&submit_mu_);
      loss_time2wait_ = std::chrono::seconds(time2wait);
      break;
    }
    case 4:
      Log(LogLevel::kInfo, who + " asked to renegotiate parameters; keeping the current ones");
      break;
    default:
      Log(LogLevel::kInfo, who + " sent vendor-specific async event " + std::to_string(event));
      break;
  }
}

void Session::HandleReject(const Bhs& bhs, std::span<const uint8_t> data) {
  UpdateSequence(bhs, true);
  const uint8_t reason = bhs.b[2];
  const std::string why = std::string("target rejected a PDU: ") + RejectReasonName(reason);
  if (data.size() < kBhsLength) {
    ProtocolFailure(why + " (without the rejected header)");
    return;
  }
  Bhs rejected;
  std::memcpy(rejected.data(), data.data(), kBhsLength);
  if (rejected.opcode() == Opcode::kScsiCommand && reason != 0x02) {
    if (Task* t = LookupTask(rejected.itt())) {
      t->status = Status::ProtocolError(why + " (SCSI Command, CDB opcode " +
                                        HexByte(rejected.b[bhs::kCdb]) + ")");
      Complete(t);
      return;
    }
  }
  // At error recovery level 0 a rejected Data-Out or NOP cannot be retried: the task would hang.
  ProtocolFailure(why + " (" + OpcodeName(rejected.opcode()) + ")");
}

void Session::HandleLogoutResponse(const Bhs& bhs) {
  UpdateSequence(bhs, true);
  if (bhs.b[2] != 0) {
    Log(LogLevel::kWarning,
        Describe() + " answered Logout with response " + std::to_string(bhs.b[2]));
  }
  MutexLock lock(&close_mu_);
  logout_done_ = true;
  close_cv_.SignalAll();
}

void Session::SendNopOut() {
  control_itt_ = ++slot_generation_[0] << kSlotBits;
  Bhs nop;
  nop.set_opcode(Opcode::kNopOut, true);
  nop.set_flags(kFinalBit);
  nop.set_itt(control_itt_);
  nop.set_u32(bhs::kTtt, kReservedTag);
  nop.set_u32(bhs::kCmdSN, window_.next());
  nop.set_u32(bhs::kExpStatSN, exp_statsn_);
  dm_->SendControl(nop, {});
  nop_outstanding_ = true;
  nop_sent_ = dm_->Now();
}

void Session::SendLogout() {
  logout_sent_ = true;
  Bhs logout;
  logout.set_opcode(Opcode::kLogoutRequest, true);
  logout.set_flags(kFinalBit | 0);  // reason 0: close the session
  logout.set_itt(++slot_generation_[0] << kSlotBits | 0);
  logout.set_u32(bhs::kCmdSN, window_.next());
  logout.set_u32(bhs::kExpStatSN, exp_statsn_);
  dm_->SendControl(logout, {});
  // A logout the target asked for waits for its answer from when it leaves, whoever sent it
  // (Dispatch, once the commands drained, may do so just before the target's deadline).
  if (logout_deadline_set_) logout_deadline_ = dm_->Now() + options_.logout_timeout;
}

void Session::OnControlPosted(const Bhs& bhs) {
  // A NOP-Out or a task management request waits for its answer from when it left, not from
  // when it was queued behind commands (iSER: commands waiting for a data slot or memory).
  if (bhs.opcode() == Opcode::kNopOut && nop_outstanding_ && bhs.itt() == control_itt_) {
    nop_sent_ = dm_->Now();
  } else if (bhs.opcode() == Opcode::kTaskMgmtRequest) {
    for (TaskManagement& m : tmfs_) {
      if (m.itt == bhs.itt()) m.sent_at = dm_->Now();
    }
  } else if (bhs.opcode() == Opcode::kLogoutRequest && logout_deadline_set_) {
    logout_deadline_ = dm_->Now() + options_.logout_timeout;
  }
}

void Session::OnCommandPosted(Task* task) {
  const uint32_t slot = task->itt & (kSlots - 1);
  if (slots_[slot] != task) return;
  slot_posted_[slot] = 1;
  // Its command_timeout counts from here: the wait for a data slot was ours, not the target's.
  if (options_.command_timeout.count() > 0) slot_sent_at_[slot] = dm_->Now();
}

void Session::OnTimer() {
  if (!connected_) return;
  if (logout_requested_ || !delayed_.empty()) Dispatch();
  const auto now = dm_->Now();
  if (logout_deadline_set_ && now >= logout_deadline_) {
    if (logout_sent_) {
      dm_->Abort(Status::Timeout("no Logout Response to the logout the target asked for"));
      return;
    }
    Log(LogLevel::kWarning, Describe() + ": logging out as the target asked, with " +
                                std::to_string(CommandsAwaitingResponse()) +
                                " commands unanswered; they will be sent again");
    SendLogout();
  }
  // No task management follows a Logout Request on its connection.
  if (options_.command_timeout.count() > 0 && !logout_sent_) {
    CheckCommandTimeouts(now);
    if (!connected_) return;
  }
  if (nop_outstanding_ && now - nop_sent_ > options_.nop_timeout) {
    dm_->Abort(Status::Timeout("no answer to NOP-Out within " +
                               std::to_string(options_.nop_timeout.count() / 1000.0).substr(0, 4) +
                               " s: the target stopped responding"));
    return;
  }
  // Nothing follows a Logout Request on its connection (RFC 7143 11.14).
  if (options_.nop_interval.count() > 0 && !nop_outstanding_ && !logout_sent_ &&
      now - last_receive_ > options_.nop_interval) {
    SendNopOut();
  }
}

void Session::FailAll(const Status& status) {
  for (uint32_t s = 1; s < kSlots; ++s) {
    if (Task* t = slots_[s]) {
      t->status = status;
      Complete(t);
    }
  }
  tmfs_.clear();
  answers_due_.clear();
  resets_waiting_.clear();
  r2ts_unanswered_.clear();
  replay_lives_.clear();
  Task* lists[3] = {nullptr, pending_head_, nullptr};
  // Delayed retries were sent before anything still pending.
  for (size_t i = delayed_.size(); i-- > 0;) {
    delayed_[i].task->next = lists[0];
    lists[0] = delayed_[i].task;
  }
  delayed_.clear();
  pending_head_ = pending_tail_ = nullptr;
  {
    MutexLock lock(&submit_mu_);
    lists[2] = submit_head_;
    submit_head_ = submit_tail_ = nullptr;
  }
  for (Task* t : lists) FailQueue(t, status);
}

void Session::FailQueue(Task* head, const Status& status) {
  while (head) {
    Task* next = head->next;
    head->status = status;
    head->on_complete(head);
    head = next;
  }
}

void Session::OnConnectionError(const Status& status) {
  connected_ = false;
  failure_ = status;
  failed_ = true;
  bool logged_out;
  {
    MutexLock lock(&close_mu_);
    logged_out = logout_done_;
    if (logout_sent_ && !logout_done_) closed_after_logout_ = true;
  }
  bool recover;
  Status no_thread;
  {
    MutexLock lock(&submit_mu_);
    recover = options_.recover && !stopping_;
    if (recover && !recovery_thread_.joinable()) {
      try {
        recovery_thread_ = std::thread([this] { RecoveryMain(); });
      } catch (const std::system_error& e) {
        recover = false;
        no_thread =
            Status::ResourceExhausted(std::string("cannot start the recovery thread: ") + e.what());
      }
    }
    if (recover) {
      recovery_requested_ = true;
      loss_ = logged_out ? Status::ConnectionFailed("the target asked us to log out") : status;
      stats_.state = SessionStats::State::kRecovering;
      stats_.last_loss = loss_.message();
      recovery_cv_.SignalAll();
    } else if (!stopping_) {
      stats_.state = SessionStats::State::kFailed;
      stats_.last_loss = status.message();
    }
  }
  // The recovery thread logs the loss, numbered (recovery.cc).
  if (recover) {
    if (options_.handoff) options_.handoff->ConnectionChanged();
    return;
  }
  if (!no_thread.ok()) {
    Log(LogLevel::kError,
        no_thread.message() + ": the session to " + Describe() + " is not recovered");
  }
  StopAccepting(status);
  // The target drops the connection after its Logout Response: that is how a logout ends, not a
  // failure worth reporting.
  if (logged_out) {
    Log(LogLevel::kDebug, "connection " + dm_->Describe() + " closed after logout");
  } else {
    Log(logout_sent_ ? LogLevel::kDebug : LogLevel::kError, status.message());
  }
  FailAll(status);
  if (options_.handoff) options_.handoff->ConnectionChanged();
  MutexLock lock(&close_mu_);
  close_cv_.SignalAll();
}

Status Session::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  StopRecovery();
  EndUnfenced();
  if (!dm_) return Status::OK();
  const Status closed = Status::Aborted("the session to " + Describe() + " was closed");
  StopAccepting(closed);
  bool logged_in;
  {
    MutexLock lock(&submit_mu_);
    logged_in = stats_.state == SessionStats::State::kLoggedIn;
  }
  // Without a started I/O thread (Open failed after login) nobody would send the Logout; a
  // session between connections has nobody to log out from.
  const Status result = started_ && logged_in && !failed_ ? AwaitLogout() : Status::OK();
  dm_->Shutdown();
  FailAll(closed);
  MutexLock lock(&submit_mu_);
  stats_.state = SessionStats::State::kClosed;
  return result;
}

Status Session::AwaitLogout() {
  logout_requested_ = true;
  dm_->Wake();
  const auto deadline = std::chrono::steady_clock::now() + options_.logout_timeout;
  MutexLock lock(&close_mu_);
  while (!logout_done_ && !failed_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Status::Timeout("no Logout Response from " + Describe() + " within " +
                             std::to_string(options_.logout_timeout.count()) + " ms");
    }
    close_cv_.WaitFor(&close_mu_, deadline - now);
  }
  if (closed_after_logout_) {
    Log(LogLevel::kDebug, "the connection to " + Describe() +
                              " ended after our Logout Request, with no Logout Response");
  }
  return logout_done_ || closed_after_logout_ ? Status::OK() : failure_;
}

}  // namespace iser
