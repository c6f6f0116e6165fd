// The one software device, softrdma0: device list, open/close, and the query verbs.
// Every open returns the same context (rdma_cm ids must share one ibv_context per device, and
// tgtd compares those pointers); its async_fd is a real eventfd.
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>

#include "api.h"
#include "log.h"
#include "objects.h"
#include "profile.h"

#undef ibv_query_port
#undef ibv_reg_mr

using namespace softrdma;

namespace {

constexpr uint64_t kGuid = 0x02005eff'fe000001ull;

ibv_device* the_device() {
  static ibv_device* dev = [] {
    auto* d = new ibv_device{};
    d->node_type = profile().node_type;
    d->transport_type = profile().transport_type;
    snprintf(d->name, sizeof d->name, "softrdma0");
    snprintf(d->dev_name, sizeof d->dev_name, "uverbs0");
    snprintf(d->dev_path, sizeof d->dev_path, "/dev/infiniband/uverbs0");
    snprintf(d->ibdev_path, sizeof d->ibdev_path, "/sys/class/infiniband/softrdma0");
    return d;
  }();
  return dev;
}

struct AsyncQueue {
  std::mutex mu;
  std::deque<ibv_async_event> events;
};
AsyncQueue& async_queue() {
  static auto* q = new AsyncQueue;
  return *q;
}

}  // namespace

namespace softrdma {

ibv_context* shared_context() {
  static ibv_context* ctx = [] {
    auto* c = new ibv_context{};
    c->device = the_device();
    c->cmd_fd = -1;
    c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    c->num_comp_vectors = 1;
    pthread_mutex_init(&c->mutex, nullptr);
    fill_context_ops(&c->ops);
    fill_mw_ops(&c->ops);
    return c;
  }();
  return ctx;
}

void post_async_event(const ibv_async_event& ev) {
  {
    std::lock_guard g(async_queue().mu);
    async_queue().events.push_back(ev);
  }
  uint64_t one = 1;
  if (write(shared_context()->async_fd, &one, sizeof one) < 0) log_warn("async event lost");
}

}  // namespace softrdma

extern "C" {

ibv_device** ibv_get_device_list(int* num) {
  auto** list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  list[0] = the_device();
  if (num) *num = 1;
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  free(list);
}

const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

__be64 ibv_get_device_guid(ibv_device*) {
  return htobe64(kGuid);
}

int ibv_get_device_index(ibv_device*) {
  return 0;
}

ibv_context* ibv_open_device(ibv_device*) {
  if (!profile_usable("ibv_open_device")) {
    errno = EINVAL;
    return nullptr;
  }
  return shared_context();
}

int ibv_close_device(ibv_context*) {
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* a) {
  const Profile& p = profile();
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "softrdma 0.1");
  a->node_guid = htobe64(kGuid);
  a->sys_image_guid = htobe64(kGuid);
  a->max_mr_size = UINT64_MAX;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = p.vendor_id;
  a->vendor_part_id = p.vendor_part_id;
  a->hw_ver = 1;
  a->max_qp = 65536;
  a->max_qp_wr = p.max_qp_wr;
  a->device_cap_flags = p.device_cap_flags;
  a->max_sge = p.max_sge;
  a->max_sge_rd = p.max_sge_rd;
  a->max_cq = 65536;
  a->max_cqe = p.max_cqe;
  a->max_mr = p.max_mr;
  a->max_mw = p.max_mw;
  a->max_pd = 65536;
  a->max_qp_rd_atom = p.max_qp_rd_atom;
  a->max_qp_init_rd_atom = p.max_qp_init_rd_atom;
  a->max_res_rd_atom = 1 << 20;
  a->max_srq = 0;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  a->atomic_cap = p.atomic_cap;
  return 0;
}

int ibv_query_port(ibv_context*, uint8_t port, _compat_ibv_port_attr* out) {
  if (port != 1) return EINVAL;
  ibv_port_attr a{};
  a.state = IBV_PORT_ACTIVE;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = IBV_MTU_4096;
  a.gid_tbl_len = 2;
  a.port_cap_flags = IBV_PORT_CM_SUP;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;     // VL0 only
  a.active_width = 2;   // 4x
  a.active_speed = 32;  // EDR
  a.phys_state = 5;     // LinkUp
  a.link_layer = profile().link_layer;
  // Callers without an extended context pass the legacy structure: fill only its prefix.
  memcpy(out, &a, offsetof(ibv_port_attr, port_cap_flags2) + sizeof a.port_cap_flags2);
  return 0;
}

static void gid_at(int index, ibv_gid* gid) {
  memset(gid, 0, sizeof *gid);
  if (index == 0) {
    gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
    gid->global.interface_id = htobe64(kGuid);
  } else {
    gid->raw[10] = gid->raw[11] = 0xff;
    in_addr lo{htonl(INADDR_LOOPBACK)};
    memcpy(&gid->raw[12], &lo, 4);
  }
}

int ibv_query_gid(ibv_context*, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index > 1) return -1;
  gid_at(index, gid);
  return 0;
}

// rdma-core's private enum ibv_gid_type_sysfs: 0 is IB/RoCE v1, 1 is RoCE v2.
int ibv_query_gid_type(ibv_context*, uint8_t port, unsigned index, int* type) {
  if (port != 1 || index > 1) return -1;
  *type = index == 0 ? 0 : 1;
  return 0;
}

int _ibv_query_gid_ex(ibv_context*, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t,
                      size_t) {
  if (port != 1 || index > 1) return EINVAL;
  memset(entry, 0, sizeof *entry);
  gid_at(index, &entry->gid);
  entry->gid_index = index;
  entry->port_num = 1;
  entry->gid_type = index == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 1;
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries, size_t max, uint32_t,
                             size_t sz) {
  size_t n = 0;
  for (uint32_t i = 0; i < 2 && n < max; i++, n++) _ibv_query_gid_ex(ctx, 1, i, &entries[n], 0, sz);
  return n;
}

int ibv_query_pkey(ibv_context*, uint8_t port, int index, __be16* pkey) {
  if (port != 1 || index != 0) return -1;
  *pkey = htobe16(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context*, uint8_t, __be16 pkey) {
  return pkey == htobe16(0xffff) ? 0 : -1;
}

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  const char* val = nullptr;
  if (!strcmp(file, "node_type"))
    val = profile().node_type == IBV_NODE_RNIC ? "4: RNIC" : "1: CA";
  else if (!strcmp(file, "board_id"))
    val = "softrdma";
  else if (!strcmp(file, "fw_ver"))
    val = "softrdma 0.1";
  if (!val || !strstr(dir, "softrdma0")) {
    errno = ENOENT;
    return -1;
  }
  return snprintf(buf, size, "%s", val);
}

int ibv_get_async_event(ibv_context* ctx, ibv_async_event* ev) {
  uint64_t v;
  if (read(ctx->async_fd, &v, sizeof v) != sizeof v) return -1;
  std::lock_guard g(async_queue().mu);
  if (async_queue().events.empty()) return -1;
  *ev = async_queue().events.front();
  async_queue().events.pop_front();
  return 0;
}

void ibv_ack_async_event(ibv_async_event*) {}

int ibv_fork_init(void) {
  return 0;
}
enum ibv_fork_status ibv_is_fork_initialized(void) {
  return IBV_FORK_DISABLED;
}
int ibv_dontfork_range(void*, size_t) {
  return 0;
}
int ibv_dofork_range(void*, size_t) {
  return 0;
}

}  // extern "C"

// Hardware providers linked into some programs (perftest links libmlx5 and libefa) register
// themselves from their constructors; softrdma has no use for them.
extern "C" void verbs_register_driver_34(const void*) {}
