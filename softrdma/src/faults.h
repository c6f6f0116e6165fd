// Fault injection for tests, read from the environment once per process:
//   SOFTRDMA_FAIL_REG_MR=N  the Nth ibv_reg_mr of the process fails with ENOMEM;
//   SOFTRDMA_DROP_AFTER=N   after N posted send work requests the connection carrying the next one
//                           is cut, as if the peer died (RETRY_EXC_ERR, flushes, DISCONNECTED);
//                           binds and local invalidations never reach the peer and do not count;
//   SOFTRDMA_DELAY_US=N     every acknowledgement is processed N microseconds late.
#pragma once

namespace softrdma {

bool fault_fail_reg_mr();
bool fault_drop_now();
void fault_delay_completion();

}  // namespace softrdma
