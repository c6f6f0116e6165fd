// SCSI status and sense data (SPC-4 §4.5): fixed (0x70/0x71) and descriptor (0x72/0x73) formats
// decoded into sense key, ASC and ASCQ, with names for the ones a block-device user meets, and a
// mapping to the Status codes the frontends turn into errno values.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "initiator/base/status.h"

namespace iser {

namespace scsi_status {
inline constexpr uint8_t kGood = 0x00;
inline constexpr uint8_t kCheckCondition = 0x02;
inline constexpr uint8_t kConditionMet = 0x04;
inline constexpr uint8_t kBusy = 0x08;
inline constexpr uint8_t kReservationConflict = 0x18;
inline constexpr uint8_t kTaskSetFull = 0x28;
inline constexpr uint8_t kAcaActive = 0x30;
inline constexpr uint8_t kTaskAborted = 0x40;
}  // namespace scsi_status

namespace sense_key {
inline constexpr uint8_t kNoSense = 0x0;
inline constexpr uint8_t kRecoveredError = 0x1;
inline constexpr uint8_t kNotReady = 0x2;
inline constexpr uint8_t kMediumError = 0x3;
inline constexpr uint8_t kHardwareError = 0x4;
inline constexpr uint8_t kIllegalRequest = 0x5;
inline constexpr uint8_t kUnitAttention = 0x6;
inline constexpr uint8_t kDataProtect = 0x7;
inline constexpr uint8_t kBlankCheck = 0x8;
inline constexpr uint8_t kAbortedCommand = 0xb;
inline constexpr uint8_t kMiscompare = 0xe;
}  // namespace sense_key

struct Sense {
  bool valid = false;
  uint8_t key = 0;
  uint8_t asc = 0;
  uint8_t ascq = 0;
  // "ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE (0x21/0x00)".
  std::string ToString() const;
};

Sense DecodeSense(std::span<const uint8_t> sense);
const char* ScsiStatusName(uint8_t status);
const char* SenseKeyName(uint8_t key);

// The Status for a command that completed with this SCSI status and sense. `what` names the
// command ("READ(16) at LBA 2048"). Medium errors → kIoError, space allocation failed → kNoSpace,
// write protected → kReadOnly, LBA out of range / invalid field → kInvalidArgument, invalid
// opcode → kNotSupported, anything else → kScsiError.
Status ScsiStatusToStatus(uint8_t status, const Sense& sense, const std::string& what);

}  // namespace iser
