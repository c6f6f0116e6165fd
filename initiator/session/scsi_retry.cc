#include "initiator/session/scsi_retry.h"

#include <algorithm>
#include <span>

#include "initiator/scsi/sense.h"

namespace iser {

namespace {

constexpr uint8_t kStatusCheckCondition = 0x02;
constexpr uint8_t kStatusBusy = 0x08;
constexpr uint8_t kStatusTaskSetFull = 0x28;
constexpr uint8_t kSenseNotReady = 0x02;
constexpr uint8_t kSenseUnitAttention = 0x06;
constexpr uint8_t kSenseAbortedCommand = 0x0b;

// 10, 20, 40, ... ms, at most a second: a busy target gets room, a caller never waits long.
std::chrono::milliseconds Backoff(uint8_t retries) {
  return std::chrono::milliseconds(std::min(10 << std::min<int>(retries, 7), 1000));
}

}  // namespace

RetryDecision DecideScsiRetry(const Task& t) {
  RetryDecision d;
  if (t.retries >= kMaxScsiRetries) return d;
  switch (t.scsi_status) {
    case kStatusBusy:
      d = {true, Backoff(t.retries), false, "BUSY"};
      return d;
    case kStatusTaskSetFull:
      d = {true, Backoff(t.retries), false, "TASK SET FULL"};
      return d;
    case kStatusCheckCondition:
      break;
    default:
      return d;
  }
  const Sense sense = DecodeSense(std::span<const uint8_t>(t.sense, t.sense_length));
  if (!sense.valid) return d;
  switch (sense.key) {
    case kSenseUnitAttention:
      d = {true, std::chrono::milliseconds(0), sense.asc == 0x2a && sense.ascq == 0x09,
           "UNIT ATTENTION"};
      return d;
    case kSenseNotReady:
      if (sense.asc == 0x04 && sense.ascq == 0x01) {
        d = {true, Backoff(t.retries), false, "NOT READY (becoming ready)"};
      }
      return d;
    case kSenseAbortedCommand:
      d = {true, std::chrono::milliseconds(0), false, "ABORTED COMMAND"};
      return d;
  }
  return d;
}

}  // namespace iser
