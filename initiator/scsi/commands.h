// SCSI commands for a block device (SBC-4, SPC-5): CDB builders that fill a Task, and parsers
// for the data the target returns. Parsers take untrusted bytes: every length is checked and
// short data yields an error naming the command, never a read past the end.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/task/task.h"

namespace iser::scsi {

namespace opcode {
inline constexpr uint8_t kTestUnitReady = 0x00;
inline constexpr uint8_t kInquiry = 0x12;
inline constexpr uint8_t kModeSense10 = 0x5a;
inline constexpr uint8_t kReadCapacity10 = 0x25;
inline constexpr uint8_t kRead10 = 0x28;
inline constexpr uint8_t kWrite10 = 0x2a;
inline constexpr uint8_t kSynchronizeCache10 = 0x35;
inline constexpr uint8_t kUnmap = 0x42;
inline constexpr uint8_t kRead16 = 0x88;
inline constexpr uint8_t kWrite16 = 0x8a;
inline constexpr uint8_t kPreFetch16 = 0x90;
inline constexpr uint8_t kSynchronizeCache16 = 0x91;
inline constexpr uint8_t kWriteSame16 = 0x93;
inline constexpr uint8_t kServiceActionIn16 = 0x9e;  // READ CAPACITY(16), GET LBA STATUS
inline constexpr uint8_t kReportLuns = 0xa0;
}  // namespace opcode

// Each builder sets cdb, cdb_length, direction, buffer and transfer_length.
void TestUnitReady(Task& t);
void Inquiry(Task& t, uint8_t* buf, uint16_t alloc, bool evpd = false, uint8_t page = 0);
void ReadCapacity10(Task& t, uint8_t* buf8);
void ReadCapacity16(Task& t, uint8_t* buf32);
void ReportLuns(Task& t, uint8_t* buf, uint32_t alloc);
void ModeSense10(Task& t, uint8_t* buf, uint16_t alloc, uint8_t page);
// READ/WRITE(10) when the LBA and length fit, else (16).
void Read(Task& t, uint64_t lba, uint32_t blocks, uint8_t* buf, uint32_t bytes);
void Write(Task& t, uint64_t lba, uint32_t blocks, const uint8_t* buf, uint32_t bytes, bool fua);
void SynchronizeCache(Task& t, uint64_t lba, uint32_t blocks);
void WriteSame16(Task& t, uint64_t lba, uint32_t blocks, const uint8_t* block, uint32_t block_size,
                 bool unmap);
// The parameter list for UNMAP: one descriptor per range, built into buf (8 + 16 * n bytes).
struct UnmapRange {
  uint64_t lba;
  uint32_t blocks;
};
uint32_t BuildUnmapParameters(std::span<const UnmapRange> ranges, uint8_t* buf);
void Unmap(Task& t, uint8_t* params, uint32_t params_len);
void GetLbaStatus(Task& t, uint64_t lba, uint8_t* buf, uint32_t alloc);
void PreFetch16(Task& t, uint64_t lba, uint32_t blocks);

// "READ(16)" etc., for messages.
const char* CommandName(const Task& t);
// The task's outcome as a Status: transport failure, or the SCSI status with sense decoded.
Status TaskStatus(const Task& t, const std::string& what);

struct StandardInquiry {
  uint8_t peripheral_qualifier = 0;
  uint8_t device_type = 0;
  bool removable = false;
  uint8_t version = 0;
  bool tpgs = false;
  bool protect = false;
  std::string vendor, product, revision;
};
Result<StandardInquiry> ParseStandardInquiry(std::span<const uint8_t> d);
const char* DeviceTypeName(uint8_t type);  // "DIRECT_ACCESS" etc., as iscsi-ls prints

Result<std::vector<uint8_t>> ParseSupportedVpdPages(std::span<const uint8_t> d);
Result<std::string> ParseUnitSerialNumber(std::span<const uint8_t> d);
// The preferred designator of page 0x83 as text ("naa.6001405...", "t10.VENDOR...", "eui.").
Result<std::string> ParseDeviceIdentification(std::span<const uint8_t> d);

struct BlockLimits {
  uint32_t max_transfer_blocks = 0;  // 0: no limit reported
  uint32_t optimal_transfer_blocks = 0;
  uint16_t optimal_granularity_blocks = 0;
  uint32_t max_unmap_blocks = 0;
  uint32_t max_unmap_descriptors = 0;
  uint32_t unmap_granularity_blocks = 0;
  uint64_t max_write_same_blocks = 0;
};
Result<BlockLimits> ParseBlockLimits(std::span<const uint8_t> d);
// VPD 0xB1 MEDIUM ROTATION RATE: 1 = non-rotating (solid state), 0 = not reported.
Result<uint16_t> ParseRotationRate(std::span<const uint8_t> d);

struct Provisioning {
  bool lbpu = false;   // UNMAP supported
  bool lbpws = false;  // WRITE SAME(16) with UNMAP supported
  bool lbpws10 = false;
  uint8_t lbprz = 0;  // unmapped blocks read as zero when non-zero
  uint8_t type = 0;   // 0 full, 1 resource, 2 thin
};
Result<Provisioning> ParseProvisioning(std::span<const uint8_t> d);

struct Capacity {
  uint64_t blocks = 0;  // number of logical blocks (last LBA + 1)
  uint32_t block_size = 0;
  uint8_t lbppbe = 0;  // 2^lbppbe logical blocks per physical block
  bool lbpme = false;
  bool lbprz = false;
};
Result<Capacity> ParseReadCapacity10(std::span<const uint8_t> d);
Result<Capacity> ParseReadCapacity16(std::span<const uint8_t> d);

Result<std::vector<uint64_t>> ParseReportLuns(std::span<const uint8_t> d);

struct ModeSenseCaching {
  bool write_protected = false;
  bool dpofua = false;
  bool wce = false;
  bool has_caching_page = false;
};
Result<ModeSenseCaching> ParseModeSense10(std::span<const uint8_t> d);

struct LbaStatus {
  uint64_t lba;
  uint32_t blocks;
  uint8_t status;  // 0 mapped, 1 deallocated, 2 anchored
};
Result<std::vector<LbaStatus>> ParseGetLbaStatus(std::span<const uint8_t> d);

}  // namespace iser::scsi
