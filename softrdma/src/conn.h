// A softrdma connection: one local stream socket between two RC QPs (or a CM handshake in
// progress), driven by the background loop. Contract: send() never blocks (bytes the socket does
// not take are queued and flushed by the loop), so application threads and the loop thread can
// never deadlock on each other's full sockets. Incoming messages are dispatched in order on the
// loop thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "objects.h"
#include "wire.h"

namespace softrdma {

struct CmIdImpl;

struct ParkedSend {
  std::vector<uint8_t> msg;
};

struct Conn : std::enable_shared_from_this<Conn> {
  int fd = -1;
  pid_t peer_pid = 0;
  bool push = false;  // the peer cannot reach our memory: send payloads in the stream
  std::mutex out_mu;
  std::string out;
  bool want_out = false;
  std::vector<uint8_t> in;
  size_t in_used = 0;

  // Owned by the loop thread.
  std::mutex mu;
  Qp* qp = nullptr;
  CmIdImpl* id = nullptr;  // the connected cm id, or the listener while a REQ is awaited
  bool awaiting_req = false;
  bool closed = false;  // socket gone (EOF or error)
  bool local_disconnect = false;
  bool remote_disconnect = false;
  bool disconnected_reported = false;
  std::deque<std::vector<uint8_t>> rnr_parked;  // SENDs waiting for a receive, in order
  // RNR retries left for the first parked SEND, counted down by a timerfd that fires every
  // responder RNR timer period; only for an rnr_retry of 1-6 (7 waits forever).
  int rnr_timer_fd = -1;
  uint8_t rnr_retries_left = 0;
  uint32_t acked_psn = 0;
  uint32_t done_psn = 0;
  uint32_t seen_psn = 0;

  void send(const void* data, size_t len);
  void send_locked(const void* data, size_t len);  // caller holds out_mu
  // Shuts the socket down both ways: both ends then see the peer vanish.
  void cut();
  void flush_locked();
  void watch_output_locked();  // EPOLLOUT on the loop exactly while `out` holds bytes
};

// Registers a connected nonblocking socket with the loop (starting it if needed).
std::shared_ptr<Conn> conn_add(int fd, CmIdImpl* id, bool awaiting_req);
// Registers a listening socket; accepted sockets become Conns awaiting a REQ for `listener`,
// after `greeting` is sent on them.
void listener_add(int fd, CmIdImpl* listener, std::string greeting = {});
void listener_remove(int fd);
// Called by post_recv: retries SENDs parked on this connection for lack of a receive.
void conn_kick(const std::shared_ptr<Conn>& c);
// Adds c->rnr_timer_fd to the loop; its expiries call transport_rnr_timer.
void conn_watch_rnr_timer(const std::shared_ptr<Conn>& c);
// Runs fn on the loop thread once `delay` has passed (starting the loop if needed).
void loop_after(std::chrono::milliseconds delay, std::function<void()> fn);
// The connections the loop watches now, each once (fault injection finds their QPs here).
std::vector<std::shared_ptr<Conn>> loop_connections();

// Implemented by the CM library side (cm hooks registered at runtime, so libibverbs does not
// depend on librdmacm).
struct CmHooks {
  void (*on_message)(const std::shared_ptr<Conn>& c, const WireHdr* msg);
  void (*on_close)(const std::shared_ptr<Conn>& c);
};
void set_cm_hooks(const CmHooks* hooks);

// Responder and requester processing of transport messages (loop thread).
void transport_message(const std::shared_ptr<Conn>& c, const WireHdr* msg);
void transport_send_ack(const std::shared_ptr<Conn>& c);
void transport_rnr_timer(const std::shared_ptr<Conn>& c);

}  // namespace softrdma
