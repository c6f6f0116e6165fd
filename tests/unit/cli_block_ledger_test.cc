// bench --verify's block ledger: generations per block, and claims that keep two I/Os off the
// same block, also under threads racing for few blocks.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cli/bench/block_ledger.h"

namespace iser::cli {
namespace {

TEST(BlockLedger, GenerationsCountWritesPerBlock) {
  BlockLedger l(4);
  EXPECT_EQ(l.blocks(), 4u);
  for (uint64_t b = 0; b < 4; ++b) EXPECT_EQ(l.generation(b), 0u);
  l.SetAll(1);
  ASSERT_TRUE(l.TryClaim(2));
  EXPECT_EQ(l.NextGeneration(2), 2u);
  EXPECT_EQ(l.generation(2), 2u);
  l.Release(2);
  ASSERT_TRUE(l.TryClaim(2));
  EXPECT_EQ(l.NextGeneration(2), 3u);
  l.Release(2);
  EXPECT_EQ(l.generation(2), 3u);
  EXPECT_EQ(l.generation(1), 1u);
}

TEST(BlockLedger, OneClaimPerBlock) {
  BlockLedger l(3);
  EXPECT_TRUE(l.TryClaim(1));
  EXPECT_FALSE(l.TryClaim(1));
  EXPECT_EQ(l.ClaimFrom(1), 2u);
  EXPECT_EQ(l.ClaimFrom(1), 0u);  // wraps around
  EXPECT_FALSE(l.TryClaim(0));
  l.Release(1);
  EXPECT_EQ(l.ClaimFrom(2), 1u);
  EXPECT_EQ(l.generation(1), 0u);  // claims leave the generation alone
}

TEST(BlockLedger, ThreadsNeverHoldOneBlockTogether) {
  constexpr uint64_t kBlocks = 3;
  constexpr int kThreads = 3;
  BlockLedger l(kBlocks);
  std::vector<std::atomic<int>> holders(kBlocks);
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const uint64_t b = l.ClaimFrom(static_cast<uint64_t>(i + t) % kBlocks);
        if (holders[b].fetch_add(1) != 0) ++overlaps;
        l.NextGeneration(b);
        holders[b].fetch_sub(1);
        l.Release(b);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  uint64_t writes = 0;
  for (uint64_t b = 0; b < kBlocks; ++b) writes += l.generation(b);
  EXPECT_EQ(writes, 20000u * kThreads);  // no increment lost to a race
}

}  // namespace
}  // namespace iser::cli
