#include "initiator/session/scsi_retry.h"

#include <algorithm>
#include <span>

namespace iser {

namespace {

// 10, 20, 40, ... ms, at most a second: a busy target gets room, a caller never waits long.
std::chrono::milliseconds Backoff(uint8_t retries) {
  return std::chrono::milliseconds(std::min(10 << std::min<int>(retries, 7), 1000));
}

// The outcome's kind and delay, whatever the count of earlier retries.
RetryDecision Decide(const Task& t) {
  RetryDecision d;
  switch (t.scsi_status) {
    case scsi_status::kBusy:
      d.retry = true;
      d.delay = Backoff(t.retries);
      d.reason = "BUSY";
      return d;
    case scsi_status::kTaskSetFull:
      d.retry = true;
      d.delay = Backoff(t.retries);
      d.reason = "TASK SET FULL";
      return d;
    case scsi_status::kCheckCondition:
      break;
    default:
      return d;
  }
  d.sense = DecodeSense(std::span<const uint8_t>(t.sense, t.sense_length));
  const Sense& sense = d.sense;
  if (!sense.valid) return d;
  switch (sense.key) {
    case sense_key::kUnitAttention:
      d.retry = true;
      d.capacity_changed = sense.asc == 0x2a && sense.ascq == 0x09;
      d.luns_changed = sense.asc == 0x3f && sense.ascq == 0x0e;
      // Asymmetric access state changed, or an implicit transition failed: the paths' ALUA
      // states are read again (initiator/paths).
      d.alua_changed = sense.asc == 0x2a && (sense.ascq == 0x06 || sense.ascq == 0x07);
      d.reason = "UNIT ATTENTION";
      return d;
    case sense_key::kNotReady:
      if (sense.asc == 0x04 && sense.ascq == 0x01) {
        d.retry = true;
        d.delay = Backoff(t.retries);
        d.reason = "NOT READY (becoming ready)";
      } else if (sense.asc == 0x04 && sense.ascq == 0x0a) {
        // An ALUA transition takes seconds: the same path is the one to ask again (SPC-5 5.16.2.6).
        d.retry = true;
        d.transitioning = true;
        d.delay = std::chrono::milliseconds(1000);
        d.reason = "NOT READY (asymmetric access state transition)";
      }
      return d;
    case sense_key::kAbortedCommand:
      d.retry = true;
      d.reason = "ABORTED COMMAND";
      return d;
  }
  return d;
}

}  // namespace

RetryDecision DecideScsiRetry(const Task& t) {
  RetryDecision d = Decide(t);
  // An ALUA transition may take a minute (Linux waits that long); everything else gets its
  // few attempts.
  const uint8_t most = d.transitioning ? kMaxTransitionRetries : kMaxScsiRetries;
  if (t.retries >= most) d.retry = false;
  return d;
}

}  // namespace iser
