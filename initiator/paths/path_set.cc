#include "initiator/paths/path_set.h"

#include <algorithm>
#include <optional>

#include "initiator/base/log.h"
#include "initiator/base/notification.h"
#include "initiator/scsi/alua.h"
#include "initiator/scsi/commands.h"
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

// A command of ours on one path, outside the set's selection.
Status RunOn(Session& s, Task& t, uint64_t lun) {
  t.lun = lun;
  s.Execute(&t);
  return scsi::TaskStatus(t, std::string(scsi::CommandName(t)) + " on LUN " + std::to_string(lun));
}

// The standard INQUIRY data without a page, else the VPD page.
Result<std::vector<uint8_t>> Inquiry(Session& s, uint64_t lun, std::optional<uint8_t> page) {
  std::vector<uint8_t> buf(1024);
  Task t;
  scsi::Inquiry(t, buf.data(), static_cast<uint16_t>(buf.size()), page.has_value(),
                page.value_or(0));
  if (Status st = RunOn(s, t, lun); !st.ok()) return st;
  buf.resize(TransferredBytes(t));
  return buf;
}

// A path with commands outstanding that has completed nothing for this long gets no new command
// while another path is not in that state: a stalled path stops taking I/O long before its
// NOP-Out times out and it is declared lost.
constexpr std::chrono::milliseconds kStuckAfter{500};

// Moves of one command between paths; past them it stays where it is (Task::path_moves).
constexpr uint8_t kMaxMoves = 8;

// The periodic refresh that catches a change no unit attention reported (a path's state after
// it rejoins, a target that reports transitions only on the port that changed).
constexpr std::chrono::seconds kRefreshInterval{10};

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
  set->selector_ = selector;
  set->primary_target_ = paths.front().target_name;
  for (size_t i = 0; i < paths.size(); ++i) {
    auto path = std::make_unique<Path>();
    path->set = set.get();
    path->home = paths[i].portal;
    if (paths.size() > 1) paths[i].handoff = path.get();
    Result<std::unique_ptr<Session>> s = Session::Open(paths[i]);
    if (!s.ok()) {
      if (i == 0) return s.status();
      Log(LogLevel::kWarning, "path " + std::to_string(i + 1) + " to " + paths[i].target_name +
                                  " at " + paths[i].portal.ToString() +
                                  " left out: " + s.status().message());
      continue;
    }
    path->index = static_cast<uint32_t>(set->paths_.size());
    path->session = std::shared_ptr<Session>(std::move(*s));
    set->paths_.push_back(std::move(path));
  }
  if (set->paths_.size() > 1) {
    set->checker_ = std::thread([s = set.get()] { s->CheckerMain(); });
    std::string where;
    for (const auto& p : set->paths_) where += (where.empty() ? "" : ", ") + p->home.ToString();
    Log(LogLevel::kInfo, "multipath to " + set->primary_target_ + ": " +
                             std::to_string(set->paths_.size()) + " paths (" + where + "), " +
                             PathSelectorName(selector));
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
  set->paths_.push_back(std::move(path));
  return set;
}

PathSet::~PathSet() {
  Close().IgnoreError();
}

iser::Status PathSet::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  closing_ = true;
  {
    MutexLock lock(&checker_mu_);
    stopping_ = true;
    checker_cv_.SignalAll();
  }
  if (checker_.joinable()) checker_.join();
  iser::Status result;
  // A lone session opened elsewhere (Of) is its owner's to close.
  if (!owns_sessions_) return result;
  for (const auto& p : paths_) {
    iser::Status st = p->session->Close();
    if (result.ok() && !st.ok()) result = st;
  }
  return result;
}

uint32_t PathSet::max_transfer_bytes() const {
  uint32_t least = paths_.front()->session->max_transfer_bytes();
  for (const auto& p : paths_) least = std::min(least, p->session->max_transfer_bytes());
  return least;
}

uint64_t PathSet::capacity_changes() const {
  uint64_t n = 0;
  for (const auto& p : paths_) n += p->session->capacity_changes();
  return n;
}

uint64_t PathSet::luns_changes() const {
  uint64_t n = 0;
  for (const auto& p : paths_) n += p->session->luns_changes();
  return n;
}

bool PathSet::healthy() const {
  return std::any_of(paths_.begin(), paths_.end(),
                     [](const auto& p) { return p->session->healthy(); });
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
  const uint32_t n = static_cast<uint32_t>(paths_.size());
  // Round robin starts each choice one further; queue length breaks ties the same way, so
  // equal paths share the work.
  const uint32_t start = next_turn_.fetch_add(1, std::memory_order_relaxed);
  const int64_t stuck_before = Ticks() - std::chrono::steady_clock::duration(kStuckAfter).count();
  uint32_t best = kNoPath;
  bool best_stuck = true;
  int best_rank = kNever;
  int64_t best_queue = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = (start + k) % n;
    if (i == avoid || !paths_[i]->session->healthy()) continue;
    int rank = 0;
    if (l) {
      if (!l->serves[i]) continue;
      rank = Rank(static_cast<AluaState>(l->state[i].load(std::memory_order_relaxed)));
      if (rank == kNever) continue;
    }
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
  uint32_t best = 0;
  int64_t latest = -1;
  for (uint32_t i = 0; i < paths_.size(); ++i) {
    if (l && !l->serves[i]) continue;
    const int64_t at = paths_[i]->lost_at.load(std::memory_order_relaxed);
    if (at > latest) {
      best = i;
      latest = at;
    }
  }
  return best;
}

void PathSet::Submit(Task* task) {
  if (paths_.size() == 1) {
    paths_.front()->session->Submit(task);
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

void PathSet::NoteState(const Lun& lun, uint32_t path, AluaState state, const char* how) {
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
  for (const auto& p : paths_) alua += p->session->alua_changes();
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
  // Close ends every path: no change worth a line.
  if (closing_.load()) return;
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
  for (const auto& p : paths_) {
    if (p.get() != except && !p->session->healthy()) p->session->OfferWaiting();
  }
}

std::vector<Portal> PathSet::ReachablePortals(Path* path) {
  const std::optional<uint16_t> tpgt = path->session->stats().current_tpgt;
  std::vector<Portal> portals;
  for (const auto& p : paths_) {
    if (p.get() == path || !p->session->healthy()) continue;
    const SessionStats s = p->session->stats();
    // Only a login to the same portal group reinstates the session (its SSID is ISID + TPGT).
    if (tpgt && s.current_tpgt == tpgt) portals.push_back(s.current_portal);
  }
  return portals;
}

iser::Status PathSet::ProbePath(uint32_t path, Lun* lun, bool identity) {
  Session& s = *paths_[path]->session;
  if (identity) {
    Result<std::vector<uint8_t>> page = Inquiry(s, lun->lun, 0x83);
    if (!page.ok()) return page.status();
    Result<scsi::DeviceIdentifiers> ids = scsi::ParseDeviceIdentifiers(*page);
    if (!ids.ok()) return ids.status();
    if (path == 0) {
      lun->identity = ids->lu_name;
      Result<std::vector<uint8_t>> standard = Inquiry(s, lun->lun, std::nullopt);
      if (!standard.ok()) return standard.status();
      lun->alua = scsi::InquiryTpgs(*standard) != 0;
    } else if (lun->identity.empty()) {
      lun->why_not[path] = "the LUN reports no NAA or EUI-64 identifier (VPD page 0x83)";
      return Status::OK();
    } else if (ids->lu_name != lun->identity) {
      lun->why_not[path] = "another LUN answers here (" +
                           (ids->lu_name.empty() ? std::string("no identifier") : ids->lu_name) +
                           ", not " + lun->identity + ")";
      return Status::OK();
    }
    if (s.max_transfer_bytes() < paths_.front()->session->max_transfer_bytes()) {
      lun->why_not[path] = "its connection carries less per command than the first path's";
      return Status::OK();
    }
    lun->port_group[path] = ids->target_port_group.value_or(0);
    if (path == 0 || !lun->identity.empty()) lun->serves[path] = 1;
  }
  if (!lun->alua) {
    lun->state[path].store(static_cast<uint8_t>(AluaState::kActiveOptimized));
    return Status::OK();
  }
  std::vector<uint8_t> buf(4096);
  Task t;
  scsi::ReportTargetPortGroups(t, buf.data(), static_cast<uint32_t>(buf.size()));
  if (iser::Status st = RunOn(s, t, lun->lun); !st.ok()) return st;
  buf.resize(TransferredBytes(t));
  Result<scsi::TargetPortGroups> groups = scsi::ParseReportTargetPortGroups(buf);
  if (!groups.ok()) return groups.status();
  for (const scsi::TargetPortGroup& g : groups->groups) {
    if (g.id != lun->port_group[path]) continue;
    if (identity) {
      lun->state[path].store(static_cast<uint8_t>(g.state));
    } else {
      NoteState(*lun, path, g.state, "reported by REPORT TARGET PORT GROUPS");
    }
  }
  return Status::OK();
}

iser::Status PathSet::AddLun(uint64_t lun) {
  MutexLock lock(&luns_mu_);
  if (FindLun(lun)) return Status::OK();
  const size_t count = lun_count_.load(std::memory_order_relaxed);
  if (count == kMaxLuns) {
    return Status::ResourceExhausted("more than " + std::to_string(kMaxLuns) + " LUNs on " +
                                     primary_target_);
  }
  auto l = std::make_unique<Lun>();
  l->lun = lun;
  l->serves.assign(paths_.size(), 0);
  l->why_not.assign(paths_.size(), "");
  l->port_group.assign(paths_.size(), 0);
  l->state = std::make_unique<std::atomic<uint8_t>[]>(paths_.size());
  for (size_t i = 0; i < paths_.size(); ++i) {
    l->state[i].store(static_cast<uint8_t>(AluaState::kActiveOptimized));
  }
  if (paths_.size() > 1) {
    ISER_RETURN_IF_ERROR(ProbePath(0, l.get(), true));
    for (uint32_t i = 1; i < paths_.size(); ++i) {
      if (iser::Status st = ProbePath(i, l.get(), true); !st.ok()) {
        l->serves[i] = 0;
        l->why_not[i] = "its identity could not be read: " + st.message();
      }
    }
    for (uint32_t i = 1; i < paths_.size(); ++i) {
      if (!l->serves[i]) {
        Log(LogLevel::kWarning, "path " + std::to_string(i + 1) + " to " + primary_target_ +
                                    " does not serve LUN " + std::to_string(lun) + ": " +
                                    l->why_not[i]);
      }
    }
  } else {
    l->serves[0] = 1;
  }
  luns_[count] = std::move(l);
  lun_count_.store(count + 1, std::memory_order_release);
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

void PathSet::RefreshAlua() {
  const size_t n = lun_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    Lun* l = luns_[i].get();
    if (!l->alua) continue;
    for (uint32_t p = 0; p < paths_.size(); ++p) {
      if (!l->serves[p] || !paths_[p]->session->healthy()) continue;
      if (iser::Status st = ProbePath(p, l, false); !st.ok()) {
        Log(LogLevel::kDebug, "path " + std::to_string(p + 1) + " to " + primary_target_ +
                                  ": REPORT TARGET PORT GROUPS failed: " + st.message());
      }
    }
  }
}

std::vector<LunPathStatus> PathSet::PathStatuses() const {
  std::vector<LunPathStatus> out;
  const size_t n = lun_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const Lun& l = *luns_[i];
    LunPathStatus s;
    s.lun = l.lun;
    s.identity = l.identity;
    s.alua = l.alua;
    for (uint32_t p = 0; p < paths_.size(); ++p) {
      PathStatus ps;
      ps.session = paths_[p]->session->stats();
      ps.portal = ps.session.portal;
      ps.tpgt = ps.session.current_tpgt.value_or(0);
      ps.healthy = paths_[p]->session->healthy();
      ps.serves = l.serves[p] != 0;
      ps.why_not = l.why_not[p];
      ps.alua_state = scsi::AluaStateName(static_cast<AluaState>(l.state[p].load()));
      ps.target_port_group = l.port_group[p];
      ps.commands = paths_[p]->completed.load();
      ps.outstanding = static_cast<uint64_t>(std::max<int64_t>(0, paths_[p]->outstanding.load()));
      s.paths.push_back(std::move(ps));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace iser
