// Header and data digests on the wire (RFC 7143 §11.1, §13.1): a CRC32C (base/crc32c.h) of four
// bytes, least-significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "initiator/base/crc32c.h"

namespace iser {

inline constexpr size_t kDigestLength = 4;

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
