// The iSCSI Basic Header Segment (RFC 7143 §11.2): 48 bytes, big-endian fields. Bhs is the raw
// bytes with typed accessors for the fields the initiator reads and writes; it never allocates,
// so PDUs are built in place in preallocated task and send-queue storage.
//
// Contract: accessors do no validation. Incoming headers must pass ValidateTargetBhs before
// any field is trusted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "initiator/base/status.h"

namespace iser {

inline constexpr size_t kBhsLength = 48;
inline constexpr uint32_t kReservedTag = 0xffffffffu;  // "no task" ITT/TTT
inline constexpr uint32_t kMaxDataSegmentLength = (1u << 24) - 1;

enum class Opcode : uint8_t {
  // Initiator to target.
  kNopOut = 0x00,
  kScsiCommand = 0x01,
  kTaskMgmtRequest = 0x02,
  kLoginRequest = 0x03,
  kTextRequest = 0x04,
  kDataOut = 0x05,
  kLogoutRequest = 0x06,
  kSnackRequest = 0x10,
  // Target to initiator.
  kNopIn = 0x20,
  kScsiResponse = 0x21,
  kTaskMgmtResponse = 0x22,
  kLoginResponse = 0x23,
  kTextResponse = 0x24,
  kDataIn = 0x25,
  kLogoutResponse = 0x26,
  kR2T = 0x31,
  kAsyncMessage = 0x32,
  kReject = 0x3f,
};

const char* OpcodeName(Opcode op);

inline uint32_t LoadBe32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
inline uint16_t LoadBe16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint64_t LoadBe64(const uint8_t* p) {
  return uint64_t{LoadBe32(p)} << 32 | LoadBe32(p + 4);
}
inline void StoreBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void StoreBe64(uint8_t* p, uint64_t v) {
  StoreBe32(p, static_cast<uint32_t>(v >> 32));
  StoreBe32(p + 4, static_cast<uint32_t>(v));
}

// Byte-1 flag bits.
inline constexpr uint8_t kFinalBit = 0x80;           // F, most PDUs
inline constexpr uint8_t kContinueBit = 0x40;        // C, Login/Text
inline constexpr uint8_t kTransitBit = 0x80;         // T, Login
inline constexpr uint8_t kReadBit = 0x40;            // R, SCSI Command
inline constexpr uint8_t kWriteBit = 0x20;           // W, SCSI Command
inline constexpr uint8_t kAckBit = 0x40;             // A, Data-In
inline constexpr uint8_t kStatusBit = 0x01;          // S, Data-In
inline constexpr uint8_t kResidualOverflow = 0x04;   // O
inline constexpr uint8_t kResidualUnderflow = 0x02;  // U
inline constexpr uint8_t kImmediateBit = 0x40;       // I, byte 0

struct Bhs {
  std::array<uint8_t, kBhsLength> b{};

  void Clear() { b.fill(0); }
  uint8_t* data() { return b.data(); }
  const uint8_t* data() const { return b.data(); }

  Opcode opcode() const { return static_cast<Opcode>(b[0] & 0x3f); }
  bool immediate() const { return b[0] & kImmediateBit; }
  void set_opcode(Opcode op, bool immediate) {
    b[0] = static_cast<uint8_t>(op) | (immediate ? kImmediateBit : 0);
  }
  uint8_t flags() const { return b[1]; }
  void set_flags(uint8_t f) { b[1] = f; }
  bool final() const { return b[1] & kFinalBit; }

  uint32_t total_ahs_bytes() const { return uint32_t{b[4]} * 4; }
  uint32_t data_segment_length() const { return uint32_t{b[5]} << 16 | uint32_t{b[6]} << 8 | b[7]; }
  void set_data_segment_length(uint32_t len) {
    b[5] = static_cast<uint8_t>(len >> 16);
    b[6] = static_cast<uint8_t>(len >> 8);
    b[7] = static_cast<uint8_t>(len);
  }
  void set_total_ahs_bytes(uint32_t bytes) { b[4] = static_cast<uint8_t>(bytes / 4); }

  uint64_t lun() const { return LoadBe64(&b[8]); }
  void set_lun(uint64_t encoded) { StoreBe64(&b[8], encoded); }
  uint32_t itt() const { return LoadBe32(&b[16]); }
  void set_itt(uint32_t v) { StoreBe32(&b[16], v); }

  // Generic 32-bit field at a byte offset (the opcode-specific fields are named where used).
  uint32_t u32(size_t off) const { return LoadBe32(&b[off]); }
  void set_u32(size_t off, uint32_t v) { StoreBe32(&b[off], v); }
  uint16_t u16(size_t off) const { return LoadBe16(&b[off]); }
  void set_u16(size_t off, uint16_t v) { StoreBe16(&b[off], v); }
};
static_assert(sizeof(Bhs) == kBhsLength);

// Field offsets shared by many opcodes.
namespace bhs {
inline constexpr size_t kTtt = 20;                         // Target Transfer Tag
inline constexpr size_t kExpectedDataTransferLength = 20;  // SCSI Command
inline constexpr size_t kCmdSN = 24;                       // requests
inline constexpr size_t kExpStatSN = 28;                   // requests
inline constexpr size_t kStatSN = 24;                      // responses
inline constexpr size_t kExpCmdSN = 28;                    // responses
inline constexpr size_t kMaxCmdSN = 32;                    // responses
inline constexpr size_t kDataSN = 36;                      // Data-In/Data-Out, R2TSN in R2T
inline constexpr size_t kBufferOffset = 40;
inline constexpr size_t kResidualCount = 44;  // SCSI Response, Data-In
inline constexpr size_t kDesiredLength = 44;  // R2T
inline constexpr size_t kCdb = 32;            // SCSI Command
}  // namespace bhs

// Checks an incoming header before any field is used: a target opcode an initiator can receive,
// reserved bits clear where the RFC requires it, DataSegmentLength within what we declared we can
// receive, and AHS length within the bound. The message names the opcode and the field.
Status ValidateTargetBhs(const Bhs& bhs, uint32_t max_recv_data_segment_length,
                         uint32_t max_ahs_bytes);

// Bytes of padding that follow a data segment of this length.
inline constexpr uint32_t PadLength(uint32_t len) {
  return (4 - (len & 3)) & 3;
}

// SAM LUN encoding for the LUN field (SAM-5 §4.7): peripheral (0..255) or flat (256..16383)
// addressing; larger values are passed through as already-encoded 64-bit LUNs.
uint64_t EncodeLun(uint64_t lun);
uint64_t DecodeLun(uint64_t encoded);

}  // namespace iser
