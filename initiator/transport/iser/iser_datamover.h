// The iSER datamover (RFC 7145, iSER-assisted mode): one RDMA CM connection (RC QP) to the
// portal, carrying every PDU in an RDMA SEND behind the 28-byte iSER header. The target moves
// SCSI data itself: RDMA WRITE into our read buffers, RDMA READ from our write buffers, using
// the STags and addresses we advertise in the command's iSER header; no Data-In, R2T or
// Data-Out cross the wire (a target that sends them breaks the protocol).
//
// Written against the standard rdma-core API only (librdmacm + libibverbs): the same code runs
// on RDMA hardware and on softrdma.
//
// Memory. Each command's STag exposes exactly that command's bytes, for the one direction it
// needs (REMOTE_WRITE for reads, REMOTE_READ for writes), and is revoked when its SCSI Response
// arrives (or the connection fails), so a target that uses a stale or out-of-range STag fails
// with a remote access error instead of touching our memory. Where the bytes are:
//  - commands of at least kDirectBytes: in the caller's buffer, registered for this command and
//    deregistered after it (zero copy: a registration costs less than copying that much);
//  - smaller ones, or when a registration fails (RLIMIT_MEMLOCK): copied through a pool of
//    pre-registered slots (reads when the SCSI Response arrives, writes before the command is
//    sent). Where the device has type 2 memory windows, each slot is one MR with no remote
//    access and a window is bound over the command's bytes (a BIND_MW chained before the
//    command's SEND, a LOCAL_INV after its response: two work requests, no system call);
//    otherwise the slot's bytes are registered per command too.
// docs/initiator.md has the measured cost of each. Receive buffers (28 + 48 + 8192 bytes each)
// and send buffers are registered once. RLIMIT_MEMLOCK is checked before registering, so a small
// `ulimit -l` gives a clear error instead of a failed registration.
//
// Flow control: all receives are posted before connecting (more than the CmdSN window the
// session honours plus room for NOP-In pings and Async Messages), and every receive is reposted
// as soon as its completion is processed; sends never exceed the send queue.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "initiator/transport/datamover.h"

namespace iser {

class IserDatamover final : public Datamover {
 public:
  IserDatamover();
  ~IserDatamover() override;

  Status Connect(const Portal& portal, Deadline deadline) override;
  std::string Describe() const override { return "iSER " + peer_; }
  Status SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) override;
  Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) override;
  Status EnterFullFeature(const ConnectionParams& params) override;
  uint32_t MaxTransferBytes() const override { return kDataSlotBytes; }
  // How STags are made, for logs.
  const char* StagMethod() const;
  Status Start(DatamoverEvents* events) override;
  void Wake() override;
  bool OnIoThread() const override { return std::this_thread::get_id() == io_thread_id_; }
  void SendCommand(Task* task) override;
  void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) override;
  void SendControl(const Bhs& bhs, std::span<const uint8_t> data) override;
  void Abort(const Status& status) override { Fail(status); }
  void Shutdown() override;

  // tgt refuses more than 512 KiB per command and direction (docs/iser-wire.md,
  // "tgt 1.0.85's iSER target").
  static constexpr uint32_t kDataSlotBytes = 512 * 1024;
  // From this size on the caller's buffer is registered instead of copied.
  static constexpr uint32_t kDirectBytes = 128 * 1024;

 private:
  struct DataSlot {
    uint8_t* addr = nullptr;
    ibv_mr* base_mr = nullptr;  // memory windows: the slot, bindable, no remote access
    ibv_mw* mw = nullptr;
    uint32_t stag = 0;  // the window's current key
  };
  struct Exposure {  // what one command in flight lets the target access
    Task* task = nullptr;
    DataSlot* slot = nullptr;  // bytes copied through this slot (its window or io_mr), and/or
    ibv_mr* io_mr = nullptr;   // a registration for this command alone
  };
  struct SendSlot {
    uint8_t* addr = nullptr;
  };
  struct Pending {  // waits for a send slot or a data slot
    Task* task;     // a command, or nullptr for a control PDU
    Bhs bhs;
    std::vector<uint8_t> data;
  };

  Status SetUpResources(ibv_context* verbs);
  Status CheckMemlock(size_t bytes) const;
  Status PostReceive(uint32_t index);
  Status WaitCmEvent(rdma_cm_event_type want, Deadline deadline, const char* what);
  // What one work completion means: a receive to handle, a send slot to release, nothing (a
  // flush after we failed or stopped, a bind or invalidate), or an error ending the connection.
  struct Completion {
    enum Kind { kNothing, kReceive, kSendDone } kind = kNothing;
    uint32_t index = 0;
    uint32_t length = 0;
  };
  Status Classify(const ibv_wc& wc, Completion* out) const;
  // Processes completions until one receive arrives (login phase) or the deadline passes.
  Status PollForReceive(uint32_t* index, uint32_t* length, Deadline deadline);
  void Run();
  void DrainCompletions();
  // Checks the message in receive buffer `index` (iSER header, BHS, length) and finds its PDU.
  Status DecodeReceive(uint32_t index, uint32_t length, Bhs* bhs,
                       std::span<const uint8_t>* data) const;
  void HandleReceive(uint32_t index, uint32_t length);
  void HandleCmEvent();
  bool TrySend(Task* task, const Bhs& bhs, std::span<const uint8_t> data);
  // Gives the target access to the task's data (or the part not sent with the command): the
  // STag and address for the iSER header, and a bind to post before the command if any. Returns
  // false when no slot is free (try again after a completion).
  bool Expose(Task* task, uint32_t sent, uint32_t* stag, uint64_t* va, ibv_send_wr* bind,
              Status* error);
  // Ends the access Expose gave (at the SCSI Response, or when the connection fails); for
  // reads through a slot, copies `data_in` bytes to the caller first.
  void Revoke(Exposure* e, uint32_t data_in);
  void SendQueued();
  int FreeSendSlot();  // a free send slot (taken by QueueSend), or -1
  void ReleaseSendSlot(uint32_t index);
  Status PostSend(int slot, size_t length);
  // Queues a SEND of `length` bytes from `slot` (a slot FreeSendSlot returned), after `bind` if
  // not null, for FlushSends.
  void QueueSend(int slot, size_t length, const ibv_send_wr* bind);
  // Posts what QueueSend queued in one ibv_post_send: one doorbell (under softrdma, one socket
  // write and one wake-up of the target) for all the PDUs one wake-up of the I/O thread produced.
  Status FlushSends();
  void Fail(Status status);
  void Teardown();

  std::string peer_;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* comp_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool qp_created_ = false;
  bool connected_ = false;
  uint8_t responder_resources_ = 1;
  bool memory_windows_ = false;
  bool direct_ = true;

  std::vector<uint8_t*> regions_;  // page-aligned allocations, freed at teardown
  ibv_mr* recv_mr_ = nullptr;
  uint8_t* recv_base_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  std::vector<SendSlot> send_slots_;
  std::vector<DataSlot> data_slots_;
  std::vector<int> free_send_slots_;  // stacks: the most recently used first (warm caches)
  std::vector<DataSlot*> free_small_slots_;
  std::vector<DataSlot*> free_large_slots_;
  std::vector<Exposure> by_itt_;  // ITT slot bits → what that command exposes
  std::deque<Pending> pending_;
  // QueueSend's work requests and SGEs; reserved once, so the links between them stay valid.
  std::vector<ibv_send_wr> queued_wrs_;
  std::vector<ibv_sge> queued_sges_;
  std::deque<uint32_t> ready_receives_;  // completed receives seen while waiting for a send

  DatamoverEvents* events_ = nullptr;
  std::thread io_thread_;
  std::thread::id io_thread_id_;
  std::atomic<bool> stopping_{false};
  bool failed_ = false;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int timer_fd_ = -1;
  uint32_t target_recv_dsl_ = 8192;
};

}  // namespace iser
