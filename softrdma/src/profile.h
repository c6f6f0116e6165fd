// Device profiles (SOFTRDMA_PROFILE=NAME): softrdma0 answers and refuses as one family of real
// RDMA NIC does, through its rdma-core provider and kernel driver. Values and their sources are in
// docs/softrdma.md. Contract: profile() is read once per process and never changes; without
// SOFTRDMA_PROFILE it is the default profile, which keeps softrdma's own historic answers (close
// to rxe, with larger limits). An unknown name leaves profile_known() false: device open and
// rdma_create_id then fail with a message naming the known profiles.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace softrdma {

enum class Transport {
  Ib,     // InfiniBand or RoCE: RNR NAKs, IB CM
  Iwarp,  // RDMAP/DDP/MPA over TCP: no RNR, MPA rules
  Other,  // neither (EFA's SRD): the RDMA CM does not serve the device
};

// What ibv_create_qp does with cap.max_inline_data.
enum class InlineRule {
  Historic,  // the default profile: raised to 64, lowered to 1024, never refused
  Refuse,    // above max_inline: EINVAL; else granted as asked
  Mlx5,      // granted up to the end of the send WQE (64-byte units); above max_inline: EINVAL
  Clamp,     // always granted max_inline, whatever was asked (cxgb4)
};

// What ibv_create_cq grants for `cqe` entries (what cq->cqe says, and what the CQ holds before a
// completion overruns it). Only the rules read in a provider's source are modelled; the others
// grant exactly what was asked.
enum class CqRule {
  Exact,              // the default profile, and those whose rule is not modelled
  PowerOfTwoLessOne,  // roundup_pow_of_two(cqe + 1) - 1 (mlx5, rxe)
  PowerOfTwo,         // roundup_pow_of_two(cqe) (siw)
};

struct Profile {
  const char* name;
  Transport transport;
  ibv_node_type node_type;
  ibv_transport_type transport_type;
  uint8_t link_layer;  // IBV_LINK_LAYER_*
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  unsigned device_cap_flags;
  int max_qp_wr;
  int max_sge;
  int max_sge_rd;
  int max_cqe;
  int max_mr;
  int max_mw;
  int max_qp_rd_atom;       // as responder
  int max_qp_init_rd_atom;  // as requester
  ibv_atomic_cap atomic_cap;
  InlineRule inline_rule;
  uint32_t max_inline;
  // ibv_alloc_mw: 0 when the type is allocated, else the errno it fails with.
  int mw_type1_errno;
  int mw_type2_errno;
  bool rc;  // RC QPs exist (EFA has none)
  // Whether ibv_create_qp refuses caps above the limits above with EINVAL (real providers do;
  // the default profile never did).
  bool check_caps;
  unsigned reg_mr_us;  // default cost of ibv_reg_mr and ibv_dereg_mr (SOFTRDMA_REG_MR_US)
  CqRule cq_rule = CqRule::Exact;
};

const Profile& profile();
bool profile_known();
// Logs, once per call site that asks, why the device cannot be opened; false if it can't.
bool profile_usable(const char* who);
// The space-separated names SOFTRDMA_PROFILE takes.
const char* profile_names();
// The microseconds ibv_reg_mr and ibv_dereg_mr take: SOFTRDMA_REG_MR_US, else the profile's.
unsigned reg_mr_cost_us();

}  // namespace softrdma
