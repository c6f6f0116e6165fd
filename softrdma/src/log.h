// Diagnostics: SOFTRDMA_DEBUG=1 logs verbs and CM calls to stderr; warnings always print.
// Also how every on/off setting is read from the environment.
#pragma once

namespace softrdma {

// The environment variable `name` is set to something other than "" or "0".
bool env_on(const char* name);
bool debug_enabled();
void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace softrdma
