// The iSER datamover (RFC 7145, iSER-assisted mode): one RDMA CM connection (RC QP) to the
// portal, carrying every PDU in an RDMA SEND behind the 28-byte iSER header. The target moves
// SCSI data itself: RDMA WRITE into our read buffers, RDMA READ from our write buffers, using
// the STags and addresses we advertise in the command's iSER header; no Data-In, R2T or
// Data-Out cross the wire (a target that sends them breaks the protocol). So this datamover does
// not count Data-In bytes (DataInAccounting::kTargetPlaced): only the target's residual says
// how much of a read it wrote.
//
// Written against the standard rdma-core API only (librdmacm + libibverbs): the same code runs
// on RDMA hardware and on softrdma. Three parts, as in the Linux iSER initiator:
//  - IserResources (iser_resources.h): the RDMA objects, their setup and teardown, and posting;
//  - IserMemory (iser_memory.h): what the target may reach in our memory, and for how long;
//  - this: the login-phase PDU exchange on the caller's thread, and in full feature phase the
//    I/O thread (an IoLoop named "iser-io") that turns completions into PDU events and queued
//    PDUs into SENDs.
//
// Flow control: all receives are posted before connecting, and every receive is reposted as
// soon as its completion is processed; the session never has more requests awaiting an answer
// than receives are posted (MaxOutstandingCommands); sends never exceed the send queue. The
// device's async events (a CQ overrun, a fatal QP, a port down) end the connection with a
// status naming them, as a flushed work request does. The PDUs one wake-up
// of the I/O thread produces are posted with one ibv_post_send.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/io_loop.h"
#include "initiator/transport/iser/iser_memory.h"
#include "initiator/transport/iser/iser_resources.h"

namespace iser {

class IserDatamover final : public Datamover, private IoLoopEvents {
 public:
  IserDatamover();
  ~IserDatamover() override;

  Status Connect(const Portal& portal, Deadline deadline) override;
  std::string Describe() const override { return "iSER " + peer_; }
  Status SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) override;
  Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) override;
  Status EnterFullFeature(const ConnectionParams& params) override;
  uint32_t MaxTransferBytes() const override { return IserMemory::kDataSlotBytes; }
  uint32_t MaxOutstandingCommands() const override {
    return res_.receive_count() - IserResources::kUnexpectedReceives;
  }
  std::string Mechanism() const override;
  DataInAccounting data_in_accounting() const override { return DataInAccounting::kTargetPlaced; }
  // Commands wait for a data slot or locked memory, and control PDUs pass them (SendQueued).
  bool PostsCommandsLater() const override { return true; }
  void SetTimerPeriod(std::chrono::milliseconds period) override { loop_.set_tick(period); }
  Status Start(DatamoverEvents* events) override;
  void Wake() override { loop_.Wake(); }
  bool OnIoThread() const override { return loop_.OnIoThread(); }
  void SendCommand(Task* task) override;
  void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) override;
  void SendControl(const Bhs& bhs, std::span<const uint8_t> data) override;
  void Retire(Task* task) override;
  void Abort(const Status& status) override { Fail(status); }
  void Shutdown() override;

 private:
  // A PDU waiting for a send slot, or a command waiting for a data slot or locked memory.
  struct Pending {
    Task* task;  // the command, or the command whose unsolicited Data-Out this is; nullptr for
                 // a control PDU
    bool data_out;
    Bhs bhs;
    std::vector<uint8_t> data;
  };
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
  // IoLoopEvents.
  void OnLoopStart() override;
  void OnWake() override;
  void OnTick() override { events_->OnTimer(); }
  void OnRoundEnd() override;
  // A failure Retire deferred to the round's end comes first: the loop ends here.
  void OnLoopFailure(const Status& status) override {
    ReportDeferredFailure();
    Fail(status);
  }

  void OnCompletionChannel();
  void DrainCompletions();
  // Checks the message in receive buffer `index` (iSER header, BHS, length) and finds its PDU.
  Status DecodeReceive(uint32_t index, uint32_t length, Bhs* bhs,
                       std::span<const uint8_t>* data) const;
  void HandleReceive(uint32_t index, uint32_t length);
  void HandleCmEvent();
  // An async event another thread read for this connection (AsyncEvents), if any, ends it.
  void TakeAsyncFailure();
  // A fatal QP or CQ also shows as flushed work requests, or as the target disconnecting once it
  // finds our QP in error, in no order the verbs specify against its async event: the event, if
  // one is pending for this connection (the async fd is read first), else the symptom.
  Status CauseOf(Status symptom);
  bool TrySend(Task* task, const Bhs& bhs, std::span<const uint8_t> data);
  // Sends what pending_ holds while send slots last. Commands and their Data-Out keep their
  // order among themselves; a control PDU (NOP-Out, task management, Text, Logout) passes the
  // commands that wait for a data slot or locked memory, so a keepalive or an abort is never
  // held behind the data it is about.
  void SendQueued();
  // Ends the connection and reports it to the session now.
  void Fail(Status status);
  // Ends the connection: the queue pair in the error state, every STag revoked, nothing queued.
  void StopConnection();
  // What Retire could not report at once (OnRoundEnd reports it).
  void ReportDeferredFailure();
  void ReportFailure(const Status& status);

  std::string peer_;
  // Destroyed in reverse: the loop (and its thread) first, the resources last.
  IserResources res_;
  IserMemory memory_;
  std::deque<Pending> pending_;
  std::deque<uint32_t> ready_receives_;  // completed receives seen while waiting for a send
  DatamoverEvents* events_ = nullptr;
  IoLoop loop_{"iser-io", std::chrono::seconds(1)};  // the name shows in top -H and bench
  bool failed_ = false;
  bool logout_posted_ = false;  // from then on, task PDUs stay in pending_
  Status unreported_failure_;   // OK unless Retire failed the connection
  bool async_registered_ = false;
  Mutex async_mu_;
  Status async_failure_ ISER_GUARDED_BY(async_mu_);
  uint32_t target_recv_dsl_ = 8192;
};

}  // namespace iser
