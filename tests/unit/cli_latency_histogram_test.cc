// bench's latency histogram: nearest-rank percentiles of known samples, exact where the bucket
// is one value wide and never more than 1/16 below (never above) the true sample elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cli/bench/latency_histogram.h"

namespace iser::cli {
namespace {

TEST(LatencyHistogram, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(0.5), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
}

TEST(LatencyHistogram, SmallValuesAreExact) {
  LatencyHistogram h;
  for (uint64_t ns = 0; ns < 32; ++ns) h.Record(31 - ns);
  EXPECT_EQ(h.count(), 32u);
  EXPECT_EQ(h.sum_ns(), 31u * 32 / 2);
  EXPECT_EQ(h.max_ns(), 31u);
  EXPECT_EQ(h.Percentile(1.0 / 32), 0u);
  EXPECT_EQ(h.Percentile(0.5), 15u);   // the 16th smallest
  EXPECT_EQ(h.Percentile(0.51), 16u);  // rank ceil(16.32) = 17
  EXPECT_EQ(h.Percentile(31.0 / 32), 30u);
  EXPECT_EQ(h.Percentile(1.0), 31u);
}

TEST(LatencyHistogram, BucketBoundsAreExact) {
  // 100 samples: 90 of 1 us, 9 of 2 ms, 1 of 5 s; each a bucket's lower bound.
  LatencyHistogram h;
  const uint64_t fast = uint64_t{16} << 6;
  const uint64_t slow = uint64_t{16 + 15} << 16;
  const uint64_t slowest = uint64_t{16 + 3} << 28;
  for (int i = 0; i < 90; ++i) h.Record(fast);
  for (int i = 0; i < 9; ++i) h.Record(slow);
  h.Record(slowest);
  EXPECT_EQ(h.Percentile(0.5), fast);
  EXPECT_EQ(h.Percentile(0.9), fast);
  EXPECT_EQ(h.Percentile(0.91), slow);
  EXPECT_EQ(h.Percentile(0.99), slow);
  EXPECT_EQ(h.Percentile(1.0), slowest);
  EXPECT_EQ(h.max_ns(), slowest);
  EXPECT_EQ(h.sum_ns(), 90 * fast + 9 * slow + slowest);
}

TEST(LatencyHistogram, WithinOneSixteenthBelowTheTrueSample) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(11.0, 1.5);  // around 60 us, long tail
  std::vector<uint64_t> samples;
  LatencyHistogram h;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t ns = static_cast<uint64_t>(dist(rng));
    samples.push_back(ns);
    h.Record(ns);
  }
  std::sort(samples.begin(), samples.end());
  for (double p : {0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const uint64_t truth = samples[static_cast<size_t>(std::ceil(p * 100000)) - 1];
    const uint64_t got = h.Percentile(p);
    EXPECT_LE(got, truth) << "p" << p;
    EXPECT_GE(static_cast<double>(got), static_cast<double>(truth) * 15 / 16) << "p" << p;
  }
  EXPECT_EQ(h.max_ns(), samples.back());
}

TEST(LatencyHistogram, HugeValuesHaveABucket) {
  LatencyHistogram h;
  h.Record(UINT64_MAX);
  h.Record(0);
  EXPECT_EQ(h.Percentile(0.5), 0u);
  EXPECT_EQ(h.Percentile(1.0), 31ull << 59);
  EXPECT_EQ(h.max_ns(), UINT64_MAX);
}

}  // namespace
}  // namespace iser::cli
