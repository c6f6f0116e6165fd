// How tasks end over the real iSCSI/TCP datamovers (epoll and io_uring), against a scripted
// target (tests/integration/fake_target.h: tgtd cannot be made to sit on READs and ignore task
// management, so a fake target does). The session tests in tests/unit run on a fake datamover
// that copies every PDU when it is queued; these run the session over the datamovers that read
// queued PDUs later, when they build a batch.
//
// 100 READs the target holds, command_timeout 1 s: the session aborts each one in the same
// round; the target, which never answers an ABORT TASK, must see exactly 100 of them, one per
// held READ, and then the LOGICAL UNIT RESET that follows unanswered aborts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "initiator/transport/tcp/tcp_datamover_choice.h"
#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using test::FakePdu;
using test::FakeTarget;
using test::ResponseHeader;

constexpr uint32_t kReads = 100;
constexpr uint8_t kAbortTask = 1;
constexpr uint8_t kLogicalUnitReset = 5;
constexpr size_t kReferencedTaskTag = 20;

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class TcpTaskEnding : public ::testing::TestWithParam<TcpDatamoverKind> {};

TEST_P(TcpTaskEnding, HundredHeldReadsGetHundredDistinctAbortsThenTheLunReset) {
  // What the target saw, written by its thread before `done` is set.
  std::set<uint32_t> read_itts;
  std::vector<uint32_t> aborted;  // Referenced Task Tag of each ABORT TASK, in order
  bool reset_seen = false;
  std::vector<uint32_t> commands_after_reset;
  std::atomic<bool> done{false};
  FakeTarget target({}, [&](FakeTarget& t) {
    FakePdu pdu;
    bool window_opened = false;
    while (!reset_seen && t.Read(&pdu)) {
      if (pdu.bhs.opcode() == Opcode::kScsiCommand) {
        read_itts.insert(pdu.bhs.itt());
        if (!window_opened) {
          // Login allowed 64 commands; hold room for all of them.
          const uint32_t cmdsn = pdu.bhs.u32(bhs::kCmdSN);
          Bhs nop = ResponseHeader(Opcode::kNopIn, kReservedTag, t.next_statsn(), cmdsn,
                                   cmdsn + 2 * kReads);
          nop.set_u32(bhs::kTtt, kReservedTag);
          t.Send(nop);
          window_opened = true;
        }
      } else if (pdu.bhs.opcode() == Opcode::kTaskMgmtRequest) {
        const uint8_t function = pdu.bhs.flags() & 0x7f;
        if (function == kAbortTask) aborted.push_back(pdu.bhs.u32(kReferencedTaskTag));
        reset_seen = function == kLogicalUnitReset;
      }
    }
    done = true;
    // The session fails its READs when the connection ends (recovery is off).
    t.Close();
  });
  SessionOptions o = test::LoopbackOptions(target.port(), "iqn.2026-11.io.iser-connect.test:fake");
  o.logout_timeout = std::chrono::milliseconds(200);
  o.recover = false;
  o.nop_interval = std::chrono::milliseconds(0);
  o.command_timeout = std::chrono::seconds(1);
  const TcpDatamoverKind kind = GetParam();
  o.datamover_factory = [kind](TransportKind) -> Result<std::unique_ptr<Datamover>> {
    return NewTcpDatamover(kind);
  };
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();

  std::vector<Task> tasks(kReads);
  std::vector<std::vector<uint8_t>> buffers(kReads, std::vector<uint8_t>(4096));
  std::atomic<uint32_t> completed{0};
  for (uint32_t i = 0; i < kReads; ++i) {
    Task& t = tasks[i];
    scsi::Read(t, i * 8, 8, buffers[i].data(), 4096);
    t.lun = 1;
    t.context = &completed;
    t.on_complete = [](Task* task) { ++*static_cast<std::atomic<uint32_t>*>(task->context); };
    (*s)->Submit(&t);
  }
  // command_timeout (1 s, checked once a second), then the aborts' own 1 s: a few seconds; the
  // bound is for a loaded machine under a sanitizer.
  ASSERT_TRUE(WaitFor([&] { return done.load(); }, std::chrono::seconds(30)))
      << "the target saw no LOGICAL UNIT RESET";
  ASSERT_TRUE(WaitFor([&] { return completed.load() == kReads; }, std::chrono::seconds(30)))
      << completed.load() << " of " << kReads << " READs ended";
  (*s)->Close().IgnoreError();  // the connection is gone: no Logout

  EXPECT_TRUE(reset_seen);
  EXPECT_EQ(read_itts.size(), kReads);
  EXPECT_EQ(aborted.size(), kReads) << "ABORT TASKs before the LOGICAL UNIT RESET";
  const std::set<uint32_t> distinct(aborted.begin(), aborted.end());
  EXPECT_EQ(distinct.size(), kReads) << "an ABORT TASK was sent twice";
  EXPECT_EQ(distinct, read_itts) << "the aborts do not reference the held READs";
}

INSTANTIATE_TEST_SUITE_P(Both, TcpTaskEnding,
                         ::testing::Values(TcpDatamoverKind::kIoUring, TcpDatamoverKind::kEpoll),
                         [](const ::testing::TestParamInfo<TcpDatamoverKind>& p) {
                           return p.param == TcpDatamoverKind::kIoUring ? "IoUring" : "Epoll";
                         });

}  // namespace
}  // namespace iser
