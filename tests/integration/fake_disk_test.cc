// Session and BlockDevice against FakeDisk (tests/integration/fake_disk.h), for what a real
// target cannot show or do on request.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <vector>

#include "initiator/block/block_device.h"
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

using testing::FakeDisk;

SessionOptions OptionsFor(const FakeDisk& disk) {
  SessionOptions o;
  o.portal = {"127.0.0.1", disk.port()};
  o.target_name = "iqn.2026-11.io.iser-connect.test:fake-disk";
  o.initiator_name = "iqn.2026-11.io.iser-connect.test:initiator";
  o.login_timeout = std::chrono::seconds(5);
  o.nop_interval = std::chrono::milliseconds(0);
  return o;
}

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

}  // namespace
}  // namespace iser
