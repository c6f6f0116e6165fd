#include "initiator/block/lun_info.h"

#include <algorithm>
#include <array>

#include "initiator/scsi/commands.h"
#include "initiator/scsi/run.h"
#include "initiator/scsi/sense.h"

namespace iser {

namespace {

// Without a Block Limits page we still bound one command: large enough for streaming, small
// enough for any target we know.
constexpr uint32_t kDefaultMaxTransfer = 4u << 20;
constexpr int kUnitAttentionRetries = 8;

std::string On(uint64_t lun) {
  return " on LUN " + std::to_string(lun);
}

// A command the LUN does not support or whose CDB it finds wrong (ILLEGAL REQUEST), as
// opposed to one that could not be carried out.
bool Refused(const Status& st) {
  return st.code() == StatusCode::kNotSupported || st.code() == StatusCode::kInvalidArgument;
}

}  // namespace

Result<LunIdentity> ReadLunIdentity(Executor& s, uint64_t lun) {
  LunIdentity id;
  Result<std::vector<uint8_t>> p = scsi::RunInquiry(s, lun, 0x83);
  if (p.ok()) {
    if (auto d = scsi::ParseDeviceIdentification(*p); d.ok()) id.identifier = *d;
  } else if (!Refused(p.status())) {
    return p.status();
  }
  p = scsi::RunInquiry(s, lun, 0x80);
  if (p.ok()) {
    if (auto serial = scsi::ParseUnitSerialNumber(*p); serial.ok()) id.serial = *serial;
  } else if (!Refused(p.status())) {
    return p.status();
  }
  return id;
}

Result<std::vector<uint64_t>> ReportLuns(Executor& s) {
  std::vector<uint8_t> buf(16384);
  Task t;
  scsi::ReportLuns(t, buf.data(), static_cast<uint32_t>(buf.size()));
  Status st = scsi::Run(s, t, 0);
  if (!st.ok()) return st;
  buf.resize(TransferredBytes(t));
  return scsi::ParseReportLuns(buf);
}

Result<scsi::Capacity> ReadLunCapacity(Executor& s, uint64_t lun) {
  std::array<uint8_t, 32> buf{};
  Task t;
  scsi::ReadCapacity16(t, buf.data());
  Status st = scsi::Run(s, t, lun);
  if (st.ok()) return scsi::ParseReadCapacity16(buf);
  if (!Refused(st)) return st;
  Task t10;
  scsi::ReadCapacity10(t10, buf.data());
  ISER_RETURN_IF_ERROR(scsi::Run(s, t10, lun));
  return scsi::ParseReadCapacity10({buf.data(), 8});
}

Result<LunInfo> ProbeLun(Executor& s, uint64_t lun) {
  LunInfo info;
  info.lun = lun;
  for (int i = 0; i < kUnitAttentionRetries; ++i) {
    Task t;
    scsi::TestUnitReady(t);
    t.lun = lun;
    s.Execute(&t);
    if (!t.status.ok()) return t.status.WithContext("TEST UNIT READY" + On(lun));
    const Sense sense = DecodeSense({t.sense, t.sense_length});
    if (t.scsi_status != scsi_status::kCheckCondition || sense.key != sense_key::kUnitAttention) {
      break;
    }
  }
  std::array<uint8_t, 96> inq{};
  {
    Task t;
    scsi::Inquiry(t, inq.data(), inq.size());
    ISER_RETURN_IF_ERROR(scsi::Run(s, t, lun));
    Result<scsi::StandardInquiry> q = scsi::ParseStandardInquiry({inq.data(), TransferredBytes(t)});
    if (!q.ok()) return q.status();
    if (q->peripheral_qualifier != 0) {
      return Status::NotFound("LUN " + std::to_string(lun) +
                              " is not connected (peripheral "
                              "qualifier " +
                              std::to_string(q->peripheral_qualifier) + ")");
    }
    info.device_type = q->device_type;
    info.device_type_name = scsi::DeviceTypeName(q->device_type);
    info.vendor = q->vendor;
    info.product = q->product;
    info.revision = q->revision;
  }
  std::vector<uint8_t> pages;
  if (Result<std::vector<uint8_t>> p = scsi::RunInquiry(s, lun, 0x00); p.ok()) {
    if (Result<std::vector<uint8_t>> list = scsi::ParseSupportedVpdPages(*p); list.ok()) {
      pages = *list;
    }
  }
  auto has = [&](uint8_t page) {
    return std::find(pages.begin(), pages.end(), page) != pages.end();
  };
  if (has(0x80)) {
    if (auto p = scsi::RunInquiry(s, lun, 0x80); p.ok()) {
      if (auto serial = scsi::ParseUnitSerialNumber(*p); serial.ok()) info.serial = *serial;
    }
  }
  if (has(0x83)) {
    if (auto p = scsi::RunInquiry(s, lun, 0x83); p.ok()) {
      if (auto id = scsi::ParseDeviceIdentification(*p); id.ok()) info.identifier = *id;
    }
  }
  if (info.device_type != 0x00) return info;
  info.is_disk = true;

  Result<scsi::Capacity> cap_or = ReadLunCapacity(s, lun);
  if (!cap_or.ok()) return cap_or.status();
  const scsi::Capacity cap = *cap_or;
  info.blocks = cap.blocks;
  info.logical_block_size = cap.block_size;
  info.size_bytes = cap.blocks * cap.block_size;
  info.physical_block_size = cap.block_size << std::min<uint8_t>(cap.lbppbe, 16);
  info.thin = cap.lbpme;
  info.unmapped_reads_zero = cap.lbprz;

  uint64_t max_transfer = std::min(s.max_transfer_bytes(), kDefaultMaxTransfer);
  if (has(0xb0)) {
    if (auto p = scsi::RunInquiry(s, lun, 0xb0); p.ok()) {
      if (auto l = scsi::ParseBlockLimits(*p); l.ok()) {
        if (l->max_transfer_blocks != 0) {
          max_transfer = std::min<uint64_t>(s.max_transfer_bytes(),
                                            uint64_t{l->max_transfer_blocks} * cap.block_size);
        }
        info.optimal_transfer_bytes = static_cast<uint32_t>(
            std::min<uint64_t>(uint64_t{l->optimal_transfer_blocks} * cap.block_size, 1u << 30));
        info.max_unmap_blocks = l->max_unmap_blocks;
        info.max_unmap_descriptors = l->max_unmap_descriptors;
        info.max_write_same_blocks = l->max_write_same_blocks;
      }
    }
  }
  info.max_transfer_bytes =
      static_cast<uint32_t>(std::max<uint64_t>(max_transfer / cap.block_size, 1) * cap.block_size);
  if (has(0xb1)) {
    if (auto p = scsi::RunInquiry(s, lun, 0xb1); p.ok()) {
      if (auto r = scsi::ParseRotationRate(*p); r.ok()) {
        info.rotation_rate = *r;
        info.rotational = *r > 1;
      }
    }
  }
  if (has(0xb2)) {
    if (auto p = scsi::RunInquiry(s, lun, 0xb2); p.ok()) {
      if (auto prov = scsi::ParseProvisioning(*p); prov.ok()) {
        info.unmap = prov->lbpu;
        info.write_same_unmap = prov->lbpws;
        info.unmapped_reads_zero = info.unmapped_reads_zero || prov->lbprz != 0;
      }
    }
  }
  {
    std::array<uint8_t, 256> buf{};
    Task t;
    scsi::ModeSense10(t, buf.data(), buf.size(), 0x08);
    if (scsi::Run(s, t, lun).ok()) {
      if (auto m = scsi::ParseModeSense10(buf); m.ok()) {
        info.read_only = m->write_protected;
        info.fua = m->dpofua;
        info.write_cache = m->wce;
      }
    }
  }
  return info;
}

}  // namespace iser
