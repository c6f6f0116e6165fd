#include "initiator/pdu/bhs.h"

#include <string>

namespace iser {

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kNopOut:
      return "NOP-Out";
    case Opcode::kScsiCommand:
      return "SCSI Command";
    case Opcode::kTaskMgmtRequest:
      return "Task Management Request";
    case Opcode::kLoginRequest:
      return "Login Request";
    case Opcode::kTextRequest:
      return "Text Request";
    case Opcode::kDataOut:
      return "Data-Out";
    case Opcode::kLogoutRequest:
      return "Logout Request";
    case Opcode::kSnackRequest:
      return "SNACK Request";
    case Opcode::kNopIn:
      return "NOP-In";
    case Opcode::kScsiResponse:
      return "SCSI Response";
    case Opcode::kTaskMgmtResponse:
      return "Task Management Response";
    case Opcode::kLoginResponse:
      return "Login Response";
    case Opcode::kTextResponse:
      return "Text Response";
    case Opcode::kDataIn:
      return "Data-In";
    case Opcode::kLogoutResponse:
      return "Logout Response";
    case Opcode::kR2T:
      return "R2T";
    case Opcode::kAsyncMessage:
      return "Async Message";
    case Opcode::kReject:
      return "Reject";
  }
  return "unknown opcode";
}

static bool IsTargetOpcode(uint8_t op) {
  switch (static_cast<Opcode>(op)) {
    case Opcode::kNopIn:
    case Opcode::kScsiResponse:
    case Opcode::kTaskMgmtResponse:
    case Opcode::kLoginResponse:
    case Opcode::kTextResponse:
    case Opcode::kDataIn:
    case Opcode::kLogoutResponse:
    case Opcode::kR2T:
    case Opcode::kAsyncMessage:
    case Opcode::kReject:
      return true;
    default:
      return false;
  }
}

Status ValidateTargetBhs(const Bhs& bhs, uint32_t max_recv_data_segment_length,
                         uint32_t max_ahs_bytes) {
  const uint8_t raw = bhs.b[0] & 0x3f;
  if (!IsTargetOpcode(raw)) {
    char hex[8];
    snprintf(hex, sizeof hex, "0x%02x", bhs.b[0]);
    return Status::ProtocolError(std::string("target sent a PDU with unknown opcode ") + hex);
  }
  const Opcode op = bhs.opcode();
  const uint32_t dsl = bhs.data_segment_length();
  if (dsl > max_recv_data_segment_length) {
    return Status::ProtocolError(std::string(OpcodeName(op)) + " DataSegmentLength " +
                                 std::to_string(dsl) + " exceeds our MaxRecvDataSegmentLength " +
                                 std::to_string(max_recv_data_segment_length));
  }
  if (bhs.total_ahs_bytes() > max_ahs_bytes) {
    return Status::ProtocolError(std::string(OpcodeName(op)) + " TotalAHSLength " +
                                 std::to_string(bhs.total_ahs_bytes()) + " bytes exceeds " +
                                 std::to_string(max_ahs_bytes));
  }
  switch (op) {
    case Opcode::kR2T:
      if (dsl != 0) return Status::ProtocolError("R2T carries a data segment");
      if (bhs.u32(bhs::kDesiredLength) == 0)
        return Status::ProtocolError("R2T with Desired Data Transfer Length 0");
      break;
    case Opcode::kDataIn:
      if ((bhs.flags() & kStatusBit) && !(bhs.flags() & kFinalBit))
        return Status::ProtocolError("Data-In with S bit but without F bit");
      break;
    case Opcode::kScsiResponse:
      if (!(bhs.flags() & kFinalBit)) return Status::ProtocolError("SCSI Response without F bit");
      break;
    default:
      break;
  }
  return Status::OK();
}

uint64_t EncodeLun(uint64_t lun) {
  if (lun < 256) return lun << 48;
  if (lun < 16384) return (0x4000 | lun) << 48;
  return lun;
}

uint64_t DecodeLun(uint64_t encoded) {
  const uint64_t top = encoded >> 48;
  const uint64_t method = top >> 14;
  if ((encoded & 0xffffffffffffULL) == 0) {
    if (method == 0) return top & 0xff;
    if (method == 1) return top & 0x3fff;
  }
  return encoded;
}

}  // namespace iser
