// The iSCSI/TCP datamover: one TCP connection, its I/O thread and PDU framing (RFC 7143 §11):
// BHS, AHS, header digest, data segment, padding, data digest. Data-In payloads are read
// straight into the task's buffer (readv with the staging buffer behind it, so a large segment
// costs no copy and small PDUs arrive many per system call); Data-Out PDUs are cut to the
// target's MaxRecvDataSegmentLength and sent with writev from the caller's buffer, many PDUs per
// call. Nothing is allocated per PDU after Start. The I/O thread is an IoLoop (transport/io_loop.h)
// named "iscsi-tcp-io".
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <vector>

#include "initiator/transport/datamover.h"
#include "initiator/transport/io_loop.h"

namespace iser {

class TcpDatamover final : public Datamover, private IoLoopEvents {
 public:
  TcpDatamover();
  ~TcpDatamover() override;

  Status Connect(const Portal& portal, Deadline deadline) override;
  std::string Describe() const override { return "TCP " + peer_; }
  Status SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) override;
  Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) override;
  Status EnterFullFeature(const ConnectionParams& params) override;
  // R2T and Data-In sequences carry any length; bound one command for fairness between tasks.
  uint32_t MaxTransferBytes() const override { return 16u << 20; }
  Status Start(DatamoverEvents* events) override;
  void Wake() override { loop_.Wake(); }
  bool OnIoThread() const override { return loop_.OnIoThread(); }
  void SendCommand(Task* task) override;
  void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) override;
  void SendControl(const Bhs& bhs, std::span<const uint8_t> data) override;
  void Abort(const Status& status) override { Fail(status); }
  void Shutdown() override;

 private:
  // One PDU (or a run of Data-Out PDUs) waiting to be written.
  struct Output {
    enum Kind : uint8_t { kCommand, kDataOut, kControl } kind;
    Task* task;
    uint32_t ttt;
    uint32_t offset;     // next Buffer Offset to send
    uint32_t remaining;  // bytes of this burst still to send
    uint32_t data_sn;
    uint32_t control;  // index into controls_
  };
  struct Control {
    Bhs bhs;
    std::vector<uint8_t> data;
  };
  // Header, digest and pad bytes of one PDU in the current writev batch.
  struct Frame {
    uint8_t header[kBhsLength + 4];
    uint8_t trailer[3 + 4];
  };

  // IoLoopEvents.
  void OnWake() override { events_->OnWake(); }
  void OnTick() override { events_->OnTimer(); }
  void OnRoundEnd() override;
  void OnLoopFailure(const Status& status) override { Fail(status); }

  void HandleReadable();
  bool ParseHeader();  // one header from staging; false if more bytes are needed
  bool ReceiveData();  // data segment + trailer; false if more bytes are needed
  void Fail(Status status);
  void Flush();
  void BuildBatch();
  void AddPdu(const Bhs& bhs, const uint8_t* data, uint32_t len);
  void PushOutput(const Output& out);
  void UpdateWriteInterest();

  int fd_ = -1;
  std::string peer_;
  DatamoverEvents* events_ = nullptr;
  IoLoop loop_{"iscsi-tcp-io", std::chrono::seconds(1)};  // the name shows in top -H and bench
  bool failed_ = false;

  bool header_digest_ = false;
  bool data_digest_ = false;
  uint32_t max_recv_dsl_ = 8192;  // ours: bound on incoming segments
  uint32_t max_send_dsl_ = 8192;  // target's: bound on our Data-Out and immediate data

  // Receive side.
  std::vector<uint8_t> staging_;
  size_t rpos_ = 0;
  size_t rend_ = 0;
  enum class Rx { kHeader, kData, kTrailer } rx_ = Rx::kHeader;
  Bhs rx_bhs_;
  uint8_t* rx_dst_ = nullptr;
  uint32_t rx_len_ = 0;   // data segment length
  uint32_t rx_done_ = 0;  // data bytes received so far
  uint32_t rx_crc_ = 0;
  std::vector<uint8_t> rx_control_;  // data segments of PDUs other than Data-In
  bool large_segments_ = false;      // the last data segment was large: expect more

  // Send side.
  std::vector<Output> outputs_;  // ring
  size_t out_head_ = 0;
  size_t out_count_ = 0;
  std::vector<Control> controls_;  // ring, parallel index space
  size_t control_next_ = 0;
  std::vector<Frame> frames_;
  std::vector<iovec> iov_;
  size_t iov_pos_ = 0;
  size_t iov_count_ = 0;
  bool want_write_ = false;
};

}  // namespace iser
