// Memory window verbs. ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw are inline in verbs.h and
// reach softrdma through the context ops filled here; binds and invalidations themselves are send
// work requests (verbs.cc) checked against the key space (keys.cc).
#include <cerrno>
#include <cstring>

#include "api.h"
#include "keys.h"
#include "log.h"
#include "profile.h"

namespace softrdma {
namespace {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  // The profile's provider may have no windows (siw; bnxt_re's library lacks the verb although
  // its kernel driver advertises type 2B) or only type 1 (cxgb4's kernel refuses type 2).
  if (int err = type == IBV_MW_TYPE_1 ? profile().mw_type1_errno : profile().mw_type2_errno) {
    log_debug("ibv_alloc_mw type %d: %s under profile %s", type, strerror(err), profile().name);
    errno = err;
    return nullptr;
  }
  auto* mw = new Mw();
  mw->pd = impl<Pd>(pd);
  mw->pub.context = pd->context;
  mw->pub.pd = pd;
  mw->pub.type = type;
  key_add_mw(mw);
  mw->pd->users++;
  log_debug("ibv_alloc_mw type %d -> key 0x%x", type, mw->key);
  return &mw->pub;
}

int dealloc_mw(ibv_mw* mw) {
  key_remove_mw(impl<Mw>(mw));
  return 0;
}

// What rxe and mlx5 do: post a bind work request with the next key and show that key in the
// handle at once (the man page: the caller restores the old key if the bind completes in error).
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  // Type 1 windows are never zero-based (o10-36.2.2).
  if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;
  ibv_send_wr wr{}, *bad;
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  if (int err = qp->context->ops.post_send(qp, &wr, &bad)) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace

void fill_mw_ops(ibv_context_ops* ops) {
  ops->alloc_mw = alloc_mw;
  ops->dealloc_mw = dealloc_mw;
  ops->bind_mw = bind_mw;
}

}  // namespace softrdma
