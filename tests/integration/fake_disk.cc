#include "tests/integration/fake_disk.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "initiator/scsi/commands.h"
#include "initiator/scsi/sense.h"

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

bool IsRead(uint8_t opcode) {
  return opcode == op::kRead10 || opcode == op::kRead16;
}

bool IsWrite(uint8_t opcode) {
  return opcode == op::kWrite10 || opcode == op::kWrite16;
}

// Fixed-format sense data (response code 0x70): 18 bytes, ADDITIONAL SENSE LENGTH 10.
std::vector<uint8_t> FixedSense(uint8_t key, uint8_t asc, uint8_t ascq) {
  std::vector<uint8_t> sense(18, 0);
  sense[0] = 0x70;
  sense[2] = key;
  sense[7] = 10;
  sense[12] = asc;
  sense[13] = ascq;
  return sense;
}

constexpr uint8_t kReportTargetPortGroups = 0x0a;  // MAINTENANCE IN service action
constexpr uint8_t kReadCapacity16 = 0x10;          // SERVICE ACTION IN(16) service action

bool IsReportTargetPortGroups(const uint8_t* cdb) {
  return cdb[0] == op::kMaintenanceIn && (cdb[1] & 0x1f) == kReportTargetPortGroups;
}

// One designation descriptor of VPD page 0x83 (SPC-5 7.7.6): binary code set; a target port's
// carries PIV and the iSCSI protocol identifier (5).
void AddDesignator(std::vector<uint8_t>& page, uint8_t association, uint8_t type,
                   const std::vector<uint8_t>& designator) {
  const bool port = association == scsi::association::kTargetPort;
  page.push_back(static_cast<uint8_t>((port ? 0x50 : 0x00) | 0x01));
  page.push_back(static_cast<uint8_t>((port ? 0x80 : 0x00) | association << 4 | type));
  page.push_back(0);
  page.push_back(static_cast<uint8_t>(designator.size()));
  page.insert(page.end(), designator.begin(), designator.end());
}

// A relative target port or target port group designator: two reserved bytes, then the id.
std::vector<uint8_t> Id16(uint16_t id) {
  return {0, 0, static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)};
}

}  // namespace

FakeAlua::Group& FakeAlua::GroupLocked(uint16_t id) {
  for (Group& g : groups_) {
    if (g.id == id) return g;
  }
  groups_.push_back({id});
  return groups_.back();
}

void FakeAlua::Set(uint16_t group, scsi::AluaState state, bool unit_attention) {
  MutexLock lock(&mu_);
  Group& g = GroupLocked(group);
  if (g.state == state) return;
  g.state = state;
  g.status_code = 2;  // altered by implicit asymmetric access state transition
  if (unit_attention) ++announced_;
}

void FakeAlua::AddPort(uint16_t group, uint16_t relative_target_port) {
  MutexLock lock(&mu_);
  GroupLocked(group).relative_target_ports.push_back(relative_target_port);
}

scsi::AluaState FakeAlua::StateOf(uint16_t group) {
  MutexLock lock(&mu_);
  return GroupLocked(group).state;
}

std::vector<uint8_t> FakeAlua::ReportTargetPortGroups() {
  MutexLock lock(&mu_);
  std::vector<uint8_t> data(4, 0);
  for (const Group& g : groups_) {
    const size_t at = data.size();
    data.resize(at + 8 + 4 * g.relative_target_ports.size(), 0);
    data[at] = static_cast<uint8_t>(g.state);  // PREF 0
    data[at + 1] = 0xcf;                       // T_SUP O_SUP U_SUP S_SUP AN_SUP AO_SUP
    StoreBe16(&data[at + 2], g.id);
    data[at + 5] = g.status_code;
    data[at + 7] = static_cast<uint8_t>(g.relative_target_ports.size());
    for (size_t i = 0; i < g.relative_target_ports.size(); ++i) {
      StoreBe16(&data[at + 8 + 4 * i + 2], g.relative_target_ports[i]);
    }
  }
  StoreBe32(&data[0], static_cast<uint32_t>(data.size() - 4));  // RETURN DATA LENGTH
  return data;
}

uint64_t FakeAlua::announced() {
  MutexLock lock(&mu_);
  return announced_;
}

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
      alua_(config.tpgs == 0 ? nullptr
            : config.alua    ? config.alua
                             : std::make_shared<FakeAlua>()),
      blocks_(config.blocks),
      target_(DiskLogin(), [this](FakeTarget& t) { Serve(t); }) {
  // Before the initiator can know the port number, so before any command asks for the groups.
  if (alua_) alua_->AddPort(config_.target_port_group, config_.relative_target_port);
}

std::vector<FakeCommand> FakeDisk::Commands() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commands_;
}

void FakeDisk::ClearCommands() {
  std::lock_guard<std::mutex> lock(mu_);
  commands_.clear();
}

FakeIoCounts FakeDisk::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
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
  // The I_T nexus begins with this login: changes before it are no unit attention of its.
  if (alua_) alua_changes_reported_ = alua_->announced();
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
  if (IsRead(cmd.opcode()) || IsWrite(cmd.opcode())) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.io_received;
  }
  if (capacity_changed_.exchange(false)) {
    // UNIT ATTENTION, CAPACITY DATA HAS CHANGED.
    SendStatus(t, itt, 0x02, FixedSense(sense_key::kUnitAttention, 0x2a, 0x09));
    return;
  }
  if (alua_) {
    if (std::vector<uint8_t> sense = AluaRefusal(cmd); !sense.empty()) {
      SendStatus(t, itt, 0x02, sense);
      return;
    }
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
        data[5] = static_cast<uint8_t>((config_.tpgs & 3) << 4);  // TPGS
        data[6] = data[7] = 0;
        std::memcpy(&data[8], "FAKE    FAKEDISK        0001", 28);
      } else if (cdb[2] == 0x00) {
        if (config_.naa != 0 || alua_) {
          data = {0x00, 0x00, 0x00, 3, 0x00, 0x83, 0xb2};
        } else {
          data = {0x00, 0x00, 0x00, 2, 0x00, 0xb2};
        }
      } else if (cdb[2] == 0x83 && (config_.naa != 0 || alua_)) {
        data = DeviceIdentificationPage();
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
    case op::kMaintenanceIn:
      // REPORT TARGET PORT GROUPS, length-only format only (PARAMETER DATA FORMAT 000b), cut to
      // the ALLOCATION LENGTH.
      known = alua_ && IsReportTargetPortGroups(cdb) && (cdb[1] >> 5) == 0;
      if (known) {
        data = alua_->ReportTargetPortGroups();
        data.resize(std::min<size_t>(data.size(), LoadBe32(&cdb[6])));
      }
      break;
    default:
      known = false;
      break;
  }
  if (!known) {
    // ILLEGAL REQUEST: INVALID FIELD IN CDB for a page or service action we do not serve of a
    // command we do, else INVALID COMMAND OPERATION CODE.
    const bool field =
        cmd.opcode() == op::kInquiry || (cmd.opcode() == op::kMaintenanceIn && alua_);
    SendStatus(t, itt, 0x02, FixedSense(sense_key::kIllegalRequest, field ? 0x24 : 0x20, 0));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(cmd);
    if (IsRead(cmd.opcode())) ++counts_.reads;
    if (IsWrite(cmd.opcode())) ++counts_.writes;
    if (IsReportTargetPortGroups(cdb)) ++counts_.report_target_port_groups;
  }
  if (data.empty()) {
    SendStatus(t, itt, 0x00, {}, underflow, overflow);
  } else {
    SendData(t, itt, data, expected, overflow);
  }
}

std::vector<uint8_t> FakeDisk::AluaRefusal(const FakeCommand& cmd) {
  const uint8_t o = cmd.opcode();
  const bool rtpg = IsReportTargetPortGroups(cmd.cdb);
  // INQUIRY and REPORT LUNS neither report nor clear a unit attention (SAM-5); REPORT TARGET PORT
  // GROUPS passes it too (the header says why).
  if (o != op::kInquiry && o != op::kReportLuns && !rtpg) {
    const uint64_t announced = alua_->announced();
    if (announced != alua_changes_reported_) {
      alua_changes_reported_ = announced;
      std::lock_guard<std::mutex> lock(mu_);
      ++counts_.unit_attentions;
      // UNIT ATTENTION, ASYMMETRIC ACCESS STATE CHANGED.
      return FixedSense(sense_key::kUnitAttention, 0x2a, 0x06);
    }
  }
  // What each state lets through (SPC-5 5.16.2.4; READ CAPACITY in standby as LIO does).
  const bool everywhere = o == op::kInquiry || o == op::kReportLuns || rtpg;
  const bool in_standby = everywhere || o == op::kModeSense10 ||
                          (o == op::kServiceActionIn16 && (cmd.cdb[1] & 0x1f) == kReadCapacity16);
  uint8_t ascq = 0;  // LOGICAL UNIT NOT ACCESSIBLE, ... (04/ascq)
  switch (alua_->StateOf(config_.target_port_group)) {
    case scsi::AluaState::kStandby:
      if (!in_standby) ascq = 0x0b;  // TARGET PORT IN STANDBY STATE
      break;
    case scsi::AluaState::kUnavailable:
    case scsi::AluaState::kOffline:
      if (!everywhere) ascq = 0x0c;  // TARGET PORT IN UNAVAILABLE STATE
      break;
    case scsi::AluaState::kTransitioning:
      if (!everywhere) ascq = 0x0a;  // ASYMMETRIC ACCESS STATE TRANSITION
      break;
    default:
      break;
  }
  if (ascq == 0) return {};
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.not_ready;
  return FixedSense(sense_key::kNotReady, 0x04, ascq);
}

// The LU's NAA designator (logical unit association), then with ALUA this port's relative target
// port and target port group (target port association).
std::vector<uint8_t> FakeDisk::DeviceIdentificationPage() const {
  std::vector<uint8_t> page = {0x00, 0x83, 0, 0};
  if (config_.naa != 0) {
    std::vector<uint8_t> naa(8);
    StoreBe64(naa.data(), config_.naa);
    AddDesignator(page, scsi::association::kLogicalUnit, scsi::designator_type::kNaa, naa);
  }
  if (alua_) {
    AddDesignator(page, scsi::association::kTargetPort, scsi::designator_type::kRelativeTargetPort,
                  Id16(config_.relative_target_port));
    AddDesignator(page, scsi::association::kTargetPort, scsi::designator_type::kTargetPortGroup,
                  Id16(config_.target_port_group));
  }
  StoreBe16(&page[2], static_cast<uint16_t>(page.size() - 4));
  return page;
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

SessionOptions OptionsFor(const FakeDisk& disk) {
  SessionOptions o = LoopbackOptions(disk.port(), "iqn.2026-11.io.iser-connect.test:fake-disk");
  o.nop_interval = std::chrono::milliseconds(0);
  return o;
}

}  // namespace iser::test
