// Strict mode (SOFTRDMA_STRICT=1, on in the project's tests): enforce what hardware and the kernel
// enforce and make undefined results visible, so code that works on softrdma works on hardware.
//   - error completions carry only wr_id, status, qp_num and vendor_err; the rest is poisoned;
//   - ibv_reg_mr fails with EFAULT unless every page of the range is mapped;
//   - registered bytes count against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK (or runs
//     as root), or SOFTRDMA_IGNORE_MEMLOCK=1 is set.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>

namespace softrdma {

bool strict_mode();
void strict_poison_error(ibv_wc* wc);
// Returns 0 or the errno ibv_reg_mr must fail with; accounts the bytes when it returns 0.
int strict_check_registration(void* addr, size_t length);
void strict_release_registration(size_t length);

}  // namespace softrdma
