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
//
// Identity and ALUA (SPC-5 5.16), off by default, for multipath tests (tgtd reports TPGS 0):
// with an NAA identifier the LUN has VPD page 0x83; with TPGS it is one target port of a logical
// unit whose target port groups and their states a FakeAlua holds, shared by the FakeDisks that
// are its other ports. Then the disk answers as an implicit-ALUA target does (SPC-5 5.16.2.4):
// - standard INQUIRY reports TPGS; VPD 0x83 adds this port's relative target port (type 4) and
//   target port group (type 5) designators to the LU's NAA one;
// - MAINTENANCE IN / REPORT TARGET PORT GROUPS (length-only format) lists every group with its
//   state and ports; the extended format is refused (INVALID FIELD IN CDB);
// - through a port whose group is standby, every command but INQUIRY, REPORT LUNS, MODE SENSE,
//   READ CAPACITY and REPORT TARGET PORT GROUPS gets CHECK CONDITION, NOT READY 04/0B; unavailable:
//   all but INQUIRY, REPORT LUNS and REPORT TARGET PORT GROUPS get 04/0C; transitioning: the same
//   with 04/0A; offline: as unavailable, 04/0C (LIO reports its per-port offline with 04/12,
//   LOGICAL UNIT NOT READY, OFFLINE: this fake does not). Active/non-optimized serves as
//   active/optimized does, at the same speed;
// - after a state change (FakeAlua::Set), the next command on each I_T nexus of the LU (each
//   FakeDisk's connection) gets UNIT ATTENTION 2A/06, ASYMMETRIC ACCESS STATE CHANGED, once,
//   before its state's answer. INQUIRY and REPORT LUNS pass a pending unit attention (SAM-5), and
//   so does REPORT TARGET PORT GROUPS here: it is answered and the unit attention stays for the
//   next command. (LIO reports the unit attention on it too; an initiator that reads the states
//   because of one unit attention then gets the next on its RTPG, which the session retries.)
// All answers carry fixed-format sense data (response code 0x70, 18 bytes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/scsi/alua.h"
#include "initiator/session/session_options.h"
#include "tests/integration/fake_target.h"

namespace iser::test {

// FakeAlua: the target port groups of one logical unit and their asymmetric access states, shared
// by the FakeDisks that are the LU's target ports (FakeDiskConfig::alua). A group comes into being
// active/optimized when the first port joins it or the test first sets it. Thread-safe: the test
// changes states while the disks answer.
class FakeAlua {
 public:
  // The group is in this state from now on (an implicit transition: status code 2 in REPORT
  // TARGET PORT GROUPS). With unit_attention, a change establishes 2A/06 for every I_T nexus of
  // the LU, as SPC-5 asks; without it the change is silent, for a test of the state's own answers
  // (NOT READY 04/0B, ...) arriving before any unit attention. Setting the state a group is in
  // changes nothing.
  void Set(uint16_t group, scsi::AluaState state, bool unit_attention = true);

 private:
  friend class FakeDisk;
  struct Group {
    uint16_t id = 0;
    scsi::AluaState state = scsi::AluaState::kActiveOptimized;
    uint8_t status_code = 0;
    std::vector<uint16_t> relative_target_ports;
  };
  Group& GroupLocked(uint16_t id) ISER_REQUIRES(mu_);
  void AddPort(uint16_t group, uint16_t relative_target_port);
  scsi::AluaState StateOf(uint16_t group);
  // The parameter data of REPORT TARGET PORT GROUPS, length-only format (SPC-5 6.37).
  std::vector<uint8_t> ReportTargetPortGroups();
  // Changes announced by unit attention so far: a nexus that has reported fewer has one pending.
  uint64_t announced();

  Mutex mu_;
  std::vector<Group> groups_ ISER_GUARDED_BY(mu_);
  uint64_t announced_ ISER_GUARDED_BY(mu_) = 0;
};

struct FakeDiskConfig {
  uint64_t blocks = 8192;
  uint32_t block_size = 512;
  bool dpofua = true;           // MODE SENSE: the FUA bit is supported
  bool write_cache = true;      // MODE SENSE caching page: WCE
  bool thin = true;             // LBPME and LBPRZ; VPD 0xB2: UNMAP and WRITE SAME with UNMAP
  bool ask_for_logout = false;  // right after login, an Async Message asking for a logout
  // The LU's NAA designator in VPD page 0x83 (8 bytes, NAA 5 IEEE Registered: the top nibble is
  // 5); 0: no page 0x83. FakeDisks with the same one are one LU through several target ports.
  uint64_t naa = 0;
  // Standard INQUIRY's TPGS: 0 no ALUA (alua is ignored), 1 implicit, 2 explicit, 3 both. Any
  // non-zero value serves ALUA as above; states change only by FakeAlua::Set (SET TARGET PORT
  // GROUPS is refused as an unknown command).
  uint8_t tpgs = 0;
  std::shared_ptr<FakeAlua> alua;     // with tpgs: the LU's groups (null: a table of its own)
  uint16_t relative_target_port = 1;  // with tpgs: this port's, in VPD 0x83 and RTPG
  uint16_t target_port_group = 1;     // with tpgs: this port's group
};

// What one port (one FakeDisk) was asked, for tests that must see which path carried I/O.
struct FakeIoCounts {
  uint64_t reads = 0;   // READs answered GOOD
  uint64_t writes = 0;  // WRITEs answered GOOD
  // READs and WRITEs received, whatever the answer (unit attention and NOT READY included).
  uint64_t io_received = 0;
  uint64_t not_ready = 0;        // commands answered NOT READY for the group's state
  uint64_t unit_attentions = 0;  // commands answered 2A/06 ASYMMETRIC ACCESS STATE CHANGED
  uint64_t report_target_port_groups = 0;
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
  // The commands answered GOOD so far, in order.
  std::vector<FakeCommand> Commands() const;
  void ClearCommands();
  FakeIoCounts Counts() const;
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
  // With ALUA: the sense data of the unit attention or NOT READY that answers cmd instead
  // (counted), or nothing when its state lets it through.
  std::vector<uint8_t> AluaRefusal(const FakeCommand& cmd);
  std::vector<uint8_t> DeviceIdentificationPage() const;
  void SendData(FakeTarget& t, uint32_t itt, const std::vector<uint8_t>& data, uint32_t expected,
                uint32_t overflow = 0);
  void SendStatus(FakeTarget& t, uint32_t itt, uint8_t status, const std::vector<uint8_t>& sense,
                  uint32_t underflow = 0, uint32_t overflow = 0);

  const FakeDiskConfig config_;
  const std::shared_ptr<FakeAlua> alua_;  // null without TPGS
  std::atomic<int> delay_ms_{0};
  std::atomic<uint64_t> blocks_;
  std::atomic<bool> capacity_changed_{false};
  std::atomic<uint32_t> short_by_{0};
  std::atomic<uint32_t> long_by_{0};
  uint32_t exp_cmdsn_ = 1;  // the login's CmdSN: the first command reuses it
  // The FakeAlua changes this nexus has reported a unit attention for (Serve's thread only).
  uint64_t alua_changes_reported_ = 0;
  mutable std::mutex mu_;
  std::vector<FakeCommand> commands_;
  FakeIoCounts counts_;
  FakeTarget target_;  // last: its thread uses the members above
};

// Options for a session to the disk: its target, a test initiator, no keepalive.
SessionOptions OptionsFor(const FakeDisk& disk);

}  // namespace iser::test
