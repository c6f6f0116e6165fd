// Multipath with ALUA (docs/multipath.md, SPC-5 5.16) against two FakeDisks that are two target
// ports of one logical unit: tgtd reports TPGS 0, so these states and transitions can only be
// played by the scripted fake (tests/integration/fake_disk.h). Port A is path 1 (relative target
// port 1, target port group 1), port B path 2 (port 2, group 2); the test sets the groups' states
// in the FakeAlua both share, and reads each port's counts to see which path carried the I/O.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/block/block_device.h"
#include "initiator/paths/path_set.h"
#include "initiator/scsi/alua.h"
#include "initiator/scsi/commands.h"
#include "tests/integration/fake_disk.h"

namespace iser {
namespace {

using scsi::AluaState;
using test::FakeAlua;
using test::FakeCommand;
using test::FakeDisk;
using test::FakeDiskConfig;
using test::FakeIoCounts;
using Clock = std::chrono::steady_clock;

// NAA 5 (IEEE Registered) identifiers: the LU, and another LU.
constexpr uint64_t kNaa = 0x5001405a1a1a0001;
constexpr uint64_t kOtherNaa = 0x5001405a1a1a0002;
constexpr char kNaaName[] = "naa.5001405a1a1a0001";
constexpr char kOtherNaaName[] = "naa.5001405a1a1a0002";
constexpr uint32_t kIoBytes = 4096;

Clock::time_point g_log_start;

// The initiator's log at info level and above, with the time since the test began: a path's
// state change is a sequence of lines (unit attention, refresh, new state).
void PrintLog(LogLevel, const std::string& message) {
  const double at = std::chrono::duration<double>(Clock::now() - g_log_start).count();
  std::fprintf(stderr, "%7.3f %s\n", at, message.c_str());
}

std::string Describe(const FakeIoCounts& c) {
  return "reads " + std::to_string(c.reads) + ", writes " + std::to_string(c.writes) +
         ", READ/WRITE received " + std::to_string(c.io_received) + ", NOT READY " +
         std::to_string(c.not_ready) + ", 2A/06 " + std::to_string(c.unit_attentions) + ", RTPG " +
         std::to_string(c.report_target_port_groups);
}

class MultipathAlua : public ::testing::Test {
 protected:
  void SetUp() override {
    g_log_start = Clock::now();
    SetLogSink(&PrintLog, LogLevel::kInfo);
  }

  void TearDown() override {
    dev_.reset();
    if (set_) {
      EXPECT_TRUE(set_->Close().ok());
    }
    SetLogSink(nullptr, LogLevel::kWarning);
  }

  // Starts ports A and B of the LU (the groups' states as the test set them so far are their
  // states at login: no unit attention), with TPGS `tpgs` (0: no ALUA) and B reporting `b_naa`.
  void StartPorts(uint8_t tpgs = 1, uint64_t b_naa = kNaa) {
    FakeDiskConfig a;
    a.naa = kNaa;
    a.tpgs = tpgs;
    a.alua = alua_;
    a.relative_target_port = 1;
    a.target_port_group = 1;
    FakeDiskConfig b = a;
    b.naa = b_naa;
    b.relative_target_port = 2;
    b.target_port_group = 2;
    a_ = std::make_unique<FakeDisk>(a);
    b_ = std::make_unique<FakeDisk>(b);
  }

  // Opens A and B, in that order, as one PathSet, and LUN 0 over it.
  void Open() {
    Result<std::shared_ptr<PathSet>> set = PathSet::Open(
        std::vector<SessionOptions>{OptionsFor(*a_), OptionsFor(*b_)}, PathSelector::kQueueLength);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    set_ = *set;
    ASSERT_EQ(set_->size(), 2u);
    Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(set_, 0);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    dev_ = std::move(*dev);
  }

  LunPathStatus Lun0() {
    for (const LunPathStatus& l : set_->PathStatuses()) {
      if (l.lun == 0) return l;
    }
    ADD_FAILURE() << "LUN 0 is not in the path set";
    return {};
  }

  // The ALUA state the set holds for path 1 or 2.
  std::string StateOf(int path) {
    const LunPathStatus l = Lun0();
    return l.paths.size() == 2 ? l.paths[path - 1].alua_state : "";
  }

  // One WRITE and one READ of 4 KiB, at a block that changes with i.
  Status Round(int i) {
    std::vector<uint8_t> buf(kIoBytes, static_cast<uint8_t>(i));
    const uint64_t offset = uint64_t{static_cast<uint32_t>(i) % 64} * kIoBytes;
    ISER_RETURN_IF_ERROR(dev_->Write(offset, buf.data(), buf.size()));
    return dev_->Read(offset, buf.data(), buf.size());
  }

  Status Rounds(int n) {
    for (int i = 0; i < n; ++i) ISER_RETURN_IF_ERROR(Round(i));
    return Status::OK();
  }

  // Runs rounds until `done` holds (true) or `limit` passed (false); the first I/O error stops
  // them and lands in *error.
  bool RoundsUntil(std::chrono::seconds limit, const std::function<bool()>& done, Status* error) {
    const auto deadline = Clock::now() + limit;
    for (int i = 0; !done(); ++i) {
      if (Clock::now() >= deadline) return false;
      if (Status st = Round(i); !st.ok()) {
        *error = st;
        return false;
      }
    }
    return true;
  }

  // A changes to `state` with no unit attention yet: the command A answers NOT READY for that
  // state is sent by B and succeeds, and A serves no READ or WRITE afterwards.
  void SilentChangeMovesTheCommand(AluaState state) {
    ASSERT_TRUE(Round(0).ok());
    alua_->Set(1, state, /*unit_attention=*/false);
    bool moved = false;
    for (int i = 1; i <= 20 && !moved; ++i) {
      const FakeIoCounts a_before = a_->Counts();
      const FakeIoCounts b_before = b_->Counts();
      const Status st = Round(i);
      ASSERT_TRUE(st.ok()) << "round " << i << ": " << st.ToString();
      const FakeIoCounts a_after = a_->Counts();
      const FakeIoCounts b_after = b_->Counts();
      if (a_after.not_ready == a_before.not_ready) continue;
      moved = true;
      EXPECT_EQ(a_after.not_ready, a_before.not_ready + 1);
      EXPECT_EQ(a_after.reads + a_after.writes, a_before.reads + a_before.writes);
      // The round's write and read were both carried by B, the refused one after it moved.
      EXPECT_EQ(b_after.reads + b_after.writes, b_before.reads + b_before.writes + 2)
          << "B: " << Describe(b_after);
    }
    ASSERT_TRUE(moved) << "A never answered NOT READY in 20 rounds: " << Describe(a_->Counts());
    const FakeIoCounts a_moved = a_->Counts();
    ASSERT_TRUE(Rounds(20).ok());
    const FakeIoCounts a_end = a_->Counts();
    EXPECT_EQ(a_end.reads + a_end.writes, a_moved.reads + a_moved.writes) << Describe(a_end);
    // The refresh the NOT READY asked for confirms the state (REPORT TARGET PORT GROUPS).
    const std::string name = scsi::AluaStateName(state);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (StateOf(1) != name && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(StateOf(1), name);
    EXPECT_EQ(a_->Counts().unit_attentions, 0u);
  }

  std::shared_ptr<FakeAlua> alua_ = std::make_shared<FakeAlua>();
  // The ports outlive the set: it logs out of them in TearDown.
  std::unique_ptr<FakeDisk> a_;
  std::unique_ptr<FakeDisk> b_;
  std::shared_ptr<PathSet> set_;
  std::unique_ptr<BlockDevice> dev_;
};

bool OnlyInquiryAndRtpg(const std::vector<FakeCommand>& cmds) {
  for (const FakeCommand& c : cmds) {
    if (c.opcode() != scsi::opcode::kInquiry && c.opcode() != scsi::opcode::kMaintenanceIn) {
      return false;
    }
  }
  return true;
}

TEST_F(MultipathAlua, BothGroupsActiveOptimizedShareTheIo) {
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  const LunPathStatus lun = Lun0();
  EXPECT_TRUE(lun.alua);
  EXPECT_EQ(lun.identity, kNaaName);
  ASSERT_EQ(lun.paths.size(), 2u);
  for (int p = 0; p < 2; ++p) {
    EXPECT_TRUE(lun.paths[p].serves) << "path " << p + 1 << ": " << lun.paths[p].why_not;
    EXPECT_EQ(lun.paths[p].target_port_group, p + 1) << "from VPD 0x83, designator type 5";
    EXPECT_EQ(lun.paths[p].alua_state, "active/optimized");
  }
  ASSERT_TRUE(Rounds(100).ok());
  const FakeIoCounts a = a_->Counts();
  const FakeIoCounts b = b_->Counts();
  // Each path's state comes from REPORT TARGET PORT GROUPS through its own port.
  EXPECT_GE(a.report_target_port_groups, 1u);
  EXPECT_GE(b.report_target_port_groups, 1u);
  // Equal paths take turns: each carries a good share of 100 writes and 100 reads.
  EXPECT_GE(a.reads + a.writes, 50u) << "A: " << Describe(a);
  EXPECT_GE(b.reads + b.writes, 50u) << "B: " << Describe(b);
  EXPECT_EQ(a.reads + a.writes + b.reads + b.writes, 200u) << "every command once";
}

// Active/non-optimized is used only while no active/optimized path is usable. A going standby
// is reported by a unit attention on A's next command (retried there, then answered 04/0B and
// moved to B); A's return to active/optimized shows up when B's next command gets its unit
// attention 2A/06: that makes the set read the states again (the 10 s periodic refresh would
// also catch it, later; the log's times show which one did).
TEST_F(MultipathAlua, NonOptimizedCarriesIoOnlyWhileTheOptimizedPathIsStandby) {
  alua_->Set(2, AluaState::kActiveNonOptimized);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(StateOf(1), "active/optimized");
  EXPECT_EQ(StateOf(2), "active/non-optimized");
  ASSERT_TRUE(Rounds(50).ok());
  EXPECT_EQ(b_->Counts().io_received, 0u) << "B is non-optimized while A is optimized";
  EXPECT_EQ(a_->Counts().reads, 50u);

  alua_->Set(1, AluaState::kStandby);
  const FakeIoCounts b_before = b_->Counts();
  Status error;
  EXPECT_TRUE(RoundsUntil(
      std::chrono::seconds(30), [&] { return StateOf(1) == "standby"; }, &error))
      << "A's standby state never read; " << error.ToString();
  ASSERT_TRUE(error.ok()) << "I/O failed while A went standby: " << error.ToString();
  EXPECT_EQ(a_->Counts().unit_attentions, 1u);
  EXPECT_GE(a_->Counts().not_ready, 1u) << "A's first command after the change was not moved";
  // path_changes counts ALUA state changes, and each is logged.
  EXPECT_EQ(set_->path_changes(), 1u) << "A went from active/optimized to standby";
  const FakeIoCounts a_standby = a_->Counts();
  ASSERT_TRUE(Rounds(50).ok());
  EXPECT_EQ(a_->Counts().io_received, a_standby.io_received) << "a READ or WRITE went to standby";
  EXPECT_GE(b_->Counts().reads, b_before.reads + 50) << "B: " << Describe(b_->Counts());

  const uint64_t b_unit_attentions = b_->Counts().unit_attentions;
  alua_->Set(1, AluaState::kActiveOptimized);
  const auto back_at = Clock::now();
  const FakeIoCounts a_back = a_->Counts();
  EXPECT_TRUE(RoundsUntil(
      std::chrono::seconds(30), [&] { return a_->Counts().reads > a_back.reads; }, &error))
      << "no I/O by A 30 s after it is active/optimized again; " << error.ToString();
  ASSERT_TRUE(error.ok()) << error.ToString();
  std::printf("I/O back on A %.3f s after the change; B reported %llu unit attention(s)\n",
              std::chrono::duration<double>(Clock::now() - back_at).count(),
              static_cast<unsigned long long>(b_->Counts().unit_attentions));
  EXPECT_EQ(b_->Counts().unit_attentions, b_unit_attentions + 1) << "B's nexus reports it once";
  EXPECT_EQ(StateOf(1), "active/optimized");
  EXPECT_EQ(set_->path_changes(), 2u) << "A went standby, then active/optimized";
  const FakeIoCounts b_after = b_->Counts();
  ASSERT_TRUE(Rounds(50).ok());
  EXPECT_EQ(b_->Counts().io_received, b_after.io_received) << "B carries I/O while A is optimized";
}

// More port groups than 4 KiB of REPORT TARGET PORT GROUPS holds: 600 without ports (8 bytes
// each) come before the LU's own two, so both ports' groups are past the first 4 KiB. The set
// asks again with the length the target announced and finds B non-optimized.
TEST_F(MultipathAlua, PortGroupsPastTheFirst4KiBAreRead) {
  for (uint16_t g = 100; g < 700; ++g) alua_->Set(g, AluaState::kUnavailable, false);
  alua_->Set(2, AluaState::kActiveNonOptimized);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(StateOf(1), "active/optimized");
  EXPECT_EQ(StateOf(2), "active/non-optimized");
  EXPECT_GE(b_->Counts().report_target_port_groups, 2u) << "4 KiB, then all of it";
  ASSERT_TRUE(Rounds(20).ok());
  EXPECT_EQ(b_->Counts().io_received, 0u) << "B is non-optimized while A is optimized";
}

// B starts standby, then goes unavailable, offline, transitioning and standby again (each change
// announced by 2A/06): the set learns each state, A carries every READ and WRITE, and B is asked
// nothing but INQUIRY and REPORT TARGET PORT GROUPS.
TEST_F(MultipathAlua, StandbyUnavailableAndOfflinePathsGetNoReadOrWrite) {
  alua_->Set(2, AluaState::kStandby);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(StateOf(2), "standby");
  ASSERT_TRUE(Rounds(20).ok());
  for (AluaState state : {AluaState::kUnavailable, AluaState::kOffline, AluaState::kTransitioning,
                          AluaState::kStandby}) {
    alua_->Set(2, state);
    const std::string name = scsi::AluaStateName(state);
    Status error;
    EXPECT_TRUE(RoundsUntil(
        std::chrono::seconds(30), [&] { return StateOf(2) == name; }, &error))
        << "B never shown " << name << "; " << error.ToString();
    ASSERT_TRUE(error.ok()) << "I/O failed while B went " << name << ": " << error.ToString();
    ASSERT_TRUE(Rounds(20).ok());
  }
  const FakeIoCounts b = b_->Counts();
  EXPECT_EQ(b.io_received, 0u) << "B: " << Describe(b);
  EXPECT_EQ(b.not_ready, 0u) << "B: " << Describe(b);
  EXPECT_TRUE(OnlyInquiryAndRtpg(b_->Commands()));
  EXPECT_GE(b.report_target_port_groups, 5u) << "at open and after each of 4 changes";
  EXPECT_EQ(a_->Counts().unit_attentions, 4u) << "one per change on A's nexus";
  EXPECT_EQ(a_->Counts().not_ready, 0u);
}

TEST_F(MultipathAlua, ACommandAnsweredStandbyMovesToTheOtherPath) {
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  SilentChangeMovesTheCommand(AluaState::kStandby);
}

TEST_F(MultipathAlua, ACommandAnsweredUnavailableMovesToTheOtherPath) {
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  SilentChangeMovesTheCommand(AluaState::kUnavailable);
}

// A transitions while B is standby: A is the only usable path, its answers 04/0A are retried
// there a second apart, and the command succeeds once A is active/optimized again, ~2 s later.
TEST_F(MultipathAlua, TransitioningOnTheOnlyUsablePathIsRetriedUntilItIsOptimized) {
  alua_->Set(2, AluaState::kStandby);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_TRUE(Rounds(5).ok());
  alua_->Set(1, AluaState::kTransitioning);
  std::thread done([this] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    alua_->Set(1, AluaState::kActiveOptimized);
  });
  std::vector<uint8_t> buf(kIoBytes);
  const Status read = dev_->Read(0, buf.data(), buf.size());
  done.join();
  EXPECT_TRUE(read.ok()) << read.ToString();
  EXPECT_GE(a_->Counts().not_ready, 1u) << "A never answered 04/0A: " << Describe(a_->Counts());
  EXPECT_TRUE(Rounds(5).ok());
  EXPECT_EQ(b_->Counts().io_received, 0u);
}

// A transition may take longer than the few seconds the session's retries last (SPC-5 leaves its
// length to the target; RTPG's extended header reports up to 255 s, and Linux waits 60 s by
// default). Here A transitions for 12 s while B stays active/non-optimized: the command that
// meets the transition on A must not fail, whether it waits out the transition or moves to B.
TEST_F(MultipathAlua, ATransitionLongerThanTheRetriesFailsNoCommand) {
  alua_->Set(2, AluaState::kActiveNonOptimized);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_TRUE(Rounds(5).ok());
  alua_->Set(1, AluaState::kTransitioning);
  std::thread failover([this] {
    std::this_thread::sleep_for(std::chrono::seconds(12));
    alua_->Set(1, AluaState::kStandby);
    alua_->Set(2, AluaState::kActiveOptimized);
  });
  std::vector<uint8_t> buf(kIoBytes);
  const auto start = Clock::now();
  const Status read = dev_->Read(0, buf.data(), buf.size());
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  failover.join();
  EXPECT_TRUE(read.ok()) << "after " << took << " s: " << read.ToString()
                         << "; A: " << Describe(a_->Counts());
  EXPECT_TRUE(Rounds(5).ok());
}

// Path 2's port reports another LU's identifier: it serves nothing, and says why.
TEST_F(MultipathAlua, ADifferentNaaOnPath2ServesNothing) {
  StartPorts(/*tpgs=*/0, /*b_naa=*/kOtherNaa);
  ASSERT_NO_FATAL_FAILURE(Open());
  const LunPathStatus lun = Lun0();
  EXPECT_EQ(lun.identity, kNaaName);
  ASSERT_EQ(lun.paths.size(), 2u);
  EXPECT_TRUE(lun.paths[0].serves);
  EXPECT_FALSE(lun.paths[1].serves);
  EXPECT_NE(lun.paths[1].why_not.find(kOtherNaaName), std::string::npos) << lun.paths[1].why_not;
  EXPECT_NE(lun.paths[1].why_not.find(kNaaName), std::string::npos) << lun.paths[1].why_not;
  ASSERT_TRUE(Rounds(50).ok());
  EXPECT_EQ(b_->Counts().io_received, 0u);
  EXPECT_EQ(a_->Counts().reads, 50u);
}

// TPGS 0: the LU has no ALUA, every path is active/optimized, and no port is asked for groups.
TEST_F(MultipathAlua, WithoutTpgsEveryPathIsActiveOptimized) {
  StartPorts(/*tpgs=*/0);
  ASSERT_NO_FATAL_FAILURE(Open());
  const LunPathStatus lun = Lun0();
  EXPECT_FALSE(lun.alua);
  ASSERT_EQ(lun.paths.size(), 2u);
  for (const PathStatus& p : lun.paths) {
    EXPECT_TRUE(p.serves) << p.why_not;
    EXPECT_EQ(p.alua_state, "active/optimized");
  }
  ASSERT_TRUE(Rounds(50).ok());
  for (FakeDisk* d : {a_.get(), b_.get()}) {
    // Equal paths take turns: each carries a good share of 50 writes and 50 reads.
    const FakeIoCounts c = d->Counts();
    EXPECT_GE(c.reads + c.writes, 25u) << Describe(c);
    EXPECT_EQ(c.report_target_port_groups, 0u);
  }
}

// The first path's group is unavailable when the LU is opened, the second's active/optimized:
// the LU is there, by path 2, as it is for an initiator that probes it by any usable path.
TEST_F(MultipathAlua, TheFirstPathUnavailableAtOpenOpensByTheSecond) {
  alua_->Set(1, AluaState::kUnavailable);
  StartPorts();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(StateOf(1), "unavailable");
  ASSERT_TRUE(Rounds(20).ok());
  EXPECT_EQ(a_->Counts().io_received, 0u);
  EXPECT_EQ(b_->Counts().reads, 20u);
}

}  // namespace
}  // namespace iser
