#include "faults.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "conn.h"
#include "log.h"
#include "objects.h"

namespace softrdma {
namespace {

long setting(const char* name) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : 0;
}

// The QPs of this process's connections that are connected and not failed.
std::vector<Qp*> connected_qps() {
  std::vector<Qp*> qps;
  for (const auto& c : loop_connections()) {
    Qp* qp;
    {
      std::lock_guard g(c->mu);
      qp = c->qp;
    }
    if (qp == nullptr) continue;
    std::lock_guard g(qp->mu);  // objects are never freed: a QP destroyed meanwhile is harmless
    if (!qp->destroyed && qp->attr.qp_state == IBV_QPS_RTS) qps.push_back(qp);
  }
  return qps;
}

}  // namespace

bool fault_fail_reg_mr() {
  static const long n = setting("SOFTRDMA_FAIL_REG_MR");
  static std::atomic<long> count{0};
  return n > 0 && ++count == n;
}

bool fault_drop_now() {
  static const long n = setting("SOFTRDMA_DROP_AFTER");
  static std::atomic<long> count{0};
  return n > 0 && ++count == n + 1;
}

void fault_delay_completion() {
  static const long us = setting("SOFTRDMA_DELAY_US");
  if (us > 0) usleep(us);
}

}  // namespace softrdma

using namespace softrdma;

extern "C" int softrdma_raise_async_event(int event_type) {
  const auto type = static_cast<ibv_event_type>(event_type);
  if (type != IBV_EVENT_QP_FATAL && type != IBV_EVENT_QP_REQ_ERR &&
      type != IBV_EVENT_QP_ACCESS_ERR && type != IBV_EVENT_CQ_ERR) {
    errno = EINVAL;
    return -1;
  }
  const std::vector<Qp*> qps = connected_qps();
  int raised = 0;
  if (type == IBV_EVENT_CQ_ERR) {
    std::vector<Cq*> cqs;
    for (Qp* qp : qps) {
      for (ibv_cq* c : {qp->pub.send_cq, qp->pub.recv_cq}) {
        if (std::find(cqs.begin(), cqs.end(), impl<Cq>(c)) == cqs.end()) cqs.push_back(impl<Cq>(c));
      }
    }
    for (Cq* cq : cqs) {
      log_debug("fault injection: IBV_EVENT_CQ_ERR on CQ %p", static_cast<void*>(cq));
      raised += cq_raise_error(cq);
    }
    return raised;
  }
  for (Qp* qp : qps) {
    std::lock_guard g(qp->mu);
    if (qp->destroyed || qp->attr.qp_state != IBV_QPS_RTS) continue;
    log_debug("fault injection: %s on qp %u", ibv_event_type_str(type), qp->pub.qp_num);
    ibv_async_event ae{};
    ae.element.qp = &qp->pub;
    ae.event_type = type;
    post_async_event(ae);
    qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
    qp->pub.state = IBV_QPS_ERR;
    ++raised;
  }
  return raised;
}
