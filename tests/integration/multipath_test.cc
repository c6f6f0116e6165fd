// Multipath against a real tgtd (docs/multipath.md): one LUN through several sessions, each path
// carrying I/O, the LUN's identity checked on each; paths lost by a cut or a stall (the path
// cutter, tests/harness/path_cutter.h, between us and one portal) move their I/O to the others
// without an error, and a write in flight on the lost path never lands over a newer one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "discovery/connect.h"
#include "initiator/base/log.h"
#include "initiator/block/block_device.h"
#include "tests/harness/path_cutter.h"
#include "tests/harness/tgt_fixture.h"

namespace iser {
namespace {

using test::FreePort;
using test::PathCutter;
using test::TgtFixture;
using Clock = std::chrono::steady_clock;

// Built twice: over TCP, and (ISER_TEST_OVER_ISER=1) over iSER, against tgtd's iSER target
// under softrdma in a network namespace of the test's own, where the second portal is a second
// address (127.0.0.2) on the iSER port. The path cutter relays TCP only: the cut and stall tests
// are TCP's.
constexpr bool kOverIser = ISER_TEST_OVER_ISER;
constexpr const char* kScheme = kOverIser ? "iser://" : "iscsi://";
constexpr const char* kLld = kOverIser ? "--lld iser " : "--lld iscsi ";
constexpr const char* kIqn = "iqn.2026-11.io.iser-connect.test:multipath";
constexpr const char* kInitiator = "iqn.2026-11.io.iser-connect.test:initiator";
constexpr uint32_t kBlock = 4096;
constexpr int kWriters = 8;
// Each writer's blocks: few, so that a block is written again soon after any write of it, and a
// stale copy landing late is caught by the read-back.
constexpr uint32_t kBlocksPerWriter = 16;

// Writers that stamp every block they write with (writer, block, generation) and keep what each
// block must hold; Check reads the LUN back against that ledger.
struct Ledger {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::atomic<int> running{0};
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<uint64_t> generation = std::vector<uint64_t>(kWriters * kBlocksPerWriter, 0);
  std::vector<std::thread> threads;
  // The longest time no write completed on any writer: the I/O pause a path loss caused.
  std::atomic<int64_t> last_completion_ns{0};
  std::atomic<int64_t> longest_gap_ns{0};

  static void Stamp(uint8_t* block, uint32_t index, uint64_t gen) {
    for (uint32_t off = 0; off < kBlock; off += 16) {
      std::memcpy(block + off, &index, 4);
      std::memcpy(block + off + 4, &off, 4);
      std::memcpy(block + off + 8, &gen, 8);
    }
  }

  void Note() {
    const int64_t now = Clock::now().time_since_epoch().count();
    const int64_t last = last_completion_ns.exchange(now);
    if (last != 0 && now - last > longest_gap_ns.load()) longest_gap_ns = now - last;
  }

  void Run(BlockDevice* dev, int id) {
    std::mt19937 rng(100 + id);
    std::vector<uint8_t> out(kBlock), back(kBlock);
    while (!stop) {
      const uint32_t index = id * kBlocksPerWriter + rng() % kBlocksPerWriter;
      const uint64_t gen = generation[index] + 1;
      Stamp(out.data(), index, gen);
      Status st = dev->Write(uint64_t{index} * kBlock, out.data(), kBlock);
      if (st.ok()) {
        generation[index] = gen;
        st = dev->Read(uint64_t{index} * kBlock, back.data(), kBlock);
        if (st.ok() && back != out) st = Status::IoError("read back other bytes");
      }
      if (!st.ok()) {
        std::lock_guard lock(mu);
        errors.push_back("block " + std::to_string(index) + ": " + st.ToString());
        break;
      }
      ++writes;
      Note();
    }
    --running;
  }

  void Start(BlockDevice* dev) {
    running = kWriters;
    for (int i = 0; i < kWriters; ++i) threads.emplace_back([this, dev, i] { Run(dev, i); });
  }

  void Stop() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // Every block holds its last acknowledged generation: nothing lost, nothing stale.
  std::vector<std::string> Check(BlockDevice* dev) {
    std::vector<std::string> bad;
    std::vector<uint8_t> expect(kBlock), back(kBlock);
    for (uint32_t index = 0; index < generation.size(); ++index) {
      if (generation[index] == 0) continue;
      Stamp(expect.data(), index, generation[index]);
      Status st = dev->Read(uint64_t{index} * kBlock, back.data(), kBlock);
      if (!st.ok()) {
        bad.push_back("block " + std::to_string(index) + ": " + st.ToString());
      } else if (back != expect) {
        uint64_t got;
        std::memcpy(&got, back.data() + 8, 8);
        bad.push_back("block " + std::to_string(index) + " holds generation " +
                      std::to_string(got) + ", not " + std::to_string(generation[index]));
      }
    }
    return bad;
  }
};

// The log at info level and above, kept for assertions and printed with the time since the
// test began (a path loss is a sequence of lines).
std::mutex g_log_mu;
std::vector<std::string> g_log;
Clock::time_point g_log_start;

void CaptureLog(LogLevel, const std::string& message) {
  const double at = std::chrono::duration<double>(Clock::now() - g_log_start).count();
  std::fprintf(stderr, "%7.3f %s\n", at, message.c_str());
  std::lock_guard lock(g_log_mu);
  g_log.push_back(message);
}

[[maybe_unused]] bool Logged(const std::string& text) {
  std::lock_guard lock(g_log_mu);
  for (const std::string& m : g_log) {
    if (m.find(text) != std::string::npos) return true;
  }
  return false;
}

bool WaitFor(std::chrono::milliseconds limit, const std::function<bool()>& done) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class MultipathTest : public ::testing::Test {
 protected:
  MultipathTest() : tgt_(kOverIser ? test::TgtLld::kIser : test::TgtLld::kIscsi, kInitiator) {}

  void SetUp() override {
    {
      std::lock_guard lock(g_log_mu);
      g_log.clear();
    }
    g_log_start = Clock::now();
    SetLogSink(&CaptureLog, LogLevel::kInfo);
    std::string error;
    ASSERT_TRUE(tgt_.Start(&error)) << error;
    tgt_.AddTarget(1, kIqn);
    tgt_.AddLun(1, 1, 64u << 20);
    options_.initiator_name = kInitiator;
    options_.login_timeout = std::chrono::seconds(5);
    // A stalled path is noticed within 2 s.
    options_.nop_interval = std::chrono::seconds(1);
    options_.nop_timeout = std::chrono::seconds(1);
  }

  // tgt's iSER target takes no second portal (tgtadm: invalid request): there, two sessions to
  // its one portal are the two paths.
  std::string SecondPath() {
    if (kOverIser) return "?portal=" + tgt_.portal() + "&nr_sessions=2";
    const Portal second{"127.0.0.1", FreePort()};
    tgt_.MustAdm(std::string(kLld) + "--op new --mode portal --param portal=" + second.ToString());
    return "?portal=" + second.ToString();
  }

  std::string UrlOf(const std::string& portal, const std::string& args) const {
    return kScheme + portal + "/" + kIqn + "/1" + args;
  }

  std::shared_ptr<PathSet> MustOpen(const std::string& url_text) {
    Result<IscsiUrl> url = ParseIscsiUrl(url_text);
    EXPECT_TRUE(url.ok()) << url.status().ToString();
    if (!url.ok()) return nullptr;
    Result<std::shared_ptr<PathSet>> paths = OpenPaths(*url, options_);
    EXPECT_TRUE(paths.ok()) << paths.status().ToString() << "\n" << tgt_.log();
    return paths.ok() ? *paths : nullptr;
  }

  // tgtd's I_T nexuses of target 1, one per session.
  int Nexuses() {
    std::string out;
    tgt_.Adm(std::string(kLld) + "--op show --mode target", &out);
    int n = 0;
    for (size_t at = out.find("I_T nexus:"); at != std::string::npos;
         at = out.find("I_T nexus:", at + 1)) {
      ++n;
    }
    return n;
  }

  void TearDown() override { SetLogSink(nullptr, LogLevel::kWarning); }

  TgtFixture tgt_;
  ConnectOptions options_;
};

std::vector<PathStatus> PathsOfLun1(PathSet& set) {
  for (const LunPathStatus& l : set.PathStatuses()) {
    if (l.lun == 1) return l.paths;
  }
  return {};
}

// tgt's SendTargets names only the portal it arrives at, so the URL names the second.
TEST_F(MultipathTest, TwoPortalsAreTwoPathsThatBothCarryIo) {
  std::shared_ptr<PathSet> set = MustOpen(UrlOf(tgt_.portal(), SecondPath()));
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 2u);
  EXPECT_EQ(Nexuses(), 2);
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(set, 1);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  const std::vector<LunPathStatus> luns = set->PathStatuses();
  ASSERT_EQ(luns.size(), 1u);
  EXPECT_EQ(luns[0].identity.rfind("naa.", 0), 0u) << luns[0].identity;
  EXPECT_FALSE(luns[0].alua) << "tgt reports TPGS 0";

  Ledger ledger;
  ledger.Start(dev->get());
  ASSERT_TRUE(WaitFor(std::chrono::seconds(20), [&] { return ledger.writes >= 400; }));
  ledger.Stop();
  EXPECT_TRUE(ledger.errors.empty()) << ledger.errors.front();
  EXPECT_TRUE(ledger.Check(dev->get()).empty());
  const std::vector<PathStatus> paths = PathsOfLun1(*set);
  ASSERT_EQ(paths.size(), 2u);
  for (const PathStatus& p : paths) {
    EXPECT_TRUE(p.serves) << p.portal << ": " << p.why_not;
    EXPECT_EQ(p.alua_state, "active/optimized");
    // Queue length spreads eight writers over both paths: each carries a good share.
    EXPECT_GT(p.commands, ledger.writes / 5)
        << p.portal << " carried too little of " << ledger.writes * 2 << " commands";
  }
  EXPECT_EQ(set->path_changes(), 0u);
  dev->reset();
  EXPECT_TRUE(set->Close().ok());
}

TEST_F(MultipathTest, MultipathOffIsOneSessionAndNrSessionsOpensSeveralToOnePortal) {
  std::shared_ptr<PathSet> one = MustOpen(UrlOf(tgt_.portal(), "?multipath=off"));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->size(), 1u);
  EXPECT_EQ(Nexuses(), 1);
  one->primary().Close().IgnoreError();
  one.reset();

  std::shared_ptr<PathSet> three =
      MustOpen(UrlOf(tgt_.portal(), "?portal=" + tgt_.portal() + "&nr_sessions=3"));
  ASSERT_TRUE(three);
  EXPECT_EQ(three->size(), 3u) << "portal= names the paths: one portal, three sessions";
  // tgtd's iSER target forgets the logged-out session a moment after the Logout Response.
  EXPECT_TRUE(WaitFor(std::chrono::seconds(5), [&] { return Nexuses() == 3; }))
      << Nexuses() << " I_T nexuses";
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(three, 1);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  Ledger ledger;
  ledger.Start(dev->get());
  ASSERT_TRUE(WaitFor(std::chrono::seconds(20), [&] { return ledger.writes >= 300; }));
  ledger.Stop();
  EXPECT_TRUE(ledger.errors.empty()) << ledger.errors.front();
  for (const PathStatus& p : PathsOfLun1(*three)) EXPECT_GT(p.commands, 0u) << p.portal;
  dev->reset();
  EXPECT_TRUE(three->Close().ok());
}

#if !ISER_TEST_OVER_ISER
// Two paths, each through its own cutter to tgtd's one portal.
class MultipathCutTest : public MultipathTest {
 protected:
  void SetUp() override {
    MultipathTest::SetUp();
    for (auto& cutter : cutters_) {
      Result<std::unique_ptr<PathCutter>> c = PathCutter::Start("127.0.0.1", tgt_.port());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cutter = std::move(*c);
    }
  }

  std::string Url(const std::string& args) const {
    return "iscsi://127.0.0.1:" + std::to_string(cutters_[0]->port()) + "/" + kIqn +
           "/1?portal=127.0.0.1:" + std::to_string(cutters_[1]->port()) + args;
  }

  // Runs the writers, loses path 1 by `lose`, runs on by path 2, stops them and brings path 1
  // back with Restore: what the cutter held reaches tgtd now, and would land over newer writes
  // if it were to land at all; the ledger checks that before anything writes those blocks again.
  // Then path 1 must rejoin and carry I/O.
  void LoseAndRestore(const std::string& args, const std::function<void(PathCutter&)>& lose) {
    std::shared_ptr<PathSet> set = MustOpen(Url(args));
    ASSERT_TRUE(set);
    ASSERT_EQ(set->size(), 2u);
    Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(set, 1);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    Ledger ledger;
    ledger.Start(dev->get());
    ASSERT_TRUE(WaitFor(std::chrono::seconds(20), [&] { return ledger.writes >= 200; }));

    lose(*cutters_[0]);
    ASSERT_TRUE(WaitFor(std::chrono::seconds(10), [&] { return !PathsOfLun1(*set)[0].healthy; }))
        << "path 1 still up 10 s after it was lost";
    const uint64_t at_loss = ledger.writes;
    EXPECT_TRUE(WaitFor(std::chrono::seconds(10), [&] { return ledger.writes >= at_loss + 200; }))
        << "the writers did not go on by path 2";
    // Long enough for the writers to write every block again, several times, by path 2; then
    // nothing writes, whatever the cutter held reaches tgtd, and the ledger sees whether it
    // landed.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const double longest_pause_ms = ledger.longest_gap_ns.load() / 1e6;
    ledger.Stop();
    // Lost for longer than Time2Wait (2 s) and a login attempt: path 1 has tried its portal and
    // found it down, and must still come back there, not through path 2's portal.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    cutters_[0]->Restore();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(ledger.errors.empty())
        << ledger.errors.size() << " errors, the first " << ledger.errors.front();
    std::vector<std::string> bad = ledger.Check(dev->get());
    EXPECT_TRUE(bad.empty()) << bad.size() << " blocks lost or stale, the first: " << bad.front();
    // With round robin every writer's next command goes by path 1 until it is found stuck, so
    // about eight commands, half of them writes, are caught there: a write is held but for one
    // run in 256.
    if (args.find("round-robin") != std::string::npos) {
      EXPECT_TRUE(Logged("ended the lost session"))
          << "no write was held on the lost path (or it was never fenced): nothing was shown";
    }
    std::printf("longest pause with no write completing: %.0f ms; %llu writes\n", longest_pause_ms,
                static_cast<unsigned long long>(ledger.writes.load()));

    EXPECT_TRUE(WaitFor(std::chrono::seconds(30), [&] { return PathsOfLun1(*set)[0].healthy; }))
        << "path 1 did not come back";
    EXPECT_EQ(set->session(0).stats().current_portal.port, cutters_[0]->port())
        << "path 1 came back through another portal than its own";
    const uint64_t path1_before = PathsOfLun1(*set)[0].commands;
    ledger.stop = false;
    ledger.Start(dev->get());
    EXPECT_TRUE(WaitFor(std::chrono::seconds(20), [&] {
      return PathsOfLun1(*set)[0].commands >= path1_before + 50;
    })) << "path 1 carries no I/O after it came back";
    ledger.Stop();
    EXPECT_TRUE(ledger.errors.empty()) << ledger.errors.front();
    bad = ledger.Check(dev->get());
    EXPECT_TRUE(bad.empty()) << bad.size() << " blocks lost or stale, the first: " << bad.front();
    EXPECT_GE(set->path_changes(), 2u) << "down and up again";
    dev->reset();
    EXPECT_TRUE(set->Close().ok());
  }

  std::unique_ptr<PathCutter> cutters_[2];
};

TEST_F(MultipathCutTest, ACutPathsIoGoesOnByTheOtherAndNothingIsLostOrStale) {
  LoseAndRestore("", [](PathCutter& c) { c.Cut(); });
}

// A stall: both sides' connections stay up, the bytes our writes were in are held by the cutter
// and reach tgtd after Restore. A write moved to path 2 at once would land, be acknowledged and
// be written again, and then the held copy would land over the newer data; the ledger sees that.
// Round robin sends every writer's next command by path 1 until the stall is noticed, so that
// several writes sit in the cutter.
TEST_F(MultipathCutTest, AStalledPathsHeldWritesNeverLandOverNewerOnes) {
  LoseAndRestore("&path_selector=round-robin", [](PathCutter& c) { c.Stall(); });
}

// The first path's portal is down when the device opens: it opens by the second, and the first
// joins once its portal is back, the LUN checked through it, and carries I/O.
TEST_F(MultipathCutTest, APathDownAtOpenJoinsOnceItsPortalIsBack) {
  cutters_[0]->Cut();
  std::shared_ptr<PathSet> set = MustOpen(Url(""));
  ASSERT_TRUE(set);
  EXPECT_EQ(set->size(), 1u) << "the path through the cut portal logged in";
  EXPECT_TRUE(Logged("left out for now"));
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(set, 1);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  cutters_[0]->Restore();
  ASSERT_TRUE(WaitFor(std::chrono::seconds(30), [&] {
    const std::vector<PathStatus> paths = PathsOfLun1(*set);
    return paths.size() == 2 && paths[1].serves;
  })) << "the path did not join within 30 s of its portal's return";
  EXPECT_EQ(set->session(1).portal().port, cutters_[0]->port());
  EXPECT_TRUE(Logged("joined"));
  Ledger ledger;
  ledger.Start(dev->get());
  EXPECT_TRUE(WaitFor(std::chrono::seconds(20), [&] {
    return PathsOfLun1(*set)[1].commands >= 50;
  })) << "the joined path carries no I/O";
  ledger.Stop();
  EXPECT_TRUE(ledger.errors.empty()) << ledger.errors.front();
  std::vector<std::string> bad = ledger.Check(dev->get());
  EXPECT_TRUE(bad.empty()) << bad.size() << " blocks lost or stale, the first: " << bad.front();
  dev->reset();
  EXPECT_TRUE(set->Close().ok());
  EXPECT_TRUE(WaitFor(std::chrono::seconds(5), [&] { return Nexuses() == 0; }))
      << Nexuses() << " I_T nexuses left after Close: the joined path was not logged out";
}

#endif  // !ISER_TEST_OVER_ISER

}  // namespace
}  // namespace iser
