// LunInfo: what a LUN is and what it can do, gathered once at open from INQUIRY (standard and
// VPD 0x00/0x80/0x83/0xB0/0xB1/0xB2), READ CAPACITY(16) (or (10)) and MODE SENSE(10).
// ProbeLun also clears the unit attentions a fresh login leaves behind (TEST UNIT READY).
// Every command goes by the Executor given: a session, or a device's set of paths (any usable
// path answers for the LUN).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/scsi/commands.h"
#include "initiator/task/executor.h"

namespace iser {

struct LunInfo {
  uint64_t lun = 0;
  uint8_t device_type = 0x1f;
  std::string device_type_name;
  std::string vendor, product, revision, serial, identifier;
  bool is_disk = false;  // direct access: the fields below are valid
  uint64_t size_bytes = 0;
  uint64_t blocks = 0;
  uint32_t logical_block_size = 0;
  uint32_t physical_block_size = 0;
  uint32_t optimal_transfer_bytes = 0;  // 0: not reported
  uint32_t max_transfer_bytes = 0;      // what one command may carry on this session
  bool read_only = false;
  bool write_cache = false;          // WCE
  bool fua = false;                  // DPOFUA
  bool thin = false;                 // LBPME
  bool unmap = false;                // LBPU
  bool write_same_unmap = false;     // LBPWS
  bool unmapped_reads_zero = false;  // LBPRZ
  bool rotational = false;           // VPD 0xB1 rotation rate > 1
  uint16_t rotation_rate = 0;
  uint32_t max_unmap_blocks = 0;
  uint32_t max_unmap_descriptors = 0;
  uint64_t max_write_same_blocks = 0;
};

Result<LunInfo> ProbeLun(Executor& executor, uint64_t lun);

// What names a LUN, to tell it from another one created later under its number: LunInfo's
// identifier and serial.
struct LunIdentity {
  std::string identifier;  // the Device Identification VPD page's (0x83) designator
  std::string serial;      // the Unit Serial Number (VPD 0x80)
};
// Two INQUIRY commands, for a check cheaper than ProbeLun's nine. A page the LUN refuses is
// empty; any other failure of either command fails.
Result<LunIdentity> ReadLunIdentity(Executor& executor, uint64_t lun);
// READ CAPACITY(16), or (10) where the LUN has no (16).
Result<scsi::Capacity> ReadLunCapacity(Executor& executor, uint64_t lun);
Result<std::vector<uint64_t>> ReportLuns(Executor& executor);

}  // namespace iser
