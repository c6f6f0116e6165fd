#include "initiator/base/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace iser {

uint32_t Crc32cExtend(uint32_t running, const void* data, size_t len) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L only reads
  while (len > 0) {
    const int chunk = len > INT_MAX ? INT_MAX : static_cast<int>(len);
    running = crc32_iscsi(p, chunk, running);
    p += chunk;
    len -= static_cast<size_t>(chunk);
  }
  return running;
}

}  // namespace iser
