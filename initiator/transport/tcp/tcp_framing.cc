#include "initiator/transport/tcp/tcp_framing.h"

#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "initiator/pdu/digest.h"
#include "initiator/task/task.h"
#include "initiator/transport/io_loop.h"
#include "initiator/transport/portal.h"

namespace iser {

namespace {

constexpr size_t kStagingSize = 256 * 1024;
constexpr size_t kMaxFramesPerBatch = 256;
constexpr size_t kMaxAhsBytes = 1020;  // TotalAHSLength is one byte of 4-byte words
// A queue depth's worth of commands; PushOutput doubles it when a burst needs more. Small, because
// a daemon may hold hundreds of sessions (2048 entries were 64 KiB each).
constexpr size_t kInitialOutputs = 128;
// A data segment at least this long is worth a system call of its own to avoid a copy.
constexpr uint32_t kLargeSegment = 32 * 1024;

std::string ErrnoText(int err) {
  return std::strerror(err);
}

Status ReadExact(int fd, uint8_t* p, size_t len, Deadline deadline, const std::string& peer,
                 const char* what) {
  while (len > 0) {
    const ssize_t n = read(fd, p, len);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::ConnectionFailed(peer + " closed the connection while we waited for " + what);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      return Status::ConnectionFailed("receiving " + std::string(what) + " from " + peer + ": " +
                                      ErrnoText(errno));
    }
    ISER_RETURN_IF_ERROR(
        WaitFd(fd, POLLIN, deadline, std::string("waiting for ") + what + " from " + peer));
  }
  return Status::OK();
}

}  // namespace

TcpFramedDatamover::~TcpFramedDatamover() {
  if (fd_ >= 0) close(fd_);
}

std::string TcpFramedDatamover::Describe() const {
  return "TCP " + peer_ + " (" + mover_ + ")";
}

Status TcpFramedDatamover::Connect(const Portal& portal, Deadline deadline) {
  peer_ = portal.ToString();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(portal.port);
  const int rc = getaddrinfo(portal.host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) {
    return Status::ConnectionFailed("cannot resolve portal " + peer_ + ": " + gai_strerror(rc));
  }
  Status last = Status::ConnectionFailed("no address for portal " + peer_);
  for (addrinfo* ai = list; ai; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = Status::ConnectionFailed("socket: " + ErrnoText(errno));
      continue;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      if (errno != EINPROGRESS) {
        err = errno;
      } else {
        Status st = WaitFd(fd, POLLOUT, deadline, "connecting to portal " + peer_);
        if (!st.ok()) {
          close(fd);
          last = st;
          if (st.code() == StatusCode::kTimeout) break;
          continue;
        }
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err != 0) {
      close(fd);
      last = Status::ConnectionFailed("cannot connect to portal " + peer_ + ": " + ErrnoText(err));
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
    last = Status::OK();
    break;
  }
  freeaddrinfo(list);
  return last;
}

Status TcpFramedDatamover::SendPdu(const Bhs& bhs, std::span<const uint8_t> data,
                                   Deadline deadline) {
  static const uint8_t kZeros[4] = {};
  iovec iov[3] = {{const_cast<uint8_t*>(bhs.data()), kBhsLength},
                  {const_cast<uint8_t*>(data.data()), data.size()},
                  {const_cast<uint8_t*>(kZeros), PadLength(static_cast<uint32_t>(data.size()))}};
  size_t idx = 0;
  while (idx < 3) {
    if (iov[idx].iov_len == 0) {
      ++idx;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov + idx;
    msg.msg_iovlen = 3 - idx;
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);  // a closed peer is an error, not SIGPIPE
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        ISER_RETURN_IF_ERROR(WaitFd(fd_, POLLOUT, deadline, "sending to " + peer_));
        continue;
      }
      return Status::ConnectionFailed("sending " + std::string(OpcodeName(bhs.opcode())) + " to " +
                                      peer_ + ": " + ErrnoText(errno));
    }
    size_t left = static_cast<size_t>(n);
    while (idx < 3 && left >= iov[idx].iov_len) {
      left -= iov[idx].iov_len;
      ++idx;
    }
    if (idx < 3) {
      iov[idx].iov_base = static_cast<uint8_t*>(iov[idx].iov_base) + left;
      iov[idx].iov_len -= left;
    }
  }
  return Status::OK();
}

Status TcpFramedDatamover::ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) {
  ISER_RETURN_IF_ERROR(ReadExact(fd_, bhs->data(), kBhsLength, deadline, peer_, "a PDU header"));
  Status st = ValidateTargetBhs(*bhs, max_recv_dsl_, kMaxAhsBytes);
  if (!st.ok()) return st.WithContext("from " + peer_);
  std::vector<uint8_t> ahs(bhs->total_ahs_bytes());
  ISER_RETURN_IF_ERROR(ReadExact(fd_, ahs.data(), ahs.size(), deadline, peer_, "an AHS"));
  const uint32_t dsl = bhs->data_segment_length();
  data->resize(dsl + PadLength(dsl));
  ISER_RETURN_IF_ERROR(
      ReadExact(fd_, data->data(), data->size(), deadline, peer_, "a data segment"));
  data->resize(dsl);
  return Status::OK();
}

Status TcpFramedDatamover::EnterFullFeature(const ConnectionParams& params) {
  header_digest_ = params.header_digest;
  data_digest_ = params.data_digest;
  max_recv_dsl_ = params.initiator_max_recv_data_segment_length;
  max_send_dsl_ = params.target_max_recv_data_segment_length;
  return Status::OK();
}

bool TcpFramedDatamover::ParseHeader() {
  const size_t avail = rend_ - rpos_;
  if (avail < kBhsLength) return false;
  std::memcpy(rx_bhs_.data(), staging_.get() + rpos_, kBhsLength);
  Status st = ValidateTargetBhs(rx_bhs_, max_recv_dsl_, kMaxAhsBytes);
  if (!st.ok()) {
    Fail(st);
    return false;
  }
  const size_t ahs = rx_bhs_.total_ahs_bytes();
  const size_t header_len = kBhsLength + ahs + (header_digest_ ? kDigestLength : 0);
  if (avail < header_len) return false;
  if (header_digest_) {
    const uint8_t* h = staging_.get() + rpos_;
    const uint32_t expected = LoadDigest(h + kBhsLength + ahs);
    const uint32_t actual = Crc32c(h, kBhsLength + ahs);
    if (expected != actual) {
      char msg[160];
      snprintf(msg, sizeof msg, "header digest mismatch on %s: received 0x%08x, computed 0x%08x",
               OpcodeName(rx_bhs_.opcode()), expected, actual);
      Fail(Status::ProtocolError(msg));
      return false;
    }
  }
  rpos_ += header_len;
  const Opcode opcode = rx_bhs_.opcode();
  if (opcode == Opcode::kScsiResponse ||
      (opcode == Opcode::kDataIn && (rx_bhs_.flags() & kStatusBit))) {
    ++received_.responses;
  } else if (opcode == Opcode::kR2T) {
    received_.r2t_or_large_data = true;
  }
  rx_len_ = rx_bhs_.data_segment_length();
  rx_done_ = 0;
  rx_crc_ = kCrc32cSeed;
  if (rx_len_ == 0) {
    events_->OnPdu(rx_bhs_, {});
    return true;
  }
  large_segments_ = rx_len_ >= kLargeSegment;
  if (opcode == Opcode::kDataIn) {
    st = events_->PlaceDataIn(rx_bhs_, &rx_dst_);
    if (!st.ok()) {
      Fail(st);
      return false;
    }
  } else {
    // Sense data, text and pings are small; a target may still use all of our
    // MaxRecvDataSegmentLength, so the buffer grows to what arrives rather than being allocated
    // at that size up front.
    if (rx_control_.size() < rx_len_) rx_control_.resize(rx_len_);
    rx_dst_ = rx_control_.data();
  }
  rx_ = Rx::kData;
  return true;
}

bool TcpFramedDatamover::ReceiveData() {
  if (rx_ == Rx::kData) {
    const size_t take = std::min<size_t>(rend_ - rpos_, rx_len_ - rx_done_);
    if (take > 0) {
      std::memcpy(rx_dst_ + rx_done_, staging_.get() + rpos_, take);
      if (data_digest_) rx_crc_ = Crc32cExtend(rx_crc_, rx_dst_ + rx_done_, take);
      rx_done_ += static_cast<uint32_t>(take);
      rpos_ += take;
    }
    if (rx_done_ < rx_len_) return false;
    rx_ = Rx::kTrailer;
  }
  const uint32_t pad = PadLength(rx_len_);
  const size_t trailer = pad + (data_digest_ ? kDigestLength : 0);
  if (rend_ - rpos_ < trailer) return false;
  if (data_digest_) {
    const uint8_t* t = staging_.get() + rpos_;
    const uint32_t actual = Crc32cFinish(Crc32cExtend(rx_crc_, t, pad));
    const uint32_t expected = LoadDigest(t + pad);
    if (expected != actual) {
      char msg[160];
      snprintf(msg, sizeof msg, "data digest mismatch on %s: received 0x%08x, computed 0x%08x",
               OpcodeName(rx_bhs_.opcode()), expected, actual);
      Fail(Status::ProtocolError(msg));
      return false;
    }
  }
  rpos_ += trailer;
  rx_ = Rx::kHeader;
  events_->OnPdu(rx_bhs_, {rx_dst_, rx_len_});
  return true;
}

void TcpFramedDatamover::PushOutput(const Output& out) {
  if (failed_) return;
  if (out_count_ == outputs_.size()) {
    std::vector<Output> bigger(outputs_.size() * 2);
    for (size_t i = 0; i < out_count_; ++i) {
      bigger[i] = outputs_[(out_head_ + i) % outputs_.size()];
    }
    outputs_ = std::move(bigger);
    out_head_ = 0;
  }
  outputs_[(out_head_ + out_count_) % outputs_.size()] = out;
  ++out_count_;
}

void TcpFramedDatamover::SendCommand(Task* task) {
  PushOutput({Output::kCommand, task, kReservedTag, 0, 0, 0, 0});
  if (task->unsolicited_bytes > 0) {
    PushOutput({Output::kDataOut, task, kReservedTag, task->immediate_bytes,
                task->unsolicited_bytes, 0, 0});
  }
}

void TcpFramedDatamover::SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) {
  PushOutput({Output::kDataOut, task, ttt, offset, length, 0, 0});
}

TcpFramedDatamover::Control* TcpFramedDatamover::TakeControl() {
  if (free_controls_.empty()) {
    controls_.push_back(std::make_unique<Control>());
    // Every control can be free at once: returning one to the list never allocates.
    if (free_controls_.capacity() < controls_.size()) free_controls_.reserve(2 * controls_.size());
    return controls_.back().get();
  }
  Control* c = free_controls_.back();
  free_controls_.pop_back();
  return c;
}

void TcpFramedDatamover::SendControl(const Bhs& bhs, std::span<const uint8_t> data) {
  if (failed_) return;
  Control* c = TakeControl();
  c->bhs = bhs;
  c->data.assign(data.begin(), data.end());
  PushOutput({Output::kControl, nullptr, 0, 0, 0, 0, c});
}

void TcpFramedDatamover::Retire(Task* task) {
  // Called on every completion: the queue and the unwritten batch are short or empty by then.
  size_t kept = 0;
  for (size_t i = 0; i < out_count_; ++i) {
    const Output& out = outputs_[(out_head_ + i) % outputs_.size()];
    if (out.task == task) continue;
    outputs_[(out_head_ + kept) % outputs_.size()] = out;
    ++kept;
  }
  out_count_ = kept;
  if (!failed_) DropUnstartedDataOut(task);
  for (size_t i = iov_pos_; i < iov_count_; ++i) {
    if (!UnwrittenDataOf(i, task)) continue;
    auto copy = std::make_unique_for_overwrite<uint8_t[]>(iov_[i].iov_len);
    std::memcpy(copy.get(), iov_[i].iov_base, iov_[i].iov_len);
    iov_[i].iov_base = copy.get();
    retired_bytes_.push_back(std::move(copy));
  }
  if (ReceivingDataInto(task)) {
    rx_retired_ = std::make_unique_for_overwrite<uint8_t[]>(rx_len_);
    std::memcpy(rx_retired_.get(), rx_dst_, rx_done_);
    rx_dst_ = rx_retired_.get();
  }
}

void TcpFramedDatamover::DropUnstartedDataOut(const Task* task) {
  if (iov_pos_ == iov_count_) return;  // the batch is written whole
  // A frame is untouched while its header's iovec still starts at the header: Sent moves it on.
  size_t frame = iov_pos_ / 3;
  if (iov_pos_ % 3 != 0 || iov_[iov_pos_].iov_base != frames_[frame].header) ++frame;
  // The task's command, if it has not started either, still goes (with copies of its bytes):
  // leaving it out would leave its CmdSN a hole the target waits on for ever.
  for (; frame < iov_count_ / 3; ++frame) {
    const Frame& f = frames_[frame];
    if (f.task != task || static_cast<Opcode>(f.header[0] & 0x3f) != Opcode::kDataOut) continue;
    for (size_t i = 3 * frame; i < 3 * frame + 3; ++i) iov_[i].iov_len = 0;
  }
  while (iov_pos_ < iov_count_ && iov_[iov_pos_].iov_len == 0) ++iov_pos_;
}

bool TcpFramedDatamover::UnwrittenDataOf(size_t i, const Task* task) const {
  return i % 3 == 1 && frames_[i / 3].task == task && iov_[i].iov_len > 0;
}

bool TcpFramedDatamover::ReceivingDataInto(const Task* task) const {
  return rx_ == Rx::kData && rx_bhs_.opcode() == Opcode::kDataIn && rx_bhs_.itt() == task->itt &&
         rx_dst_ != rx_retired_.get();
}

bool TcpFramedDatamover::ReceiveReaches(const Task* task) const {
  return planned_direct_ > 0 && ReceivingDataInto(task);
}

bool TcpFramedDatamover::BatchReaches(const Task* task) const {
  for (size_t i = iov_pos_; i < iov_count_; ++i) {
    if (UnwrittenDataOf(i, task)) return true;
  }
  return false;
}

void TcpFramedDatamover::AddPdu(const Bhs& bhs, const uint8_t* data, uint32_t len,
                                const Task* task) {
  Frame& f = frames_[iov_count_ / 3];
  f.task = task;
  std::memcpy(f.header, bhs.data(), kBhsLength);
  size_t hlen = kBhsLength;
  if (header_digest_) {
    StoreDigest(f.header + kBhsLength, Crc32c(f.header, kBhsLength));
    hlen += kDigestLength;
  }
  // Three slots per frame keep frames_ and iov_ indexable together; empty slots cost nothing.
  iov_[iov_count_++] = {f.header, hlen};
  iov_[iov_count_++] = {const_cast<uint8_t*>(data), len};
  const uint32_t pad = PadLength(len);
  std::memset(f.trailer, 0, pad);
  size_t tlen = pad;
  if (data_digest_ && len > 0) {
    uint32_t crc = Crc32cExtend(kCrc32cSeed, data, len);
    crc = Crc32cExtend(crc, f.trailer, pad);
    StoreDigest(f.trailer + pad, Crc32cFinish(crc));
    tlen += kDigestLength;
  }
  iov_[iov_count_++] = {f.trailer, tlen};
}

void TcpFramedDatamover::BuildBatch() {
  // The last batch has been written whole: its controls and Retire's copies are free.
  free_controls_.insert(free_controls_.end(), batch_controls_.begin(), batch_controls_.end());
  batch_controls_.clear();
  retired_bytes_.clear();
  iov_count_ = iov_pos_ = 0;
  while (out_count_ > 0 && iov_count_ < iov_.size()) {
    Output& out = outputs_[out_head_];
    bool done = true;
    switch (out.kind) {
      case Output::kCommand: {
        Task* t = out.task;
        AddPdu(t->bhs, t->buffer, t->immediate_bytes, t);
        break;
      }
      case Output::kControl: {
        Control* c = out.control;
        AddPdu(c->bhs, c->data.data(), static_cast<uint32_t>(c->data.size()), nullptr);
        batch_controls_.push_back(c);
        break;
      }
      case Output::kDataOut: {
        Task* t = out.task;
        const uint32_t len = std::min(out.remaining, max_send_dsl_);
        Bhs bhs;
        bhs.set_opcode(Opcode::kDataOut, false);
        bhs.set_flags(len == out.remaining ? kFinalBit : 0);
        bhs.set_data_segment_length(len);
        bhs.set_lun(t->bhs.lun());
        bhs.set_itt(t->itt);
        bhs.set_u32(bhs::kTtt, out.ttt);
        bhs.set_u32(bhs::kExpStatSN, 0);
        bhs.set_u32(bhs::kDataSN, out.data_sn);
        bhs.set_u32(bhs::kBufferOffset, out.offset);
        AddPdu(bhs, t->buffer + out.offset, len, t);
        out.offset += len;
        out.remaining -= len;
        ++out.data_sn;
        done = out.remaining == 0;
        break;
      }
    }
    if (done) {
      out_head_ = (out_head_ + 1) % outputs_.size();
      --out_count_;
    }
  }
}

void TcpFramedDatamover::StartFraming(DatamoverEvents* events) {
  events_ = events;
  // Not zero-filled: pages the receives never reach (most of them, for small PDUs) stay
  // unallocated, which matters with hundreds of sessions in one daemon.
  staging_ = std::make_unique_for_overwrite<uint8_t[]>(kStagingSize);
  outputs_.resize(kInitialOutputs);
  frames_.resize(kMaxFramesPerBatch);
  batch_controls_.reserve(kMaxFramesPerBatch);
  iov_.resize(kMaxFramesPerBatch * 3);
}

void TcpFramedDatamover::StopFraming() {
  failed_ = true;
  out_count_ = 0;
  iov_count_ = iov_pos_ = 0;
}

int TcpFramedDatamover::PlanReceive(iovec* iov) {
  if (rpos_ == rend_) rpos_ = rend_ = 0;
  if (rx_ == Rx::kHeader && kStagingSize - rend_ < kBhsLength + kMaxAhsBytes + 8) {
    std::memmove(staging_.get(), staging_.get() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  int iovcnt = 0;
  planned_direct_ = 0;
  if (rx_ == Rx::kData && rpos_ == rend_) {
    planned_direct_ = rx_len_ - rx_done_;
    iov[iovcnt++] = {rx_dst_ + rx_done_, planned_direct_};
    rpos_ = rend_ = 0;
  }
  if (rend_ == kStagingSize && rpos_ > 0) {
    std::memmove(staging_.get(), staging_.get() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  // While large segments stream in, read only up to the next header into staging, so their
  // data lands straight in the task's buffer instead of being copied out of staging.
  planned_room_ = kStagingSize - rend_;
  if (large_segments_) {
    planned_room_ = std::min(planned_room_, kBhsLength + (header_digest_ ? kDigestLength : 0));
  }
  iov[iovcnt++] = {staging_.get() + rend_, planned_room_};
  return iovcnt;
}

bool TcpFramedDatamover::Received(size_t n) {
  const bool drained = n < planned_direct_ + planned_room_;
  if (planned_direct_ > 0) {
    const size_t into_task = std::min(n, planned_direct_);
    if (data_digest_) rx_crc_ = Crc32cExtend(rx_crc_, rx_dst_ + rx_done_, into_task);
    rx_done_ += static_cast<uint32_t>(into_task);
    n -= into_task;
  }
  rend_ += n;
  return drained;
}

TcpFramedDatamover::ReceivedSummary TcpFramedDatamover::TakeReceivedSummary() {
  ReceivedSummary summary = received_;
  // While large segments stream (one may be half read), so does the data.
  summary.r2t_or_large_data |= large_segments_;
  received_ = {};
  return summary;
}

void TcpFramedDatamover::ParseReceived() {
  while (!failed_ && (rx_ == Rx::kHeader ? ParseHeader() : ReceiveData())) {
  }
}

std::span<iovec> TcpFramedDatamover::PendingSend() {
  if (iov_pos_ == iov_count_) {
    if (out_count_ == 0) return {};
    BuildBatch();
  }
  return {&iov_[iov_pos_], std::min<size_t>(iov_count_ - iov_pos_, IOV_MAX)};
}

void TcpFramedDatamover::Sent(size_t n) {
  while (iov_pos_ < iov_count_ && n >= iov_[iov_pos_].iov_len) {
    n -= iov_[iov_pos_].iov_len;
    ++iov_pos_;
  }
  if (iov_pos_ < iov_count_) {
    iov_[iov_pos_].iov_base = static_cast<uint8_t*>(iov_[iov_pos_].iov_base) + n;
    iov_[iov_pos_].iov_len -= n;
  }
}

}  // namespace iser
