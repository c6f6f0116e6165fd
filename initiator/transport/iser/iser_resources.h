// IserResources: the RDMA objects of one iSER connection and their lifetime: the RDMA CM event
// channel and id (address and route resolution, connect, disconnect), the protection domain,
// the completion channel and CQ, the RC queue pair, and the registered receive and send
// buffers. It posts receives and sends; what the messages mean is the datamover's business.
//
// Contract:
//  - Connect sets everything up in order (and IserMemory's slots in the same PD), posts every
//    receive before connecting, and leaves a connected QP; on an error the caller tears down.
//  - Queue depths come from the device: up to kRecvBuffers receives of kBufferBytes each (iSER
//    header, BHS and our 8 KiB receive data segment) and kSendSlots send buffers, fewer where
//    the device's max_qp_wr or max_cqe is smaller; the CQ holds a completion for every work
//    request we post, signalled or not (a flush completes them all), so it cannot overrun (an
//    overrun is IBV_EVENT_CQ_ERR and the end of the connection). receive_count() is what was
//    posted.
//  - Receives are reposted by the datamover once processed; the session never has more
//    requests awaiting an answer than receives are posted (Datamover::MaxOutstandingCommands):
//    on IB and RoCE a SEND that finds no receive waits out an RNR timer, on iWARP it ends the
//    connection.
//  - Sends: a slot taken by QueueSend is free again when its completion is released with
//    ReleaseSendSlot. FlushSends posts everything queued in one ibv_post_send. A PDU that fits
//    the QP's inline size (asked for at creation, then what the QP got) is sent inline: the
//    device copies it at post time instead of fetching it later by DMA.
//  - Teardown is in two steps around IserMemory::Release, in the order the verbs require:
//    DestroyQueuePair (orderly disconnect, then the QP), then memory, then Release (the
//    buffers, CQ, channels, PD and CM id).
// Everything runs on one thread at a time: the login thread, then the datamover's I/O thread.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/pdu/bhs.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/iser/iser_header.h"

namespace iser {

class IserMemory;
struct Portal;

class IserResources {
 public:
  static constexpr size_t kPduHeader = kIserHeaderLength + kBhsLength;
  static constexpr size_t kBufferBytes = 8448;  // iSER header + BHS + 8 KiB data, rounded up
  // Receives: more than any target's CmdSN window we have met (tgt 128, LIO 64) plus NOP-In
  // pings, Async Messages and answers to immediate PDUs.
  static constexpr uint32_t kRecvBuffers = 160;
  static constexpr uint32_t kSendSlots = 160;
  // The fewest of each a connection takes when RLIMIT_MEMLOCK leaves little.
  static constexpr uint32_t kMinBuffers = 24;
  // Receives kept for PDUs the target sends unasked (NOP-In pings, Async Messages, Rejects) and
  // answers to our NOP-Out, Text and Logout requests.
  static constexpr uint32_t kUnexpectedReceives = 8;
  // Inline size asked for: an iSER header and BHS (a command PDU) and a little more.
  static constexpr uint32_t kInlineBytes = 128;

  IserResources() = default;
  ~IserResources();
  IserResources(const IserResources&) = delete;
  IserResources& operator=(const IserResources&) = delete;

  Status Connect(const Portal& portal, Deadline deadline, IserMemory* memory);
  uint8_t responder_resources() const { return responder_resources_; }
  uint32_t receive_count() const { return recv_count_; }
  uint32_t max_inline_data() const { return max_inline_; }

  ibv_context* context() const { return id_->verbs; }
  ibv_qp* qp() const { return id_->qp; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* comp_channel() const { return comp_channel_; }
  rdma_event_channel* cm_channel() const { return cm_channel_; }
  const char* device_name() const;

  // Starts a disconnect (the QP flushes); Teardown still waits for its end.
  void Disconnect();
  // The target ended the connection.
  void MarkDisconnected() { connected_ = false; }

  const uint8_t* receive_buffer(uint32_t index) const {
    return recv_base_ + size_t{index} * kBufferBytes;
  }
  Status PostReceive(uint32_t index);

  // A free send slot (taken by QueueSend), or -1.
  int FreeSendSlot() const { return free_send_slots_.empty() ? -1 : free_send_slots_.back(); }
  uint8_t* send_buffer(int slot) const { return send_slots_[slot]; }
  void ReleaseSendSlot(uint32_t index);
  // Queues a SEND of `length` bytes from `slot` (a slot FreeSendSlot returned), after `bind` if
  // not null, for FlushSends.
  void QueueSend(int slot, size_t length, const ibv_send_wr* bind);
  // Posts what QueueSend queued in one ibv_post_send: one doorbell (under softrdma, one socket
  // write and one wake-up of the target) for all the PDUs one wake-up of the I/O thread produced.
  Status FlushSends();

  void DestroyQueuePair();
  void Release();

 private:
  Status WaitCmEvent(rdma_cm_event_type want, Deadline deadline, const char* what);
  Status SetUp(IserMemory* memory);

  std::string peer_;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* comp_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool qp_created_ = false;
  bool connected_ = false;
  uint8_t responder_resources_ = 1;
  uint32_t recv_count_ = 0;
  uint32_t send_count_ = 0;
  uint32_t max_inline_ = 0;
  size_t locked_ = 0;  // reserved in the process's memlock budget (iser_memory.h)

  std::vector<uint8_t*> regions_;  // page-aligned allocations, freed at Release
  ibv_mr* recv_mr_ = nullptr;
  uint8_t* recv_base_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  std::vector<uint8_t*> send_slots_;
  std::vector<int> free_send_slots_;  // a stack: the most recently used first (warm caches)
  // QueueSend's work requests and SGEs; reserved once, so the links between them stay valid.
  std::vector<ibv_send_wr> queued_wrs_;
  std::vector<ibv_sge> queued_sges_;
};

}  // namespace iser
