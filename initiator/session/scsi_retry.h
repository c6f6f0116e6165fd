// ScsiRetry: which SCSI outcomes a command is sent again for, and when.
//
// A target that restarts, resets a LUN, is busy or is still spinning up answers with a status
// that means "try again", not "this failed": BUSY, TASK SET FULL, CHECK CONDITION with UNIT
// ATTENTION (e.g. 29/00 after every reconnect to a restarted tgtd), NOT READY "in process of
// becoming ready" (04/01) or "asymmetric access state transition" (04/0A), and ABORTED COMMAND. The
// session retries those transparently, with a bounded number of attempts and a doubling delay where
// waiting helps; everything else completes as the target said. Pure functions: the session owns the
// task and the timing.
#pragma once

#include <chrono>
#include <cstdint>

#include "initiator/scsi/sense.h"
#include "initiator/task/task.h"

namespace iser {

struct RetryDecision {
  bool retry = false;
  std::chrono::milliseconds delay{0};  // how long to wait before sending it again
  bool capacity_changed = false;       // UNIT ATTENTION 2A/09: the LUN's size changed
  bool luns_changed = false;           // UNIT ATTENTION 3F/0E: LUNs were added or removed
  bool alua_changed = false;           // UNIT ATTENTION 2A/06 or 2A/07: ALUA states changed
  bool transitioning = false;          // NOT READY 04/0A: an ALUA transition under way
  const char* reason = "";             // "BUSY", "UNIT ATTENTION", ... for logs
  Sense sense;                         // decoded for CHECK CONDITION, for the same logs
};

// Attempts a task gets for one kind of outcome before its last answer stands.
inline constexpr uint8_t kMaxScsiRetries = 8;
// Attempts, a second apart, while the LUN says an ALUA transition is under way (NOT READY 04/0A).
inline constexpr uint8_t kMaxTransitionRetries = 60;

// t has completed with a SCSI status (t.status is OK); t.retries counts earlier retries.
RetryDecision DecideScsiRetry(const Task& t);

}  // namespace iser
