// CRC32C (Castagnoli), computed by ISA-L's crc32_iscsi: iSCSI's header and data digests
// (pdu/digest.h) and a general checksum for anything else (bench's verify pattern, the initiator
// name's host hash). Incremental: start from kCrc32cSeed, feed Crc32cExtend with the running
// value, then Crc32cFinish; Crc32c does all three for one buffer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iser {

inline constexpr uint32_t kCrc32cSeed = 0xffffffffu;

uint32_t Crc32cExtend(uint32_t running, const void* data, size_t len);
inline uint32_t Crc32cFinish(uint32_t running) {
  return ~running;
}
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cFinish(Crc32cExtend(kCrc32cSeed, data, len));
}

}  // namespace iser
