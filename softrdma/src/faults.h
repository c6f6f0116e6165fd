// Fault injection for tests, read from the environment once per process:
//   SOFTRDMA_FAIL_REG_MR=N  the Nth ibv_reg_mr of the process fails with ENOMEM;
//   SOFTRDMA_DROP_AFTER=N   after N posted send work requests the connection carrying the next one
//                           is cut, as if the peer died (RETRY_EXC_ERR, flushes, DISCONNECTED);
//                           binds and local invalidations never reach the peer and do not count;
//   SOFTRDMA_DELAY_US=N     every acknowledgement is processed N microseconds late.
// And one a test calls (dlsym, node SOFTRDMA_TEST_3; a real libibverbs has none):
// softrdma_raise_async_event, below.
#pragma once

namespace softrdma {

bool fault_fail_reg_mr();
bool fault_drop_now();
void fault_delay_completion();

}  // namespace softrdma

// Raises an asynchronous error on every connected QP of this process, as a NIC does when it
// hits an internal error that no peer can provoke (a firmware or WQE fetch error, a CQ that
// cannot take a completion):
//   IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR: the event (element: the
//     QP) is queued on the async fd, the QP goes to error and its outstanding work requests
//     flush (IBV_WC_WR_FLUSH_ERR); the event is queued first, so a consumer that looks at the
//     async fd when the flushes surprise it finds their cause (the verbs specify no order);
//   IBV_EVENT_CQ_ERR: each CQ those QPs use fails as an overrun fails it (the event, element the
//     CQ; the CQ takes no more completions, so the flushes never show; its QPs go to error).
// The peer learns nothing until its next operation finds the QP in error, as on the wire.
// Returns how many QPs (CQs for IBV_EVENT_CQ_ERR) it failed, or -1 with errno EINVAL for another
// event type.
extern "C" int softrdma_raise_async_event(int event_type);
