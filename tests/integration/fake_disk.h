// FakeDisk: a FakeTarget (tests/integration/fake_target.h) that serves one direct-access LUN of
// zeroes and records every SCSI command it answers. For tests that must see which commands the
// initiator sends (FUA bits, SYNCHRONIZE CACHE ranges), or need a target that answers slowly or
// asks for a logout: tgtd can do none of that on request, so these tests use this mock.
//
// It answers what ProbeLun asks (INQUIRY with VPD pages 0x00 and 0xB2, READ CAPACITY(16), MODE
// SENSE(10) with the caching page), READ with zeroes, and accepts WRITE, WRITE SAME, UNMAP,
// SYNCHRONIZE CACHE and TEST UNIT READY, dropping the data; any other command gets CHECK
// CONDITION, ILLEGAL REQUEST. Write data comes as immediate and unsolicited data, the rest by
// R2T. A Logout is answered and the connection closed, as tgtd does.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tests/integration/fake_target.h"

namespace iser::test {

struct FakeDiskConfig {
  uint64_t blocks = 8192;
  uint32_t block_size = 512;
  bool dpofua = true;           // MODE SENSE: the FUA bit is supported
  bool write_cache = true;      // MODE SENSE caching page: WCE
  bool thin = true;             // LBPME and LBPRZ; VPD 0xB2: UNMAP and WRITE SAME with UNMAP
  bool ask_for_logout = false;  // right after login, an Async Message asking for a logout
};

struct FakeCommand {
  uint8_t cdb[16] = {};
  std::vector<uint8_t> data;  // what the initiator sent with it

  uint8_t opcode() const { return cdb[0]; }
  // For READ, WRITE, WRITE SAME and SYNCHRONIZE CACHE (10 and 16): the range addressed.
  uint64_t lba() const;
  uint32_t blocks() const;
  bool fua() const;    // READ/WRITE: the FUA bit
  bool unmap() const;  // WRITE SAME(16): the UNMAP bit
};

class FakeDisk {
 public:
  explicit FakeDisk(FakeDiskConfig config = {});

  uint16_t port() const { return target_.port(); }
  // The commands answered so far, in order.
  std::vector<FakeCommand> Commands() const;
  void ClearCommands();
  // Every answer from now on is sent this much later.
  void SetDelay(std::chrono::milliseconds delay) { delay_ms_ = static_cast<int>(delay.count()); }
  // The LUN has this many blocks from now on, and the next command gets UNIT ATTENTION
  // "capacity data has changed" (2A/09), as a target reports a resized LUN.
  void Resize(uint64_t blocks) {
    blocks_ = blocks;
    capacity_changed_ = true;
  }
  // From now on READ and WRITE end GOOD with this many bytes not transferred (an underflow
  // residual): a READ sends that much less data, a WRITE's status carries the residual.
  void ShortTransfers(uint32_t bytes) { short_by_ = bytes; }
  // From now on READ and WRITE end GOOD with an overflow residual of this many bytes: the
  // target would have moved more than the command's Expected Data Transfer Length.
  void LongTransfers(uint32_t bytes) { long_by_ = bytes; }

 private:
  void Serve(FakeTarget& t);
  void Answer(FakeTarget& t, uint32_t itt, FakeCommand cmd, uint32_t expected);
  void SendData(FakeTarget& t, uint32_t itt, const std::vector<uint8_t>& data, uint32_t expected,
                uint32_t overflow = 0);
  void SendStatus(FakeTarget& t, uint32_t itt, uint8_t status, const std::vector<uint8_t>& sense,
                  uint32_t underflow = 0, uint32_t overflow = 0);

  const FakeDiskConfig config_;
  std::atomic<int> delay_ms_{0};
  std::atomic<uint64_t> blocks_;
  std::atomic<bool> capacity_changed_{false};
  std::atomic<uint32_t> short_by_{0};
  std::atomic<uint32_t> long_by_{0};
  uint32_t exp_cmdsn_ = 1;  // the login's CmdSN: the first command reuses it
  mutable std::mutex mu_;
  std::vector<FakeCommand> commands_;
  FakeTarget target_;  // last: its thread uses the members above
};

}  // namespace iser::test
