// PathCutter: a TCP proxy between the initiator and one target portal, for multipath tests. The
// test points one path at port() instead of the portal and can then stall, cut and restore that
// path while the target, and the other paths, go on untouched.
//
// It listens on 127.0.0.1 on an ephemeral port, accepts any number of connections and relays each
// to the target (a new target connection per accepted one), bytes both ways, on one thread of its
// own. Each direction of a connection has a bounded buffer (1 MiB): a side is not read while the
// buffer it fills is full, so a slow reader slows the writer down as TCP would. When one side
// shuts down writing, the other side's write is shut down once its buffer has drained. When
// either side fails (reset, error) or the target cannot be reached, the other side is reset.
//
// The commands are thread-safe and each returns once it has taken effect:
//  - Stall: relays nothing more in either direction and accepts nothing (new connections wait in
//    the listen backlog), like a link gone dark: both peers see silence, the TCP connections stay
//    up. Nothing is lost: bytes read before the stall are relayed after Restore, in order.
//  - Cut: resets every current connection on both sides (RST), drops their buffered bytes, and
//    resets each new connection as soon as it is accepted, until Restore.
//  - Restore: relays again; after a stall the held bytes and the waiting connections go on.
//  - Reset: resets every current connection on both sides (a one-off loss of the connections);
//    the mode stays as it was, so when relaying, new connections are relayed at once.
// The destructor stops the thread and resets the connections still open.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/status.h"

namespace iser::test {

class PathCutter {
 public:
  // Resolves the target (a host name or a numeric address) and starts listening and the thread;
  // the target itself is only connected to when an initiator connects.
  static Result<std::unique_ptr<PathCutter>> Start(const std::string& target_host,
                                                   uint16_t target_port);
  ~PathCutter();
  PathCutter(const PathCutter&) = delete;
  PathCutter& operator=(const PathCutter&) = delete;

  uint16_t port() const { return port_; }
  std::string portal() const { return "127.0.0.1:" + std::to_string(port_); }

  void Stall();
  void Cut();
  void Restore();
  void Reset();

  // Connections taken to be relayed, whether or not the target then answered (those reset at once
  // during a Cut are not counted).
  uint64_t connections_accepted() const { return connections_accepted_.load(); }
  // Bytes written to the target's side and to the initiator's side of the relayed connections.
  uint64_t bytes_to_target() const { return bytes_to_target_.load(); }
  uint64_t bytes_to_initiator() const { return bytes_to_initiator_.load(); }

 private:
  enum class Mode { kRelay, kStalled, kCut };
  enum class Command { kStall, kCut, kRestore, kReset, kQuit };
  struct Connection;

  PathCutter(int listen_fd, int wake_fd, uint16_t port, const sockaddr_storage& target,
             socklen_t target_len);
  // Queues the command for the thread and waits until the thread has applied it.
  void Run(Command command);
  void Loop();
  // Applies the queued commands; returns false on kQuit.
  bool ApplyCommands();
  void AcceptAll();
  // Moves what it can in both directions (target_revents: what poll said of the target's side,
  // which ends a connect under way); returns false once the connection is over (closed after both
  // half-closes, or reset after a failure) and its descriptors closed.
  bool Pump(Connection& c, short target_revents);
  void ResetAll();

  const int listen_fd_;
  const int wake_fd_;  // eventfd: a command is queued
  const uint16_t port_;
  const sockaddr_storage target_;
  const socklen_t target_len_;

  std::mutex mutex_;
  std::condition_variable applied_cv_;
  std::vector<Command> queued_;  // under mutex_
  uint64_t issued_ = 0;          // under mutex_: commands queued so far
  uint64_t applied_ = 0;         // under mutex_: commands the thread has applied

  // The thread's own.
  Mode mode_ = Mode::kRelay;
  std::vector<std::unique_ptr<Connection>> connections_;

  std::atomic<uint64_t> connections_accepted_{0};
  std::atomic<uint64_t> bytes_to_target_{0};
  std::atomic<uint64_t> bytes_to_initiator_{0};

  std::thread thread_;
};

}  // namespace iser::test
