// Which iSCSI/TCP datamover a process uses: UringDatamover (io_uring) where io_uring works,
// TcpDatamover (epoll) where it is missing or refused (kernel.io_uring_disabled, a container's
// seccomp profile: Docker's default blocks io_uring_setup). The environment variable
// ISER_CONNECT_TCP_DATAMOVER=io_uring|epoll forces one.
#pragma once

#include <memory>
#include <string>

#include "initiator/base/status.h"
#include "initiator/transport/datamover.h"

namespace iser {

enum class TcpDatamoverKind { kIoUring, kEpoll };

struct TcpDatamoverChoice {
  TcpDatamoverKind kind = TcpDatamoverKind::kEpoll;
  // Why, for the log line: the variable that forced it, or why io_uring could not be used.
  std::string reason;
};

// Reads ISER_CONNECT_TCP_DATAMOVER, else probes io_uring (UringDatamover::Probe), and logs one
// info line saying which datamover and why ("iSCSI/TCP datamover: epoll (io_uring_setup:
// Operation not permitted)"). An unknown value of the variable, or io_uring forced where it
// fails, is an error.
Result<TcpDatamoverChoice> ChooseTcpDatamover();

// A fresh, unconnected datamover of that kind.
std::unique_ptr<Datamover> NewTcpDatamover(TcpDatamoverKind kind);

}  // namespace iser
