#include "log.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace softrdma {

bool env_on(const char* name) {
  const char* v = getenv(name);
  return v && *v && *v != '0';
}

bool debug_enabled() {
  static const bool on = env_on("SOFTRDMA_DEBUG");
  return on;
}

static void vlog(const char* level, const char* fmt, va_list ap) {
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  fprintf(stderr, "softrdma %s: %s\n", level, line);
}

void log_debug(const char* fmt, ...) {
  if (!debug_enabled()) return;
  va_list ap;
  va_start(ap, fmt);
  vlog("debug", fmt, ap);
  va_end(ap);
}

void log_warn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog("warning", fmt, ap);
  va_end(ap);
}

}  // namespace softrdma
