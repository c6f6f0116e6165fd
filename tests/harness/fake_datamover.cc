#include "tests/harness/fake_datamover.h"

#include <cstring>
#include <memory>

#include "initiator/transport/portal.h"

namespace iser::test {

class FakeDatamover final : public Datamover {
 public:
  explicit FakeDatamover(FakeConnection* c) : c_(c) {}

  Clock::time_point Now() const override { return c_->Now(); }

  Status Connect(const Portal& portal, Deadline) override {
    const int n = ++c_->connects_;
    portal_ = portal.ToString();
    c_->failed_ = false;
    c_->failure_ = Status::OK();
    c_->shut_down_ = false;
    c_->io_thread_stopped_ = false;
    c_->events_ = nullptr;
    c_->login_responses_.clear();
    c_->portals_.push_back(portal_);
    if (c_->options_.connect_result) return c_->options_.connect_result(n);
    return c_->options_.connect_status;
  }
  std::string Describe() const override { return "FAKE " + portal_; }
  std::string Mechanism() const override { return "fake"; }

  Status SendPdu(const Bhs& bhs, std::span<const uint8_t>, Deadline) override {
    if (bhs.opcode() != Opcode::kLoginRequest) {
      return Status::ProtocolError(std::string("the fake target answers only Login, not ") +
                                   OpcodeName(bhs.opcode()));
    }
    c_->AnswerLogin(bhs);
    return Status::OK();
  }
  Status ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline) override {
    if (c_->login_responses_.empty()) return Status::Timeout("the fake target has nothing to say");
    *bhs = c_->login_responses_.front().first;
    *data = std::move(c_->login_responses_.front().second);
    c_->login_responses_.pop_front();
    return Status::OK();
  }
  uint32_t MaxTransferBytes() const override { return c_->options_.max_transfer_bytes; }
  uint32_t MaxOutstandingCommands() const override { return c_->options_.max_outstanding_commands; }
  Status EnterFullFeature(const ConnectionParams& params) override {
    c_->params_ = params;
    return c_->options_.enter_full_feature_status;
  }

  // The test fires the timer itself (FireTimer).
  void SetTimerPeriod(std::chrono::milliseconds) override {}
  Status Start(DatamoverEvents* events) override {
    if (!c_->options_.start_status.ok()) return c_->options_.start_status;
    c_->events_ = events;
    return Status::OK();
  }
  void Wake() override {
    ++c_->wakes_;
    if (!OnIoThread()) return;
    c_->Post([c = c_] { c->events_->OnWake(); });
    if (c_->options_.on_wake) c_->Post(c_->options_.on_wake);
  }
  bool OnIoThread() const override {
    return c_->events_ != nullptr && !c_->shut_down_ && !c_->io_thread_stopped_;
  }
  void SendCommand(Task* task) override {
    SentPdu p;
    p.kind = SentPdu::Kind::kCommand;
    p.bhs = task->bhs;
    p.task = task;
    p.data.assign(task->buffer, task->buffer + task->immediate_bytes);
    p.unsolicited_bytes = task->unsolicited_bytes;
    c_->sent_.push_back(std::move(p));
  }
  void Retire(Task* task) override { c_->retired_.push_back(task->itt); }
  void SendDataOut(Task* task, uint32_t ttt, uint32_t offset, uint32_t length) override {
    SentPdu p;
    p.kind = SentPdu::Kind::kDataOut;
    p.bhs = task->bhs;
    p.task = task;
    p.ttt = ttt;
    p.offset = offset;
    p.length = length;
    p.data.assign(task->buffer + offset, task->buffer + offset + length);
    c_->sent_.push_back(std::move(p));
  }
  void SendControl(const Bhs& bhs, std::span<const uint8_t> data) override {
    SentPdu p;
    p.bhs = bhs;
    p.data.assign(data.begin(), data.end());
    c_->sent_.push_back(std::move(p));
    if (bhs.opcode() == Opcode::kLogoutRequest && c_->options_.answer_logout) {
      const Bhs rsp = c_->Header(Opcode::kLogoutResponse, bhs.itt());
      c_->Post([c = c_, rsp] { c->Deliver(rsp); });
    }
  }
  void Abort(const Status& status) override {
    c_->Post([c = c_, status] { c->Fail(status); });
  }
  void Shutdown() override { c_->shut_down_ = true; }

 private:
  FakeConnection* const c_;
  std::string portal_;
};

FakeConnection::FakeConnection(FakeConnectionOptions options)
    : options_(std::move(options)), now_(Clock::time_point(std::chrono::hours(1))) {}

DatamoverFactory FakeConnection::Factory() {
  return [this](TransportKind) -> Result<std::unique_ptr<Datamover>> {
    return std::unique_ptr<Datamover>(new FakeDatamover(this));
  };
}

void FakeConnection::AnswerLogin(const Bhs& req) {
  const uint8_t csg = (req.flags() >> 2) & 3;
  if (csg == 0) logins_.push_back(req);
  const uint32_t cmdsn = req.u32(bhs::kCmdSN);
  Bhs rsp;
  rsp.set_opcode(Opcode::kLoginResponse, false);
  rsp.set_itt(req.itt());
  rsp.set_u32(bhs::kStatSN, statsn_++);
  rsp.set_u32(bhs::kExpCmdSN, cmdsn);
  rsp.set_u32(bhs::kMaxCmdSN, cmdsn + options_.login_cmdsn_window);
  std::memcpy(&rsp.b[8], &req.b[8], 6);  // ISID
  rsp.set_u16(14, 0x1234);               // TSIH
  std::string text;
  if (csg == 0) {
    text = std::string("AuthMethod=None") + '\0' + "TargetPortalGroupTag=1" + '\0';
    rsp.set_flags(kTransitBit | 0 << 2 | 1);
  } else {
    for (const std::string& k : options_.login_keys) text += k + '\0';
    rsp.set_flags(kTransitBit | 1 << 2 | 3);
    exp_cmdsn = cmdsn;
    max_cmdsn = cmdsn + options_.login_cmdsn_window;
  }
  rsp.set_data_segment_length(static_cast<uint32_t>(text.size()));
  login_responses_.emplace_back(rsp, std::vector<uint8_t>(text.begin(), text.end()));
}

Bhs FakeConnection::Header(Opcode op, uint32_t itt) {
  Bhs b;
  b.set_opcode(op, false);
  b.set_flags(kFinalBit);
  b.set_itt(itt);
  b.set_u32(bhs::kStatSN, statsn_++);
  b.set_u32(bhs::kExpCmdSN, exp_cmdsn);
  b.set_u32(bhs::kMaxCmdSN, max_cmdsn);
  return b;
}

void FakeConnection::Run(const std::function<void()>& event) {
  ++depth_;
  event();
  --depth_;
  while (depth_ == 0 && !posted_.empty()) {
    std::function<void()> next = std::move(posted_.front());
    posted_.pop_front();
    ++depth_;
    next();
    --depth_;
  }
}

void FakeConnection::Post(std::function<void()> event) {
  if (depth_ > 0) {
    posted_.push_back(std::move(event));
  } else {
    Run(event);
  }
}

void FakeConnection::Deliver(const Bhs& bhs, std::span<const uint8_t> data) {
  if (events_ == nullptr) return;
  std::vector<uint8_t> copy(data.begin(), data.end());
  Bhs framed = bhs;
  framed.set_data_segment_length(static_cast<uint32_t>(copy.size()));
  Post([this, bhs = framed, copy = std::move(copy)] {
    if (failed_) return;
    if (bhs.opcode() == Opcode::kDataIn && !copy.empty()) {
      uint8_t* destination = nullptr;
      const Status st = events_->PlaceDataIn(bhs, &destination);
      if (!st.ok()) {
        Fail(st);
        return;
      }
      std::memcpy(destination, copy.data(), copy.size());
    }
    events_->OnPdu(bhs, copy);
  });
}

void FakeConnection::DeliverUnplaced(const Bhs& bhs, std::span<const uint8_t> data) {
  if (events_ == nullptr) return;
  std::vector<uint8_t> copy(data.begin(), data.end());
  Bhs framed = bhs;
  framed.set_data_segment_length(static_cast<uint32_t>(copy.size()));
  Post([this, bhs = framed, copy = std::move(copy)] {
    if (!failed_) events_->OnPdu(bhs, copy);
  });
}

void FakeConnection::FireTimer() {
  if (events_ == nullptr) return;
  Post([this] { events_->OnTimer(); });
}

void FakeConnection::FailConnection(const Status& status) {
  if (events_ == nullptr) return;
  if (depth_ > 0) {
    posted_.push_back([this, status] { Fail(status); });
    return;
  }
  // Not through Run: once the session hears of the failure its recovery thread may take the fake
  // over (reconnect, start, Wake), so this thread touches nothing of the fake after Fail.
  Fail(status);
}

void FakeConnection::Fail(const Status& status) {
  if (failed_) return;
  failed_ = true;
  failure_ = status;
  events_->OnConnectionError(status);
}

void FakeConnection::StopIoThread() {
  io_thread_stopped_ = true;
}

std::vector<SentPdu> FakeConnection::TakeSent() {
  std::vector<SentPdu> out;
  out.swap(sent_);
  return out;
}

}  // namespace iser::test
