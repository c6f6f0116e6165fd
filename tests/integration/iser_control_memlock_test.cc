// Control PDUs never wait behind commands that wait for a data slot or locked memory
// (docs/iser-wire.md, "What waits for what"). Under the usual 8 MiB RLIMIT_MEMLOCK an iSER
// connection takes 17 data slots, while the session may have far more commands outstanding:
// those past the 17th wait in the datamover. A target whose backend stalls holds every READ but
// answers NOP-Out at once, as tgtd and LIO do; the keepalive must reach it, or the session
// declares the target dead and recovers for nothing. A scripted target (FakeIserTarget, a mock by
// necessity: tgtd cannot be made to hold READs) plays it.
//
// The memlock budget is settled for good once read (as in iser_memlock_test.cc, whose header
// says how the limit is made to bite as root), so this test has a binary of its own.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "initiator/transport/iser/iser_memory.h"
#include "tests/integration/fake_iser_target.h"
#include "tests/integration/ipc_lock.h"

namespace iser {
namespace {

using test::DropIpcLock;
using test::FakeIserTarget;
using test::FakePdu;
using test::ResponseHeader;
using Clock = std::chrono::steady_clock;

constexpr uint16_t kPort = 3260;  // the test runs in a network namespace of its own
constexpr size_t kLimit = 8 << 20;
constexpr int kReads = 100;

Bhs Answer(Opcode op, FakeIserTarget& t, const FakePdu& req) {
  const uint32_t cmdsn = req.bhs.u32(bhs::kCmdSN);
  return ResponseHeader(op, req.bhs.itt(), t.next_statsn(), cmdsn + 1, cmdsn + 256);
}

// The usual 8 MiB limit, without CAP_IPC_LOCK, as the initiator's budget sees it: empty, or what
// went wrong. The fake target in this process registers 9 MiB, which the kernel (and softrdma's
// strict mode) would count against the same limit, so softrdma does not enforce it here: these
// tests are about what waits in the datamover when the budget gives 17 data slots.
std::string LimitLockedMemory() {
  if (setenv("SOFTRDMA_IGNORE_MEMLOCK", "1", 1) != 0) return "setenv failed";
  if (std::string dropped = DropIpcLock(); !dropped.empty()) return dropped;
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return std::string("getrlimit: ") + strerror(errno);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < kLimit) {
    return "the hard RLIMIT_MEMLOCK (" + std::to_string(lim.rlim_max) +
           " bytes) is below the test's 8 MiB";
  }
  lim.rlim_cur = kLimit;
  if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return std::string("setrlimit: ") + strerror(errno);
  if (LockedLeft() != kLimit) return "the initiator does not see the 8 MiB limit";
  return "";
}

// Sets the flag when the test leaves, however it leaves: a script waiting on it ends.
struct SetOnExit {
  std::atomic<bool>* flag;
  ~SetOnExit() { *flag = true; }
};

// Submits `n` READs of 4 KiB; each completion counts in *done.
void SubmitReads(Session* s, std::vector<Task>* tasks, std::vector<std::vector<uint8_t>>* buffers,
                 std::atomic<int>* done) {
  for (size_t i = 0; i < tasks->size(); ++i) {
    (*buffers)[i].assign(4096, 0);
    Task& t = (*tasks)[i];
    scsi::Read(t, uint64_t{8} * i, 8, (*buffers)[i].data(), 4096);
    t.lun = 1;
    t.context = done;
    t.on_complete = [](Task* done_task) { ++*static_cast<std::atomic<int>*>(done_task->context); };
  }
  for (Task& t : *tasks) s->Submit(&t);
}

TEST(IserControlBehindData, ANopOutPassesReadsWaitingForADataSlot) {
  const std::string limited = LimitLockedMemory();
  ASSERT_EQ(limited, "");

  std::atomic<int> held{0}, nops{0};
  std::atomic<bool> release{false};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    std::vector<FakePdu> reads;
    int answered = 0;
    FakePdu pdu;
    Clock::time_point give_up = Clock::time_point::max();
    while (answered < kReads && Clock::now() < give_up) {
      if (release && give_up == Clock::time_point::max()) {
        give_up = Clock::now() + std::chrono::seconds(20);  // the connection may be gone
      }
      if (release) {
        for (const FakePdu& r : reads) t.Send(Answer(Opcode::kScsiResponse, t, r));
        answered += static_cast<int>(reads.size());
        reads.clear();
      }
      if (!t.ReadWithin(&pdu, std::chrono::milliseconds(50))) continue;
      if (pdu.bhs.opcode() == Opcode::kNopOut) {
        Bhs in = Answer(Opcode::kNopIn, t, pdu);
        in.set_u32(bhs::kTtt, kReservedTag);
        in.set_u32(bhs::kExpCmdSN, pdu.bhs.u32(bhs::kCmdSN));  // an immediate PDU
        t.Send(in);
        ++nops;
      } else if (pdu.bhs.opcode() == Opcode::kScsiCommand) {
        reads.push_back(pdu);
        ++held;
      }
    }
  });
  // An assertion that returns early must not leave the script waiting.
  const SetOnExit release_on_exit{&release};
  ASSERT_EQ(target.error(), "");

  SessionOptions o = test::FakeIserSessionOptions(kPort);
  o.nop_interval = std::chrono::seconds(1);
  o.nop_timeout = std::chrono::seconds(2);
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Session> s = std::move(*opened);
  const std::string mechanism = s->stats().datamover;

  std::vector<std::vector<uint8_t>> buffers(kReads);
  std::vector<Task> tasks(kReads);
  std::atomic<int> done{0};
  SubmitReads(s.get(), &tasks, &buffers, &done);

  // Four NOP intervals, and a second past the NOP timeout, with every READ held: the target sees
  // keepalives, and the session loses nothing. A NOP-Out stuck behind the READs waiting for a
  // slot ends the connection instead, which ends the wait at once.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (nops < 3 && s->stats().last_loss.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const SessionStats stats = s->stats();
  std::printf("%d of %d READs reached the target (%s), %d NOP-Outs answered\n", held.load(), kReads,
              mechanism.c_str(), nops.load());
  EXPECT_LT(held, kReads) << "no READ waited for a data slot: the test proves nothing";
  EXPECT_GE(nops, 3) << "the target never got our NOP-Outs";
  EXPECT_EQ(stats.recoveries, 0u) << stats.last_loss;
  EXPECT_EQ(stats.last_loss, "");

  release = true;
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (done < kReads && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(done, kReads);
  s->Close().IgnoreError();
  target.Join();
  ASSERT_EQ(done, kReads) << "READs never completed";
}

}  // namespace
}  // namespace iser

namespace iser {
namespace {

// READs the target holds time out (command_timeout 1 s) while most still wait for a data slot;
// the target answers every ABORT TASK "function complete", and each READ is sent again under a
// new ITT, and answered. Control PDUs pass the READs that wait for a slot, so an abort of one
// of those would reach the target before the READ itself, which would then run under an ITT the
// session has given up: a READ is timed out and aborted only once it has left (its timeout
// counts from then), and none goes out after its abort.
TEST(IserControlBehindData, OnlyReadsThatLeftAreAbortedAndNoneGoesOutAfterItsAbort) {
  const std::string limited = LimitLockedMemory();
  ASSERT_EQ(limited, "");
  constexpr int kCommands = 40;
  std::atomic<int> stale{0}, aborts{0};
  std::atomic<bool> stop{false};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    std::vector<uint32_t> aborted;
    std::vector<uint32_t> first_tries;  // the LBAs seen once, held
    FakePdu pdu;
    while (!stop) {
      if (!t.ReadWithin(&pdu, std::chrono::milliseconds(50))) continue;
      if (pdu.bhs.opcode() == Opcode::kTaskMgmtRequest) {
        aborted.push_back(pdu.bhs.u32(20));  // Referenced Task Tag
        ++aborts;
        test::AnswerTaskManagement(t, pdu, 0);
      } else if (pdu.bhs.opcode() == Opcode::kScsiCommand) {
        if (std::find(aborted.begin(), aborted.end(), pdu.bhs.itt()) != aborted.end()) ++stale;
        const uint32_t lba = LoadBe32(pdu.bhs.data() + 32 + 2);  // READ(10)'s LBA in the CDB
        if (std::find(first_tries.begin(), first_tries.end(), lba) == first_tries.end()) {
          first_tries.push_back(lba);  // held until aborted
        } else {
          t.Send(Answer(Opcode::kScsiResponse, t, pdu));
        }
      }
    }
  });
  const SetOnExit stop_on_exit{&stop};
  ASSERT_EQ(target.error(), "");
  SessionOptions o = test::FakeIserSessionOptions(kPort);
  o.command_timeout = std::chrono::seconds(1);
  o.nop_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Session> s = std::move(*opened);

  std::vector<std::vector<uint8_t>> buffers(kCommands);
  std::vector<Task> tasks(kCommands);
  std::atomic<int> done{0};
  SubmitReads(s.get(), &tasks, &buffers, &done);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (done < kCommands && s->stats().last_loss.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const SessionStats stats = s->stats();
  std::printf("%d of %d READs done, %d aborts answered\n", done.load(), kCommands, aborts.load());
  EXPECT_EQ(stats.last_loss, "");
  EXPECT_GE(aborts, kCommands) << "a held READ was never aborted";
  EXPECT_EQ(stale, 0) << "READs went out after the abort of their ITT";
  s->Close().IgnoreError();
  stop = true;
  target.Join();
  EXPECT_EQ(done, kCommands);
  const auto failed =
      std::count_if(tasks.begin(), tasks.end(), [](const Task& t) { return !t.status.ok(); });
  EXPECT_EQ(failed, 0) << "READs failed, the first: " << tasks[0].status.ToString();
}

}  // namespace
}  // namespace iser

namespace iser {
namespace {

// Nothing follows a Logout Request on its connection (RFC 7143 11.14), not even a READ that was
// waiting for locked memory when the Logout passed it: the target asks for a logout (Async
// Message event 1, within 1 s) while it holds the READs that left, the Logout goes by then with
// the others still waiting, and the target then answers what it held, which frees the memory
// they wait for. They must stay unsent (the next connection replays them); sent after the
// Logout, a target that runs them would run them twice.
TEST(IserControlBehindData, NoReadWaitingForMemoryGoesOutAfterTheLogout) {
  const std::string limited = LimitLockedMemory();
  ASSERT_EQ(limited, "");
  std::atomic<int> held{0}, after_logout{0};
  std::atomic<bool> logout_seen{false}, stop{false};
  FakeIserTarget target(kPort, FakeIserTarget::IserLogin(), [&](FakeIserTarget& t) {
    std::vector<FakePdu> reads;
    bool asked = false;
    FakePdu pdu;
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
    while (!stop && !logout_seen && Clock::now() < give_up) {
      if (!asked && held > 0) {
        Bhs async = ResponseHeader(Opcode::kAsyncMessage, kReservedTag, t.next_statsn(),
                                   reads.back().bhs.u32(bhs::kCmdSN) + 1,
                                   reads.back().bhs.u32(bhs::kCmdSN) + 256);
        async.b[36] = 1;       // AsyncEvent: logout requested
        async.set_u16(42, 1);  // Parameter3: within 1 s
        t.Send(async);
        asked = true;
      }
      if (!t.ReadWithin(&pdu, std::chrono::milliseconds(50))) continue;
      if (pdu.bhs.opcode() == Opcode::kScsiCommand) {
        reads.push_back(pdu);
        ++held;
      } else if (pdu.bhs.opcode() == Opcode::kLogoutRequest) {
        logout_seen = true;
      }
    }
    if (!logout_seen) return;
    const FakePdu logout = pdu;
    for (const FakePdu& r : reads) t.Send(Answer(Opcode::kScsiResponse, t, r));
    const Clock::time_point until = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < until) {
      if (t.ReadWithin(&pdu, std::chrono::milliseconds(50)) &&
          pdu.bhs.opcode() == Opcode::kScsiCommand) {
        ++after_logout;
      }
    }
    t.Send(Answer(Opcode::kLogoutResponse, t, logout));
  });
  const SetOnExit stop_on_exit{&stop};
  ASSERT_EQ(target.error(), "");
  SessionOptions o = test::FakeIserSessionOptions(kPort);
  o.nop_interval = std::chrono::milliseconds(0);
  o.logout_timeout = std::chrono::seconds(5);  // the script answers the Logout after 1 s
  o.recover = false;  // one connection: what was not sent fails, which is not the point here
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Session> s = std::move(*opened);
  std::vector<std::vector<uint8_t>> buffers(kReads);
  std::vector<Task> tasks(kReads);
  std::atomic<int> done{0};
  SubmitReads(s.get(), &tasks, &buffers, &done);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (done < kReads && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  target.Join();
  std::printf("%d of %d READs reached the target before the Logout, %d after it\n", held.load(),
              kReads, after_logout.load());
  EXPECT_TRUE(logout_seen) << "no Logout Request within 1 s of the target's request";
  EXPECT_LT(held, kReads) << "no READ waited for a data slot: the test proves nothing";
  EXPECT_EQ(after_logout, 0) << "READs went out after the Logout Request";
  EXPECT_EQ(done, kReads) << "READs never completed (answered, or failed with the session)";
  s->Close().IgnoreError();
}

}  // namespace
}  // namespace iser
