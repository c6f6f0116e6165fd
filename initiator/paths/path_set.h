// PathSet: one target reached through several sessions (paths), as one place to submit tasks.
//
// A path is a session to one portal, with its own ISID and I/O thread. For each LUN it serves
// (AddLun), the set checks the LUN's identity on every path (the NAA or EUI-64 designator of VPD
// page 0x83) against the first healthy path's (the LUN's reference path): a path that reports
// another identity, none, or a smaller transfer limit does not serve that LUN (PathStatuses says
// why); a path down then reads it once it is back. A LUN the set does not know yet (before
// AddLun: its probe, REPORT LUNS) is asked through the first healthy path, so that every answer
// comes from one place. ALUA: a path's state for a LUN is
// its target port group's, from REPORT TARGET PORT GROUPS when the LUN reports TPGS, read at
// AddLun and again after a UNIT ATTENTION 2A/06 or 2A/07 on any path; a LUN without TPGS is
// active/optimized on every path.
//
// Submit picks, among the healthy paths that serve the task's LUN, those in the best ALUA state
// (active/optimized, else active/non-optimized, else transitioning; never standby, unavailable
// or offline), and among them the one with the fewest outstanding tasks (queue-length) or the
// next in turn (round-robin); a path that has had tasks outstanding and completed none for half a
// second comes after every path that has not (a stall shows long before the path is lost). With no
// such path the task goes to the recovering serving path lost last, whose recovery holds it
// (replacement_timeout applies as on a lone session), and moves as soon as another path is usable
// (else to a logged-in path, which answers for its port group's state, else to one that gave up,
// which fails it saying why).
// A task answered NOT READY 04/0B or 04/0C (standby, unavailable) moves to another path instead of
// failing, when there is one.
//
// Write safety (docs/multipath.md): the sessions are TaskHandoff members: a path that loses its
// connection hands over at once what is safe to run elsewhere (tasks that never reached the
// target, and reads); a WRITE that reached the target stays with its session until a login with
// that session's ISID (after Time2Wait, through a portal another path reaches, else through its
// own when it is back) made the target end the old session and its tasks; then it goes by any
// path. So a write's old copy never runs after a newer write of the same blocks.
//
// Tasks keep the contract of task.h: each completes exactly once, through the submitter's
// on_complete, on whichever thread the serving session completes it on. A set of one path
// (Of) submits straight to its session, at no cost. A path recovers only at its own portal (it
// is that portal's path; docs/multipath.md), unless it alone serves a LUN: then also at the other
// portals of its group, as a lone session fails over. Paths are added, never removed: one that
// could not log in at Open is tried again (after 1 s, backing off to every 10 s) and joins when it
// can (its LUNs checked as AddLun does); a path whose session fails for good stays in the set,
// unusable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/scsi/alua.h"
#include "initiator/session/session.h"
#include "initiator/session/session_options.h"

namespace iser {

enum class PathSelector : uint8_t { kQueueLength, kRoundRobin };
const char* PathSelectorName(PathSelector selector);  // "queue-length", "round-robin"

// What `session -P 1` shows of a path for one LUN, and what bench reports.
struct PathStatus {
  std::string portal;      // where its session is logged in now
  uint16_t tpgt = 0;       // its target portal group tag
  bool healthy = false;    // logged in now
  bool serves = false;     // carries this LUN's I/O (identity matched)
  std::string why_not;     // when !serves
  std::string alua_state;  // "active/optimized", ... ("active/optimized" without ALUA)
  uint16_t target_port_group = 0;
  uint64_t commands = 0;  // tasks completed through this path
  uint64_t outstanding = 0;
  SessionStats session;
};
struct LunPathStatus {
  uint64_t lun = 0;
  std::string identity;  // "naa.…" or "eui.…"; empty: none
  bool alua = false;     // the LUN reports TPGS
  std::vector<PathStatus> paths;
};

class PathSet final : public Executor {
 public:
  // Opens one session per entry (their handoff is the set's); one must open (else the first
  // one's failure), one that fails is left out with a warning and tried again in the background.
  // More than 16 paths is InvalidArgument.
  static Result<std::shared_ptr<PathSet>> Open(std::vector<SessionOptions> paths,
                                               PathSelector selector);
  // A set of one path around a session opened elsewhere.
  static std::shared_ptr<PathSet> Of(std::shared_ptr<Session> session);
  ~PathSet();

  PathSet(const PathSet&) = delete;
  PathSet& operator=(const PathSet&) = delete;

  void Submit(Task* task);
  // Submits and waits. Not from an I/O thread.
  void Execute(Task* task) override;
  // Reads the LUN's identity and ALUA states through every path (each path's own commands).
  // Fails only when the first path cannot read them; a path that cannot serves not, until the
  // checker has read them through it (it tries again while the path is healthy).
  Status AddLun(uint64_t lun);

  // The first path's session: where the set was opened, for what is the same on every path.
  Session& primary() { return *paths_[0]->session; }
  // Path i's session (i < size()), for commands of its own.
  Session& session(size_t i) { return *paths_[i]->session; }
  SessionStats primary_stats() const { return paths_[0]->session->stats(); }
  // The paths logged in at least once (grows when a left-out path joins).
  size_t size() const { return count(); }
  const std::string& target_name() const { return primary_target_; }
  // The least any path serves: one command never carries more.
  uint32_t max_transfer_bytes() const override;
  // Sums over the paths (each only grows).
  uint64_t capacity_changes() const;
  uint64_t luns_changes() const;
  uint64_t lun_changes() const { return capacity_changes() + luns_changes(); }
  // Healthy on any path.
  bool healthy() const;
  // The paths of each LUN added so far.
  std::vector<LunPathStatus> PathStatuses() const;
  // Times a path went down or came back, or changed ALUA state.
  uint64_t path_changes() const { return path_changes_.load(); }
  PathSelector selector() const { return selector_; }
  // Open was given several paths (a set of one, Of's or Open's, is a lone session).
  bool multipath() const { return multipath_; }
  // The portals of the paths that have not logged in since Open (they join when they can).
  std::vector<Portal> LeftOutPortals() const;
  // Logs out of every path. Idempotent: a later or concurrent call returns once the first has
  // finished, with its outcome.
  iser::Status Close();

 private:
  // One path: its session and the handoff its session calls.
  struct Path final : TaskHandoff {
    PathSet* set = nullptr;
    uint32_t index = 0;  // its slot in paths_; part of the set once index < path_count_
    std::shared_ptr<Session> session;
    Portal home;
    std::atomic<int64_t> outstanding{0};
    std::atomic<uint64_t> completed{0};
    std::atomic<bool> was_healthy{true};
    std::atomic<int64_t> lost_at{0};  // steady clock ticks of the last loss
    // Steady clock ticks of its last completion, or of its first command after it was idle.
    std::atomic<int64_t> last_completion{0};
    bool TakeOver(Task* task) override { return set->TakeOver(this, task); }
    void ConnectionChanged() override { set->ConnectionChanged(this); }
    std::vector<Portal> ReachablePortals() override { return set->ReachablePortals(this); }
    bool MayRecoverElsewhere() override { return set->AloneServes(this); }
  };
  static constexpr size_t kMaxPaths = 16;
  static constexpr size_t kMaxLuns = 256;
  // One LUN: its identity and ALUA support, as its reference path reads them (fixed at AddLun)
  // and, per path slot, whether the path serves it, its port group and state (an AluaState
  // value). A path's entry is written before the path joins or, for a path whose identity is
  // not read yet (unread; never the reference), under luns_mu_ by the checker; serves is set
  // last.
  struct Lun {
    uint64_t lun = 0;
    uint32_t reference = 0;
    std::string identity;
    bool alua = false;
    std::atomic<uint8_t> serves[kMaxPaths] = {};
    std::atomic<uint8_t> unread[kMaxPaths] = {};
    std::atomic<uint16_t> port_group[kMaxPaths] = {};
    std::atomic<uint8_t> state[kMaxPaths] = {};
    std::string why_not[kMaxPaths];  // under why_mu_
  };

  PathSet() = default;
  uint32_t count() const { return path_count_.load(std::memory_order_acquire); }
  // Why a path does not serve a LUN (shown by PathStatuses).
  void SetWhyNot(Lun* lun, uint32_t path, std::string why);
  // Reads a LUN's identity through one path that could not at AddLun (checker thread).
  void ReadIdentityAgain(Lun* lun, uint32_t path);
  // Opens the left-out paths' sessions again and adds those that log in (joiner thread).
  void JoinLeftOut();
  void JoinerMain();
  const Lun* FindLun(uint64_t lun) const;
  Lun* FindLun(uint64_t lun) { return const_cast<Lun*>(std::as_const(*this).FindLun(lun)); }
  // The path for a task of this LUN other than `avoid` (kNoPath: none), or kNoPath when none
  // is usable.
  static constexpr uint32_t kNoPath = ~0u;
  uint32_t Choose(uint64_t lun, uint32_t avoid);
  // Where a task waits when no path is usable (see the top of this file).
  uint32_t Fallback(uint64_t lun) const;
  void SendOn(uint32_t path, Task* task);
  // Stores a path's ALUA state for a LUN; a change is a path change, logged with how we learned
  // it.
  void NoteState(Lun& lun, uint32_t path, scsi::AluaState state, const char* how);
  // Asks for a refresh when a session counted a unit attention 2A/06 or 2A/07 since the last
  // look.
  void CheckAluaChanges();
  // Asks every path that is recovering, but `except`, to offer what it holds again.
  void OfferToRecovering(const Path* except);
  static void Completed(Task* task);
  bool TakeOver(Path* from, Task* task);
  void ConnectionChanged(Path* path);
  std::vector<Portal> ReachablePortals(Path* path);
  // Some LUN is served by this path and no other.
  bool AloneServes(const Path* path) const;
  // Reads the ALUA states of every LUN through every healthy path (checker thread).
  void RefreshAlua();
  // Reads one LUN's identity and states through one path into *lun (AddLun, RefreshAlua).
  iser::Status ProbePath(uint32_t path, Lun* lun, bool identity);
  void CheckerMain();
  void RequestRefresh();

  // Slots [0, path_count_) are the set's paths; a slot is filled before the count covers it,
  // and never changes after.
  std::unique_ptr<Path> paths_[kMaxPaths];
  std::atomic<uint32_t> path_count_{0};
  std::string primary_target_;
  // The options of paths that could not log in at Open (joiner thread only, after Open).
  mutable Mutex left_out_mu_;
  std::vector<SessionOptions> left_out_ ISER_GUARDED_BY(left_out_mu_);
  std::thread joiner_;
  // Guards every Lun's why_not.
  mutable Mutex why_mu_;
  PathSelector selector_ = PathSelector::kQueueLength;
  std::atomic<uint32_t> next_turn_{0};
  std::atomic<uint64_t> path_changes_{0};

  // LUNs, added under luns_mu_ and never removed: readers take the count, then the entries.
  Mutex luns_mu_;
  std::unique_ptr<Lun> luns_[kMaxLuns];
  std::atomic<size_t> lun_count_{0};

  // The checker thread reads ALUA states again when asked (a unit attention, a path back).
  Mutex checker_mu_;
  CondVar checker_cv_;
  bool refresh_requested_ ISER_GUARDED_BY(checker_mu_) = false;
  bool stopping_ ISER_GUARDED_BY(checker_mu_) = false;
  std::thread checker_;
  std::atomic<uint64_t> alua_changes_seen_{0};
  bool owns_sessions_ = false;  // Open's sessions, not Of's
  bool multipath_ = false;      // Open asked for more than one path
  Mutex close_mu_;
  bool closed_ ISER_GUARDED_BY(close_mu_) = false;
  iser::Status close_result_ ISER_GUARDED_BY(close_mu_);
  std::atomic<bool> closing_{false};
};

}  // namespace iser
