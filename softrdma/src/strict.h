// Strict mode (SOFTRDMA_STRICT=1, on in the project's tests): enforce what hardware and the kernel
// enforce and make undefined results visible, so code that works on softrdma works on hardware.
//   - error completions carry only wr_id, status, qp_num and vendor_err; the rest is poisoned;
//   - ibv_reg_mr fails with EFAULT unless every page of the range is mapped;
//   - registered memory is locked memory, counted as the kernel counts it (ib_umem_get): every
//     page a registration spans counts, always; a registration that would take the count past
//     RLIMIT_MEMLOCK fails with ENOMEM unless the registering thread has CAP_IPC_LOCK in its
//     effective set in the initial user namespace (root has it, unless dropped; the one a user
//     namespace grants, as `unshare -r` does, does not count, as for the kernel), or
//     SOFTRDMA_IGNORE_MEMLOCK=1 is set.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>

namespace softrdma {

bool strict_mode();
void strict_poison_error(ibv_wc* wc);
// Returns 0 or the errno ibv_reg_mr must fail with. On 0, *locked is what the registration
// counts as locked, for strict_release_registration to give back at deregistration.
int strict_check_registration(void* addr, size_t length, size_t* locked);
void strict_release_registration(size_t locked);

}  // namespace softrdma
