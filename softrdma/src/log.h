// Diagnostics: SOFTRDMA_DEBUG=1 logs verbs and CM calls to stderr; warnings always print.
#pragma once

namespace softrdma {

bool debug_enabled();
void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace softrdma
