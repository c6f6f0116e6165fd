// TcpFramedDatamover: what both iSCSI/TCP datamovers share, everything but how their I/O thread
// waits and moves bytes. The socket and connecting to a portal; the login phase (blocking
// exchanges bounded by a deadline); and the PDU framing of the full-feature phase (RFC 7143 §11:
// BHS, AHS, header digest, data segment, padding, data digest) as two halves a loop drives:
//
//  - Receiving: PlanReceive says where the next read from the socket goes (an iovec pair: the
//    rest of a Data-In segment straight into the task's buffer, then the staging buffer), the
//    loop reads (readv, or an io_uring receive) and reports the count to Received, and
//    ParseReceived hands every complete PDU to DatamoverEvents. After a large segment only a
//    header's worth goes to staging, so large data is never copied twice; small PDUs arrive many
//    per read and are copied out of staging.
//  - Sending: SendCommand, SendDataOut and SendControl queue outputs; PendingSend returns the
//    iovecs of the next batch (many PDUs: headers, digests and padding in a per-batch frame
//    array, data straight from the caller's buffer; Data-Out cut to the target's
//    MaxRecvDataSegmentLength as the batch is built), and Sent(n) consumes what was written. The
//    iovecs and frames stay put until Sent has consumed them, so a write may be in flight in the
//    kernel while the loop queues more.
//  - Controls (SendControl) are copied into entries of a pool that grows when a burst needs
//    more; an entry goes back to the pool only when the batch that holds its bytes has been
//    written completely, so any number of controls may be queued in one wake-up.
//  - Retire(task) ends what the target can get of a task: its queued outputs are dropped, so are
//    its Data-Out PDUs in the batch being written that have not started, and those of its data
//    bytes that sit in the batch and have not been written yet are copied into memory the
//    datamover owns, so the PDUs that started still end whole, with the bytes they had, and the
//    stream stays well framed (a command not started goes too, for CmdSN's sake, with copies of
//    its immediate data); the rest of a Data-In segment of the task being received goes to
//    memory of ours too. A subclass whose reads and writes run while the thread goes on
//    (io_uring) first settles those in flight (BatchReaches and ReceiveReaches say whether they
//    reach the task's buffer).
//
// Nothing is allocated per PDU after StartFraming once the pool holds a burst's controls. A
// subclass runs the I/O thread, reports failures through Fail (which must stop the framing with
// StopFraming and report OnConnectionError) and implements the rest of Datamover.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "initiator/transport/datamover.h"

namespace iser {

class TcpFramedDatamover : public Datamover {
 public:
  ~TcpFramedDatamover() override;

  Status Connect(const Portal& portal, Deadline deadline) override;
  // "TCP 127.0.0.1:3260 (io_uring)": the portal and which datamover moves its bytes.
  std::string Describe() const override;
  std::string Mechanism() const override { return mover_; }
  Status SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) override;
  Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) override;
  Status EnterFullFeature(const ConnectionParams& params) override;
  // R2T and Data-In sequences carry any length; bound one command for fairness between tasks.
  uint32_t MaxTransferBytes() const override { return 16u << 20; }
  void SendCommand(Task* task) override;
  void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) override;
  void SendControl(const Bhs& bhs, std::span<const uint8_t> data) override;
  void Retire(Task* task) override;
  void Abort(const Status& status) override { Fail(status); }

 protected:
  // `mover` names the datamover in Describe ("epoll", "io_uring").
  explicit TcpFramedDatamover(const char* mover) : mover_(mover) {}

  // Sizes the buffers; events_ receives every PDU from then on.
  void StartFraming(DatamoverEvents* events);
  // After a failure: nothing more is queued or sent.
  void StopFraming();
  // Closes the connection on the I/O thread and reports OnConnectionError once.
  virtual void Fail(Status status) = 0;

  // Receiving. PlanReceive fills at most 2 iovecs and returns how many; Received(n) accounts
  // for n bytes read into them (n > 0) and returns whether the read came back short, i.e. the
  // socket is empty. ParseReceived consumes every complete PDU (and may call Fail).
  int PlanReceive(iovec* iov);
  bool Received(size_t n);
  void ParseReceived();

  // Sending: the iovecs still to write (empty when nothing is queued; at most IOV_MAX), and
  // the count of bytes the last write took.
  std::span<iovec> PendingSend();
  void Sent(size_t n);
  bool SendQueued() const { return iov_pos_ < iov_count_ || out_count_ > 0; }
  // Whether what is left of the batch (the iovecs PendingSend returned, less what Sent
  // consumed) reads bytes of the task's buffer.
  bool BatchReaches(const Task* task) const;
  // Whether the last PlanReceive put the rest of a Data-In segment of the task straight into its
  // buffer.
  bool ReceiveReaches(const Task* task) const;

  // What ParseReceived handed on since the last call: final responses (SCSI Response, Data-In
  // with the S bit), and whether an R2T was among them or large data segments are streaming.
  struct ReceivedSummary {
    uint32_t responses = 0;
    bool r2t_or_large_data = false;
  };
  ReceivedSummary TakeReceivedSummary();

  int fd_ = -1;
  std::string peer_;
  DatamoverEvents* events_ = nullptr;
  bool failed_ = false;

 private:
  struct Control {
    Bhs bhs;
    std::vector<uint8_t> data;
  };
  // One PDU (or a run of Data-Out PDUs) waiting to be written.
  struct Output {
    enum Kind : uint8_t { kCommand, kDataOut, kControl } kind;
    Task* task;  // nullptr for a control
    uint32_t ttt;
    uint32_t offset;     // next Buffer Offset to send
    uint32_t remaining;  // bytes of this burst still to send
    uint32_t data_sn;
    Control* control;  // a control's copy, from the pool
  };
  // Header, digest and pad bytes of one PDU in the current batch, and the task whose buffer its
  // data slot points into (nullptr: a control's copy).
  struct Frame {
    uint8_t header[kBhsLength + 4];
    uint8_t trailer[3 + 4];
    const Task* task;
  };

  bool ParseHeader();  // one header from staging; false if more bytes are needed
  bool ReceiveData();  // data segment + trailer; false if more bytes are needed
  void BuildBatch();
  void AddPdu(const Bhs& bhs, const uint8_t* data, uint32_t len, const Task* task);
  // Leaves the task's Data-Out PDUs of the batch that have not started out of it, whole: the
  // target would get data for a task that is over.
  void DropUnstartedDataOut(const Task* task);
  // Whether iovec i of the batch is a data segment of the task not yet written whole.
  bool UnwrittenDataOf(size_t i, const Task* task) const;
  // Whether the Data-In segment being received is the task's and still lands in its buffer.
  bool ReceivingDataInto(const Task* task) const;
  Control* TakeControl();
  void PushOutput(const Output& out);

  const char* const mover_;
  bool header_digest_ = false;
  bool data_digest_ = false;
  uint32_t max_recv_dsl_ = 8192;  // ours: bound on incoming segments
  uint32_t max_send_dsl_ = 8192;  // target's: bound on our Data-Out and immediate data

  // Receive side.
  std::unique_ptr<uint8_t[]> staging_;
  size_t rpos_ = 0;
  size_t rend_ = 0;
  enum class Rx { kHeader, kData, kTrailer } rx_ = Rx::kHeader;
  Bhs rx_bhs_;
  uint8_t* rx_dst_ = nullptr;
  uint32_t rx_len_ = 0;   // data segment length
  uint32_t rx_done_ = 0;  // data bytes received so far
  uint32_t rx_crc_ = 0;
  std::vector<uint8_t> rx_control_;  // data segments of PDUs other than Data-In
  // Where the rest of a Data-In segment goes once its task is retired.
  std::unique_ptr<uint8_t[]> rx_retired_;
  bool large_segments_ = false;  // the last data segment was large: expect more
  ReceivedSummary received_;
  // What the last PlanReceive asked for: bytes straight into the task's buffer, then staging.
  size_t planned_direct_ = 0;
  size_t planned_room_ = 0;

  // Send side.
  std::vector<Output> outputs_;  // ring
  size_t out_head_ = 0;
  size_t out_count_ = 0;
  std::vector<std::unique_ptr<Control>> controls_;  // the pool: every control made
  std::vector<Control*> free_controls_;
  std::vector<Control*> batch_controls_;  // in the current batch: free once it is written
  // Retire's copies of task bytes the current batch still had to write.
  std::vector<std::unique_ptr<uint8_t[]>> retired_bytes_;
  std::vector<Frame> frames_;
  std::vector<iovec> iov_;
  size_t iov_pos_ = 0;
  size_t iov_count_ = 0;
};

}  // namespace iser
