// LatencyHistogram: I/O latencies in nanoseconds, kept in log-linear buckets (16 per power of
// two) so that recording is O(1) and memory fixed however long a benchmark runs.
//
// Percentile(p) is the nearest-rank p-quantile (the ceil(p * count)-th smallest sample, p in
// (0, 1]) rounded down to the lower bound of its bucket: exact below 32 ns, otherwise at most
// 1/16 of the value below the sample (never above). 0 when nothing was recorded.
//
// Record from one thread at a time; count() and sum_ns() may be read from any thread meanwhile
// (a progress line), the rest once recording is over.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace iser::cli {

class LatencyHistogram {
 public:
  void Record(uint64_t ns);

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t sum_ns() const { return sum_ns_.load(std::memory_order_relaxed); }
  uint64_t max_ns() const { return max_ns_; }
  uint64_t Percentile(double p) const;

 private:
  static constexpr int kSubBuckets = 16;
  // Below 2 * kSubBuckets every value has a bucket of its own; above, each power of two
  // [2^k, 2^(k+1)) for k >= 5 splits into kSubBuckets equal buckets.
  static constexpr size_t kBuckets = (64 - 3) * kSubBuckets;

  static size_t BucketOf(uint64_t ns);
  static uint64_t LowerBound(size_t bucket);

  std::array<uint64_t, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
  uint64_t max_ns_ = 0;
};

}  // namespace iser::cli
