// Session recovery at ErrorRecoveryLevel 0: the recovery thread's half of Session (session.h
// says what it does; docs/recovery.md why).
#include <algorithm>
#include <optional>

#include "initiator/base/log.h"
#include "initiator/session/connect_login.h"
#include "initiator/session/log_text.h"
#include "initiator/session/session.h"

namespace iser {

namespace {

// Between rounds over every portal the wait doubles from the first to the last: a target that
// is back is found within the cap, one that stays away costs a login attempt every two seconds.
constexpr std::chrono::milliseconds kFirstBackoff{250};
constexpr std::chrono::milliseconds kMaxBackoff{2000};
// A connection that completed a command, or lived this long with nothing outstanding at its
// loss, ends a recovery episode: the next loss waits Time2Wait again and gets a fresh
// replacement_timeout. A connection that lived long but never completed what it was given is
// one more loss in a row, however long it lived.
constexpr std::chrono::seconds kStableConnection{10};
// Times a command is sent again on a new connection after connections that completed nothing
// before it fails: the bound where command_timeout is 0.
constexpr uint8_t kMaxReplays = 4;
// A command in flight at this many connection losses ends, even where the connections completed
// other commands, and whatever retries or aborts came between (Task::losses_in_flight): a target
// that drops the connection whenever it gets that command (a CDB that crashes its handler) would
// otherwise have it replayed for ever.
constexpr uint8_t kMaxLossesInFlight = 8;

// A fence login goes to a portal another path is logged in through now (Session::Fence).
constexpr std::chrono::milliseconds kFenceLoginTimeout{2000};
// After a give-up, sent writes wait this long for a fence before they fail: a path of their
// portal group that logs in meanwhile (one lost in the same blip, say) ends the lost session
// and takes them, instead of their failing while the target may still run them.
constexpr std::chrono::seconds kFenceAfterGiveUp{10};

constexpr uint8_t kCompareAndWrite = 0x89;
constexpr uint8_t kPersistentReserveOut = 0x5f;

// Commands that change nothing on the medium: a copy the target still runs after the same
// command went by another path does no harm (task_handoff.h).
bool ChangesNothing(const Task& t) {
  switch (t.cdb[0]) {
    case 0x9e:  // SERVICE ACTION IN(16): READ CAPACITY(16) and GET LBA STATUS only
      return (t.cdb[1] & 0x1f) == 0x10 || (t.cdb[1] & 0x1f) == 0x12;
    case 0x00:  // TEST UNIT READY
    case 0x08:  // READ(6)
    case 0x12:  // INQUIRY
    case 0x1a:  // MODE SENSE(6)
    case 0x25:  // READ CAPACITY(10)
    case 0x28:  // READ(10)
    case 0x34:  // PRE-FETCH(10)
    case 0x35:  // SYNCHRONIZE CACHE(10): moves no data, only makes earlier writes durable
    case 0x5a:  // MODE SENSE(10)
    case 0x88:  // READ(16)
    case 0x90:  // PRE-FETCH(16)
    case 0x91:  // SYNCHRONIZE CACHE(16)
    case 0xa0:  // REPORT LUNS
    case 0xa3:  // MAINTENANCE IN: REPORT TARGET PORT GROUPS
    case 0xa8:  // READ(12)
      return true;
  }
  return false;
}

// The replay life of `t` among `lives` (Session::replay_lives_), or lives.end(): it was not sent
// on the lost connection.
template <typename Lives>
auto LifeOf(Lives& lives, const Task* t) {
  return std::find_if(lives.begin(), lives.end(), [t](const auto& l) { return l.task == t; });
}

const char* NotReplayable(const Task& t) {
  switch (t.cdb[0]) {
    case kCompareAndWrite:
      return "COMPARE AND WRITE";
    case kPersistentReserveOut:
      return "PERSISTENT RESERVE OUT";
  }
  return nullptr;
}

}  // namespace

void Session::AddAlternatePortals(const std::vector<Portal>& portals) {
  MutexLock lock(&submit_mu_);
  added_portals_.insert(added_portals_.end(), portals.begin(), portals.end());
}

void Session::StopRecovery() {
  std::thread recovery;
  {
    MutexLock lock(&submit_mu_);
    stopping_ = true;
    recovery_cv_.SignalAll();
    // Once stopping_ is set, OnConnectionError starts no thread.
    recovery = std::move(recovery_thread_);
  }
  if (recovery.joinable()) recovery.join();
}

void Session::RecoveryMain() {
  for (;;) {
    {
      MutexLock lock(&submit_mu_);
      while (!recovery_requested_ && !stopping_) recovery_cv_.Wait(&submit_mu_);
      if (stopping_) return;
      recovery_requested_ = false;
    }
    Recover();
  }
}

bool Session::Outstanding() const {
  if (pending_head_ || !delayed_.empty()) return true;
  if (free_slots_.size() != kSlots - 1) return true;
  MutexLock lock(&submit_mu_);
  return submit_head_ != nullptr;
}

uint64_t Session::CollectForReplay(const std::string& cause, bool progress) {
  std::vector<ReplayLife> sent;
  for (uint32_t s = 1; s < kSlots; ++s) {
    if (slots_[s]) {
      // One the datamover still held never reached the target: this loss is not its doing.
      if (slot_posted_[s]) ++slots_[s]->losses_in_flight;
      sent.push_back({slots_[s], slot_first_sent_[s], slot_replays_[s], EscalationStarted(s)});
    }
    slots_[s] = nullptr;
    slot_abort_[s] = 0;
  }
  free_slots_.clear();
  for (uint32_t s = kSlots - 1; s >= 1; --s) free_slots_.push_back(s);
  tmfs_.clear();
  answers_due_.clear();
  resets_waiting_.clear();
  r2ts_unanswered_.clear();
  std::sort(sent.begin(), sent.end(), [](const ReplayLife& a, const ReplayLife& b) {
    return SerialLess(a.task->cmdsn, b.task->cmdsn);
  });

  // A command's life spans its replays: on a connection that completed nothing, one past
  // command_timeout since it was first sent, or replayed too often, has had its escalation
  // (abort, LUN reset, reconnect) and fails with the loss that ended it, instead of starting
  // over on the next connection for ever. So does one in its escalation (its ABORT TASK, or a
  // LUN reset covering it, under way), whatever else completed: another LUN's traffic says
  // nothing of its LUN, and the loss was the escalation's reconnect, or cut it short. And so
  // does one in flight at kMaxLossesInFlight connection losses, whatever else completed.
  // The others go in the order they were first sent in: commands in flight, retries waiting for
  // their back-off, then what never left.
  std::vector<Task*> order;
  std::vector<Task*> refused;
  std::vector<ReplayLife> expired;
  const Clock::time_point now = dm_->Now();
  const std::chrono::milliseconds timeout = options_.command_timeout;
  for (ReplayLife life : sent) {
    if (NotReplayable(*life.task)) {
      refused.push_back(life.task);
    } else if (((!progress || life.escalated) &&
                ((timeout.count() > 0 && now - life.first_sent > timeout) ||
                 life.replays >= kMaxReplays)) ||
               life.task->losses_in_flight >= kMaxLossesInFlight) {
      expired.push_back(life);
    } else {
      if (!progress || life.escalated) ++life.replays;
      replay_lives_.push_back(life);
      order.push_back(life.task);
    }
  }
  const uint64_t replayed = order.size();
  for (const Delayed& d : delayed_) order.push_back(d.task);
  delayed_.clear();
  for (Task* t = pending_head_; t; t = t->next) order.push_back(t);
  pending_head_ = pending_tail_ = nullptr;
  for (Task* t : order) Enqueue(t);

  // A failed task the target may still run waits, with a handoff, for the lost session's end.
  auto fail = [this](Task* t) {
    if (options_.handoff && !ChangesNothing(*t)) {
      unfenced_failures_.push_back(t);
    } else {
      t->on_complete(t);
    }
  };
  for (Task* t : refused) {
    t->status = Status::IoError(std::string(NotReplayable(*t)) +
                                " was in flight when the session to " + Describe() + " was lost (" +
                                cause + "): it is not safe to repeat, so it was not sent again");
    fail(t);
  }
  for (const ReplayLife& life : expired) {
    Task* t = life.task;
    const std::string why = life.task->losses_in_flight >= kMaxLossesInFlight
                                ? "on " + std::to_string(life.task->losses_in_flight) +
                                      " connections, each lost while it was in flight"
                            : life.replays >= kMaxReplays
                                ? "after " + std::to_string(life.replays) +
                                      " replays on connections that completed nothing"
                                : "within command_timeout (" + SecondsText(timeout) + ")";
    t->status = Status::IoError("no answer to CDB opcode " + HexByte(t->cdb[0]) + " on LUN " +
                                std::to_string(t->lun) + " from " + Describe() + " " + why +
                                "; the last connection was lost: " + cause);
    fail(t);
  }
  return replayed;
}

void Session::OfferWaiting() {
  MutexLock lock(&submit_mu_);
  offer_requested_ = true;
  recovery_cv_.SignalAll();
}

bool Session::Fence() {
  std::optional<uint16_t> tpgt;
  {
    MutexLock lock(&submit_mu_);
    tpgt = stats_.current_tpgt;
  }
  for (const Portal& p : options_.handoff->ReachablePortals()) {
    SessionOptions o = options_;
    o.portal = p;
    // A portal another path uses answers at once; one that stalled since (not yet noticed) must
    // not hold the fence, or this path's own recovery, for a whole login timeout.
    o.login_timeout = std::min(o.login_timeout, kFenceLoginTimeout);
    std::unique_ptr<Datamover> dm;
    LoginOutcome outcome;
    Portal where;
    const Status st = ConnectAndLogin(o, SessionType::kNormal, isid_, &dm, &outcome, &where);
    // The login alone is the fence: the session it made has no task, and ends with its
    // connection here.
    dm.reset();
    if (!st.ok()) {
      Log(LogLevel::kInfo, "could not end the lost session to " + options_.target_name +
                               " through " + p.ToString() + ": " + st.message());
      continue;
    }
    if (outcome.params.target_portal_group_tag != tpgt) {
      Log(LogLevel::kInfo, "the login through " + where.ToString() + " to " + options_.target_name +
                               " reached another portal group: the lost session was not ended");
      continue;
    }
    Log(LogLevel::kInfo, "ended the lost session to " + options_.target_name + " by a login with " +
                             "its ISID through " + where.ToString() +
                             ": its writes go by the other paths");
    return true;
  }
  return false;
}

bool Session::HoldsSentWrites() const {
  return !unfenced_failures_.empty() ||
         std::any_of(replay_lives_.begin(), replay_lives_.end(),
                     [](const ReplayLife& life) { return !ChangesNothing(*life.task); });
}

void Session::EndUnfenced() {
  std::vector<Task*> ended;
  ended.swap(unfenced_failures_);
  for (Task* t : ended) t->on_complete(t);
}

uint64_t Session::FailConnectionBound(const std::string& cause) {
  // Only a path set's probes end with their connection, and only a path of a set has a handoff.
  if (!options_.handoff) return 0;
  uint64_t sent = 0;
  Task* submitted;
  {
    MutexLock lock(&submit_mu_);
    submitted = submit_head_;
    submit_head_ = submit_tail_ = nullptr;
  }
  Task* waiting = pending_head_;
  pending_head_ = pending_tail_ = nullptr;
  std::vector<Task*> ended;
  for (Task* t : {waiting, submitted}) {
    while (t) {
      Task* next = t->next;
      if (!t->ends_with_connection) {
        Enqueue(t);
      } else {
        const auto life = LifeOf(replay_lives_, t);
        if (life != replay_lives_.end()) {
          replay_lives_.erase(life);
          ++sent;
        }
        ended.push_back(t);
      }
      t = next;
    }
  }
  for (Task* t : ended) {
    t->status = Status::ConnectionFailed("the connection of the session to " + Describe() +
                                         " it went by was lost: " + cause);
    // Probes read; one that could change the medium still waits for the lost session's end.
    if (ChangesNothing(*t)) {
      t->on_complete(t);
    } else {
      unfenced_failures_.push_back(t);
    }
  }
  return sent;
}

void Session::FailPending(const Status& why) {
  Task* t = pending_head_;
  pending_head_ = pending_tail_ = nullptr;
  replay_lives_.clear();
  FailQueue(t, why);
}

uint64_t Session::OfferMovable() {
  Task* submitted;
  {
    MutexLock lock(&submit_mu_);
    offer_requested_ = false;
    // A lone session keeps its submit queue for the next connection, as it is.
    if (!options_.handoff) return 0;
    submitted = submit_head_;
    submit_head_ = submit_tail_ = nullptr;
  }
  while (submitted) {
    Task* next = submitted->next;
    Enqueue(submitted);
    submitted = next;
  }
  Task* t = pending_head_;
  pending_head_ = pending_tail_ = nullptr;
  uint64_t sent_moved = 0;
  while (t) {
    Task* next = t->next;
    const auto life = LifeOf(replay_lives_, t);
    const bool sent = life != replay_lives_.end();
    if (sent && !fenced_ && !ChangesNothing(*t)) {
      Enqueue(t);
      t = next;
      continue;
    }
    // Forgotten before the handoff: the task may complete on another path at once, and its
    // memory come back as another task.
    std::optional<ReplayLife> kept;
    if (sent) {
      kept = *life;
      replay_lives_.erase(life);
    }
    if (options_.handoff->TakeOver(t)) {
      sent_moved += sent;
    } else {
      if (kept) replay_lives_.push_back(*kept);
      Enqueue(t);
    }
    t = next;
  }
  return sent_moved;
}

Status Session::RecoveryFailure() const {
  MutexLock lock(&submit_mu_);
  return recovery_failure_;
}

void Session::GiveUp() {
  const bool first = !gave_up_;
  gave_up_ = true;
  const Clock::duration elapsed = Clock::now() - episode_start_;
  // Logins that all fail the same way say more than the loss that started it all (a target
  // that restarted without our CHAP account, or without the target).
  const bool logins_agree = attempts_agree_ && !attempt_failure_.ok();
  std::string text = "the session to " + Describe() + " was lost (" + first_loss_.message() + ") " +
                     SecondsText(elapsed) + " ago and is not back within " +
                     "replacement_timeout (" + SecondsText(options_.replacement_timeout) + ")";
  if (losses_ > 1) text += ", lost " + std::to_string(losses_) + " times in a row";
  if (logins_agree) {
    text += ", " + std::to_string(attempts_) +
            (attempts_ == 1 ? " login attempt failed: " : " login attempts all failed: ") +
            attempt_failure_.message();
  }
  text += "; recovery goes on in the background";
  const Status why = Status::IoError(text);
  Task* submitted;
  {
    MutexLock lock(&submit_mu_);
    accepting_ = false;
    refusal_ = why;
    recovery_failure_ = Status(logins_agree ? attempt_failure_.code() : first_loss_.code(), text);
    if (!recovery_requested_) stats_.state = SessionStats::State::kFailed;
    submitted = submit_head_;
    submit_head_ = submit_tail_ = nullptr;
  }
  // Once per episode: a target that keeps dropping new connections does not flood the log.
  Log(first ? LogLevel::kWarning : LogLevel::kDebug,
      "gave up waiting for the session to " + Describe() + " after " + SecondsText(elapsed) +
          ": I/O now fails; still trying");
  FailQueue(submitted, why);
  if (!options_.handoff || fenced_ || !HoldsSentWrites()) {
    FailPending(why);
    // No fence will come: as on a lone session (docs/multipath.md, "What remains unsafe").
    EndUnfenced();
    return;
  }
  // A fence may still come: another path of the group logs in (or is logged in) within
  // kFenceAfterGiveUp. Recover tries it every round until then; the sent writes wait.
  fence_until_ = Clock::now() + kFenceAfterGiveUp;
  Task* t = pending_head_;
  pending_head_ = pending_tail_ = nullptr;
  std::vector<ReplayLife> kept;
  while (t) {
    Task* next = t->next;
    const auto life = LifeOf(replay_lives_, t);
    if (life != replay_lives_.end() && !ChangesNothing(*t)) {
      kept.push_back(*life);
      Enqueue(t);
    } else {
      t->status = why;
      t->on_complete(t);
    }
    t = next;
  }
  replay_lives_ = std::move(kept);
}

Status Session::RefusalAfterGiveUp() const {
  MutexLock lock(&submit_mu_);
  return refusal_;
}

void Session::Recover() {
  Status cause;
  std::chrono::seconds time2wait;
  {
    MutexLock lock(&submit_mu_);
    cause = loss_;
    time2wait = loss_time2wait_.count() > 0 ? loss_time2wait_
                                            : std::chrono::seconds(params_.default_time2wait);
    loss_time2wait_ = std::chrono::seconds(0);
  }
  const Clock::time_point lost_at = Clock::now();
  // Joins the I/O thread, and over iSER deregisters the connection's memory: from here no
  // target can reach a task's buffer through an old STag, and the I/O state is this thread's.
  dm_->Shutdown();
  const bool progress = progress_.exchange(false);
  const bool idle_and_stable = lost_at - connected_at_ >= kStableConnection && !Outstanding();
  if (!in_episode_ || progress || idle_and_stable) {
    in_episode_ = true;
    episode_start_ = lost_at;
    backoff_ = std::chrono::milliseconds(0);
    gave_up_ = false;
    losses_ = 0;
    attempts_ = 0;
    first_loss_ = cause;
    attempt_failure_ = Status::OK();
    attempts_agree_ = true;
  } else {
    // The last login succeeded but its connection died without completing anything (a target
    // that accepts and drops at once): wait longer each time, whatever Time2Wait says.
    backoff_ = std::clamp<std::chrono::milliseconds>(backoff_ * 2, kFirstBackoff, kMaxBackoff);
  }
  ++losses_;
  {
    MutexLock lock(&submit_mu_);
    stats_.recovering_since = episode_start_;
  }
  // Every loss and every attempt at warning level: a one-shot command or a mount that stalls
  // must say why on stderr, not only after replacement_timeout.
  Log(LogLevel::kWarning, "session to " + Describe() + " lost: " + cause.message() +
                              "; recovering (loss " + std::to_string(losses_) + " in a row)");
  fenced_ = false;
  uint64_t replayed = CollectForReplay(cause.message(), progress);
  replayed -= std::min(replayed, FailConnectionBound(cause.message()));
  // Before any GiveUp: what another path takes does not fail here.
  replayed -= std::min(replayed, OfferMovable());
  if (gave_up_ || options_.replacement_timeout.count() == 0) {
    GiveUp();
    replayed = 0;
  }

  // Its portal, as named and where Open's login ended (after redirects).
  std::vector<Portal> candidates{options_.portal, portal_};
  // A path of several (a handoff) is its portal's: recovering through another portal would
  // leave it there, sharing that portal's fate with the path already on it, and leave its own
  // portal unused once back. Its writes need no other portal (the fence uses the other paths').
  // Unless it alone serves a LUN (task_handoff.h).
  if (!options_.handoff || options_.handoff->MayRecoverElsewhere()) {
    candidates.insert(candidates.end(), options_.alternate_portals.begin(),
                      options_.alternate_portals.end());
    MutexLock lock(&submit_mu_);
    candidates.insert(candidates.end(), added_portals_.begin(), added_portals_.end());
  }
  std::vector<Portal> portals;
  for (const Portal& p : candidates) {
    if (std::find(portals.begin(), portals.end(), p) == portals.end()) portals.push_back(p);
  }

  Clock::time_point next_attempt = lost_at + std::max<Clock::duration>(time2wait, backoff_);
  for (;;) {
    const Clock::time_point give_up_at = episode_start_ + options_.replacement_timeout;
    bool offer = false;
    {
      MutexLock lock(&submit_mu_);
      for (;;) {
        if (stopping_) return;
        if (offer_requested_) {
          offer = true;
          break;
        }
        const Clock::time_point now = Clock::now();
        if ((!gave_up_ && now >= give_up_at) || now >= next_attempt) break;
        const Clock::time_point until =
            gave_up_ ? next_attempt : std::min(next_attempt, give_up_at);
        recovery_cv_.WaitFor(&submit_mu_, until - now);
      }
    }
    if (offer) {
      replayed -= std::min(replayed, OfferMovable());
      continue;
    }
    // Writes the target may still run wait for a login with our ISID; through a portal another
    // path reaches, it need not wait for this path's own portal to come back.
    if (options_.handoff && !fenced_ && HoldsSentWrites()) {
      if (Fence()) {
        fenced_ = true;
        EndUnfenced();
        replayed -= std::min(replayed, OfferMovable());
        // After a give-up, what no path took fails as the rest did.
        if (gave_up_) FailPending(RefusalAfterGiveUp());
      } else if (gave_up_ && Clock::now() >= fence_until_) {
        // The fence the give-up kept them for did not come in time.
        FailPending(RefusalAfterGiveUp());
        EndUnfenced();
      }
    }
    if (!gave_up_ && Clock::now() >= give_up_at) {
      replayed -= std::min(replayed, OfferMovable());
      GiveUp();
      replayed = 0;
      continue;
    }
    for (const Portal& p : portals) {
      // A path that came back during the last attempt takes what may go by it before the next
      // (an attempt may last a login timeout at a portal that accepts and never answers).
      bool offer_now;
      {
        MutexLock lock(&submit_mu_);
        offer_now = offer_requested_;
      }
      if (offer_now) replayed -= std::min(replayed, OfferMovable());
      ++attempts_;
      const Status st = Reconnect(p, replayed, lost_at);
      if (st.ok()) {
        attempts_agree_ = false;
        return;
      }
      if (attempt_failure_.ok()) {
        attempt_failure_ = st;
      } else if (st.code() != attempt_failure_.code() ||
                 st.message() != attempt_failure_.message()) {
        attempts_agree_ = false;
      }
      // The back-off bounds this to one line per portal every two seconds.
      Log(LogLevel::kWarning, "recovering the session to " + options_.target_name + ": attempt " +
                                  std::to_string(attempts_) + " at " + p.ToString() +
                                  " failed: " + st.message() + "; trying again");
      MutexLock lock(&submit_mu_);
      if (stopping_) return;
    }
    backoff_ = std::clamp<std::chrono::milliseconds>(backoff_ * 2, kFirstBackoff, kMaxBackoff);
    next_attempt = Clock::now() + backoff_;
  }
}

Status Session::Reconnect(const Portal& portal, uint64_t replayed, Clock::time_point lost_at) {
  SessionOptions o = options_;
  o.portal = portal;
  std::unique_ptr<Datamover> dm;
  LoginOutcome outcome;
  Portal where;
  ISER_RETURN_IF_ERROR(ConnectAndLogin(o, SessionType::kNormal, isid_, &dm, &outcome, &where));
  if (options_.transport == TransportKind::kIser && !outcome.params.rdma_extensions) {
    return Status::LoginFailed("the target at " + where.ToString() +
                               " refused RDMAExtensions=Yes on a session that was iSER");
  }
  if (dm->MaxTransferBytes() < max_transfer_bytes_) {
    return Status::LoginFailed(
        "the connection to " + where.ToString() + " carries at most " +
        std::to_string(dm->MaxTransferBytes()) + " bytes per command, less than the " +
        std::to_string(max_transfer_bytes_) + " the session's users were promised");
  }
  if (options_.handoff && !fenced_ && HoldsSentWrites()) {
    std::optional<uint16_t> lost_tpgt;
    {
      MutexLock lock(&submit_mu_);
      lost_tpgt = stats_.current_tpgt;
    }
    // A login to another portal group makes a parallel session and leaves the lost one, and
    // the writes it may still run, alive: replaying them there could land them twice, late.
    if (outcome.params.target_portal_group_tag != lost_tpgt) {
      return Status::LoginFailed("the login at " + where.ToString() +
                                 " reached another portal group than the lost session's, which "
                                 "holds writes that only its own group can end");
    }
  }
  // The login with our ISID in the lost session's portal group reinstated it: the target has
  // ended its tasks, so those that failed may be reported.
  EndUnfenced();
  ISER_RETURN_IF_ERROR(dm->EnterFullFeature(ConnectionParamsOf(outcome.params)));

  params_ = outcome.params;
  window_.Reset(1, outcome.exp_cmdsn, outcome.max_cmdsn);
  exp_statsn_ = outcome.exp_statsn;
  nop_outstanding_ = false;
  logout_sent_ = false;
  logout_requested_ = false;
  logout_deadline_set_ = false;
  {
    MutexLock lock(&close_mu_);
    logout_done_ = false;
    closed_after_logout_ = false;
  }
  last_receive_ = dm->Now();
  connected_at_ = Clock::now();
  std::unique_ptr<Datamover> old;
  {
    MutexLock lock(&submit_mu_);
    old = std::move(dm_);
    dm_ = std::move(dm);
    stats_.portal = dm_->Describe();
    stats_.current_portal = where;
    stats_.current_tpgt = outcome.params.target_portal_group_tag;
    stats_.datamover = dm_->Mechanism();
  }
  old.reset();
  connected_ = true;
  failed_ = false;
  dm_->SetTimerPeriod(TimerPeriodFor(options_));
  if (Status st = dm_->Start(this); !st.ok()) {
    connected_ = false;
    failed_ = true;
    dm_->Shutdown();
    return st;
  }
  {
    MutexLock lock(&submit_mu_);
    if (!recovery_requested_) stats_.state = SessionStats::State::kLoggedIn;
    if (!stopping_) {
      accepting_ = true;
      refusal_ = Status::OK();
      recovery_failure_ = Status::OK();
    }
    wake_pending_ = true;
  }
  // The replayed tasks wait in pending_, and what was submitted meanwhile in the submit queue.
  // Outside the lock: a datamover may run OnWake inside Wake. dm_ stays valid: only this thread
  // replaces it, and Close joins this thread first.
  dm_->Wake();
  const Clock::duration took = Clock::now() - lost_at;
  std::string where_now;
  {
    MutexLock lock(&submit_mu_);
    ++stats_.recoveries;
    stats_.replayed_tasks += replayed;
    stats_.longest_recovery = std::max(stats_.longest_recovery,
                                       std::chrono::duration_cast<std::chrono::milliseconds>(took));
    where_now = stats_.portal;
  }
  Log(LogLevel::kWarning, "recovered the session to " + options_.target_name + " after " +
                              SecondsText(took) + " via " + where_now + " at attempt " +
                              std::to_string(attempts_) + ", " + std::to_string(replayed) +
                              (replayed == 1 ? " command" : " commands") + " replayed");
  if (options_.handoff) options_.handoff->ConnectionChanged();
  return Status::OK();
}

}  // namespace iser
