// SessionOptions: everything needed to open a session to one target: where it is, who we are,
// the credentials, what we offer in login, the timeouts, and the datamover factory (the seam
// tests use to replace the transport).
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "initiator/login/login.h"
#include "initiator/session/datamover_factory.h"
#include "initiator/session/task_handoff.h"
#include "initiator/transport/portal.h"

namespace iser {

struct SessionOptions {
  Portal portal;
  std::string target_name;
  TransportKind transport = TransportKind::kTcp;
  std::string initiator_name;
  std::string initiator_alias;
  ChapCredentials chap;
  OperationalOffer offer;
  std::chrono::milliseconds login_timeout{15000};
  std::chrono::milliseconds nop_interval{5000};  // 0: no keepalive
  std::chrono::milliseconds nop_timeout{5000};
  std::chrono::milliseconds logout_timeout{5000};
  int max_redirects = 4;

  // Session recovery (docs/recovery.md). A lost connection is replaced by a new session with the
  // same ISID (session reinstatement), tried on `portal` and then on each of
  // `alternate_portals` in turn (a path of several: those only when its handoff allows,
  // task_handoff.h), and every unfinished task is sent again on it.
  bool recover = true;  // false: a lost connection fails the session for good
  // How long tasks wait for recovery before they (and new ones) fail; recovery goes on after.
  // 0: they fail at once.
  std::chrono::milliseconds replacement_timeout{120000};
  // A command unanswered this long is aborted (ABORT TASK, then LOGICAL UNIT RESET, then the
  // connection is dropped) and retried a bounded number of times. 0: no command timeout.
  std::chrono::milliseconds command_timeout{30000};
  std::vector<Portal> alternate_portals;
  // Empty: DefaultDatamoverFactory().
  DatamoverFactory datamover_factory;
  // The session is one path of several (initiator/paths): while it has no connection it offers
  // what is safe to run elsewhere to this handoff (task_handoff.h). Null: a session on its own.
  // The handoff outlives the session.
  TaskHandoff* handoff = nullptr;
};

// How often the session's timer runs on its connection: a quarter of the shorter of the NOP-Out
// interval and timeout, between 100 ms and 1 s, so that a silent target is noticed within about a
// quarter more than they say.
inline std::chrono::milliseconds TimerPeriodFor(const SessionOptions& o) {
  std::chrono::milliseconds shortest{1000};
  for (std::chrono::milliseconds t : {o.nop_interval, o.nop_timeout}) {
    if (t.count() > 0) shortest = std::min(shortest, t / 4);
  }
  return std::max(shortest, std::chrono::milliseconds(100));
}

}  // namespace iser
