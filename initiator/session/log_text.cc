#include "initiator/session/log_text.h"

#include <cstdio>

namespace iser {

std::string HexTag(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", value);
  return buf;
}

std::string HexByte(uint8_t value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", value);
  return buf;
}

std::string SecondsText(std::chrono::nanoseconds duration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(duration).count());
  return buf;
}

}  // namespace iser
