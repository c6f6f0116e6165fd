// ReceiveCoalescing: how long an iSCSI/TCP I/O thread waits before its next receive, so that
// responses are read and answered many at a time instead of one wake-up each.
//
// With many commands waiting, a thread that sleeps until the socket is readable wakes once or
// twice per response; on loopback that wake-up (a context switch, and the receive and send it
// leads to) is most of the initiator's CPU per 4 KiB read. Waiting a little before the next
// receive lets several responses arrive and be handled in one round, and the commands they free
// go out in one send: what a NIC's interrupt moderation does, on the receive side of a socket.
//
// Contract, on the I/O thread: Received() after each receive that brought data, with the count
// of final responses (SCSI Response, or Data-In with the S bit) and whether an R2T or a large
// data segment came; Delay() just before the next receive is armed, with the count of commands
// waiting for their final responses, says how long to wait before it (zero: at once):
//  - zero below kFrom waiting commands: at low queue depth every microsecond is latency;
//  - zero after an R2T (a write waits on it) or a large data segment (data that streams must be
//    read as it comes, or the socket buffer fills and the target stops sending);
//  - zero until the response rate has been measured while busy;
//  - otherwise the time a quarter of the waiting commands' responses take to arrive at that
//    rate: by Little's law about a quarter of one command's latency, so the target still holds
//    most of the commands and keeps working while we wait. At most kMost.
// Disabled (always zero) when the environment sets ISER_CONNECT_RECEIVE_COALESCING=0.
#pragma once

#include <chrono>
#include <cstdint>

#include "initiator/transport/datamover.h"

namespace iser {

class ReceiveCoalescing {
 public:
  static constexpr uint32_t kFrom = 16;
  static constexpr std::chrono::microseconds kMost{500};

  // Reads ISER_CONNECT_RECEIVE_COALESCING.
  ReceiveCoalescing();
  explicit ReceiveCoalescing(bool enabled) : enabled_(enabled) {}

  void Received(Clock::time_point now, uint32_t responses, bool r2t_or_large_data);
  std::chrono::nanoseconds Delay(uint32_t waiting);

 private:
  bool enabled_;
  bool busy_ = false;       // the receive in flight was armed with kFrom or more waiting
  bool streaming_ = false;  // the last receive brought an R2T or a large data segment
  // When the last receive that brought responses completed, if it and every receive since were
  // armed busy: the start of the next sample.
  bool measuring_ = false;
  Clock::time_point last_{};
  double nanos_per_response_ = 0;  // measured while busy; 0 until then
};

}  // namespace iser
