// Per-command registrations under a small RLIMIT_MEMLOCK, against tgtd's iSER target: when a
// command's registration finds no locked memory left, the command waits for those in flight to
// give theirs back instead of failing the connection (docs/initiator.md, "RLIMIT_MEMLOCK").
//
// How the limit is made to bite as root: the test process drops CAP_IPC_LOCK (which lifts the
// limit for the initiator and, as for the kernel's ib_umem_get, for softrdma's strict mode) from
// its main thread, whose threads started later (the session's) inherit it, and lowers its soft
// RLIMIT_MEMLOCK to 4 MiB. In a user namespace of its own (ctest's iser_memlock_userns runs it
// under `unshare -r`) it keeps every capability that namespace grants: CAP_IPC_LOCK there lifts
// no limit, for the kernel as for the initiator and softrdma. tgtd is started before, with its
// capabilities and limit untouched. Both settle the process's memlock budget for good (the
// initiator reads it once), so this test has a binary of its own.
//
// STags by per-command registration, the caller's buffer registered directly from 128 KiB on
// (ISER_CONNECT_STAGS=per-command,direct; softrdma's default device would otherwise get memory
// windows): the connection takes about 1 MiB of buffers, which leaves room for five or six
// 512 KiB registrations at once, and 24 commands of 512 KiB are sent at once.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "initiator/block/block_device.h"
#include "initiator/session/session.h"
#include "initiator/transport/iser/iser_memory.h"
#include "tests/harness/tgt_fixture.h"
#include "tests/integration/ipc_lock.h"

namespace iser {
namespace {

using test::DropIpcLock;
using test::TgtFixture;
using test::TgtLld;
using Clock = std::chrono::steady_clock;

constexpr const char* kIqn = "iqn.2026-11.io.iser-connect.test:memlock";
constexpr const char* kInitiator = "iqn.2026-11.io.iser-connect.test:initiator";
constexpr size_t kLimit = 4 << 20;
constexpr int kCommands = 24;
constexpr uint32_t kLen = 512 * 1024;

struct Batch {
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  std::string first_error;  // written by the first failure only
};

// Submits every request at once and waits for all of them (30 s at most: more is a hang, which
// aborts the test after killing tgtd, which would outlive the abort).
void RunAtOnce(BlockDevice* dev, std::vector<IoRequest>& reqs, Batch* batch, TgtFixture* tgt) {
  batch->done = 0;
  for (IoRequest& r : reqs) {
    r.context = batch;
    r.on_complete = [](IoRequest* done, const Status& st) {
      auto* b = static_cast<Batch*>(done->context);
      if (!st.ok() && b->failed++ == 0) b->first_error = st.ToString();
      ++b->done;
    };
  }
  for (IoRequest& r : reqs) dev->Submit(&r);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (batch->done < static_cast<int>(reqs.size()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (batch->done < static_cast<int>(reqs.size())) {
    std::fprintf(stderr, "%d of %zu commands still unanswered after 30 s: a hang\n",
                 static_cast<int>(reqs.size()) - batch->done, reqs.size());
    tgt->Kill();
    std::abort();  // the requests cannot be abandoned while the session may still complete them
  }
}

TEST(IserMemlock, PerCommandRegistrationsThatFindNoLockedMemoryWaitAndAllComplete) {
  TgtFixture tgt(TgtLld::kIser, kInitiator);
  std::string error;
  // In a user namespace of its own tgtd cannot lock its 128 MiB buffer pool either: the
  // capability the namespace grants lifts no limit, and raising the hard limit takes
  // CAP_SYS_RESOURCE in the initial namespace, which a rootless user (and some containers' root)
  // lacks. softrdma lets tgtd alone ignore the limit (it reads the environment it was started
  // with); the initiator's budget is what this test is about.
  const bool own_namespace = !InInitialUserNamespace();
  if (own_namespace) {
    ASSERT_EQ(setenv("SOFTRDMA_IGNORE_MEMLOCK", "1", 1), 0);
  }
  const bool started = tgt.Start(&error);
  if (own_namespace) {
    ASSERT_EQ(unsetenv("SOFTRDMA_IGNORE_MEMLOCK"), 0);
  }
  ASSERT_TRUE(started) << error;
  tgt.AddTarget(1, kIqn);
  const std::string lun = tgt.AddLun(1, 1, 32 << 20);

  if (InInitialUserNamespace()) {
    const std::string dropped = DropIpcLock();
    ASSERT_EQ(dropped, "") << "cannot drop CAP_IPC_LOCK";
  }
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  ASSERT_TRUE(lim.rlim_max == RLIM_INFINITY || lim.rlim_max >= kLimit)
      << "the hard RLIMIT_MEMLOCK (" << lim.rlim_max << " bytes) is below the test's 4 MiB";
  lim.rlim_cur = kLimit;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &lim), 0) << strerror(errno);
  ASSERT_EQ(LockedLeft(), kLimit) << "the initiator does not see the 4 MiB limit (CAP_IPC_LOCK "
                                     "still effective, or the budget was read before)";
  ASSERT_EQ(setenv("ISER_CONNECT_STAGS", "per-command,direct", 1), 0);

  SessionOptions o;
  o.portal = {"127.0.0.1", tgt.port()};
  o.transport = TransportKind::kIser;
  o.target_name = kIqn;
  o.initiator_name = kInitiator;
  o.login_timeout = std::chrono::seconds(10);
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString() << "\n" << tgt.log();
  std::shared_ptr<Session> session(std::move(*opened));
  const std::string mechanism = session->stats().datamover;
  ASSERT_NE(mechanism.find("caller buffers registered per command (>= 128 KiB), else copies "
                           "through slots registered per command"),
            std::string::npos)
      << mechanism;
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(session, 1);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();

  std::vector<std::vector<uint8_t>> data(kCommands), back(kCommands);
  std::vector<IoRequest> reqs(kCommands);
  std::mt19937 rng(7);
  for (int i = 0; i < kCommands; ++i) {
    data[i].resize(kLen);
    for (uint8_t& b : data[i]) b = static_cast<uint8_t>(rng());
    back[i].assign(kLen, 0xee);
    reqs[i].op = IoOp::kWrite;
    reqs[i].offset = uint64_t{kLen} * i;
    reqs[i].length = kLen;
    reqs[i].buffer = data[i].data();
  }
  const uint64_t waits_before = RegistrationWaitsForLockedMemory();
  Batch writes, reads;
  RunAtOnce(dev->get(), reqs, &writes, &tgt);
  const uint64_t write_waits = RegistrationWaitsForLockedMemory() - waits_before;
  for (int i = 0; i < kCommands; ++i) {
    reqs[i].op = IoOp::kRead;
    reqs[i].buffer = back[i].data();
  }
  RunAtOnce(dev->get(), reqs, &reads, &tgt);
  const uint64_t read_waits = RegistrationWaitsForLockedMemory() - waits_before - write_waits;
  const SessionStats stats = session->stats();
  std::printf(
      "%d writes then %d reads of 512 KiB at once under RLIMIT_MEMLOCK 4 MiB (%s): "
      "%llu + %llu registrations waited for locked memory\n",
      kCommands, kCommands, mechanism.c_str(), static_cast<unsigned long long>(write_waits),
      static_cast<unsigned long long>(read_waits));

  EXPECT_EQ(writes.failed, 0) << writes.first_error;
  EXPECT_EQ(reads.failed, 0) << reads.first_error;
  EXPECT_GT(write_waits, 0u) << "no write's registration waited: the limit never bit";
  EXPECT_GT(read_waits, 0u) << "no read's registration waited: the limit never bit";
  EXPECT_EQ(stats.recoveries, 0u) << "a connection failed: " << stats.last_loss;
  EXPECT_EQ(stats.last_loss, "");
  EXPECT_TRUE(session->healthy());
  std::ifstream file(lun, std::ios::binary);
  std::vector<uint8_t> stored(kLen);
  for (int i = 0; i < kCommands; ++i) {
    EXPECT_TRUE(back[i] == data[i]) << "read " << i << " returned other bytes than written";
    ASSERT_TRUE(file.read(reinterpret_cast<char*>(stored.data()), kLen)) << lun;
    EXPECT_TRUE(stored == data[i]) << "write " << i << " is not in the backing file";
  }
  EXPECT_TRUE(session->Close().ok());
}

}  // namespace
}  // namespace iser
