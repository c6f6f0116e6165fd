// TaskHandoff: how a session that is one path of several (initiator/paths) gives back work while
// it has no connection, instead of holding it until its own recovery.
//
// Contract. A session with a handoff (SessionOptions::handoff) that has lost its connection
// offers it the tasks that are safe to run on another path: those that never reached the target
// (waiting to be sent, waiting for a retry's back-off, or submitted while it was recovering), and
// those that reached it but change nothing on the medium (READ, INQUIRY, ...: a copy the target
// may still run does no harm). A task that reached the target and may change the medium (a WRITE)
// is offered only once a login with the session's ISID made the target end the old session and
// its tasks: the session logs in through a portal another path reaches (ReachablePortals) and
// drops that connection at once, or, when none does, replays the write itself after its own
// reinstating login (docs/multipath.md, "Write safety").
//
// Calls come from the session's recovery thread or from a thread inside Session::Submit, and
// ConnectionChanged for a loss from the session's I/O thread as the connection fails; never with
// a session lock held. The handoff must not block on the offering session, nor submit to it from
// ConnectionChanged.
#pragma once

#include <vector>

#include "initiator/task/task.h"
#include "initiator/transport/portal.h"

namespace iser {

class TaskHandoff {
 public:
  virtual ~TaskHandoff() = default;
  // True: the handoff owns the task now (it submits it to another path or completes it); the
  // session forgets it. False: no other path can take it now; the session keeps it.
  virtual bool TakeOver(Task* task) = 0;
  // The session lost its connection or has one again (Session::healthy() says which).
  virtual void ConnectionChanged() = 0;
  // Portals of the session's target portal group that other paths are logged in through now:
  // where a session that holds sent writes logs in to end its lost session at the target.
  virtual std::vector<Portal> ReachablePortals() = 0;
  // Asked as a recovery starts. False: the session recovers at its own portal only (it is that
  // portal's path; through another portal it would stay there, beside the path already on it).
  // True: it alone serves something (a LUN no other path serves), which would be left without a
  // path until its portal is back, so it also tries the other portals of its group, as a lone
  // session does (its login there reinstates it: same ISID, same group).
  virtual bool MayRecoverElsewhere() = 0;
};

}  // namespace iser
