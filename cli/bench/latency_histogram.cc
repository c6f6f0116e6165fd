#include "cli/bench/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace iser::cli {

size_t LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < 2 * kSubBuckets) return static_cast<size_t>(ns);
  const int log = 63 - __builtin_clzll(ns);  // >= 5
  const uint64_t sub = (ns >> (log - 4)) & (kSubBuckets - 1);
  return static_cast<size_t>(log - 3) * kSubBuckets + static_cast<size_t>(sub);
}

uint64_t LatencyHistogram::LowerBound(size_t bucket) {
  if (bucket < 2 * kSubBuckets) return bucket;
  const int log = static_cast<int>(bucket / kSubBuckets) + 3;
  return (kSubBuckets + bucket % kSubBuckets) << (log - 4);
}

void LatencyHistogram::Record(uint64_t ns) {
  ++buckets_[BucketOf(ns)];
  max_ns_ = std::max(max_ns_, ns);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::Percentile(double p) const {
  const uint64_t total = count();
  if (total == 0) return 0;
  const double rank = std::ceil(std::clamp(p, 0.0, 1.0) * static_cast<double>(total));
  const uint64_t want = std::max<uint64_t>(1, static_cast<uint64_t>(rank));
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= want) return LowerBound(i);
  }
  return max_ns_;
}

}  // namespace iser::cli
