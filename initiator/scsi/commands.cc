#include "initiator/scsi/commands.h"

#include <cstdio>
#include <cstring>

#include "initiator/pdu/bhs.h"
#include "initiator/scsi/alua.h"
#include "initiator/scsi/parsing.h"
#include "initiator/scsi/sense.h"

namespace iser::scsi {

namespace {

bool Fits10(uint64_t lba, uint32_t blocks) {
  return lba + blocks <= 0xffffffffULL && blocks <= 0xffff;
}

std::string Trim(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : ' ';
  const size_t end = s.find_last_not_of(' ');
  const size_t begin = s.find_first_not_of(' ');
  return end == std::string::npos ? std::string() : s.substr(begin, end - begin + 1);
}

}  // namespace

void Setup(Task& t, uint8_t len, DataDirection dir, const uint8_t* buf, uint32_t bytes) {
  std::memset(t.cdb, 0, sizeof t.cdb);
  t.cdb_length = len;
  t.direction = bytes == 0 ? DataDirection::kNone : dir;
  t.buffer = const_cast<uint8_t*>(buf);
  t.transfer_length = bytes;
}

Status Short(const char* what, size_t got, size_t need) {
  return Status::ProtocolError(std::string(what) + ": " + std::to_string(got) +
                               " bytes returned, at least " + std::to_string(need) + " needed");
}

std::string HexBytes(std::span<const uint8_t> d) {
  std::string s;
  char b[4];
  for (uint8_t x : d) {
    snprintf(b, sizeof b, "%02x", x);
    s += b;
  }
  return s;
}

void TestUnitReady(Task& t) {
  Setup(t, 6, DataDirection::kNone, nullptr, 0);
  t.cdb[0] = opcode::kTestUnitReady;
}

void Inquiry(Task& t, uint8_t* buf, uint16_t alloc, bool evpd, uint8_t page) {
  Setup(t, 6, DataDirection::kRead, buf, alloc);
  t.cdb[0] = opcode::kInquiry;
  t.cdb[1] = evpd ? 1 : 0;
  t.cdb[2] = page;
  StoreBe16(&t.cdb[3], alloc);
}

void ReadCapacity10(Task& t, uint8_t* buf8) {
  Setup(t, 10, DataDirection::kRead, buf8, 8);
  t.cdb[0] = opcode::kReadCapacity10;
}

void ReadCapacity16(Task& t, uint8_t* buf32) {
  Setup(t, 16, DataDirection::kRead, buf32, 32);
  t.cdb[0] = opcode::kServiceActionIn16;
  t.cdb[1] = 0x10;
  StoreBe32(&t.cdb[10], 32);
}

void ReportLuns(Task& t, uint8_t* buf, uint32_t alloc) {
  Setup(t, 12, DataDirection::kRead, buf, alloc);
  t.cdb[0] = opcode::kReportLuns;
  StoreBe32(&t.cdb[6], alloc);
}

void ModeSense10(Task& t, uint8_t* buf, uint16_t alloc, uint8_t page) {
  Setup(t, 10, DataDirection::kRead, buf, alloc);
  t.cdb[0] = opcode::kModeSense10;
  t.cdb[1] = 0x08;  // DBD: no block descriptors
  t.cdb[2] = page & 0x3f;
  StoreBe16(&t.cdb[7], alloc);
}

void Read(Task& t, uint64_t lba, uint32_t blocks, uint8_t* buf, uint32_t bytes) {
  if (Fits10(lba, blocks)) {
    Setup(t, 10, DataDirection::kRead, buf, bytes);
    t.cdb[0] = opcode::kRead10;
    StoreBe32(&t.cdb[2], static_cast<uint32_t>(lba));
    StoreBe16(&t.cdb[7], static_cast<uint16_t>(blocks));
  } else {
    Setup(t, 16, DataDirection::kRead, buf, bytes);
    t.cdb[0] = opcode::kRead16;
    StoreBe64(&t.cdb[2], lba);
    StoreBe32(&t.cdb[10], blocks);
  }
}

void Write(Task& t, uint64_t lba, uint32_t blocks, const uint8_t* buf, uint32_t bytes, bool fua) {
  if (Fits10(lba, blocks)) {
    Setup(t, 10, DataDirection::kWrite, buf, bytes);
    t.cdb[0] = opcode::kWrite10;
    StoreBe32(&t.cdb[2], static_cast<uint32_t>(lba));
    StoreBe16(&t.cdb[7], static_cast<uint16_t>(blocks));
  } else {
    Setup(t, 16, DataDirection::kWrite, buf, bytes);
    t.cdb[0] = opcode::kWrite16;
    StoreBe64(&t.cdb[2], lba);
    StoreBe32(&t.cdb[10], blocks);
  }
  if (fua) t.cdb[1] |= 0x08;
}

void SynchronizeCache(Task& t, uint64_t lba, uint32_t blocks) {
  if (Fits10(lba, blocks)) {
    Setup(t, 10, DataDirection::kNone, nullptr, 0);
    t.cdb[0] = opcode::kSynchronizeCache10;
    StoreBe32(&t.cdb[2], static_cast<uint32_t>(lba));
    StoreBe16(&t.cdb[7], static_cast<uint16_t>(blocks));
  } else {
    Setup(t, 16, DataDirection::kNone, nullptr, 0);
    t.cdb[0] = opcode::kSynchronizeCache16;
    StoreBe64(&t.cdb[2], lba);
    StoreBe32(&t.cdb[10], blocks);
  }
}

void WriteSame16(Task& t, uint64_t lba, uint32_t blocks, const uint8_t* block, uint32_t block_size,
                 bool unmap) {
  Setup(t, 16, DataDirection::kWrite, block, block_size);
  t.cdb[0] = opcode::kWriteSame16;
  if (unmap) t.cdb[1] |= 0x08;
  StoreBe64(&t.cdb[2], lba);
  StoreBe32(&t.cdb[10], blocks);
}

uint32_t BuildUnmapParameters(std::span<const UnmapRange> ranges, uint8_t* buf) {
  const uint32_t len = 8 + 16 * static_cast<uint32_t>(ranges.size());
  std::memset(buf, 0, len);
  StoreBe16(&buf[0], static_cast<uint16_t>(len - 2));
  StoreBe16(&buf[2], static_cast<uint16_t>(len - 8));
  uint8_t* d = buf + 8;
  for (const UnmapRange& r : ranges) {
    StoreBe64(d, r.lba);
    StoreBe32(d + 8, r.blocks);
    d += 16;
  }
  return len;
}

void Unmap(Task& t, uint8_t* params, uint32_t params_len) {
  Setup(t, 10, DataDirection::kWrite, params, params_len);
  t.cdb[0] = opcode::kUnmap;
  StoreBe16(&t.cdb[7], static_cast<uint16_t>(params_len));
}

void GetLbaStatus(Task& t, uint64_t lba, uint8_t* buf, uint32_t alloc) {
  Setup(t, 16, DataDirection::kRead, buf, alloc);
  t.cdb[0] = opcode::kServiceActionIn16;
  t.cdb[1] = 0x12;
  StoreBe64(&t.cdb[2], lba);
  StoreBe32(&t.cdb[10], alloc);
}

void PreFetch16(Task& t, uint64_t lba, uint32_t blocks) {
  Setup(t, 16, DataDirection::kNone, nullptr, 0);
  t.cdb[0] = opcode::kPreFetch16;
  StoreBe64(&t.cdb[2], lba);
  StoreBe32(&t.cdb[10], blocks);
}

const char* CommandName(const Task& t) {
  switch (t.cdb[0]) {
    case opcode::kTestUnitReady:
      return "TEST UNIT READY";
    case opcode::kInquiry:
      return "INQUIRY";
    case opcode::kModeSense10:
      return "MODE SENSE(10)";
    case opcode::kReadCapacity10:
      return "READ CAPACITY(10)";
    case opcode::kRead10:
      return "READ(10)";
    case opcode::kWrite10:
      return "WRITE(10)";
    case opcode::kSynchronizeCache10:
      return "SYNCHRONIZE CACHE(10)";
    case opcode::kUnmap:
      return "UNMAP";
    case opcode::kRead16:
      return "READ(16)";
    case opcode::kWrite16:
      return "WRITE(16)";
    case opcode::kPreFetch16:
      return "PRE-FETCH(16)";
    case opcode::kSynchronizeCache16:
      return "SYNCHRONIZE CACHE(16)";
    case opcode::kWriteSame16:
      return "WRITE SAME(16)";
    case opcode::kServiceActionIn16:
      return (t.cdb[1] & 0x1f) == 0x10 ? "READ CAPACITY(16)" : "GET LBA STATUS";
    case opcode::kReportLuns:
      return "REPORT LUNS";
    case 0xa3:  // MAINTENANCE IN (alua.h)
      return (t.cdb[1] & 0x1f) == 0x0a ? "REPORT TARGET PORT GROUPS" : "MAINTENANCE IN";
  }
  return "SCSI command";
}

Status TaskStatus(const Task& t, const std::string& what) {
  if (!t.status.ok()) return t.status.WithContext(what);
  return ScsiStatusToStatus(t.scsi_status, DecodeSense({t.sense, t.sense_length}), what);
}

Result<StandardInquiry> ParseStandardInquiry(std::span<const uint8_t> d) {
  if (d.size() < 36) return Short("standard INQUIRY data", d.size(), 36);
  StandardInquiry q;
  q.peripheral_qualifier = d[0] >> 5;
  q.device_type = d[0] & 0x1f;
  q.removable = d[1] & 0x80;
  q.version = d[2];
  q.tpgs = (d[5] >> 4) & 3;
  q.protect = d[5] & 1;
  q.vendor = Trim(&d[8], 8);
  q.product = Trim(&d[16], 16);
  q.revision = Trim(&d[32], 4);
  return q;
}

const char* DeviceTypeName(uint8_t type) {
  switch (type) {
    case 0x00:
      return "DIRECT_ACCESS";
    case 0x01:
      return "SEQUENTIAL_ACCESS";
    case 0x03:
      return "PROCESSOR";
    case 0x05:
      return "MMC";
    case 0x07:
      return "OPTICAL_MEMORY";
    case 0x08:
      return "MEDIA_CHANGER";
    case 0x0c:
      return "STORAGE_ARRAY_CONTROLLER";
    case 0x0d:
      return "ENCLOSURE_SERVICES";
    case 0x0e:
      return "SIMPLIFIED_DIRECT_ACCESS";
    case 0x1f:
      return "UNKNOWN";
  }
  return "OTHER";
}

Result<std::span<const uint8_t>> VpdBody(std::span<const uint8_t> d, uint8_t page,
                                         const char* what) {
  if (d.size() < 4) return Short(what, d.size(), 4);
  if (d[1] != page) {
    return Status::ProtocolError(std::string(what) + ": the target returned page 0x" +
                                 HexBytes(d.subspan(1, 1)));
  }
  const size_t len = std::min<size_t>(LoadBe16(&d[2]), d.size() - 4);
  return d.subspan(4, len);
}

Result<std::vector<uint8_t>> ParseSupportedVpdPages(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0x00, "VPD page 0x00");
  if (!body.ok()) return body.status();
  return std::vector<uint8_t>(body->begin(), body->end());
}

Result<std::string> ParseUnitSerialNumber(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0x80, "VPD page 0x80");
  if (!body.ok()) return body.status();
  return Trim(body->data(), body->size());
}

Result<std::string> ParseDeviceIdentification(std::span<const uint8_t> d) {
  Result<Designators> designators = ParseDesignators(d);
  if (!designators.ok()) return designators.status();
  std::string best;
  int best_rank = 0;
  // An incomplete descriptor ends the list; the ones before it still name the LU for display.
  for (const Designator& x : designators->list) {
    const std::span<const uint8_t> id = x.designator;
    if (x.association == association::kLogicalUnit) {
      int rank = 0;
      std::string text;
      if (x.type == designator_type::kNaa) {
        rank = 3;
        text = "naa." + HexBytes(id);
      } else if (x.type == designator_type::kEui64) {
        rank = 2;
        text = "eui." + HexBytes(id);
      } else if (x.type == designator_type::kT10VendorId) {
        rank = 1;
        text = "t10." + (x.code_set == 1 ? HexBytes(id) : Trim(id.data(), id.size()));
      }
      if (rank > best_rank) {
        best_rank = rank;
        best = text;
      }
    }
  }
  return best;
}

Result<BlockLimits> ParseBlockLimits(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0xb0, "VPD page 0xB0");
  if (!body.ok()) return body.status();
  std::span<const uint8_t> b = *body;
  BlockLimits l;
  if (b.size() >= 12) {
    l.optimal_granularity_blocks = LoadBe16(&b[2]);
    l.max_transfer_blocks = LoadBe32(&b[4]);
    l.optimal_transfer_blocks = LoadBe32(&b[8]);
  }
  if (b.size() >= 28) {
    l.max_unmap_blocks = LoadBe32(&b[16]);
    l.max_unmap_descriptors = LoadBe32(&b[20]);
    l.unmap_granularity_blocks = LoadBe32(&b[24]);
  }
  if (b.size() >= 44) l.max_write_same_blocks = LoadBe64(&b[32]);
  return l;
}

Result<uint16_t> ParseRotationRate(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0xb1, "VPD page 0xB1");
  if (!body.ok()) return body.status();
  if (body->size() < 2) return Short("VPD page 0xB1", body->size(), 2);
  return LoadBe16(body->data());
}

Result<Provisioning> ParseProvisioning(std::span<const uint8_t> d) {
  Result<std::span<const uint8_t>> body = VpdBody(d, 0xb2, "VPD page 0xB2");
  if (!body.ok()) return body.status();
  if (body->size() < 4) return Short("VPD page 0xB2", body->size(), 4);
  const std::span<const uint8_t> b = *body;
  Provisioning p;
  p.lbpu = b[1] & 0x80;
  p.lbpws = b[1] & 0x40;
  p.lbpws10 = b[1] & 0x20;
  p.lbprz = (b[1] >> 2) & 0x7;
  p.type = b[2] & 0x7;
  return p;
}

Result<Capacity> ParseReadCapacity10(std::span<const uint8_t> d) {
  if (d.size() < 8) return Short("READ CAPACITY(10) data", d.size(), 8);
  Capacity c;
  c.blocks = uint64_t{LoadBe32(&d[0])} + 1;
  c.block_size = LoadBe32(&d[4]);
  if (c.block_size == 0) return Status::ProtocolError("READ CAPACITY(10): block size 0");
  return c;
}

Result<Capacity> ParseReadCapacity16(std::span<const uint8_t> d) {
  if (d.size() < 16) return Short("READ CAPACITY(16) data", d.size(), 16);
  Capacity c;
  const uint64_t last = LoadBe64(&d[0]);
  if (last == ~0ULL) return Status::ProtocolError("READ CAPACITY(16): last LBA overflows");
  c.blocks = last + 1;
  c.block_size = LoadBe32(&d[8]);
  c.lbppbe = d[13] & 0x0f;
  c.lbpme = d[14] & 0x80;
  c.lbprz = d[14] & 0x40;
  if (c.block_size == 0 || c.block_size > (1u << 20)) {
    return Status::ProtocolError("READ CAPACITY(16): implausible block size " +
                                 std::to_string(c.block_size));
  }
  return c;
}

Result<std::vector<uint64_t>> ParseReportLuns(std::span<const uint8_t> d) {
  if (d.size() < 8) return Short("REPORT LUNS data", d.size(), 8);
  const size_t len = std::min<size_t>(LoadBe32(&d[0]), d.size() - 8);
  std::vector<uint64_t> luns;
  for (size_t off = 8; off + 8 <= 8 + len; off += 8) luns.push_back(DecodeLun(LoadBe64(&d[off])));
  return luns;
}

Result<ModeSenseCaching> ParseModeSense10(std::span<const uint8_t> d) {
  if (d.size() < 8) return Short("MODE SENSE(10) data", d.size(), 8);
  ModeSenseCaching m;
  m.write_protected = d[3] & 0x80;
  m.dpofua = d[3] & 0x10;
  const size_t total = std::min<size_t>(LoadBe16(&d[0]) + 2u, d.size());
  size_t off = 8 + LoadBe16(&d[6]);
  while (off + 2 <= total) {
    const uint8_t page = d[off] & 0x3f;
    const size_t plen = d[off + 1];
    if (off + 2 + plen > total) break;
    if (page == 0x08 && plen >= 1) {
      m.has_caching_page = true;
      m.wce = d[off + 2] & 0x04;
    }
    off += 2 + plen;
  }
  return m;
}

Result<std::vector<LbaStatus>> ParseGetLbaStatus(std::span<const uint8_t> d) {
  if (d.size() < 8) return Short("GET LBA STATUS data", d.size(), 8);
  const size_t len = std::min<size_t>(LoadBe32(&d[0]) + 4u, d.size());
  std::vector<LbaStatus> out;
  for (size_t off = 8; off + 16 <= len; off += 16) {
    out.push_back(
        {LoadBe64(&d[off]), LoadBe32(&d[off + 8]), static_cast<uint8_t>(d[off + 12] & 0xf)});
  }
  return out;
}

}  // namespace iser::scsi
