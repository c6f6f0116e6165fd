#include "initiator/transport/iser/iser_datamover.h"

#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "initiator/base/log.h"
#include "initiator/task/task.h"
#include "initiator/transport/iser/iser_async_events.h"
#include "initiator/transport/iser/iser_header.h"
#include "initiator/transport/portal.h"

namespace iser {

namespace {

constexpr uint32_t kMaxRecvData = 8192;  // InitiatorRecvDataSegmentLength we declare
constexpr size_t kPduHeader = IserResources::kPduHeader;

}  // namespace

IserDatamover::IserDatamover() = default;

IserDatamover::~IserDatamover() {
  Shutdown();
  // The order the verbs require: no QP uses the memory, no MR or window uses the PD.
  res_.DestroyQueuePair();
  memory_.Release();
  res_.Release();
}

Status IserDatamover::Connect(const Portal& portal, Deadline deadline) {
  peer_ = portal.ToString();
  ISER_RETURN_IF_ERROR(res_.Connect(portal, deadline, &memory_));
  Log(LogLevel::kDebug, "iSER " + peer_ + ": " + Mechanism() + ", responder resources " +
                            std::to_string(res_.responder_resources()) + ", inline " +
                            std::to_string(res_.max_inline_data()) + " bytes");
  return Status::OK();
}

std::string IserDatamover::Mechanism() const {
  return std::string("device ") + res_.device_name() + ", STags by " + memory_.StagMethod() + ", " +
         std::to_string(res_.receive_count()) + " receives";
}

Status IserDatamover::SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) {
  if (data.size() > IserResources::kBufferBytes - kPduHeader) {
    return Status::InvalidArgument("login PDU data larger than 8 KiB");
  }
  int slot = res_.FreeSendSlot();
  while (slot < 0) {  // every slot busy: reap send completions
    uint32_t index, length;
    ISER_RETURN_IF_ERROR(PollForReceive(&index, &length, deadline));
    ready_receives_.push_back(index | length << 16);
    slot = res_.FreeSendSlot();
  }
  uint8_t* p = res_.send_buffer(slot);
  BuildIserHeader(p, kIserControl, 0, 0, 0, 0);
  std::memcpy(p + kIserHeaderLength, bhs.data(), kBhsLength);
  if (!data.empty()) std::memcpy(p + kPduHeader, data.data(), data.size());
  res_.QueueSend(slot, kPduHeader + data.size(), nullptr);
  return res_.FlushSends();
}

Status IserDatamover::PollForReceive(uint32_t* index, uint32_t* length, Deadline deadline) {
  bool armed = false;
  for (;;) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(res_.cq(), 16, wc);
    if (n < 0) return Status::ConnectionFailed("ibv_poll_cq failed");
    bool got = false;
    for (int i = 0; i < n; ++i) {
      Completion c;
      ISER_RETURN_IF_ERROR(Classify(wc[i], &c));
      if (c.kind == Completion::kSendDone) {
        res_.ReleaseSendSlot(c.index);
      } else if (c.kind == Completion::kReceive && got) {
        ready_receives_.push_back(c.index | c.length << 16);
      } else if (c.kind == Completion::kReceive) {
        *index = c.index;
        *length = c.length;
        got = true;
      }
    }
    if (got) return Status::OK();
    if (n > 0) continue;
    if (!armed) {
      // A completion that arrived before the CQ was armed raises no event: poll once more.
      if (ibv_req_notify_cq(res_.cq(), 0) != 0) {
        return Status::ConnectionFailed("ibv_req_notify_cq failed");
      }
      armed = true;
      continue;
    }
    pollfd p[2] = {{res_.comp_channel()->fd, POLLIN, 0}, {res_.cm_channel()->fd, POLLIN, 0}};
    const int r = poll(p, 2, MillisUntil(deadline));
    if (r == 0) return Status::Timeout("timed out waiting for a PDU from " + peer_);
    if (p[0].revents & POLLIN) {
      ibv_cq* cq;
      void* ctx;
      while (ibv_get_cq_event(res_.comp_channel(), &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        armed = false;
      }
    }
    if (p[1].revents & POLLIN) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(res_.cm_channel(), &ev) == 0) {
        const rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
          return Status::ConnectionFailed(peer_ + " closed the iSER connection during login");
        }
      }
    }
  }
}

Status IserDatamover::ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) {
  uint32_t index, length;
  if (!ready_receives_.empty()) {
    index = ready_receives_.front() & 0xffff;
    length = ready_receives_.front() >> 16;
    ready_receives_.pop_front();
  } else {
    ISER_RETURN_IF_ERROR(PollForReceive(&index, &length, deadline));
  }
  std::span<const uint8_t> payload;
  Status st = DecodeReceive(index, length, bhs, &payload);
  if (st.ok()) data->assign(payload.begin(), payload.end());
  ISER_RETURN_IF_ERROR(res_.PostReceive(index));
  return st;
}

Status IserDatamover::EnterFullFeature(const ConnectionParams& params) {
  if (params.rdma_extensions) target_recv_dsl_ = params.target_recv_data_segment_length;
  return Status::OK();
}

Status IserDatamover::Start(DatamoverEvents* events) {
  events_ = events;
  ISER_RETURN_IF_ERROR(loop_.Open());
  ISER_RETURN_IF_ERROR(
      loop_.Add(res_.comp_channel()->fd, EPOLLIN, [this](uint32_t) { OnCompletionChannel(); }));
  ISER_RETURN_IF_ERROR(
      loop_.Add(res_.cm_channel()->fd, EPOLLIN, [this](uint32_t) { HandleCmEvent(); }));
  AsyncEvents::Register(res_.context(), res_.qp(), res_.cq(), [this](const Status& st) {
    {
      MutexLock lock(&async_mu_);
      if (async_failure_.ok()) async_failure_ = st;
    }
    loop_.Wake();
  });
  async_registered_ = true;
  ibv_context* context = res_.context();
  ISER_RETURN_IF_ERROR(
      loop_.Add(context->async_fd, EPOLLIN, [context](uint32_t) { AsyncEvents::Drain(context); }));
  if (const int rc = ibv_req_notify_cq(res_.cq(), 0); rc != 0) {
    return Status::ConnectionFailed("ibv_req_notify_cq: " + std::string(strerror(rc)));
  }
  return loop_.Start(this);
}

void IserDatamover::OnLoopStart() {
  // Login-phase receives that arrived early are delivered first.
  while (!ready_receives_.empty()) {
    const uint32_t v = ready_receives_.front();
    ready_receives_.pop_front();
    HandleReceive(v & 0xffff, v >> 16);
  }
  // Completions that arrived after the last login poll raise no CQ event.
  DrainCompletions();
  SendQueued();
}

void IserDatamover::OnWake() {
  TakeAsyncFailure();
  events_->OnWake();
}

void IserDatamover::TakeAsyncFailure() {
  Status st;
  {
    MutexLock lock(&async_mu_);
    st = async_failure_;
  }
  if (!st.ok()) Fail(std::move(st));
}

Status IserDatamover::CauseOf(Status symptom) {
  if (failed_) return symptom;
  AsyncEvents::Drain(res_.context());
  MutexLock lock(&async_mu_);
  return async_failure_.ok() ? symptom : async_failure_;
}

void IserDatamover::OnRoundEnd() {
  ReportDeferredFailure();
  if (!failed_) SendQueued();
}

void IserDatamover::OnCompletionChannel() {
  ibv_cq* cq;
  void* ctx;
  while (ibv_get_cq_event(res_.comp_channel(), &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  if (const int rc = ibv_req_notify_cq(res_.cq(), 0); rc != 0) {
    Fail(Status::ConnectionFailed("ibv_req_notify_cq: " + std::string(strerror(rc))));
  }
  DrainCompletions();
}

void IserDatamover::DrainCompletions() {
  // The CQ is armed before this runs, so a batch smaller than asked for means it was empty: no
  // extra empty poll (which costs a yield on some providers).
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  for (int n = kBatch; n == kBatch;) {
    n = ibv_poll_cq(res_.cq(), kBatch, wc);
    for (int i = 0; i < n; ++i) {
      Completion c;
      Status st = Classify(wc[i], &c);
      if (!st.ok()) {
        Fail(CauseOf(std::move(st)));
      } else if (c.kind == Completion::kReceive && !failed_) {
        HandleReceive(c.index, c.length);
      } else if (c.kind == Completion::kSendDone) {
        res_.ReleaseSendSlot(c.index);
      }
    }
  }
}

Status IserDatamover::Classify(const ibv_wc& wc, Completion* out) const {
  const uint64_t tag = wc.wr_id & ~0xffffffffull;
  const bool recv = tag == kRecvTag;
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR && failed_) return Status::OK();
    const char* what = recv ? "receive" : tag == kSendTag ? "send" : "STag bind/invalidate";
    if (tag == kInvalidateTag && wc.status != IBV_WC_WR_FLUSH_ERR &&
        memory_.strategy() == IserMemory::StagStrategy::kWindows) {
      // The device advertised windows it cannot bind: the next connection (recovery's) does
      // without them.
      MarkWindowsUnusable(res_.device_name());
    }
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      // The first sign of a queue pair moved to the error state by the other side.
      return Status::ConnectionFailed(
          "the RDMA queue pair went to the error state (our " + std::string(what) +
          " was flushed): the target broke the connection or accessed memory through an STag it "
          "was not given");
    }
    char vendor[32];
    snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
    return Status::ConnectionFailed(std::string("RDMA ") + what + " completed with " +
                                    ibv_wc_status_str(wc.status) + " (vendor error " + vendor +
                                    ")");
  }
  if (recv && (wc.wc_flags & IBV_WC_WITH_INV)) {
    // Our connect request said we accept no Send-with-Invalidate (docs/iser-wire.md,
    // "Send-with-Invalidate").
    char rkey[16];
    snprintf(rkey, sizeof rkey, "0x%x", wc.invalidated_rkey);
    return Status::ProtocolError("the target sent a Send-with-Invalidate (STag " +
                                 std::string(rkey) + ") although we declined them");
  }
  out->index = static_cast<uint32_t>(wc.wr_id);
  out->length = wc.byte_len;
  out->kind = recv              ? Completion::kReceive
              : tag == kSendTag ? Completion::kSendDone
                                : Completion::kNothing;
  return Status::OK();
}

Status IserDatamover::DecodeReceive(uint32_t index, uint32_t length, Bhs* bhs,
                                    std::span<const uint8_t>* data) const {
  const uint8_t* p = res_.receive_buffer(index);
  if (length < kPduHeader || (p[0] & 0xf0) != kIserControl) {
    return Status::ProtocolError("malformed iSER message (" + std::to_string(length) +
                                 " bytes, flags " + std::to_string(p[0]) + ")");
  }
  std::memcpy(bhs->data(), p + kIserHeaderLength, kBhsLength);
  ISER_RETURN_IF_ERROR(ValidateTargetBhs(*bhs, kMaxRecvData, 0));
  // Targets may pad (LIO pads sense data): the data segment length, not byte_len, counts.
  const uint32_t dsl = bhs->data_segment_length();
  if (length < kPduHeader + dsl) {
    return Status::ProtocolError(std::string(OpcodeName(bhs->opcode())) + " of " +
                                 std::to_string(length) +
                                 " bytes is shorter than its data segment");
  }
  *data = {p + kPduHeader, dsl};
  return Status::OK();
}

void IserDatamover::HandleReceive(uint32_t index, uint32_t length) {
  Bhs bhs;
  std::span<const uint8_t> data;
  Status st = DecodeReceive(index, length, &bhs, &data);
  if (st.ok() && (bhs.opcode() == Opcode::kDataIn || bhs.opcode() == Opcode::kR2T)) {
    st = Status::ProtocolError(std::string("the target sent a ") + OpcodeName(bhs.opcode()) +
                               " on an iSER connection, where data moves by RDMA");
  }
  if (!st.ok()) {
    Fail(st);
    return;
  }
  if (bhs.opcode() == Opcode::kScsiResponse) {
    if (const Task* t = memory_.Exposed(bhs.itt()); t != nullptr) {
      // What the target says it wrote into a read buffer; RC ordering: its RDMA WRITE landed
      // before this SEND completed. Copied to the caller when it went through a slot.
      uint32_t written = 0;
      if (t->direction == DataDirection::kRead && bhs.b[2] == 0) {
        written = t->transfer_length;
        if (bhs.flags() & kResidualUnderflow) {
          written -= std::min(written, bhs.u32(bhs::kResidualCount));
        }
      }
      if (Status revoked = memory_.Revoke(bhs.itt(), written, failed_ ? nullptr : res_.qp());
          !revoked.ok()) {
        // No PDU event follows OnConnectionError (datamover.h): the session replays the task.
        Fail(revoked);
        return;
      }
    }
  }
  events_->OnPdu(bhs, data);
  if (!failed_) {
    Status posted = res_.PostReceive(index);
    if (!posted.ok()) Fail(posted);
  }
}

void IserDatamover::HandleCmEvent() {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(res_.cm_channel(), &ev) == 0) {
    const rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
        type == RDMA_CM_EVENT_ADDR_CHANGE) {
      res_.MarkDisconnected();
      Fail(CauseOf(Status::ConnectionFailed(std::string("the iSER connection ended: ") +
                                            rdma_event_str(type))));
    }
  }
}

bool IserDatamover::TrySend(Task* task, const Bhs& bhs, std::span<const uint8_t> data) {
  const int slot = res_.FreeSendSlot();
  if (slot < 0) return false;
  uint8_t* p = res_.send_buffer(slot);
  uint8_t flags = kIserControl;
  uint32_t write_stag = 0, read_stag = 0;
  uint64_t write_va = 0, read_va = 0;
  ibv_send_wr bind{};
  ibv_send_wr* before = nullptr;
  if (task != nullptr && task->direction != DataDirection::kNone && task->transfer_length > 0) {
    const bool reading = task->direction == DataDirection::kRead;
    const uint32_t sent = reading ? 0 : task->immediate_bytes + task->unsolicited_bytes;
    if (sent < task->transfer_length) {
      uint32_t stag = 0;
      uint64_t va = 0;
      Status error;
      if (!memory_.Expose(task, sent, &stag, &va, &bind, &error)) return false;
      if (!error.ok()) {
        Fail(error);
        return true;
      }
      if (bind.opcode == IBV_WR_BIND_MW) before = &bind;
      if (reading) {
        flags |= kIserRsv;
        read_stag = stag;
        read_va = va;
      } else {
        // The target reads what was not sent as immediate or unsolicited data.
        flags |= kIserWsv;
        write_stag = stag;
        write_va = va;
      }
    }
  }
  BuildIserHeader(p, flags, write_stag, write_va, read_stag, read_va);
  std::memcpy(p + kIserHeaderLength, bhs.data(), kBhsLength);
  if (!data.empty()) std::memcpy(p + kPduHeader, data.data(), data.size());
  res_.QueueSend(slot, kPduHeader + data.size(), before);
  return true;
}

void IserDatamover::SendQueued() {
  bool commands_wait = false;
  for (auto next = pending_.begin(); next != pending_.end() && !failed_;) {
    // Nothing follows a Logout Request on its connection (RFC 7143 11.14): a command it passed
    // waits for the next connection, where the session replays it.
    if (next->task != nullptr && (commands_wait || logout_posted_)) {
      ++next;
      continue;
    }
    if (res_.FreeSendSlot() < 0) break;
    std::span<const uint8_t> data = next->data;
    Task* exposed = next->data_out ? nullptr : next->task;
    if (exposed != nullptr && exposed->immediate_bytes > 0) {
      data = {exposed->buffer, exposed->immediate_bytes};
    }
    if (!TrySend(exposed, next->bhs, data)) {  // a send slot was free: no data slot or memory
      commands_wait = true;
      ++next;
      continue;
    }
    // TrySend may have failed the connection (a command it could not expose), which dropped
    // every pending PDU, `next` included.
    if (failed_) break;
    if (exposed != nullptr) {
      events_->OnCommandPosted(exposed);
    } else if (next->task == nullptr) {
      logout_posted_ |= next->bhs.opcode() == Opcode::kLogoutRequest;
      events_->OnControlPosted(next->bhs);
    }
    if (next->task != nullptr) --next->task->pdus_held;
    next = pending_.erase(next);
  }
  if (Status st = res_.FlushSends(); !st.ok()) Fail(st);
}

void IserDatamover::SendCommand(Task* task) {
  if (task->transfer_length > IserMemory::kDataSlotBytes) {
    Fail(Status::InvalidArgument("a command of " + std::to_string(task->transfer_length) +
                                 " bytes exceeds the iSER buffer size"));
    return;
  }
  pending_.push_back({task, false, task->bhs, {}});
  ++task->pdus_held;
  // Unsolicited Data-Out (InitialR2T=No) travels in SENDs of at most TargetRecvDataSegmentLength.
  uint32_t offset = task->immediate_bytes;
  const uint32_t end = task->immediate_bytes + task->unsolicited_bytes;
  for (uint32_t data_sn = 0; offset < end; ++data_sn) {
    const uint32_t len = std::min(end - offset, target_recv_dsl_);
    Bhs out;
    out.set_opcode(Opcode::kDataOut, false);
    out.set_flags(offset + len == end ? kFinalBit : 0);
    out.set_data_segment_length(len);
    out.set_lun(task->bhs.lun());
    out.set_itt(task->itt);
    out.set_u32(bhs::kTtt, kReservedTag);
    out.set_u32(bhs::kDataSN, data_sn);
    out.set_u32(bhs::kBufferOffset, offset);
    pending_.push_back({task, true, out, {task->buffer + offset, task->buffer + offset + len}});
    ++task->pdus_held;
    offset += len;
  }
}

void IserDatamover::SendDataOut(Task*, uint32_t, uint32_t, uint32_t) {
  Fail(Status::ProtocolError("the target sent an R2T on an iSER connection"));
}

void IserDatamover::SendControl(const Bhs& bhs, std::span<const uint8_t> data) {
  pending_.push_back({nullptr, false, bhs, {data.begin(), data.end()}});
}

void IserDatamover::Retire(Task* task) {
  // What still waits for a slot or memory would read the task's buffer, and carry its ITT, after
  // the task is over. Only an ending out of turn (an abort, a reject, a failed login's replay)
  // leaves any: a task answered normally was sent whole.
  if (task->pdus_held > 0) {
    std::erase_if(pending_, [task](const Pending& p) { return p.task == task; });
    task->pdus_held = 0;
  }
  // A SCSI Response revoked the task's STag already (HandleReceive); any other ending revokes it
  // here, copying nothing: no response said that data arrived.
  if (memory_.Exposed(task->itt) == nullptr) return;
  if (Status st = memory_.Revoke(task->itt, 0, failed_ ? nullptr : res_.qp()); !st.ok()) {
    // The session is inside a handler that ends tasks (a LUN reset's answer ends several in a
    // row): it hears of the failure once that handler has returned, at the round's end.
    if (!failed_) unreported_failure_ = st;
    StopConnection();
  }
}

void IserDatamover::Fail(Status status) {
  if (failed_) return;
  StopConnection();
  ReportFailure(status);
}

void IserDatamover::ReportDeferredFailure() {
  if (!unreported_failure_.ok()) ReportFailure(std::exchange(unreported_failure_, Status::OK()));
}

void IserDatamover::ReportFailure(const Status& status) {
  if (events_ != nullptr)
    events_->OnConnectionError(status.WithContext("connection " + Describe()));
}

void IserDatamover::StopConnection() {
  if (failed_) return;
  failed_ = true;
  for (const Pending& p : pending_) {
    if (p.task != nullptr) p.task->pdus_held = 0;
  }
  pending_.clear();
  res_.Disconnect();
  // The queue pair is in the error state now: nothing reaches the callers' buffers any more, and
  // they get them back when their tasks fail.
  memory_.RevokeAll();
}

void IserDatamover::Shutdown() {
  loop_.Stop();
  if (async_registered_) AsyncEvents::Unregister(res_.qp());
  async_registered_ = false;
  // The tasks still exposed are about to be failed and handed back: no STag of theirs may stay.
  memory_.RevokeAll();
}

}  // namespace iser
