// Datamover: the interface between the session and a transport (RFC 5047's term). A transport
// owns one connection: its socket or QP, its I/O thread, framing, digests, and how SCSI data
// moves (Data-In/R2T/Data-Out over TCP; RDMA READ/WRITE driven by the target over iSER). The
// session above it owns tasks, sequence numbers and the protocol state; it never learns how bytes
// travel, only whether Data-In PDUs carry a read's bytes past it (DataInAccounting).
//
// Two phases:
//  - Login (and discovery): the caller's thread exchanges PDUs synchronously with SendPdu and
//    ReceivePdu, each bounded by a deadline. Digests are off.
//  - Full feature: after EnterFullFeature and Start, the datamover's I/O thread runs the
//    connection and calls DatamoverEvents; SendCommand/SendDataOut/SendControl may only be
//    called on that thread (from inside an event). Wake may be called from any thread. Both
//    transports run that thread as an IoLoop (transport/io_loop.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/pdu/bhs.h"

namespace iser {

struct Task;
struct Portal;

// What login negotiated that changes how PDUs travel on this connection (RFC 7143 §13, RFC 7145
// §6). The session derives it from the login's outcome.
struct ConnectionParams {
  bool header_digest = false;  // CRC32C on every header
  bool data_digest = false;    // CRC32C on every data segment
  // What we declared we receive: the bound on every data segment the target sends us.
  uint32_t initiator_max_recv_data_segment_length = 8192;
  // What the target declared: the bound on our Data-Out and immediate data segments.
  uint32_t target_max_recv_data_segment_length = 8192;
  // iSER-assisted mode, and the largest control-type PDU data segment the target receives.
  bool rdma_extensions = false;
  uint32_t target_recv_data_segment_length = 8192;
};

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Who knows how many bytes of a read reached the task's buffer.
enum class DataInAccounting : uint8_t {
  // Data-In PDUs carry them through the datamover (PlaceDataIn, OnPdu): the session counts
  // them in Task::data_in_bytes, and a SCSI Response claiming more than arrived is a lie.
  kCountedFromPdus,
  // The target places them itself (iSER: RDMA WRITE into the STag we advertised) and no PDU
  // says how many: only the SCSI Response's residual does, and nothing can check it.
  kTargetPlaced,
};

class DatamoverEvents {
 public:
  virtual ~DatamoverEvents() = default;
  // Wake() was called (submissions are waiting).
  virtual void OnWake() = 0;
  // About once a second while started: keepalive and timeout checks.
  virtual void OnTimer() = 0;
  // A Data-In header arrived with a data segment: return where its bytes go (the task's buffer
  // at Buffer Offset) after checking ITT, offset, length and DataSN. An error fails the
  // connection.
  virtual Status PlaceDataIn(const Bhs& bhs, uint8_t** destination) = 0;
  // A complete PDU (header checked, digests verified, Data-In data already placed).
  virtual void OnPdu(const Bhs& bhs, std::span<const uint8_t> data) = 0;
  // The connection failed (peer closed, malformed PDU, digest error, timeout). Called once; no
  // PDU events follow, OnWake still does so the session can fail new submissions.
  virtual void OnConnectionError(const Status& status) = 0;
  // How many commands are waiting for their final responses: a datamover may wait a little
  // before reading when many are (receive_coalescing.h).
  virtual uint32_t CommandsAwaitingResponse() const { return 0; }
  // A control PDU queued by SendControl was posted to the connection just now: the wait for its
  // answer starts here, not when it was queued. A transport that posts at once need not call it.
  virtual void OnControlPosted(const Bhs& bhs) { (void)bhs; }
  // A command SendCommand held back (PostsCommandsLater) was posted to the connection just now:
  // from here on PDUs sent after it reach the target after it.
  virtual void OnCommandPosted(Task* task) { (void)task; }
};

class Datamover {
 public:
  virtual ~Datamover() = default;

  // The time as this connection's I/O sees it: keepalive and command timeouts are measured
  // with it, so that a fake datamover can drive them without waiting.
  virtual Clock::time_point Now() const { return Clock::now(); }

  virtual Status Connect(const Portal& portal, Deadline deadline) = 0;
  // "TCP 127.0.0.1:3260" — for messages.
  virtual std::string Describe() const = 0;

  // Login phase, caller's thread.
  virtual Status SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) = 0;
  virtual Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) = 0;
  // The most data one SCSI command may carry over this connection.
  virtual uint32_t MaxTransferBytes() const = 0;
  // The most commands and task management requests this connection can have waiting for their
  // answers at once; the session sends no more, whatever the target's CmdSN window allows. A
  // transport that receives into buffers posted in advance has as many as it posted, less room
  // for what the target sends unasked (iSER: a SEND that finds no receive waits out an RNR
  // timer on IB and RoCE, and ends the connection on iWARP). One exception, to keep the
  // escalation from waiting on itself: the late answers a target may still send to ABORT TASKs
  // that timed out keep their receives from new commands, not from task management, which then
  // borrows from the room kept for unasked PDUs. Valid after Connect.
  virtual uint32_t MaxOutstandingCommands() const { return UINT32_MAX; }
  // Whether SendCommand may hold a command back (iSER: waiting for a data slot or locked memory)
  // while control PDUs sent later pass it; such a transport calls OnCommandPosted when it
  // leaves. Until then the target knows nothing of it: it is neither aborted nor reset.
  virtual bool PostsCommandsLater() const { return false; }
  // How this connection moves data, for `session -P` and logs: "io_uring" or "epoll", or the
  // RDMA device, how STags are made and the receives posted.
  virtual std::string Mechanism() const = 0;
  // Whether the session can count a read's Data-In bytes (see DataInAccounting). iSCSI's
  // default; a transport whose target places the data itself says so.
  virtual DataInAccounting data_in_accounting() const { return DataInAccounting::kCountedFromPdus; }
  // Applies what login negotiated (digests, segment lengths) to everything that follows.
  virtual Status EnterFullFeature(const ConnectionParams& params) = 0;

  // How often OnTimer runs, from Start on (1 s unless set before Start): the session asks for
  // less when its NOP-Out interval or timeout is short, so that a silent target is noticed in
  // time.
  virtual void SetTimerPeriod(std::chrono::milliseconds period) = 0;

  // Full feature phase.
  virtual Status Start(DatamoverEvents* events) = 0;
  virtual void Wake() = 0;
  virtual bool OnIoThread() const = 0;
  // Sends task->bhs followed by task->immediate_bytes of immediate data and then
  // task->unsolicited_bytes as unsolicited Data-Out (TTT 0xffffffff). iSER instead advertises
  // the task's buffer to the target.
  virtual void SendCommand(Task* task) = 0;
  // Answers an R2T: Data-Out PDUs of at most the target's MaxRecvDataSegmentLength.
  virtual void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) = 0;
  // NOP-Out, Logout, TMF, Text: the header and data are copied.
  virtual void SendControl(const Bhs& bhs, std::span<const uint8_t> data) = 0;
  // The task is over on this connection, however it ended: a SCSI Response, a Reject, an abort
  // or LUN reset the target answered, a timeout, or before it is sent again. Whatever the
  // transport let the target reach for it ends now (iSER: its STag is revoked), before its ITT
  // is reused or its buffer handed back. Called on the I/O thread (or once that thread has
  // stopped); a task the transport already retired, or never exposed, is no error. Retire may
  // end the connection, but never calls OnConnectionError itself: that comes once the handler
  // that called Retire has returned (the session ends tasks in loops that must not be
  // interrupted by a FailAll).
  virtual void Retire(Task* task) { (void)task; }
  // Fails the connection from the I/O thread (e.g. a keepalive timeout): closes it and reports
  // OnConnectionError with this status.
  virtual void Abort(const Status& status) = 0;
  // Closes the connection and joins the I/O thread. Idempotent; not from the I/O thread.
  virtual void Shutdown() = 0;
};

}  // namespace iser
