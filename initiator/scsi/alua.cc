#include "initiator/scsi/alua.h"

#include <algorithm>

#include "initiator/pdu/bhs.h"
#include "initiator/scsi/parsing.h"

namespace iser::scsi {

namespace {

constexpr uint8_t kReportTargetPortGroupsAction = 0x0a;
constexpr char kRtpg[] = "REPORT TARGET PORT GROUPS";

}  // namespace

void ReportTargetPortGroups(Task& t, uint8_t* buf, uint32_t alloc) {
  Setup(t, 12, DataDirection::kRead, buf, alloc);
  t.cdb[0] = opcode::kMaintenanceIn;
  t.cdb[1] = kReportTargetPortGroupsAction;
  StoreBe32(&t.cdb[6], alloc);
}

const char* AluaStateName(AluaState state) {
  switch (state) {
    case AluaState::kActiveOptimized:
      return "active/optimized";
    case AluaState::kActiveNonOptimized:
      return "active/non-optimized";
    case AluaState::kStandby:
      return "standby";
    case AluaState::kUnavailable:
      return "unavailable";
    case AluaState::kLogicalBlockDependent:
      return "lba-dependent";
    case AluaState::kOffline:
      return "offline";
    case AluaState::kTransitioning:
      return "transitioning";
  }
  return "reserved";
}

Result<TargetPortGroups> ParseReportTargetPortGroups(std::span<const uint8_t> d) {
  if (d.size() < 4) return Short((std::string(kRtpg) + " data").c_str(), d.size(), 4);
  const uint64_t total = uint64_t{LoadBe32(&d[0])} + 4;
  if (total > UINT32_MAX) {
    return Status::ProtocolError(std::string(kRtpg) + ": RETURN DATA LENGTH " +
                                 std::to_string(total - 4) + " exceeds any allocation length");
  }
  TargetPortGroups out;
  if (total > d.size()) out.needed_bytes = static_cast<uint32_t>(total);
  const std::span<const uint8_t> data = d.first(std::min<uint64_t>(total, d.size()));
  // Byte 4 is the first descriptor's in the length-only format, where bits 4-6 are reserved.
  const bool extended = data.size() > 4 && ((data[4] >> 4) & 7) == 1;
  const size_t header = extended ? 8 : 4;
  if (total < header) {
    return Status::ProtocolError(std::string(kRtpg) + ": RETURN DATA LENGTH " +
                                 std::to_string(total - 4) +
                                 " is shorter than the extended header");
  }
  for (size_t off = header; off < data.size();) {
    const size_t left = data.size() - off;
    const size_t need = left < 8 ? 8 : 8 + 4 * size_t{data[off + 7]};
    if (left < need) {
      if (out.needed_bytes != 0) break;  // the allocation length cut it: the caller re-issues
      return Status::ProtocolError(
          std::string(kRtpg) + ": the target port group descriptor at byte " + std::to_string(off) +
          " needs " + std::to_string(need) + " bytes, " + std::to_string(left) + " remain");
    }
    const std::span<const uint8_t> g = data.subspan(off, need);
    TargetPortGroup group;
    group.preferred = g[0] & 0x80;
    group.state = static_cast<AluaState>(g[0] & 0x0f);
    group.supported = g[1];
    group.id = LoadBe16(&g[2]);
    group.status_code = g[5];
    for (size_t p = 8; p < need; p += 4) group.relative_target_ports.push_back(LoadBe16(&g[p + 2]));
    out.groups.push_back(std::move(group));
    off += need;
  }
  return out;
}

Result<Designators> ParseDesignators(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0x83, "VPD page 0x83");
  if (!body.ok()) return body.status();
  const size_t end = 4 + body->size();
  Designators out;
  size_t off = 4;
  while (off < end) {
    if (end - off < 4 || end - off < 4 + size_t{d[off + 3]}) {
      out.incomplete_at = off;
      break;
    }
    out.list.push_back({static_cast<uint8_t>(d[off] & 0x0f),
                        static_cast<uint8_t>((d[off + 1] >> 4) & 3),
                        static_cast<uint8_t>(d[off + 1] & 0x0f), d.subspan(off + 4, d[off + 3])});
    off += 4 + d[off + 3];
  }
  return out;
}

Result<DeviceIdentifiers> ParseDeviceIdentifiers(std::span<const uint8_t> d) {
  Result<Designators> designators = ParseDesignators(d);
  if (!designators.ok()) return designators.status();
  if (designators->incomplete_at != 0) {
    return Status::ProtocolError("VPD page 0x83: the designation descriptor at byte " +
                                 std::to_string(designators->incomplete_at) +
                                 " runs past the end of the page");
  }
  DeviceIdentifiers ids;
  bool have_naa = false;
  for (const Designator& x : designators->list) {
    // An NAA or EUI-64 designator of the target port or device names that, not the LU.
    if (x.association == association::kLogicalUnit) {
      if (x.type == designator_type::kNaa && !have_naa) {
        ids.lu_name = "naa." + HexBytes(x.designator);
        have_naa = true;
      } else if (x.type == designator_type::kEui64 && ids.lu_name.empty()) {
        ids.lu_name = "eui." + HexBytes(x.designator);
      }
    } else if (x.association == association::kTargetPort &&
               (x.type == designator_type::kRelativeTargetPort ||
                x.type == designator_type::kTargetPortGroup)) {
      const bool port = x.type == designator_type::kRelativeTargetPort;
      if (x.designator.size() < 4) {
        return Status::ProtocolError(
            std::string("VPD page 0x83: ") + (port ? "relative target port" : "target port group") +
            " designator of " + std::to_string(x.designator.size()) + " bytes, 4 needed");
      }
      std::optional<uint16_t>& field = port ? ids.relative_target_port : ids.target_port_group;
      if (!field) field = LoadBe16(&x.designator[2]);
    }
  }
  return ids;
}

uint8_t InquiryTpgs(std::span<const uint8_t> standard_inquiry) {
  if (standard_inquiry.size() < 6) return 0;
  return (standard_inquiry[5] >> 4) & 3;
}

AluaSense ClassifyAluaSense(const Sense& sense) {
  if (!sense.valid) return AluaSense::kNone;
  if (sense.key == sense_key::kNotReady && sense.asc == 0x04) {
    switch (sense.ascq) {
      case 0x0a:
        return AluaSense::kTransitioning;
      case 0x0b:
        return AluaSense::kStandby;
      case 0x0c:
      // LOGICAL UNIT NOT READY, OFFLINE: how LIO reports a port group in the offline state.
      case 0x12:
        return AluaSense::kUnavailable;
    }
  }
  if (sense.key == sense_key::kUnitAttention && sense.asc == 0x2a) {
    switch (sense.ascq) {
      case 0x06:
        return AluaSense::kStateChanged;
      case 0x07:
        return AluaSense::kImplicitTransitionFailed;
    }
  }
  return AluaSense::kNone;
}

}  // namespace iser::scsi
