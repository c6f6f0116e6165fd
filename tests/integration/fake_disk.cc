#include "tests/integration/fake_disk.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "initiator/scsi/commands.h"

namespace iser::test {

namespace {

namespace op = scsi::opcode;

constexpr uint32_t kDataInSegment = 8192;
constexpr uint32_t kMaxBurst = 262144;
constexpr uint32_t kR2tTag = 0x7f000000;

// FakeTarget's keys with immediate and unsolicited data: writes up to FirstBurstLength
// (64 KiB) need no R2T.
FakeLoginBehavior DiskLogin() {
  FakeLoginBehavior login;
  for (std::string& key : login.operational_keys) {
    if (key == "ImmediateData=No") key = "ImmediateData=Yes";
    if (key == "InitialR2T=Yes") key = "InitialR2T=No";
  }
  return login;
}

bool Is16(uint8_t opcode) {
  return opcode >= 0x80;
}

}  // namespace

uint64_t FakeCommand::lba() const {
  return Is16(opcode()) ? LoadBe64(&cdb[2]) : LoadBe32(&cdb[2]);
}

uint32_t FakeCommand::blocks() const {
  return Is16(opcode()) ? LoadBe32(&cdb[10]) : LoadBe16(&cdb[7]);
}

bool FakeCommand::fua() const {
  const uint8_t o = opcode();
  return (o == op::kRead10 || o == op::kWrite10 || o == op::kRead16 || o == op::kWrite16) &&
         (cdb[1] & 0x08);
}

bool FakeCommand::unmap() const {
  return opcode() == op::kWriteSame16 && (cdb[1] & 0x08);
}

FakeDisk::FakeDisk(FakeDiskConfig config)
    : config_(config),
      blocks_(config.blocks),
      target_(DiskLogin(), [this](FakeTarget& t) { Serve(t); }) {}

std::vector<FakeCommand> FakeDisk::Commands() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commands_;
}

void FakeDisk::ClearCommands() {
  std::lock_guard<std::mutex> lock(mu_);
  commands_.clear();
}

void FakeDisk::Serve(FakeTarget& t) {
  // Writes whose data is still arriving, by ITT.
  struct Incoming {
    FakeCommand cmd;
    uint32_t expected;
    uint32_t r2tsn;
  };
  std::map<uint32_t, Incoming> incoming;
  auto send_r2t = [&](uint32_t itt, Incoming& in) {
    const uint32_t offset = static_cast<uint32_t>(in.cmd.data.size());
    Bhs r2t = ResponseHeader(Opcode::kR2T, itt, 0, exp_cmdsn_, exp_cmdsn_ + 63);
    r2t.set_u32(bhs::kTtt, kR2tTag | in.r2tsn);
    r2t.set_u32(bhs::kDataSN, in.r2tsn++);
    r2t.set_u32(bhs::kBufferOffset, offset);
    r2t.set_u32(bhs::kDesiredLength, std::min(in.expected - offset, kMaxBurst));
    t.Send(r2t);
  };
  if (config_.ask_for_logout) {
    Bhs async = ResponseHeader(Opcode::kAsyncMessage, kReservedTag, t.next_statsn(), 1, 64);
    async.b[36] = 1;       // AsyncEvent 1: the target requests a logout
    async.set_u16(42, 5);  // Parameter3: within 5 s
    t.Send(async);
  }
  FakePdu pdu;
  while (t.Read(&pdu)) {
    const uint32_t itt = pdu.bhs.itt();
    switch (pdu.bhs.opcode()) {
      case Opcode::kScsiCommand: {
        if (!pdu.bhs.immediate()) exp_cmdsn_ = pdu.bhs.u32(bhs::kCmdSN) + 1;
        FakeCommand cmd;
        std::memcpy(cmd.cdb, &pdu.bhs.b[bhs::kCdb], sizeof cmd.cdb);
        cmd.data = pdu.data;
        const uint32_t expected = pdu.bhs.u32(bhs::kExpectedDataTransferLength);
        const bool write = pdu.bhs.flags() & kWriteBit;
        if (!write || cmd.data.size() >= expected) {
          Answer(t, itt, std::move(cmd), expected);
          break;
        }
        Incoming& in = incoming[itt] = {std::move(cmd), expected, 0};
        if (pdu.bhs.flags() & kFinalBit) send_r2t(itt, in);  // no unsolicited Data-Out follows
        break;
      }
      case Opcode::kDataOut: {
        auto it = incoming.find(itt);
        if (it == incoming.end()) break;
        Incoming& in = it->second;
        in.cmd.data.insert(in.cmd.data.end(), pdu.data.begin(), pdu.data.end());
        if (!(pdu.bhs.flags() & kFinalBit)) break;
        if (in.cmd.data.size() < in.expected) {
          send_r2t(itt, in);
          break;
        }
        Answer(t, itt, std::move(in.cmd), in.expected);
        incoming.erase(it);
        break;
      }
      case Opcode::kNopOut:
        if (itt != kReservedTag) {
          t.Send(ResponseHeader(Opcode::kNopIn, itt, t.next_statsn(), exp_cmdsn_, exp_cmdsn_ + 63));
        }
        break;
      case Opcode::kLogoutRequest:
        t.Send(ResponseHeader(Opcode::kLogoutResponse, itt, t.next_statsn(), exp_cmdsn_,
                              exp_cmdsn_ + 63));
        t.Close();
        return;
      default:
        break;
    }
  }
}

void FakeDisk::Answer(FakeTarget& t, uint32_t itt, FakeCommand cmd, uint32_t expected) {
  if (const int ms = delay_ms_.load(); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (capacity_changed_.exchange(false)) {
    std::vector<uint8_t> sense(18, 0);
    sense[0] = 0x70;
    sense[2] = 0x06;  // UNIT ATTENTION
    sense[7] = 10;
    sense[12] = 0x2a;  // CAPACITY DATA HAS CHANGED
    sense[13] = 0x09;
    SendStatus(t, itt, 0x02, sense);
    return;
  }
  const uint8_t* cdb = cmd.cdb;
  std::vector<uint8_t> data;
  bool known = true;
  uint32_t underflow = 0;
  uint32_t overflow = 0;
  switch (cmd.opcode()) {
    case op::kWrite10:
    case op::kWrite16:
      underflow = std::min(short_by_.load(), expected);
      overflow = long_by_;
      break;
    case op::kTestUnitReady:
    case op::kWriteSame16:
    case op::kUnmap:
    case op::kSynchronizeCache10:
    case op::kSynchronizeCache16:
      break;
    case op::kRead10:
    case op::kRead16:
      underflow = std::min(short_by_.load(), expected);
      overflow = long_by_;
      data.assign(expected - underflow, 0);
      break;
    case op::kInquiry:
      if (!(cdb[1] & 1)) {
        data.assign(36, ' ');
        data[0] = 0x00;  // direct access block device
        data[1] = 0;
        data[2] = 6;
        data[3] = 2;
        data[4] = 31;
        data[5] = data[6] = data[7] = 0;
        std::memcpy(&data[8], "FAKE    FAKEDISK        0001", 28);
      } else if (cdb[2] == 0x00) {
        data = {0x00, 0x00, 0x00, 2, 0x00, 0xb2};
      } else if (cdb[2] == 0xb2) {
        const uint8_t thin = config_.thin ? 0x80 | 0x40 | 0x04 : 0;  // LBPU, LBPWS, LBPRZ 1
        data = {0x00, 0xb2, 0x00, 4, 0, thin, static_cast<uint8_t>(config_.thin ? 2 : 0), 0};
      } else {
        known = false;
      }
      break;
    case op::kServiceActionIn16:
      if ((cdb[1] & 0x1f) == 0x10) {  // READ CAPACITY(16)
        data.assign(32, 0);
        StoreBe64(&data[0], blocks_ - 1);
        StoreBe32(&data[8], config_.block_size);
        data[14] = config_.thin ? 0x80 | 0x40 : 0;  // LBPME, LBPRZ
      } else {
        known = false;
      }
      break;
    case op::kModeSense10:
      data.assign(8 + 20, 0);
      StoreBe16(&data[0], static_cast<uint16_t>(data.size() - 2));
      data[3] = config_.dpofua ? 0x10 : 0;
      data[8] = 0x08;  // caching page
      data[9] = 18;
      data[10] = config_.write_cache ? 0x04 : 0;
      break;
    default:
      known = false;
      break;
  }
  if (!known) {
    // ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE (or INVALID FIELD IN CDB).
    std::vector<uint8_t> sense(18, 0);
    sense[0] = 0x70;
    sense[2] = 0x05;
    sense[7] = 10;
    sense[12] = cmd.opcode() == op::kInquiry ? 0x24 : 0x20;
    SendStatus(t, itt, 0x02, sense);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(cmd);
  }
  if (data.empty()) {
    SendStatus(t, itt, 0x00, {}, underflow, overflow);
  } else {
    SendData(t, itt, data, expected, overflow);
  }
}

// Data-In PDUs of at most 8 KiB; the last carries the status, and the residual if the data is
// shorter than the initiator asked for.
void FakeDisk::SendData(FakeTarget& t, uint32_t itt, const std::vector<uint8_t>& data,
                        uint32_t expected, uint32_t overflow) {
  const uint32_t total = std::min<uint32_t>(static_cast<uint32_t>(data.size()), expected);
  uint32_t offset = 0;
  uint32_t data_sn = 0;
  do {
    const uint32_t n = std::min(total - offset, kDataInSegment);
    const bool last = offset + n == total;
    Bhs din = ResponseHeader(Opcode::kDataIn, itt, last ? t.next_statsn() : 0, exp_cmdsn_,
                             exp_cmdsn_ + 63);
    uint8_t flags = last ? kFinalBit | kStatusBit : 0;
    if (last && total < expected) {
      flags |= kResidualUnderflow;
      din.set_u32(bhs::kResidualCount, expected - total);
    } else if (last && overflow > 0) {
      flags |= kResidualOverflow;
      din.set_u32(bhs::kResidualCount, overflow);
    }
    din.set_flags(flags);
    din.set_u32(bhs::kDataSN, data_sn++);
    din.set_u32(bhs::kBufferOffset, offset);
    din.set_data_segment_length(n);
    t.Send(din, std::vector<uint8_t>(data.begin() + offset, data.begin() + offset + n));
    offset += n;
  } while (offset < total);
}

void FakeDisk::SendStatus(FakeTarget& t, uint32_t itt, uint8_t status,
                          const std::vector<uint8_t>& sense, uint32_t underflow,
                          uint32_t overflow) {
  Bhs rsp =
      ResponseHeader(Opcode::kScsiResponse, itt, t.next_statsn(), exp_cmdsn_, exp_cmdsn_ + 63);
  rsp.b[3] = status;
  if (underflow > 0 || overflow > 0) {
    rsp.set_flags(kFinalBit | (underflow > 0 ? kResidualUnderflow : kResidualOverflow));
    rsp.set_u32(bhs::kResidualCount, underflow > 0 ? underflow : overflow);
  }
  std::vector<uint8_t> data;
  if (!sense.empty()) {  // SENSE LENGTH, then the sense data
    data.assign(2 + sense.size(), 0);
    data[1] = static_cast<uint8_t>(sense.size());
    std::copy(sense.begin(), sense.end(), data.begin() + 2);
  }
  rsp.set_data_segment_length(static_cast<uint32_t>(data.size()));
  t.Send(rsp, data);
}

}  // namespace iser::test
