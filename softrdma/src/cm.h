// softrdma's RDMA CM objects. Contract: CmIdImpl starts with the public rdma_cm_id and EventChannel
// with the public rdma_event_channel, whose fd is an eventfd counting queued events, so
// rdma_get_cm_event blocks in read() (a cancellation point) without holding any lock.
#pragma once

#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "api.h"
#include "conn.h"

namespace softrdma {

struct EventChannel {
  rdma_event_channel pub;
  std::mutex mu;
  std::deque<rdma_cm_event*> events;
};

enum class IdState {
  Idle,
  AddrResolved,
  RouteResolved,
  Listening,
  Connecting,
  Requested,
  Accepting,
  Connected,
  Disconnected
};

struct CmIdImpl {
  rdma_cm_id pub;
  std::mutex mu;
  IdState state = IdState::Idle;
  std::shared_ptr<Conn> conn;
  int listen_fd = -1;
  int tcp_listen_fd = -1;  // the same listener for processes on other hosts (see cm.cc)
  sockaddr_storage src{};
  sockaddr_storage dst{};
  uint8_t rnr_retry = 7;       // ours, sent in REQ or REP: how often the peer retries its sends
  uint8_t peer_rnr_retry = 7;  // the peer's, from its REQ or REP: what our QP uses
  ReadDepths read_depths;      // from our conn params and the peer's REQ or REP
  bool reaches_peer = false;   // our cross-memory probe of the peer worked
  uint32_t local_qpn = 0;      // named in our REQ or REP
  uint32_t remote_qpn = 0;
  bool timewait_sent = false;
  bool destroyed = false;  // by rdma_destroy_id: a pending TIMEWAIT_EXIT is not delivered
  // Events handed out by rdma_get_cm_event and acknowledged so far: rdma_destroy_id waits until
  // they are equal, as librdmacm does (a program's event thread may still be using the id).
  uint32_t events_reported = 0;
  uint32_t events_acked = 0;
  std::condition_variable acked;
};

struct CmEvent {
  rdma_cm_event pub;
  uint8_t pdata[kMaxPrivateData];
};

}  // namespace softrdma
