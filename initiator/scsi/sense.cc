#include "initiator/scsi/sense.h"

#include <cstdio>

namespace iser {

Sense DecodeSense(std::span<const uint8_t> s) {
  Sense out;
  if (s.empty()) return out;
  const uint8_t code = s[0] & 0x7f;
  if ((code == 0x70 || code == 0x71) && s.size() >= 3) {
    out.valid = true;
    out.key = s[2] & 0x0f;
    if (s.size() >= 14) {
      out.asc = s[12];
      out.ascq = s[13];
    }
  } else if ((code == 0x72 || code == 0x73) && s.size() >= 4) {
    out.valid = true;
    out.key = s[1] & 0x0f;
    out.asc = s[2];
    out.ascq = s[3];
  }
  return out;
}

const char* ScsiStatusName(uint8_t status) {
  switch (status) {
    case scsi_status::kGood:
      return "GOOD";
    case scsi_status::kCheckCondition:
      return "CHECK CONDITION";
    case scsi_status::kConditionMet:
      return "CONDITION MET";
    case scsi_status::kBusy:
      return "BUSY";
    case scsi_status::kReservationConflict:
      return "RESERVATION CONFLICT";
    case scsi_status::kTaskSetFull:
      return "TASK SET FULL";
    case scsi_status::kAcaActive:
      return "ACA ACTIVE";
    case scsi_status::kTaskAborted:
      return "TASK ABORTED";
  }
  return "unknown status";
}

const char* SenseKeyName(uint8_t key) {
  static const char* const kNames[16] = {
      "NO SENSE",       "RECOVERED ERROR", "NOT READY",      "MEDIUM ERROR",
      "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
      "BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",   "ABORTED COMMAND",
      "RESERVED",       "VOLUME OVERFLOW", "MISCOMPARE",     "COMPLETED"};
  return kNames[key & 0xf];
}

namespace {
struct AscName {
  uint8_t asc, ascq;
  const char* name;
};
// The additional sense codes a block-device initiator meets in practice (SPC-4 annex D).
constexpr AscName kAscNames[] = {
    {0x00, 0x00, "NO ADDITIONAL SENSE INFORMATION"},
    {0x04, 0x00, "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE"},
    {0x04, 0x01, "LOGICAL UNIT IS IN PROCESS OF BECOMING READY"},
    {0x0c, 0x00, "WRITE ERROR"},
    {0x11, 0x00, "UNRECOVERED READ ERROR"},
    {0x1a, 0x00, "PARAMETER LIST LENGTH ERROR"},
    {0x20, 0x00, "INVALID COMMAND OPERATION CODE"},
    {0x21, 0x00, "LOGICAL BLOCK ADDRESS OUT OF RANGE"},
    {0x24, 0x00, "INVALID FIELD IN CDB"},
    {0x25, 0x00, "LOGICAL UNIT NOT SUPPORTED"},
    {0x26, 0x00, "INVALID FIELD IN PARAMETER LIST"},
    {0x27, 0x00, "WRITE PROTECTED"},
    {0x27, 0x07, "SPACE ALLOCATION FAILED WRITE PROTECT"},
    {0x28, 0x00, "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED"},
    {0x29, 0x00, "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"},
    {0x29, 0x01, "POWER ON OCCURRED"},
    {0x2a, 0x01, "MODE PARAMETERS CHANGED"},
    {0x2a, 0x09, "CAPACITY DATA HAS CHANGED"},
    {0x38, 0x07, "THIN PROVISIONING SOFT THRESHOLD REACHED"},
    {0x3a, 0x00, "MEDIUM NOT PRESENT"},
    {0x3f, 0x0e, "REPORTED LUNS DATA HAS CHANGED"},
    {0x44, 0x00, "INTERNAL TARGET FAILURE"},
    {0x47, 0x00, "SCSI PARITY ERROR"},
    {0x1d, 0x00, "MISCOMPARE DURING VERIFY OPERATION"},
};
}  // namespace

std::string Sense::ToString() const {
  if (!valid) return "no sense data";
  const char* asc_name = nullptr;
  for (const auto& n : kAscNames) {
    if (n.asc == asc && n.ascq == ascq) asc_name = n.name;
  }
  char codes[32];
  snprintf(codes, sizeof codes, "(0x%02x/0x%02x)", asc, ascq);
  std::string out = SenseKeyName(key);
  out += ": ";
  out += asc_name ? asc_name : "additional sense";
  out += " ";
  out += codes;
  return out;
}

Status ScsiStatusToStatus(uint8_t status, const Sense& sense, const std::string& what) {
  if (status == scsi_status::kGood || status == scsi_status::kConditionMet) return Status::OK();
  std::string msg = what + " failed with " + ScsiStatusName(status);
  if (status != scsi_status::kCheckCondition) return Status::ScsiError(msg);
  msg += ", " + sense.ToString();
  if (!sense.valid) return Status::ScsiError(msg);
  switch (sense.key) {
    case sense_key::kMediumError:
    case sense_key::kHardwareError:
      return Status::IoError(msg);
    case sense_key::kDataProtect:
      if (sense.asc == 0x27 && sense.ascq == 0x07) return Status::NoSpace(msg);
      return Status::ReadOnly(msg);
    case sense_key::kIllegalRequest:
      if (sense.asc == 0x20) return Status::NotSupported(msg);
      if (sense.asc == 0x21 || sense.asc == 0x24 || sense.asc == 0x26)
        return Status::InvalidArgument(msg);
      return Status::ScsiError(msg);
    default:
      return Status::ScsiError(msg);
  }
}

}  // namespace iser
