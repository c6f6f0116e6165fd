// Keys of memory regions and memory windows (see keys.h) and the window rules of the verbs, as
// rxe and hardware apply them: a type 1 window is bound with ibv_bind_mw, rebound at will and
// unbound by a zero-length bind, and serves any QP of its PD; a type 2 window is bound by an
// IBV_WR_BIND_MW work request only while free, serves only the QP it was bound through, and is
// freed by IBV_WR_LOCAL_INV or a SEND_WITH_INV that QP receives.
#include "keys.h"

#include <cerrno>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "log.h"
#include "strict.h"

namespace softrdma {
namespace {

constexpr uint32_t kTagMask = 0xff;

struct Owner {
  Mr* mr = nullptr;
  Mw* mw = nullptr;
};

// Deregistered MRs stay quarantined (a stale handle stays harmless) but only the most recent
// kMrQuarantine of them: an initiator that registers a buffer per command would otherwise grow
// by one object per I/O.
constexpr size_t kMrQuarantine = 4096;

struct Keys {
  std::mutex mu;
  std::unordered_map<uint32_t, Owner> by_index;
  std::deque<Mr*> retired_mrs;
};
Keys& keys() {
  static auto* k = new Keys;
  return *k;
}

// A random key whose index nothing holds. Caller holds keys().mu.
uint32_t fresh_key_locked() {
  uint32_t key;
  do key = random_u32();
  while (key == 0 || keys().by_index.count(key >> 8));
  return key;
}

// Whoever holds the key's index; the caller compares the whole key. Caller holds keys().mu.
Owner owner_locked(uint32_t key) {
  auto it = keys().by_index.find(key >> 8);
  return it == keys().by_index.end() ? Owner{} : it->second;
}

bool in_range(uint64_t start, uint64_t length, uint64_t addr, uint64_t len) {
  return addr >= start && len <= length && addr - start <= length - len;
}

uint64_t mr_start(const Mr* mr) {
  return reinterpret_cast<uintptr_t>(mr->pub.addr);
}

void unbind_locked(Mw* mw) {
  if (mw->mr) mw->mr->windows--;
  mw->mr = nullptr;
  mw->addr = mw->length = 0;
  mw->access = 0;
  mw->qp = nullptr;
}

// Why the bind is refused, or null. Caller holds keys().mu.
const char* bind_refusal_locked(const Qp* qp, const Mw* mw, uint32_t named_key,
                                const ibv_mw_bind_info& b) {
  if (mw->destroyed) return "the window was deallocated";
  // Hardware names the window by its current key (rxe compares all 32 bits): after a type 2 bind
  // the application must store the new key in mw->rkey itself.
  if (named_key != mw->key) return "mw->rkey is not the window's current key";
  if (&mw->pd->pub != qp->pub.pd) return "the QP is in another PD";
  bool type2 = mw->pub.type == IBV_MW_TYPE_2;
  if (type2 && mw->mr) return "a bound type 2 window must be invalidated before it is bound again";
  if (b.mw_access_flags & IBV_ACCESS_ZERO_BASED) return "softrdma has no zero-based windows";
  if (b.length == 0) return type2 ? "a type 2 window cannot be bound with length 0" : nullptr;
  if (!b.mr) return "no MR";
  const Mr* mr = impl<Mr>(b.mr);
  if (mr->destroyed) return "the MR was deregistered";
  if (mr->pd != mw->pd) return "the MR is in another PD";
  if (!(mr->access & IBV_ACCESS_MW_BIND)) return "the MR lacks IBV_ACCESS_MW_BIND";
  if ((b.mw_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(mr->access & IBV_ACCESS_LOCAL_WRITE))
    return "a writable window needs an MR with IBV_ACCESS_LOCAL_WRITE";
  if (!in_range(mr_start(mr), mr->pub.length, b.addr, b.length)) return "the range leaves the MR";
  return nullptr;
}

}  // namespace

void key_add_mr(Mr* mr) {
  std::lock_guard g(keys().mu);
  mr->key = fresh_key_locked();
  mr->pub.lkey = mr->pub.rkey = mr->pub.handle = mr->key;
  keys().by_index[mr->key >> 8].mr = mr;
}

int mr_deregister(Mr* mr) {
  std::lock_guard g(keys().mu);
  if (mr->destroyed) return 0;
  if (mr->windows) return EBUSY;
  keys().by_index.erase(mr->key >> 8);
  mr->destroyed = true;
  mr->pd->users--;
  strict_release_registration(mr->locked);
  auto& retired = keys().retired_mrs;
  retired.push_back(mr);
  if (retired.size() > kMrQuarantine) {
    delete retired.front();
    retired.pop_front();
  }
  return 0;
}

Mr* mr_by_lkey(uint32_t lkey) {
  std::lock_guard g(keys().mu);
  Mr* mr = owner_locked(lkey).mr;
  return mr && mr->key == lkey ? mr : nullptr;
}

void key_add_mw(Mw* mw) {
  std::lock_guard g(keys().mu);
  mw->key = fresh_key_locked();
  mw->pub.rkey = mw->key;
  mw->pub.handle = mw->key >> 8;
  keys().by_index[mw->key >> 8].mw = mw;
}

void key_remove_mw(Mw* mw) {
  std::lock_guard g(keys().mu);
  if (mw->destroyed) return;
  unbind_locked(mw);
  keys().by_index.erase(mw->key >> 8);
  mw->destroyed = true;
  mw->pd->users--;
}

bool remote_access_ok(Qp* qp, uint32_t rkey, uint64_t addr, uint64_t len, int need) {
  std::lock_guard g(keys().mu);
  Owner o = owner_locked(rkey);
  if (const Mr* mr = o.mr)
    return mr->key == rkey && &mr->pd->pub == qp->pub.pd && (mr->access & need) &&
           in_range(mr_start(mr), mr->pub.length, addr, len);
  // A window grants its own rights over its own range, whatever the MR's remote rights are.
  const Mw* mw = o.mw;
  return mw && mw->key == rkey && mw->mr && &mw->pd->pub == qp->pub.pd &&
         (mw->pub.type == IBV_MW_TYPE_1 || mw->qp == qp) && (mw->access & need) &&
         in_range(mw->addr, mw->length, addr, len);
}

ibv_wc_status mw_bind(Qp* qp, const ibv_send_wr& wr) {
  Mw* mw = impl<Mw>(wr.bind_mw.mw);
  const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
  std::lock_guard g(keys().mu);
  if (const char* why = bind_refusal_locked(qp, mw, wr.bind_mw.mw->rkey, b)) {
    log_debug("qp %u: bind of window 0x%x refused: %s", qp->pub.qp_num, mw->key, why);
    return IBV_WC_MW_BIND_ERR;
  }
  unbind_locked(mw);
  // Only the tag comes from the work request: the index is the window's for life.
  mw->key = (mw->key & ~kTagMask) | (wr.bind_mw.rkey & kTagMask);
  if (b.length == 0) return IBV_WC_SUCCESS;
  mw->mr = impl<Mr>(b.mr);
  mw->mr->windows++;
  mw->addr = b.addr;
  mw->length = b.length;
  mw->access = b.mw_access_flags;
  if (mw->pub.type == IBV_MW_TYPE_2) mw->qp = qp;
  log_debug("qp %u: window 0x%x bound to %#llx+%llu access 0x%x", qp->pub.qp_num, mw->key,
            static_cast<unsigned long long>(b.addr), static_cast<unsigned long long>(b.length),
            b.mw_access_flags);
  return IBV_WC_SUCCESS;
}

ibv_wc_status mw_local_invalidate(Qp* qp, uint32_t rkey) {
  std::lock_guard g(keys().mu);
  Mw* mw = owner_locked(rkey).mw;
  // Type 1 windows cannot be invalidated, and softrdma's MRs are not fast-registration MRs (the
  // only MRs a local invalidate applies to). Invalidating a free window again is harmless.
  if (!mw || mw->key != rkey || mw->pub.type != IBV_MW_TYPE_2 || &mw->pd->pub != qp->pub.pd) {
    log_debug("qp %u: local invalidate of 0x%x refused", qp->pub.qp_num, rkey);
    return IBV_WC_LOC_QP_OP_ERR;
  }
  unbind_locked(mw);
  return IBV_WC_SUCCESS;
}

bool mw_remote_invalidate(Qp* qp, uint32_t rkey) {
  std::lock_guard g(keys().mu);
  Mw* mw = owner_locked(rkey).mw;
  // Only the peer the window was granted to may revoke it (a type 1 window never has a QP).
  if (!mw || mw->key != rkey || mw->qp != qp) return false;
  unbind_locked(mw);
  return true;
}

}  // namespace softrdma

extern "C" int softrdma_remote_keys() {
  constexpr int kRemote =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  std::lock_guard g(softrdma::keys().mu);
  int n = 0;
  for (const auto& [index, owner] : softrdma::keys().by_index) {
    if ((owner.mr && (owner.mr->access & kRemote)) || (owner.mw && owner.mw->mr)) ++n;
  }
  return n;
}

extern "C" int softrdma_live_mrs() {
  std::lock_guard g(softrdma::keys().mu);
  int n = 0;
  for (const auto& [index, owner] : softrdma::keys().by_index) n += owner.mr != nullptr;
  return n;
}

extern "C" int softrdma_live_mws() {
  std::lock_guard g(softrdma::keys().mu);
  int n = 0;
  for (const auto& [index, owner] : softrdma::keys().by_index) n += owner.mw != nullptr;
  return n;
}
