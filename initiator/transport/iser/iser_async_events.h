// RDMA asynchronous events (ibv_get_async_event): the only way a device reports a CQ overrun
// (IBV_EVENT_CQ_ERR), a QP that failed outside any work request (IBV_EVENT_QP_FATAL, the
// access and request errors) and a port or device going down. Without reading them a connection
// may stall with no completion ever saying why.
//
// librdmacm opens each RDMA device once per process, so every iSER connection to that device
// shares one verbs context and its one async fd: whichever connection's I/O thread reads an
// event may be reading another connection's. AsyncEvents routes each event to the connection
// that owns the QP or CQ it names; a port or device event goes to every connection on the
// context.
//
// Contract:
//  - Register before the connection's loop watches the context's async fd, Unregister before
//    its QP and CQ are destroyed; once Unregister returns, its callback is not running and is
//    never called again. Both from any thread.
//  - Drain reads what is pending on the context's async fd without blocking (it makes the fd
//    non-blocking) and calls the owners' callbacks on the calling thread, with a status naming
//    the event; a callback must be safe to call from another connection's thread.
//  - Events that end nothing (COMM_EST, LAST_WQE_REACHED, SQ_DRAINED, PORT_ACTIVE, ...) are
//    logged at debug and acknowledged.
#pragma once

#include <infiniband/verbs.h>

#include <functional>

#include "initiator/base/status.h"

namespace iser {

class AsyncEvents {
 public:
  using OnFatal = std::function<void(const Status&)>;

  static void Register(ibv_context* context, ibv_qp* qp, ibv_cq* cq, OnFatal on_fatal);
  static void Unregister(ibv_qp* qp);
  static void Drain(ibv_context* context);
};

}  // namespace iser
