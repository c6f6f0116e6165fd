#include "faults.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace softrdma {
namespace {

long setting(const char* name) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : 0;
}

}  // namespace

bool fault_fail_reg_mr() {
  static const long n = setting("SOFTRDMA_FAIL_REG_MR");
  static std::atomic<long> count{0};
  return n > 0 && ++count == n;
}

bool fault_drop_now() {
  static const long n = setting("SOFTRDMA_DROP_AFTER");
  static std::atomic<long> count{0};
  return n > 0 && ++count == n + 1;
}

void fault_delay_completion() {
  static const long us = setting("SOFTRDMA_DELAY_US");
  if (us > 0) usleep(us);
}

}  // namespace softrdma
