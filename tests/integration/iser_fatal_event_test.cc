// A fatal RDMA async event on a live, busy iSER session against tgtd's iSER target: the session
// ends that connection naming the event, recovers (a new connection, the tasks in flight sent
// again) and every I/O completes with the right data, within bounded time.
//
// The event is an injected fault (softrdma_raise_async_event, softrdma/src/faults.h): a NIC raises
// IBV_EVENT_QP_FATAL on internal errors (a WQE it cannot fetch, a firmware fault) that no peer
// can cause, and IBV_EVENT_CQ_ERR when a CQ overruns, which our CQ, sized for every work request
// we post, never does. softrdma does what the NIC does: the event on the async fd, the QP in
// error, its work requests flushed (for CQ_ERR the CQ takes no more completions, so the async fd
// is the only word the initiator gets). tgtd learns of it only as a peer does, when its next
// operation finds our QP in error or our disconnect arrives.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "initiator/block/block_device.h"
#include "initiator/session/session.h"
#include "tests/harness/tgt_fixture.h"

namespace iser {
namespace {

using test::TgtFixture;
using test::TgtLld;
using Clock = std::chrono::steady_clock;

constexpr const char* kIqn = "iqn.2026-11.io.iser-connect.test:fatal-event";
constexpr const char* kInitiator = "iqn.2026-11.io.iser-connect.test:initiator";
constexpr int kWorkers = 12;
constexpr uint64_t kRegion = 2ull << 20;                  // each worker's own part of the LUN
constexpr uint32_t kSizes[] = {4096, 65536, 512 * 1024};  // a small slot, a large one, direct

struct FatalEvent {
  ibv_event_type type;
  const char* name;     // ibv_event_type_str's
  const char* meaning;  // what the initiator says it means
};

void PrintTo(const FatalEvent& e, std::ostream* os) {
  *os << e.name;
}

// Writers that read back and compare everything they write, each in its own region, until told
// to stop; each keeps what its region must hold.
struct Workload {
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::atomic<uint64_t> verified{0};  // write + read back + compare done
  std::atomic<int> in_io{0};          // writers inside a Write or Read now
  std::atomic<int> mismatches{0};
  std::mutex mu;
  std::vector<std::string> errors;  // guarded by mu
  std::vector<std::vector<uint8_t>> shadows = std::vector<std::vector<uint8_t>>(kWorkers);
  std::vector<std::thread> threads;

  void Run(BlockDevice* dev, int id) {
    std::mt19937 rng(1000 + id);
    std::vector<uint8_t>& shadow = shadows[id];
    shadow.assign(kRegion, 0);  // a fresh sparse LUN reads as zeroes
    std::vector<uint8_t> out(kSizes[2]), back(kSizes[2]);
    const uint64_t base = kRegion * id;
    while (!stop) {
      const uint32_t len = kSizes[rng() % 3];
      const uint64_t at = (rng() % ((kRegion - len) / 4096 + 1)) * 4096;
      // One random word per 8 bytes, stamped with its offset: cheap enough under the
      // sanitizers that the writers spend their time in I/O, so the event finds tasks in flight.
      const uint64_t seed = (static_cast<uint64_t>(rng()) << 32) | rng();
      for (uint32_t i = 0; i < len; i += 8) {
        const uint64_t word = seed ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
        std::memcpy(out.data() + i, &word, 8);
      }
      ++in_io;
      Status st = dev->Write(base + at, out.data(), len);
      if (st.ok()) {
        std::memcpy(shadow.data() + at, out.data(), len);
        st = dev->Read(base + at, back.data(), len);
      }
      --in_io;
      if (!st.ok()) {
        std::lock_guard lock(mu);
        errors.push_back(st.ToString());
        break;
      }
      if (std::memcmp(back.data(), shadow.data() + at, len) != 0) ++mismatches;
      ++verified;
    }
    --running;
  }

  void Start(BlockDevice* dev) {
    running = kWorkers;
    for (int i = 0; i < kWorkers; ++i) threads.emplace_back([this, dev, i] { Run(dev, i); });
  }

  // Stops the writers; a writer stuck past the deadline is a hang, which aborts the test (its
  // thread cannot be joined) after killing tgtd, which would outlive the abort.
  void Stop(TgtFixture* tgt) {
    stop = true;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (running > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (running > 0) {
      std::fprintf(stderr, "%d writers still waiting for an I/O 20 s after the stop: a hang\n",
                   running.load());
      tgt->Kill();
      std::abort();
    }
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

bool WaitFor(std::chrono::seconds limit, const std::function<bool()>& done) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class IserFatalEvent : public ::testing::TestWithParam<FatalEvent> {
 protected:
  IserFatalEvent() : tgt_(TgtLld::kIser, kInitiator) {}

  void SetUp() override {
    std::string error;
    ASSERT_TRUE(tgt_.Start(&error)) << error;
    tgt_.AddTarget(1, kIqn);
    lun_ = tgt_.AddLun(1, 1, kRegion * kWorkers);
  }

  TgtFixture tgt_;
  std::string lun_;
};

TEST_P(IserFatalEvent, MidIoEndsTheConnectionNamingItAndRecoveryLosesNothing) {
  using Raise = int (*)(int);
  const auto raise = reinterpret_cast<Raise>(dlsym(RTLD_DEFAULT, "softrdma_raise_async_event"));
  ASSERT_NE(raise, nullptr) << "no softrdma_raise_async_event: run under softrdma-run "
                               "(tests/harness/iser-netns); a real libibverbs has no fault hook";
  SessionOptions o;
  o.portal = {"127.0.0.1", tgt_.port()};
  o.transport = TransportKind::kIser;
  o.target_name = kIqn;
  o.initiator_name = kInitiator;
  o.login_timeout = std::chrono::seconds(10);
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString() << "\n" << tgt_.log();
  std::shared_ptr<Session> session(std::move(*opened));
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(session, 1);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();

  Workload load;
  load.Start(dev->get());
  // The writers stop whatever an assertion below ends the test with.
  struct StopWriters {
    Workload* load;
    TgtFixture* tgt;
    ~StopWriters() {
      if (!load->threads.empty()) load->Stop(tgt);
    }
  } stop_writers{&load, &tgt_};
  ASSERT_TRUE(WaitFor(std::chrono::seconds(20), [&] { return load.verified >= 50; }))
      << "the writers verified only " << load.verified << " I/Os in 20 s before the event";
  ASSERT_EQ(session->stats().recoveries, 0u) << session->stats().last_loss;

  // Raised while most writers are inside an I/O, so that there is something to replay (a
  // check, not a guarantee: the test fails below if nothing was in flight after all).
  ASSERT_TRUE(WaitFor(std::chrono::seconds(10), [&] { return load.in_io >= kWorkers - 2; }))
      << "the writers were never all busy at once";
  const auto raised_at = Clock::now();
  const uint64_t before = load.verified;
  ASSERT_EQ(raise(GetParam().type), 1) << "the event found no connected QP (or not one)";
  const bool recovered = WaitFor(std::chrono::seconds(30), [&] {
    return session->stats().recoveries >= 1 && load.verified >= before + 50;
  });
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - raised_at);
  load.Stop(&tgt_);
  const SessionStats stats = session->stats();
  std::printf(
      "%s: recovered after %lld ms, %llu tasks replayed, %llu I/Os verified (%llu after "
      "the event); the loss: %s\n",
      GetParam().name, static_cast<long long>(took.count()),
      static_cast<unsigned long long>(stats.replayed_tasks),
      static_cast<unsigned long long>(load.verified.load()),
      static_cast<unsigned long long>(load.verified - before), stats.last_loss.c_str());

  EXPECT_TRUE(recovered) << "no recovery with 50 more verified I/Os within 30 s of the event ("
                         << stats.recoveries << " recoveries, state "
                         << SessionStateName(stats.state) << ")";
  EXPECT_TRUE(load.errors.empty())
      << load.errors.size() << " I/Os failed, the first: " << load.errors.front();
  EXPECT_EQ(load.mismatches, 0) << "reads returned other bytes than were written";
  EXPECT_EQ(stats.recoveries, 1u) << "one event, one lost connection";
  EXPECT_GT(stats.replayed_tasks, 0u) << "nothing was in flight when the connection was lost";
  const std::string event = std::string("RDMA async event ") + GetParam().name;
  EXPECT_NE(stats.last_loss.find(event), std::string::npos) << stats.last_loss;
  EXPECT_NE(stats.last_loss.find(GetParam().meaning), std::string::npos) << stats.last_loss;
  EXPECT_TRUE(session->healthy());

  // What tgtd stored is what the writers last wrote: nothing lost, nothing written twice over
  // a later write.
  std::ifstream file(lun_, std::ios::binary);
  std::vector<uint8_t> stored(kRegion);
  for (int i = 0; i < kWorkers; ++i) {
    ASSERT_TRUE(file.read(reinterpret_cast<char*>(stored.data()), kRegion)) << lun_;
    EXPECT_TRUE(stored == load.shadows[i]) << "region " << i << " of the backing file";
  }
  EXPECT_TRUE(session->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Events, IserFatalEvent,
    ::testing::Values(FatalEvent{IBV_EVENT_QP_FATAL, "local work queue catastrophic error",
                                 "the queue pair hit a fatal error"},
                      FatalEvent{IBV_EVENT_CQ_ERR, "CQ error", "the completion queue overran"}),
    [](const ::testing::TestParamInfo<FatalEvent>& event) {
      return event.param.type == IBV_EVENT_QP_FATAL ? std::string("QpFatal")
                                                    : std::string("CqError");
    });

}  // namespace
}  // namespace iser
