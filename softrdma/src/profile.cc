// The profiles' values. Where a value is a firmware or card property, it is a typical card's (named
// in docs/softrdma.md, with the source of every value).
#include "profile.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "log.h"

namespace softrdma {
namespace {

constexpr unsigned kIbMw = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;

// Name, transport, node type, transport type, link layer, vendor, part, capability flags,
// max_qp_wr, max_sge, max_sge_rd, max_cqe, max_mr, max_mw, max_qp_rd_atom, max_qp_init_rd_atom,
// atomics, inline rule, max inline, ibv_alloc_mw errno for type 1 and type 2, RC, caps checked,
// registration cost in microseconds, and how CQ depths are rounded (Exact when not given).
constexpr Profile kDefault{"default",
                           Transport::Ib,
                           IBV_NODE_CA,
                           IBV_TRANSPORT_IB,
                           IBV_LINK_LAYER_ETHERNET,
                           0xffffff,
                           1,
                           IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_MGT_EXTENSIONS | kIbMw,
                           16384,
                           32,
                           32,
                           1 << 20,
                           1 << 20,
                           65536,
                           128,
                           128,
                           IBV_ATOMIC_NONE,
                           InlineRule::Historic,
                           1024,
                           0,
                           0,
                           true,
                           false,
                           0};

constexpr Profile kProfiles[] = {
    {"mlx5",
     Transport::Ib,
     IBV_NODE_CA,
     IBV_TRANSPORT_IB,
     IBV_LINK_LAYER_ETHERNET,
     0x02c9,
     4119,
     IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_AUTO_PATH_MIG |
         IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
         IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_XRC | IBV_DEVICE_MEM_MGT_EXTENSIONS | kIbMw,
     32768,
     30,
     30,
     4194303,
     16777216,
     16777216,
     16,
     16,
     IBV_ATOMIC_HCA,
     InlineRule::Mlx5,
     988,
     0,
     0,
     true,
     true,
     25,
     CqRule::PowerOfTwoLessOne},
    {"rxe",
     Transport::Ib,
     IBV_NODE_CA,
     IBV_TRANSPORT_IB,
     IBV_LINK_LAYER_ETHERNET,
     0xffffff,
     0,
     IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_AUTO_PATH_MIG |
         IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_UD_AV_PORT_ENFORCE | IBV_DEVICE_PORT_ACTIVE_EVENT |
         IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
         IBV_DEVICE_MEM_MGT_EXTENSIONS | kIbMw,
     16384,
     32,
     32,
     32767,
     262144,
     65536,
     128,
     128,
     IBV_ATOMIC_HCA,
     InlineRule::Refuse,
     400,
     0,
     0,
     true,
     true,
     5,
     CqRule::PowerOfTwoLessOne},
    {"bnxt_re",
     Transport::Ib,
     IBV_NODE_CA,
     IBV_TRANSPORT_IB,
     IBV_LINK_LAYER_ETHERNET,
     0x14e4,
     0x16d7,
     IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SHUTDOWN_PORT |
         IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RESIZE_MAX_WR | IBV_DEVICE_PORT_ACTIVE_EVENT |
         IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_MEM_MGT_EXTENSIONS | kIbMw,
     65535,
     6,
     6,
     1048575,
     262144,
     262144,
     126,
     126,
     IBV_ATOMIC_NONE,
     InlineRule::Refuse,
     96,
     EOPNOTSUPP,
     EOPNOTSUPP,
     true,
     true,
     25},
    {"siw",
     Transport::Iwarp,
     IBV_NODE_RNIC,
     IBV_TRANSPORT_IWARP,
     IBV_LINK_LAYER_ETHERNET,
     0x626d74,
     0,
     IBV_DEVICE_MEM_MGT_EXTENSIONS,
     32768,
     6,
     1,
     3276800,
     1024000,
     0,
     128,
     128,
     IBV_ATOMIC_NONE,
     InlineRule::Refuse,
     80,
     EOPNOTSUPP,
     EOPNOTSUPP,
     true,
     true,
     5,
     CqRule::PowerOfTwo},
    {"irdma-roce",
     Transport::Ib,
     IBV_NODE_CA,
     IBV_TRANSPORT_IB,
     IBV_LINK_LAYER_ETHERNET,
     0x8086,
     0x1593,
     IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_RC_RNR_NAK_GEN,
     4063,
     13,
     13,
     1048575,
     2097152,
     2097152,
     127,
     127,
     IBV_ATOMIC_NONE,
     InlineRule::Refuse,
     101,
     0,
     0,
     true,
     true,
     25},
    {"irdma-iwarp",
     Transport::Iwarp,
     IBV_NODE_RNIC,
     IBV_TRANSPORT_IWARP,
     IBV_LINK_LAYER_ETHERNET,
     0x8086,
     0x1593,
     IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_MGT_EXTENSIONS,
     4063,
     13,
     13,
     1048575,
     2097152,
     2097152,
     127,
     127,
     IBV_ATOMIC_NONE,
     InlineRule::Refuse,
     101,
     0,
     0,
     true,
     true,
     25},
    {"cxgb4",
     Transport::Iwarp,
     IBV_NODE_RNIC,
     IBV_TRANSPORT_IWARP,
     IBV_LINK_LAYER_ETHERNET,
     0x1425,
     0x6408,
     IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_MGT_EXTENSIONS,
     16383,
     4,
     1,
     32767,
     524288,
     524288,
     32,
     32,
     IBV_ATOMIC_NONE,
     InlineRule::Clamp,
     280,
     0,
     EINVAL,
     true,
     true,
     25},
    {"efa",
     Transport::Other,
     IBV_NODE_UNSPECIFIED,
     IBV_TRANSPORT_UNSPECIFIED,
     IBV_LINK_LAYER_UNSPECIFIED,
     0x1d0f,
     0xefa1,
     0,
     4096,
     2,
     1,
     32768,
     262144,
     0,
     0,
     0,
     IBV_ATOMIC_NONE,
     InlineRule::Refuse,
     32,
     EOPNOTSUPP,
     EOPNOTSUPP,
     false,
     true,
     25},
};

struct Choice {
  const Profile* profile = &kDefault;
  bool known = true;
  std::string asked;
};

const Choice& choice() {
  static const Choice c = [] {
    Choice r;
    const char* name = getenv("SOFTRDMA_PROFILE");
    if (!name || !*name) return r;
    r.asked = name;
    r.known = false;
    for (const Profile& p : kProfiles) {
      if (r.asked == p.name) {
        r.profile = &p;
        r.known = true;
      }
    }
    return r;
  }();
  return c;
}

}  // namespace

const Profile& profile() {
  return *choice().profile;
}

bool profile_known() {
  return choice().known;
}

const char* profile_names() {
  static const std::string names = [] {
    std::string s;
    for (const Profile& p : kProfiles) s += s.empty() ? p.name : std::string(" ") + p.name;
    return s;
  }();
  return names.c_str();
}

bool profile_usable(const char* who) {
  if (profile_known()) return true;
  log_warn("%s: SOFTRDMA_PROFILE=%s is not a known profile (known: %s)", who,
           choice().asked.c_str(), profile_names());
  return false;
}

unsigned reg_mr_cost_us() {
  static const unsigned us = [] {
    const char* v = getenv("SOFTRDMA_REG_MR_US");
    return v && *v ? static_cast<unsigned>(strtoul(v, nullptr, 10)) : profile().reg_mr_us;
  }();
  return us;
}

}  // namespace softrdma
