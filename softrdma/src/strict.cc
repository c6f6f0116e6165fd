#include "strict.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "log.h"

namespace softrdma {
namespace {

std::atomic<uint64_t> locked_bytes{0};

bool may_lock_unlimited() {
  if (geteuid() == 0 || env_on("SOFTRDMA_IGNORE_MEMLOCK")) return true;
  rlimit rl{};
  return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY;
}

}  // namespace

bool strict_mode() {
  static const bool on = env_on("SOFTRDMA_STRICT");
  return on;
}

void strict_poison_error(ibv_wc* wc) {
  if (!strict_mode()) return;
  ibv_wc keep = *wc;
  memset(wc, 0xa5, sizeof *wc);
  wc->wr_id = keep.wr_id;
  wc->status = keep.status;
  wc->qp_num = keep.qp_num;
  wc->vendor_err = 0;
}

int strict_check_registration(void* addr, size_t length) {
  if (!strict_mode() || length == 0) return 0;
  long page = sysconf(_SC_PAGESIZE);
  auto start = reinterpret_cast<uintptr_t>(addr) & ~static_cast<uintptr_t>(page - 1);
  size_t span = reinterpret_cast<uintptr_t>(addr) + length - start;
  std::vector<unsigned char> vec((span + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(start), span, vec.data()) != 0) return EFAULT;
  if (may_lock_unlimited()) return 0;
  rlimit rl{};
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (locked_bytes + length > rl.rlim_cur) return ENOMEM;
  locked_bytes += length;
  return 0;
}

void strict_release_registration(size_t length) {
  if (!strict_mode() || may_lock_unlimited()) return;
  locked_bytes -= length;
}

}  // namespace softrdma
