#include "initiator/transport/iser/iser_async_events.h"

#include <fcntl.h>

#include <string>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/base/mutex.h"

namespace iser {

namespace {

struct Owner {
  ibv_context* context;
  ibv_qp* qp;
  ibv_cq* cq;
  AsyncEvents::OnFatal on_fatal;
};

// Few connections, rare events: a list under one mutex. The callbacks run under it, which is
// what lets Unregister promise that none runs after it returns.
struct Registry {
  Mutex mu;
  std::vector<Owner> owners ISER_GUARDED_BY(mu);
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: I/O threads may outlive statics
  return *r;
}

// What ends the connection, or nullptr for an event that ends nothing.
const char* FatalMeaning(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR:
      return "the completion queue overran";
    case IBV_EVENT_QP_FATAL:
      return "the queue pair hit a fatal error";
    case IBV_EVENT_QP_REQ_ERR:
      return "the peer sent a request the queue pair cannot serve";
    case IBV_EVENT_QP_ACCESS_ERR:
      return "the peer used an STag or address it was not given";
    case IBV_EVENT_PATH_MIG_ERR:
      return "path migration failed";
    case IBV_EVENT_PORT_ERR:
      return "the RDMA port went down";
    case IBV_EVENT_DEVICE_FATAL:
      return "the RDMA device failed";
    default:
      return nullptr;
  }
}

bool ForWholeContext(ibv_event_type type) {
  return type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_DEVICE_FATAL;
}

}  // namespace

void AsyncEvents::Register(ibv_context* context, ibv_qp* qp, ibv_cq* cq, OnFatal on_fatal) {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.owners.push_back({context, qp, cq, std::move(on_fatal)});
}

void AsyncEvents::Unregister(ibv_qp* qp) {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  std::erase_if(r.owners, [qp](const Owner& o) { return o.qp == qp; });
}

void AsyncEvents::Drain(ibv_context* context) {
  const int flags = fcntl(context->async_fd, F_GETFL);
  if (!(flags & O_NONBLOCK)) fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK);
  ibv_async_event ev;
  while (ibv_get_async_event(context, &ev) == 0) {
    const ibv_event_type type = ev.event_type;
    const char* meaning = FatalMeaning(type);
    std::string what = std::string("RDMA async event ") + ibv_event_type_str(type);
    if (ForWholeContext(type)) what += " on port " + std::to_string(ev.element.port_num);
    if (meaning == nullptr) {
      Log(LogLevel::kDebug, what);
    } else {
      const Status status = Status::ConnectionFailed(what + ": " + meaning);
      Registry& r = registry();
      MutexLock lock(&r.mu);
      bool delivered = false;
      for (Owner& o : r.owners) {
        const bool mine =
            ForWholeContext(type)
                ? o.context == context
                : (type == IBV_EVENT_CQ_ERR ? o.cq == ev.element.cq : o.qp == ev.element.qp);
        if (!mine) continue;
        o.on_fatal(status);
        delivered = true;
      }
      // A connection already gone (its QP destroyed after the event was raised) needs nothing.
      if (!delivered) Log(LogLevel::kDebug, what + " for a connection already closed");
    }
    ibv_ack_async_event(&ev);
  }
}

}  // namespace iser
