#include "strict.h"

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "log.h"

namespace softrdma {
namespace {

std::atomic<uint64_t> locked_bytes{0};

// Whether this process runs in the initial user namespace, whose uid_map is the identity over
// every uid; a namespace made by `unshare -r` or a rootless container maps fewer.
bool in_initial_user_namespace() {
  FILE* f = fopen("/proc/self/uid_map", "r");
  if (f == nullptr) return true;  // no user namespaces in this kernel
  unsigned long inside = 0, outside = 0, count = 0;
  const int n = fscanf(f, "%lu %lu %lu", &inside, &outside, &count);
  const bool more = n == 3 && fscanf(f, "%lu", &inside) == 1;
  fclose(f);
  return n == 3 && !more && inside == 0 && outside == 0 && count == 4294967295ul;
}

// The kernel's capable(CAP_IPC_LOCK): the calling thread's effective set (capabilities are per
// thread, and ibv_reg_mr's system call runs on the registering one), counted only in the initial
// user namespace: capable() asks about that namespace, so a capability held in a user namespace
// of one's own (`unshare -r`) lifts no limit.
bool has_ipc_lock() {
  static const bool initial = in_initial_user_namespace();
  if (!initial) return false;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
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

int strict_check_registration(void* addr, size_t length, size_t* locked) {
  *locked = 0;
  if (!strict_mode() || length == 0) return 0;
  long page = sysconf(_SC_PAGESIZE);
  auto start = reinterpret_cast<uintptr_t>(addr) & ~static_cast<uintptr_t>(page - 1);
  size_t span = reinterpret_cast<uintptr_t>(addr) + length - start;
  std::vector<unsigned char> vec((span + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(start), span, vec.data()) != 0) return EFAULT;
  const size_t pages = vec.size() * page;
  rlimit rl{};
  const bool limited = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
                       !env_on("SOFTRDMA_IGNORE_MEMLOCK") && !has_ipc_lock();
  const uint64_t now = locked_bytes += pages;
  if (limited && now > rl.rlim_cur) {
    locked_bytes -= pages;
    return ENOMEM;
  }
  *locked = pages;
  return 0;
}

void strict_release_registration(size_t locked) {
  locked_bytes -= locked;
}

}  // namespace softrdma
