// CRC32C header and data digests (RFC 7143 §11.1, §13.1) computed by ISA-L's crc32_iscsi.
// The digest goes on the wire least-significant byte first. Crc32c is incremental: feed
// Crc32cExtend with the running value, starting from kCrc32cSeed, then Crc32cFinish.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iser {

inline constexpr uint32_t kCrc32cSeed = 0xffffffffu;
inline constexpr size_t kDigestLength = 4;

uint32_t Crc32cExtend(uint32_t running, const void* data, size_t len);
inline uint32_t Crc32cFinish(uint32_t running) {
  return ~running;
}
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cFinish(Crc32cExtend(kCrc32cSeed, data, len));
}

inline void StoreDigest(uint8_t* out, uint32_t crc) {
  out[0] = static_cast<uint8_t>(crc);
  out[1] = static_cast<uint8_t>(crc >> 8);
  out[2] = static_cast<uint8_t>(crc >> 16);
  out[3] = static_cast<uint8_t>(crc >> 24);
}
inline uint32_t LoadDigest(const uint8_t* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

}  // namespace iser
