#include "initiator/paths/path_set.h"

#include <algorithm>
#include <optional>

#include "initiator/base/log.h"
#include "initiator/base/notification.h"
#include "initiator/scsi/alua.h"
#include "initiator/scsi/commands.h"
#include "initiator/scsi/run.h"
#include "initiator/scsi/sense.h"

namespace iser {

namespace {

using scsi::AluaState;

// Lower is better; kNever is never chosen.
constexpr int kNever = 3;
int Rank(AluaState s) {
  switch (s) {
    case AluaState::kActiveOptimized:
    case AluaState::kLogicalBlockDependent:
      return 0;
    case AluaState::kActiveNonOptimized:
      return 1;
    case AluaState::kTransitioning:
      return 2;
    default:
      return kNever;
  }
}

int64_t Ticks() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

// The set's own commands about one path (its LUN's identity and port group state through it):
// they go by that path's session only and fail when its connection is lost, rather than wait for
// its recovery, which would hold the checker, AddLun and every path's refresh behind it.
class ThroughPath : public Executor {
 public:
  explicit ThroughPath(Session& session) : session_(session) {}
  void Execute(Task* task) override {
    task->ends_with_connection = true;
    session_.Execute(task);
  }
  uint32_t max_transfer_bytes() const override { return session_.max_transfer_bytes(); }

 private:
  Session& session_;
};

// A path with commands outstanding that has completed nothing for this long gets no new command
// while another path is not in that state: a stalled path stops taking I/O long before its
// NOP-Out times out and it is declared lost.
constexpr std::chrono::milliseconds kStuckAfter{500};

// Moves of one command between paths; past them it stays where it is (Task::path_moves).
constexpr uint8_t kMaxMoves = 8;

// The periodic refresh that catches a change no unit attention reported (a path's state after
// it rejoins, a target that reports transitions only on the port that changed).
constexpr std::chrono::seconds kRefreshInterval{10};

// A path that could not log in at Open tries again after 1 s, then twice as long each time up to
// 10 s: a portal back within seconds serves at once, one down for long costs a login every 10 s.
constexpr std::chrono::milliseconds kFirstRejoin{1000};
constexpr std::chrono::milliseconds kMaxRejoin{10000};

}  // namespace

const char* PathSelectorName(PathSelector selector) {
  return selector == PathSelector::kRoundRobin ? "round-robin" : "queue-length";
}

Result<std::shared_ptr<PathSet>> PathSet::Open(std::vector<SessionOptions> paths,
                                               PathSelector selector) {
  if (paths.empty() || paths.size() > kMaxPaths) {
    return Status::InvalidArgument("a device has 1 to " + std::to_string(kMaxPaths) +
                                   " paths, not " + std::to_string(paths.size()));
  }
  std::shared_ptr<PathSet> set(new PathSet());
  set->owns_sessions_ = true;
  set->multipath_ = paths.size() > 1;
  set->selector_ = selector;
  set->primary_target_ = paths.front().target_name;
  Status first_failure;
  for (size_t i = 0; i < paths.size(); ++i) {
    const uint32_t slot = set->count();
    auto path = std::make_unique<Path>();
    path->set = set.get();
    path->index = slot;
    path->home = paths[i].portal;
    if (paths.size() > 1) paths[i].handoff = path.get();
    Result<std::unique_ptr<Session>> s = Session::Open(paths[i]);
    if (!s.ok()) {
      if (first_failure.ok()) first_failure = s.status();
      Log(LogLevel::kWarning, "path " + std::to_string(i + 1) + " to " + paths[i].target_name +
                                  " at " + paths[i].portal.ToString() + " left out for now: " +
                                  s.status().message() + "; it joins when it can log in");
      paths[i].handoff = nullptr;
      MutexLock lock(&set->left_out_mu_);
      set->left_out_.push_back(paths[i]);
      continue;
    }
    path->session = std::shared_ptr<Session>(std::move(*s));
    set->paths_[slot] = std::move(path);
    set->path_count_.store(slot + 1, std::memory_order_release);
  }
  if (set->count() == 0) return first_failure;
  if (paths.size() > 1) {
    set->checker_ = std::thread([s = set.get()] { s->CheckerMain(); });
    if (set->count() < paths.size()) {
      set->joiner_ = std::thread([s = set.get()] { s->JoinerMain(); });
    }
    std::string where;
    for (uint32_t i = 0; i < set->count(); ++i) {
      where += (where.empty() ? "" : ", ") + set->paths_[i]->home.ToString();
    }
    Log(LogLevel::kInfo, "multipath to " + set->primary_target_ + ": " +
                             std::to_string(set->count()) + " of " + std::to_string(paths.size()) +
                             " paths (" + where + "), " + PathSelectorName(selector));
  }
  return set;
}

std::shared_ptr<PathSet> PathSet::Of(std::shared_ptr<Session> session) {
  std::shared_ptr<PathSet> set(new PathSet());
  set->primary_target_ = session->target_name();
  auto path = std::make_unique<Path>();
  path->set = set.get();
  path->home = session->portal();
  path->session = std::move(session);
  set->paths_[0] = std::move(path);
  set->path_count_.store(1, std::memory_order_release);
  return set;
}

PathSet::~PathSet() {
  Close().IgnoreError();
}

iser::Status PathSet::Close() {
  // Close may run on a control thread and again in the destructor.
  MutexLock close_lock(&close_mu_);
  if (closed_) return close_result_;
  closed_ = true;
  closing_ = true;
  {
    MutexLock lock(&checker_mu_);
    stopping_ = true;
    checker_cv_.SignalAll();
  }
  iser::Status result;
  // The sessions first: a checker command (REPORT TARGET PORT GROUPS) that a recovering path
  // holds ends with its session instead of holding Close until replacement_timeout. Then again
  // after the threads end, for a path that joined meanwhile (Close of a session is idempotent).
  auto close_sessions = [this, &result] {
    // A lone session opened elsewhere (Of) is its owner's to close.
    if (!owns_sessions_) return;
    for (uint32_t i = 0; i < count(); ++i) {
      iser::Status st = paths_[i]->session->Close();
      if (result.ok() && !st.ok()) result = st;
    }
  };
  close_sessions();
  if (checker_.joinable()) checker_.join();
  if (joiner_.joinable()) joiner_.join();
  close_sessions();
  close_result_ = result;
  return result;
}

uint32_t PathSet::max_transfer_bytes() const {
  uint32_t least = paths_[0]->session->max_transfer_bytes();
  for (uint32_t i = 1; i < count(); ++i) {
    least = std::min(least, paths_[i]->session->max_transfer_bytes());
  }
  return least;
}

uint64_t PathSet::capacity_changes() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < count(); ++i) n += paths_[i]->session->capacity_changes();
  return n;
}

uint64_t PathSet::luns_changes() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < count(); ++i) n += paths_[i]->session->luns_changes();
  return n;
}

bool PathSet::healthy() const {
  for (uint32_t i = 0; i < count(); ++i) {
    if (paths_[i]->session->healthy()) return true;
  }
  return false;
}

const PathSet::Lun* PathSet::FindLun(uint64_t lun) const {
  const size_t n = lun_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (luns_[i]->lun == lun) return luns_[i].get();
  }
  return nullptr;
}

uint32_t PathSet::Choose(uint64_t lun, uint32_t avoid) {
  const Lun* l = FindLun(lun);
  const uint32_t n = count();
  // Round robin starts each choice one further; queue length breaks ties the same way, so
  // equal paths share the work.
  const uint32_t start = next_turn_.fetch_add(1, std::memory_order_relaxed);
  const int64_t stuck_before = Ticks() - std::chrono::steady_clock::duration(kStuckAfter).count();
  if (!l) {
    // A LUN the set does not know yet: the first usable path, so that every answer (a probe's
    // INQUIRY and READ CAPACITY, REPORT LUNS) comes from one place, not from different LUs
    // that share the number through different ports.
    for (uint32_t i = 0; i < n; ++i) {
      if (i != avoid && paths_[i]->session->healthy()) return i;
    }
    return kNoPath;
  }
  uint32_t best = kNoPath;
  bool best_stuck = true;
  int best_rank = kNever;
  int64_t best_queue = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = (start + k) % n;
    if (i == avoid || !paths_[i]->session->healthy()) continue;
    if (!l->serves[i].load(std::memory_order_acquire)) continue;
    const int rank = Rank(static_cast<AluaState>(l->state[i].load(std::memory_order_relaxed)));
    if (rank == kNever) continue;
    const Path& p = *paths_[i];
    const int64_t queue = p.outstanding.load(std::memory_order_relaxed);
    const bool stuck =
        queue > 0 && p.last_completion.load(std::memory_order_relaxed) < stuck_before;
    // A path that moves beats one that does not; then the ALUA class; then the queue.
    const bool better =
        best == kNoPath || (best_stuck && !stuck) ||
        (best_stuck == stuck &&
         (rank < best_rank ||
          (rank == best_rank && selector_ == PathSelector::kQueueLength && queue < best_queue)));
    if (better) {
      best = i;
      best_stuck = stuck;
      best_rank = rank;
      best_queue = queue;
    }
  }
  return best;
}

uint32_t PathSet::Fallback(uint64_t lun) const {
  const Lun* l = FindLun(lun);
  // Where the task has the best chance: a path that is recovering (the one whose recovery began
  // last, so gives up last: it holds the task until it is back or replacement_timeout passes,
  // and hands it over as soon as another path can take it; a path lost again and again since
  // counts from its first loss), else one that is logged in (a standby port group answers for
  // itself), else one that gave up (the task fails there, saying why).
  uint32_t best = 0;
  int best_class = 3;
  int64_t latest = -1;
  for (uint32_t i = 0; i < count(); ++i) {
    if (l && !l->serves[i].load(std::memory_order_acquire)) continue;
    Session& s = *paths_[i]->session;
    const SessionStats stats = s.stats();
    const int cls = s.healthy() ? 1 : stats.state == SessionStats::State::kRecovering ? 0 : 2;
    const int64_t at = cls == 0 ? stats.recovering_since.time_since_epoch().count()
                                : paths_[i]->lost_at.load(std::memory_order_relaxed);
    if (cls < best_class || (cls == best_class && at > latest)) {
      best = i;
      best_class = cls;
      latest = at;
    }
  }
  return best;
}

void PathSet::Submit(Task* task) {
  // A lone session takes its tasks as they are; a set of several paths keeps its hook on each
  // task even while one path is logged in, so that a path joining later can take it over.
  if (!multipath_) {
    paths_[0]->session->Submit(task);
    return;
  }
  CheckAluaChanges();
  task->path_set = this;
  task->path_moves = 0;
  task->path_on_complete = task->on_complete;
  task->on_complete = &PathSet::Completed;
  uint32_t path = Choose(task->lun, kNoPath);
  if (path == kNoPath) path = Fallback(task->lun);
  SendOn(path, task);
}

void PathSet::NoteState(Lun& lun, uint32_t path, AluaState state, const char* how) {
  const uint8_t before = lun.state[path].exchange(static_cast<uint8_t>(state));
  if (before == static_cast<uint8_t>(state)) return;
  path_changes_.fetch_add(1, std::memory_order_relaxed);
  // A port group that can serve now (a controller failover): what lost paths hold may go by it.
  if (Rank(state) < kNever && Rank(static_cast<AluaState>(before)) == kNever) {
    OfferToRecovering(nullptr);
  }
  Log(LogLevel::kWarning,
      "path " + std::to_string(path + 1) + " to " + primary_target_ + ", LUN " +
          std::to_string(lun.lun) + ": port group " + std::to_string(lun.port_group[path]) +
          " is " + scsi::AluaStateName(state) + " (was " +
          scsi::AluaStateName(static_cast<AluaState>(before)) + ", " + how + ")");
}

void PathSet::CheckAluaChanges() {
  uint64_t alua = 0;
  for (uint32_t i = 0; i < count(); ++i) alua += paths_[i]->session->alua_changes();
  if (alua_changes_seen_.exchange(alua, std::memory_order_relaxed) != alua) RequestRefresh();
}

void PathSet::SendOn(uint32_t path, Task* task) {
  task->path = path;
  // An idle path starts its stuck clock at its first command, not at its last completion.
  if (paths_[path]->outstanding.fetch_add(1, std::memory_order_relaxed) == 0) {
    paths_[path]->last_completion.store(Ticks(), std::memory_order_relaxed);
  }
  paths_[path]->session->Submit(task);
}

void PathSet::Execute(Task* task) {
  Notification done;
  task->context = &done;
  task->on_complete = [](Task* t) { static_cast<Notification*>(t->context)->Notify(); };
  Submit(task);
  done.Wait();
}

void PathSet::Completed(Task* task) {
  PathSet* set = static_cast<PathSet*>(task->path_set);
  Path& from = *set->paths_[task->path];
  from.outstanding.fetch_sub(1, std::memory_order_relaxed);
  // A unit attention the session retried may have said the ALUA states changed.
  if (task->retries > 0) set->CheckAluaChanges();
  if (task->status.ok() && task->scsi_status == scsi_status::kCheckCondition) {
    const scsi::AluaSense alua = scsi::ClassifyAluaSense(
        DecodeSense(std::span<const uint8_t>(task->sense, task->sense_length)));
    // Standby or unavailable, or still transitioning or changing after the session's retries
    // on this path: the path's port group cannot serve the LUN now. The state is noted (the
    // refresh confirms it) and the task goes by another path, if there is one.
    std::optional<AluaState> state;
    if (alua == scsi::AluaSense::kStandby) state = AluaState::kStandby;
    if (alua == scsi::AluaSense::kUnavailable) state = AluaState::kUnavailable;
    if (alua == scsi::AluaSense::kTransitioning) state = AluaState::kTransitioning;
    if (state || alua == scsi::AluaSense::kStateChanged ||
        alua == scsi::AluaSense::kImplicitTransitionFailed) {
      // A LUN without ALUA has no port group state to keep: the answer moves the task only.
      if (Lun* l = set->FindLun(task->lun); l && l->alua && state) {
        set->NoteState(*l, task->path, *state, "answered a command so");
      }
      set->RequestRefresh();
      const uint32_t other =
          task->path_moves < kMaxMoves ? set->Choose(task->lun, task->path) : kNoPath;
      if (other != kNoPath) {
        ++task->path_moves;
        task->status = Status::OK();
        task->scsi_status = 0;
        task->sense_length = 0;
        set->SendOn(other, task);
        return;
      }
    }
  }
  from.completed.fetch_add(1, std::memory_order_relaxed);
  from.last_completion.store(Ticks(), std::memory_order_relaxed);
  task->on_complete = task->path_on_complete;
  task->path_set = nullptr;
  task->on_complete(task);
}

bool PathSet::TakeOver(Path* from, Task* task) {
  // A command of one path's own (a probe, REPORT TARGET PORT GROUPS) stays on its path.
  if (task->path_set != this || task->path_moves >= kMaxMoves) return false;
  const uint32_t to = Choose(task->lun, from->index);
  if (to == kNoPath) return false;
  ++task->path_moves;
  from->outstanding.fetch_sub(1, std::memory_order_relaxed);
  SendOn(to, task);
  return true;
}

void PathSet::ConnectionChanged(Path* path) {
  // Close ends every path: no change worth a line. A path that has not joined yet is not the
  // set's to follow.
  if (closing_.load() || path->index >= count()) return;
  const bool healthy = path->session->healthy();
  const bool changed = path->was_healthy.exchange(healthy) != healthy;
  const SessionStats stats = path->session->stats();
  if (!healthy) {
    path->lost_at.store(Ticks(), std::memory_order_relaxed);
    if (!changed) return;
    path_changes_.fetch_add(1, std::memory_order_relaxed);
    Log(LogLevel::kWarning, "path " + std::to_string(path->index + 1) + " to " + primary_target_ +
                                " via " + path->home.ToString() + " down: " + stats.last_loss);
    return;
  }
  if (changed) {
    path_changes_.fetch_add(1, std::memory_order_relaxed);
    Log(LogLevel::kWarning, "path " + std::to_string(path->index + 1) + " to " + primary_target_ +
                                " up again via " + stats.portal);
  }
  // Whether or not this notification raced with the loss one: what the other paths hold while
  // recovering may go by this one now.
  OfferToRecovering(path);
  RequestRefresh();
}

void PathSet::OfferToRecovering(const Path* except) {
  for (uint32_t i = 0; i < count(); ++i) {
    const Path& p = *paths_[i];
    if (&p != except && !p.session->healthy()) p.session->OfferWaiting();
  }
}

std::vector<Portal> PathSet::ReachablePortals(Path* path) {
  const std::optional<uint16_t> tpgt = path->session->stats().current_tpgt;
  std::vector<Portal> portals;
  for (uint32_t i = 0; i < count(); ++i) {
    const Path& p = *paths_[i];
    if (&p == path || !p.session->healthy()) continue;
    const SessionStats s = p.session->stats();
    // Only a login to the same portal group reinstates the session (its SSID is ISID + TPGT).
    if (tpgt && s.current_tpgt == tpgt) portals.push_back(s.current_portal);
  }
  return portals;
}

void PathSet::SetWhyNot(Lun* lun, uint32_t path, std::string why) {
  MutexLock lock(&why_mu_);
  lun->why_not[path] = std::move(why);
}

iser::Status PathSet::ProbePath(uint32_t path, Lun* lun, bool identity) {
  Session& session = *paths_[path]->session;
  ThroughPath s(session);
  if (identity) {
    Result<std::vector<uint8_t>> page = scsi::RunInquiry(s, lun->lun, 0x83);
    if (!page.ok()) return page.status();
    Result<scsi::DeviceIdentifiers> ids = scsi::ParseDeviceIdentifiers(*page);
    if (!ids.ok()) return ids.status();
    if (path == lun->reference) {
      lun->identity = ids->lu_name;
      Result<std::vector<uint8_t>> standard = scsi::RunInquiry(s, lun->lun, std::nullopt);
      if (!standard.ok()) return standard.status();
      lun->alua = scsi::InquiryTpgs(*standard) != 0;
    } else if (lun->identity.empty()) {
      SetWhyNot(lun, path, "the LUN reports no NAA or EUI-64 identifier (VPD page 0x83)");
      return Status::OK();
    } else if (ids->lu_name != lun->identity) {
      SetWhyNot(lun, path,
                "another LUN answers here (" +
                    (ids->lu_name.empty() ? std::string("no identifier") : ids->lu_name) +
                    ", not " + lun->identity + ")");
      return Status::OK();
    }
    if (session.max_transfer_bytes() < paths_[lun->reference]->session->max_transfer_bytes()) {
      SetWhyNot(lun, path,
                "its connection carries less per command than path " +
                    std::to_string(lun->reference + 1) + "'s");
      return Status::OK();
    }
    lun->port_group[path].store(ids->target_port_group.value_or(0));
  }
  if (!lun->alua) {
    lun->state[path].store(static_cast<uint8_t>(AluaState::kActiveOptimized));
  } else {
    Result<scsi::TargetPortGroups> groups = scsi::RunReportTargetPortGroups(s, lun->lun);
    if (!groups.ok()) return groups.status();
    for (const scsi::TargetPortGroup& g : groups->groups) {
      if (g.id != lun->port_group[path].load()) continue;
      if (identity) {
        lun->state[path].store(static_cast<uint8_t>(g.state));
      } else {
        NoteState(*lun, path, g.state, "reported by REPORT TARGET PORT GROUPS");
      }
    }
  }
  // Last: from here Choose may send the LUN's tasks by this path.
  if (identity) {
    SetWhyNot(lun, path, "");
    lun->serves[path].store(1, std::memory_order_release);
  }
  return Status::OK();
}

iser::Status PathSet::AddLun(uint64_t lun) {
  MutexLock lock(&luns_mu_);
  if (FindLun(lun)) return Status::OK();
  const size_t index = lun_count_.load(std::memory_order_relaxed);
  if (index == kMaxLuns) {
    return Status::ResourceExhausted("more than " + std::to_string(kMaxLuns) + " LUNs on " +
                                     primary_target_);
  }
  auto l = std::make_unique<Lun>();
  l->lun = lun;
  for (auto& state : l->state) state.store(static_cast<uint8_t>(AluaState::kActiveOptimized));
  const uint32_t n = count();
  if (multipath_) {
    // The reference: the first path logged in that answers (the first of all may be the one that
    // is down, and one may go down during its probe).
    iser::Status probed =
        Status::ConnectionFailed("no path to " + primary_target_ + " is logged in");
    for (uint32_t i = 0; i < n; ++i) {
      if (!paths_[i]->session->healthy()) continue;
      l->reference = i;
      probed = ProbePath(i, l.get(), true);
      // A failure of the path (lost, or given up at once) rather than of the LUN: the next.
      if (probed.ok() ||
          (probed.code() != StatusCode::kConnectionFailed && paths_[i]->session->healthy())) {
        break;
      }
    }
    if (!probed.ok()) {
      return probed.WithContext("LUN " + std::to_string(lun) + " of " + primary_target_);
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (i == l->reference) continue;
      // A path that is down would hold the probe until it is back, or replacement_timeout: the
      // checker reads it once the path is back.
      if (!paths_[i]->session->healthy()) {
        l->unread[i].store(1);
        SetWhyNot(l.get(), i, "it was down when the LUN was added; read once it is back");
        continue;
      }
      if (iser::Status st = ProbePath(i, l.get(), true); !st.ok()) {
        l->unread[i].store(1);
        SetWhyNot(l.get(), i, "its identity could not be read: " + st.message());
      }
    }
    MutexLock why(&why_mu_);
    for (uint32_t i = 0; i < n; ++i) {
      if (!l->serves[i].load()) {
        Log(LogLevel::kWarning, "path " + std::to_string(i + 1) + " to " + primary_target_ +
                                    " does not serve LUN " + std::to_string(lun) +
                                    " (yet): " + l->why_not[i]);
      }
    }
  } else {
    l->serves[0].store(1);
  }
  luns_[index] = std::move(l);
  lun_count_.store(index + 1, std::memory_order_release);
  return Status::OK();
}

void PathSet::RequestRefresh() {
  MutexLock lock(&checker_mu_);
  refresh_requested_ = true;
  checker_cv_.SignalAll();
}

void PathSet::CheckerMain() {
  for (;;) {
    {
      MutexLock lock(&checker_mu_);
      const auto until = std::chrono::steady_clock::now() + kRefreshInterval;
      while (!refresh_requested_ && !stopping_) {
        if (std::chrono::steady_clock::now() >= until) break;
        checker_cv_.WaitFor(&checker_mu_, until - std::chrono::steady_clock::now());
      }
      if (stopping_) return;
      refresh_requested_ = false;
    }
    RefreshAlua();
  }
}

void PathSet::ReadIdentityAgain(Lun* lun, uint32_t path) {
  MutexLock lock(&luns_mu_);
  if (!lun->unread[path].load()) return;
  if (iser::Status st = ProbePath(path, lun, true); !st.ok()) {
    SetWhyNot(lun, path, "its identity could not be read: " + st.message());
    return;
  }
  lun->unread[path].store(0);
  if (!lun->serves[path].load()) return;
  path_changes_.fetch_add(1, std::memory_order_relaxed);
  Log(LogLevel::kWarning, "path " + std::to_string(path + 1) + " to " + primary_target_ +
                              " serves LUN " + std::to_string(lun->lun) +
                              " now: its identity could be read");
  // What lost paths hold for this LUN may go by this one now.
  OfferToRecovering(nullptr);
}

void PathSet::RefreshAlua() {
  const size_t n = lun_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    Lun* l = luns_[i].get();
    for (uint32_t p = 0; p < count(); ++p) {
      if (closing_.load()) return;
      if (!paths_[p]->session->healthy()) continue;
      // A path that was down when the LUN was added serves it once it can read its identity.
      if (l->unread[p].load()) {
        ReadIdentityAgain(l, p);
        continue;
      }
      if (!l->alua || !l->serves[p].load(std::memory_order_acquire)) continue;
      if (iser::Status st = ProbePath(p, l, false); !st.ok()) {
        Log(LogLevel::kDebug, "path " + std::to_string(p + 1) + " to " + primary_target_ +
                                  ": REPORT TARGET PORT GROUPS failed: " + st.message());
      }
    }
  }
}

void PathSet::JoinerMain() {
  for (std::chrono::milliseconds wait = kFirstRejoin;; wait = std::min(wait * 2, kMaxRejoin)) {
    {
      MutexLock lock(&checker_mu_);
      const auto until = std::chrono::steady_clock::now() + wait;
      while (!stopping_ && std::chrono::steady_clock::now() < until) {
        checker_cv_.WaitFor(&checker_mu_, until - std::chrono::steady_clock::now());
      }
      if (stopping_) return;
    }
    JoinLeftOut();
    MutexLock lock(&left_out_mu_);
    if (left_out_.empty()) return;
  }
}

void PathSet::JoinLeftOut() {
  std::vector<SessionOptions> waiting;
  {
    MutexLock lock(&left_out_mu_);
    waiting = left_out_;
  }
  for (const SessionOptions& options : waiting) {
    if (closing_.load()) return;
    const uint32_t slot = count();
    auto path = std::make_unique<Path>();
    path->set = this;
    path->index = slot;
    path->home = options.portal;
    SessionOptions o = options;
    o.handoff = path.get();
    Result<std::unique_ptr<Session>> s = Session::Open(o);
    if (!s.ok()) {
      Log(LogLevel::kDebug, "the path to " + primary_target_ + " at " + o.portal.ToString() +
                                " still cannot log in: " + s.status().message());
      continue;
    }
    path->session = std::shared_ptr<Session>(std::move(*s));
    path->was_healthy.store(path->session->healthy());
    {
      MutexLock lock(&luns_mu_);
      // Close has begun: it may have closed the sessions it saw already.
      if (closing_.load()) {
        path->session->Close().IgnoreError();
        return;
      }
      // Its LUNs wait for the checker to read their identity through it (no command here: one
      // that the path's loss would hold must not hold AddLun or Close behind this lock).
      const size_t n = lun_count_.load(std::memory_order_acquire);
      for (size_t i = 0; i < n; ++i) {
        Lun* l = luns_[i].get();
        l->state[slot].store(static_cast<uint8_t>(AluaState::kActiveOptimized));
        l->unread[slot].store(1);
        SetWhyNot(l, slot, "it has just joined; its identity is read next");
      }
      paths_[slot] = std::move(path);
      path_count_.store(slot + 1, std::memory_order_release);
    }
    {
      MutexLock lock(&left_out_mu_);
      left_out_.erase(
          std::find_if(left_out_.begin(), left_out_.end(),
                       [&](const SessionOptions& w) { return w.portal == options.portal; }));
    }
    path_changes_.fetch_add(1, std::memory_order_relaxed);
    Log(LogLevel::kWarning, "path " + std::to_string(slot + 1) + " to " + primary_target_ + " at " +
                                options.portal.ToString() +
                                " joined: it could not log in when the device was opened");
    RequestRefresh();
  }
}

std::vector<Portal> PathSet::LeftOutPortals() const {
  MutexLock lock(&left_out_mu_);
  std::vector<Portal> portals;
  for (const SessionOptions& o : left_out_) portals.push_back(o.portal);
  return portals;
}

bool PathSet::AloneServes(const Path* path) const {
  const uint32_t n = count();
  if (path->index >= n) return false;
  const size_t luns = lun_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < luns; ++i) {
    const Lun& l = *luns_[i];
    if (!l.serves[path->index].load(std::memory_order_acquire)) continue;
    bool other = false;
    for (uint32_t p = 0; p < n && !other; ++p) {
      other = p != path->index && l.serves[p].load(std::memory_order_acquire);
    }
    if (!other) return true;
  }
  return false;
}

std::vector<LunPathStatus> PathSet::PathStatuses() const {
  std::vector<LunPathStatus> out;
  const size_t n = lun_count_.load(std::memory_order_acquire);
  const uint32_t paths = count();
  for (size_t i = 0; i < n; ++i) {
    const Lun& l = *luns_[i];
    LunPathStatus s;
    s.lun = l.lun;
    s.identity = l.identity;
    s.alua = l.alua;
    for (uint32_t p = 0; p < paths; ++p) {
      PathStatus ps;
      ps.session = paths_[p]->session->stats();
      ps.portal = ps.session.portal;
      ps.tpgt = ps.session.current_tpgt.value_or(0);
      ps.healthy = paths_[p]->session->healthy();
      ps.serves = l.serves[p].load(std::memory_order_acquire) != 0;
      {
        MutexLock lock(&why_mu_);
        ps.why_not = l.why_not[p];
      }
      ps.alua_state = scsi::AluaStateName(static_cast<AluaState>(l.state[p].load()));
      ps.target_port_group = l.port_group[p].load();
      ps.commands = paths_[p]->completed.load();
      ps.outstanding = static_cast<uint64_t>(std::max<int64_t>(0, paths_[p]->outstanding.load()));
      s.paths.push_back(std::move(ps));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace iser
