// The key space of memory regions and memory windows, and every check made against it: local
// keys at post time, remote keys at the responder, window binds and invalidations.
// Contract: a key is an index (its upper 24 bits), naming one live MR or MW, and a tag (its low
// 8 bits); only a window's bind changes a tag (ibv_inc_rkey). A key matches only while it is
// exactly the object's current key and, for a window, only while the window is bound, so the key
// of a rebound, invalidated or deallocated window is refused like a key never issued. One lock
// guards the keys and all window state; callers may hold a QP's mutex (taken first) but never a
// CQ's.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "objects.h"

namespace softrdma {

// Gives `mr` a fresh random key (index unused) and publishes it.
void key_add_mr(Mr* mr);
// ibv_dereg_mr: EBUSY while windows are bound to the MR (it stays registered); else withdraws its
// key, returns its bytes to strict mode's locked-memory account and answers 0 (again later, while
// the MR is among the last 4096 deregistered; older ones are freed).
int mr_deregister(Mr* mr);
// The live MR whose key is `lkey`, or null.
Mr* mr_by_lkey(uint32_t lkey);

void key_add_mw(Mw* mw);
// Unbinds the window and withdraws its key; later calls on the handle are harmless.
void key_remove_mw(Mw* mw);

// Responder check of a remote READ (need REMOTE_READ) or WRITE (REMOTE_WRITE) of
// [addr, addr+len) arriving on `qp`, through an MR key or a bound window's key.
bool remote_access_ok(Qp* qp, uint32_t rkey, uint64_t addr, uint64_t len, int need);

// IBV_WR_BIND_MW posted on `qp`: IBV_WC_SUCCESS with the window bound, or IBV_WC_MW_BIND_ERR.
ibv_wc_status mw_bind(Qp* qp, const ibv_send_wr& wr);
// IBV_WR_LOCAL_INV posted on `qp`: IBV_WC_SUCCESS or IBV_WC_LOC_QP_OP_ERR.
ibv_wc_status mw_local_invalidate(Qp* qp, uint32_t rkey);
// SEND_WITH_INV received on `qp`: false if `rkey` is not a type 2 window bound through `qp`.
bool mw_remote_invalidate(Qp* qp, uint32_t rkey);

}  // namespace softrdma

// For tests: how many live keys grant remote access now (MRs registered with a remote access
// right, and memory windows bound), across every PD of the process. An initiator that revokes
// each command's access when the command ends returns to its count before the command.
extern "C" int softrdma_remote_keys();
// For tests: MRs registered and not deregistered, memory windows allocated and not deallocated
// (bound or not), and ibv_reg_mr calls made (failed ones included) since the process started.
extern "C" int softrdma_live_mrs();
extern "C" int softrdma_live_mws();
extern "C" long softrdma_reg_mr_calls();
