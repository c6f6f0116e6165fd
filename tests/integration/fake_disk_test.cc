// Session and BlockDevice against FakeDisk (tests/integration/fake_disk.h), for what a real
// target cannot show or do on request.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/base/notification.h"
#include "initiator/block/block_device.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/integration/fake_disk.h"

// libstdc++ 12's std::binary_semaphore spins with sched_yield before it sleeps, which is what
// SynchronousCallersSleepWithoutSpinning rules out: this definition takes the place of libc's in
// the whole test binary and counts the calls per thread.
namespace {
thread_local int t_sched_yields = 0;
}  // namespace

extern "C" int sched_yield() noexcept {
  ++t_sched_yields;
  return static_cast<int>(syscall(SYS_sched_yield));
}

namespace iser {
namespace {

using test::FakeCommand;
using test::FakeDisk;
using test::FakeDiskConfig;
namespace op = scsi::opcode;

struct Opened {
  std::shared_ptr<Session> session;
  std::unique_ptr<BlockDevice> dev;
};

// Logs in, opens LUN 0 and forgets the commands the probe sent.
Opened Open(FakeDisk& disk) {
  Opened o;
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(disk));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return o;
  o.session = std::move(*s);
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(o.session, 0);
  EXPECT_TRUE(dev.ok()) << dev.status().ToString();
  if (dev.ok()) o.dev = std::move(*dev);
  disk.ClearCommands();
  return o;
}

std::string Describe(const std::vector<FakeCommand>& cmds) {
  std::string s;
  for (const FakeCommand& c : cmds) {
    char buf[96];
    snprintf(buf, sizeof buf, "[0x%02x lba %llu blocks %u%s%s] ", c.opcode(),
             static_cast<unsigned long long>(c.lba()), c.blocks(), c.fua() ? " FUA" : "",
             c.unmap() ? " UNMAP" : "");
    s += buf;
  }
  return s;
}

bool IsSync(const FakeCommand& c) {
  return c.opcode() == op::kSynchronizeCache10 || c.opcode() == op::kSynchronizeCache16;
}

// The last command must be a SYNCHRONIZE CACHE covering [lba, lba + blocks) (0 blocks: to the
// end of the LUN), after every write.
void ExpectEndsWithSyncOver(const std::vector<FakeCommand>& cmds, uint64_t lba, uint64_t blocks) {
  ASSERT_FALSE(cmds.empty());
  const FakeCommand& last = cmds.back();
  ASSERT_TRUE(IsSync(last)) << "no SYNCHRONIZE CACHE at the end: " << Describe(cmds);
  EXPECT_LE(last.lba(), lba) << Describe(cmds);
  if (last.blocks() != 0) {
    EXPECT_GE(last.lba() + last.blocks(), lba + blocks) << Describe(cmds);
  }
}

// A target that resizes a LUN says so with UNIT ATTENTION 2A/09 on the next command: the command
// is retried transparently, and the size the frontends ask for is read again.
TEST(FakeDiskBlockDevice, ACapacityChangeIsRetriedAndTheNewSizeShown) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  EXPECT_EQ(o.dev->size_bytes(), 8192u * 512);
  disk.Resize(16384);
  std::vector<uint8_t> buf(4096);
  ASSERT_TRUE(o.dev->Read(0, buf.data(), buf.size()).ok()) << "the UNIT ATTENTION was not retried";
  EXPECT_EQ(o.session->capacity_changes(), 1u);
  EXPECT_EQ(o.dev->size_bytes(), 16384u * 512);
  EXPECT_TRUE(o.dev->Read(8192u * 512, buf.data(), buf.size()).ok())
      << "a read past the old end is refused";
}

// GOOD with an underflow on a READ or WRITE means the target moved less than the command
// addressed: the frontends must see an error naming the shortfall, never a full transfer (for a
// READ, the uncovered bytes would be whatever the buffer held before).
TEST(FakeDiskBlockDevice, AShortReadOrWriteIsAnErrorNamingTheResidual) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  disk.ShortTransfers(512);
  std::vector<uint8_t> buf(4096, 0xee);
  Status read = o.dev->Read(0, buf.data(), buf.size());
  EXPECT_EQ(read.code(), StatusCode::kIoError) << read.ToString();
  EXPECT_NE(read.message().find("residual"), std::string::npos) << read.ToString();
  EXPECT_NE(read.message().find("3584 of 4096"), std::string::npos) << read.ToString();
  Status write = o.dev->Write(0, buf.data(), buf.size());
  EXPECT_EQ(write.code(), StatusCode::kIoError) << write.ToString();
  EXPECT_NE(write.message().find("residual"), std::string::npos) << write.ToString();

  IoRequest req;
  req.op = IoOp::kRead;
  req.length = 4096;
  req.buffer = buf.data();
  struct Outcome {
    Notification done;
    Status status;
  } async;
  req.context = &async;
  req.on_complete = [](IoRequest* r, const Status& st) {
    auto* out = static_cast<Outcome*>(r->context);
    out->status = st;
    out->done.Notify();
  };
  o.dev->Submit(&req);
  async.done.Wait();
  EXPECT_EQ(async.status.code(), StatusCode::kIoError)
      << "asynchronous READ: " << async.status.ToString();
}

// An overflow residual on a READ or WRITE: the target would have moved more than the command
// addressed (its block size is not the one the LUN was opened with). Not a success either.
TEST(FakeDiskBlockDevice, AnOverflowOnAReadOrWriteIsAnError) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  disk.LongTransfers(4096);
  std::vector<uint8_t> buf(4096);
  Status read = o.dev->Read(0, buf.data(), buf.size());
  EXPECT_EQ(read.code(), StatusCode::kIoError) << read.ToString();
  EXPECT_NE(read.message().find("overflow"), std::string::npos) << read.ToString();
  Status write = o.dev->Write(0, buf.data(), buf.size());
  EXPECT_EQ(write.code(), StatusCode::kIoError) << write.ToString();
  EXPECT_NE(write.message().find("overflow"), std::string::npos) << write.ToString();
}

TEST(FakeDiskBlockDevice, WriteZeroesWithUnmapAndFuaIsSynchronized) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  ASSERT_TRUE(o.dev->info().write_same_unmap && o.dev->info().unmapped_reads_zero);
  ASSERT_TRUE(o.dev->WriteZeroes(0, 64 * 1024, /*may_trim=*/true, /*fua=*/true).ok());
  const std::vector<FakeCommand> cmds = disk.Commands();
  ASSERT_EQ(cmds.size(), 2u) << Describe(cmds);
  EXPECT_EQ(cmds[0].opcode(), op::kWriteSame16);
  EXPECT_TRUE(cmds[0].unmap());
  ExpectEndsWithSyncOver(cmds, 0, 128);
}

TEST(FakeDiskBlockDevice, WriteZeroesWithFuaOverPartialAndWholeBlocks) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  // Half of block 0, blocks 1-9, half of block 10.
  ASSERT_TRUE(o.dev->WriteZeroes(256, 10 * 512, /*may_trim=*/false, /*fua=*/true).ok());
  const std::vector<FakeCommand> cmds = disk.Commands();
  bool write_same = false;
  for (const FakeCommand& c : cmds) {
    if (c.opcode() == op::kWriteSame16) {
      write_same = true;
      EXPECT_FALSE(c.unmap());
    }
  }
  EXPECT_TRUE(write_same) << Describe(cmds);
  ExpectEndsWithSyncOver(cmds, 0, 11);
}

TEST(FakeDiskBlockDevice, WriteZeroesWithFuaOnALunWithoutDpofuaIsSynchronized) {
  FakeDiskConfig config;
  config.dpofua = false;
  FakeDisk disk(config);
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  ASSERT_FALSE(o.dev->info().fua);
  ASSERT_TRUE(o.dev->WriteZeroes(100, 200, /*may_trim=*/false, /*fua=*/true).ok());
  const std::vector<FakeCommand> cmds = disk.Commands();
  for (const FakeCommand& c : cmds) EXPECT_FALSE(c.fua()) << "FUA bit without DPOFUA";
  ExpectEndsWithSyncOver(cmds, 0, 1);
}

TEST(FakeDiskBlockDevice, WriteZeroesWithoutFuaSendsNoSynchronizeCache) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  ASSERT_TRUE(o.dev->WriteZeroes(256, 10 * 512, /*may_trim=*/true).ok());
  for (const FakeCommand& c : disk.Commands()) EXPECT_FALSE(IsSync(c) || c.fua());
}

TEST(FakeDiskBlockDevice, TrimWithFuaIsSynchronized) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  // Whole blocks 2-128 are unmapped; the partial ones at the ends are left alone.
  ASSERT_TRUE(o.dev->Trim(1000, 64 * 1024, /*fua=*/true).ok());
  const std::vector<FakeCommand> cmds = disk.Commands();
  ASSERT_GE(cmds.size(), 2u) << Describe(cmds);
  ASSERT_EQ(cmds[0].opcode(), op::kUnmap);
  ASSERT_GE(cmds[0].data.size(), 24u);
  EXPECT_EQ(LoadBe64(&cmds[0].data[8]), 2u);     // the first descriptor's LBA
  EXPECT_EQ(LoadBe32(&cmds[0].data[16]), 127u);  // and its length
  ExpectEndsWithSyncOver(cmds, 2, 127);
  disk.ClearCommands();
  ASSERT_TRUE(o.dev->Trim(1000, 64 * 1024).ok());
  for (const FakeCommand& c : disk.Commands()) EXPECT_FALSE(IsSync(c));
}

// The target takes 20 ms per command: a caller that spins before sleeping would call
// sched_yield while it waits (libstdc++'s std::binary_semaphore does, four times per wait).
TEST(FakeDiskBlockDevice, SynchronousCallersSleepWithoutSpinning) {
  FakeDisk disk;
  Opened o = Open(disk);
  ASSERT_TRUE(o.dev);
  disk.SetDelay(std::chrono::milliseconds(20));
  std::vector<uint8_t> buf(64 * 1024);
  t_sched_yields = 0;
  ASSERT_TRUE(o.dev->Read(0, buf.data(), buf.size()).ok());     // chunked I/O
  ASSERT_TRUE(o.dev->Write(512, buf.data(), 4096, true).ok());  // chunked I/O
  ASSERT_TRUE(o.dev->Flush().ok());                             // Session::Execute
  EXPECT_EQ(t_sched_yields, 0);
}

// ---- Session ----------------------------------------------------------------------------------

std::mutex g_log_mu;
std::vector<std::string> g_log;

void CaptureLog(LogLevel, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back(message);
}

// The target asks for a logout, the session logs out by itself, and the target closes the
// connection after its Logout Response: nothing failed, so nothing may be reported as a failure,
// even at debug level. (Without recovery: with it the session logs in again, as
// session_recovery_test.cc shows.)
TEST(FakeDiskSession, TheCloseAfterALogoutIsNotAFailure) {
  FakeDiskConfig config;
  config.ask_for_logout = true;
  FakeDisk disk(config);
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    g_log.clear();
  }
  SetLogSink(&CaptureLog, LogLevel::kDebug);
  SessionOptions o = OptionsFor(disk);
  o.recover = false;
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 500 && (*s)->healthy(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE((*s)->healthy()) << "the connection did not close after the logout";
  EXPECT_TRUE((*s)->Close().ok());
  SetLogSink(nullptr, LogLevel::kWarning);
  std::lock_guard<std::mutex> lock(g_log_mu);
  bool said_closed_after_logout = false;
  for (const std::string& m : g_log) {
    EXPECT_EQ(m.find("the target closed the connection"), std::string::npos) << m;
    said_closed_after_logout |= m.find("closed after logout") != std::string::npos;
  }
  EXPECT_TRUE(said_closed_after_logout);
}

// What the process's eventfds hold, written and not yet read: Wake's writes, while the I/O
// thread cannot read them.
uint64_t UnreadEventfdCount() {
  uint64_t total = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    ADD_FAILURE() << "cannot list /proc/self/fd";
    return 0;
  }
  while (dirent* e = readdir(dir)) {
    char target[64] = {};
    const std::string name = e->d_name;
    if (readlink(("/proc/self/fd/" + name).c_str(), target, sizeof target - 1) < 0 ||
        std::string(target) != "anon_inode:[eventfd]") {
      continue;
    }
    std::ifstream info("/proc/self/fdinfo/" + name);
    std::string key, value;
    while (info >> key >> value) {
      if (key == "eventfd-count:") total += std::stoull(value, nullptr, 16);
    }
  }
  closedir(dir);
  return total;
}

struct Counter {
  std::counting_semaphore<1 << 20> done{0};
  static void Complete(Task* t) { static_cast<Counter*>(t->context)->done.release(); }
  bool WaitFor(int n) {
    for (int i = 0; i < n; ++i) {
      if (!done.try_acquire_for(std::chrono::seconds(10))) return false;
    }
    return true;
  }
};

// While the I/O thread is busy (here: inside a completion callback), submissions from another
// thread must not write its eventfd: it looks at the submission queue before it sleeps again.
TEST(FakeDiskSession, SubmissionsWhileTheIoThreadWorksCostNoWakeUp) {
  constexpr int kBurst = 16;
  struct Blocker {
    Task task;
    Notification entered;
    Notification release;
  } blocker;
  Counter counter;
  std::vector<Task> tasks(kBurst);
  // Declared after the tasks: closed first, so a task it still holds completes into live memory.
  FakeDisk disk;
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(disk));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Session& session = **s;
  scsi::TestUnitReady(blocker.task);
  blocker.task.context = &blocker;
  blocker.task.on_complete = [](Task* t) {
    auto* b = static_cast<Blocker*>(t->context);
    b->entered.Notify();
    b->release.Wait();
  };
  session.Submit(&blocker.task);
  blocker.entered.Wait();

  EXPECT_EQ(UnreadEventfdCount(), 0u);  // the blocker's wake-up was read
  for (Task& t : tasks) {
    scsi::TestUnitReady(t);
    t.context = &counter;
    t.on_complete = &Counter::Complete;
    session.Submit(&t);
  }
  const uint64_t unread = UnreadEventfdCount();
  blocker.release.Notify();
  ASSERT_TRUE(counter.WaitFor(kBurst)) << "a submission was never sent (lost wake-up)";
  for (const Task& t : tasks) EXPECT_TRUE(t.status.ok()) << t.status.ToString();
  EXPECT_EQ(unread, 0u) << "submissions to a busy I/O thread wrote its eventfd";
}

// Many threads submitting while completions arrive: every submission is sent, none waits for a
// wake-up that never comes.
TEST(FakeDiskSession, NoWakeUpIsLostUnderConcurrentSubmitters) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  constexpr int kDepth = 4;
  std::vector<Counter> counters(kThreads);
  std::vector<std::vector<Task>> task_sets(kThreads, std::vector<Task>(kDepth));
  FakeDisk disk;
  Result<std::unique_ptr<Session>> s = Session::Open(OptionsFor(disk));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Session& session = **s;
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Counter& counter = counters[i];
      std::vector<Task>& tasks = task_sets[i];
      for (int round = 0; round < kRounds && lost == 0; ++round) {
        for (Task& t : tasks) {
          scsi::TestUnitReady(t);
          t.context = &counter;
          t.on_complete = &Counter::Complete;
          session.Submit(&t);
        }
        if (!counter.WaitFor(kDepth)) ++lost;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(lost, 0) << "submissions stayed queued while the I/O thread slept";
  EXPECT_TRUE(session.healthy());
}

}  // namespace
}  // namespace iser
