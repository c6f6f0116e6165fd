// ReceiveCoalescing (receive_coalescing.h): no delay at low queue depth, while a write waits for
// an R2T or large data streams, or before the response rate is known; with it known, a quarter
// of the waiting commands' responses at that rate, at most kMost; a gap while idle (and the
// latency of the first response after it) never counts as the rate; off when disabled.
#include "initiator/transport/tcp/receive_coalescing.h"

#include <chrono>

#include <gtest/gtest.h>

namespace iser {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

constexpr uint32_t kBusy = 32;

// Rounds of a busy connection: each receive brings `responses` responses `apart` after the last.
class Rounds {
 public:
  explicit Rounds(ReceiveCoalescing* c) : c_(c) {}
  nanoseconds Round(microseconds apart, uint32_t responses, uint32_t waiting = kBusy,
                    bool r2t_or_large_data = false) {
    const nanoseconds delay = c_->Delay(waiting);
    now_ += apart;
    c_->Received(now_, responses, r2t_or_large_data);
    return delay;
  }
  nanoseconds Next(uint32_t waiting = kBusy) { return c_->Delay(waiting); }

 private:
  ReceiveCoalescing* c_;
  Clock::time_point now_ = Clock::now();
};

TEST(ReceiveCoalescing, NoDelayUntilTheRateIsMeasured) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  EXPECT_EQ(r.Round(microseconds(800), 4), nanoseconds(0));  // the first: latency, not rate
  EXPECT_EQ(r.Next(), nanoseconds(0));
}

TEST(ReceiveCoalescing, AQuarterOfTheWaitingCommandsAtTheMeasuredRate) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2);  // 20 us per response
  EXPECT_EQ(r.Next(32), microseconds(8 * 20));
  EXPECT_EQ(r.Next(64), microseconds(16 * 20));
}

TEST(ReceiveCoalescing, NoDelayBelowTheQueueDepthWhereItStarts) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2);
  EXPECT_GT(r.Next(ReceiveCoalescing::kFrom), nanoseconds(0));
  EXPECT_EQ(r.Next(ReceiveCoalescing::kFrom - 1), nanoseconds(0));
  EXPECT_EQ(r.Next(1), nanoseconds(0));
}

TEST(ReceiveCoalescing, NoDelayAfterAnR2tOrWhileLargeDataStreams) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2, kBusy, true);
  EXPECT_EQ(r.Next(), nanoseconds(0));
  r.Round(microseconds(40), 2);
  EXPECT_GT(r.Next(), nanoseconds(0));
}

TEST(ReceiveCoalescing, NeverMoreThanTheMost) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 1);
  r.Round(microseconds(100000), 1);  // a slow disk: 100 ms per response
  EXPECT_EQ(r.Next(), nanoseconds(ReceiveCoalescing::kMost));
}

TEST(ReceiveCoalescing, AnIdleGapIsNotTheRate) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2);                 // 20 us per response
  r.Round(microseconds(40), 2, 1);              // the queue drains
  r.Round(microseconds(5000000), 1, 1);         // idle for 5 s
  r.Round(microseconds(900), 1, kBusy);         // busy again: the first response's latency
  EXPECT_EQ(r.Next(32), microseconds(8 * 20));  // still the rate measured while busy
}

TEST(ReceiveCoalescing, OneSlowRoundMovesTheRateAnEighthOfTheWay) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2);   // 20 us per response
  r.Round(microseconds(100), 1);  // one of 100 us: 20 + (100 - 20) / 8 = 30
  EXPECT_EQ(r.Next(32), microseconds(8 * 30));
}

TEST(ReceiveCoalescing, RoundsWithoutAResponseAddToTheNextSample) {
  ReceiveCoalescing c(true);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(30), 0);  // half a PDU
  r.Round(microseconds(30), 3);  // 60 us for 3 responses
  EXPECT_EQ(r.Next(32), microseconds(8 * 20));
}

TEST(ReceiveCoalescing, DisabledNeverDelays) {
  ReceiveCoalescing c(false);
  Rounds r(&c);
  r.Round(microseconds(800), 4);
  r.Round(microseconds(40), 2);
  EXPECT_EQ(r.Next(), nanoseconds(0));
}

}  // namespace
}  // namespace iser
