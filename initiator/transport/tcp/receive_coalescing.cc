#include "initiator/transport/tcp/receive_coalescing.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace iser {

namespace {

bool EnabledByEnvironment() {
  const char* value = std::getenv("ISER_CONNECT_RECEIVE_COALESCING");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

ReceiveCoalescing::ReceiveCoalescing() : ReceiveCoalescing(EnabledByEnvironment()) {}

void ReceiveCoalescing::Received(Clock::time_point now, uint32_t responses,
                                 bool r2t_or_large_data) {
  streaming_ = r2t_or_large_data;
  if (!busy_ || responses == 0) return;
  // A sample is the time between two receives that brought responses, all armed busy: the gap
  // before the first one (idle, or the whole latency of the first command) says nothing about
  // how fast the target answers a full queue. Samples are averaged (weight 1/8) so that one slow
  // round does not set the next delay.
  if (measuring_) {
    const double sample = std::chrono::duration<double, std::nano>(now - last_).count() / responses;
    nanos_per_response_ = nanos_per_response_ == 0
                              ? sample
                              : nanos_per_response_ + (sample - nanos_per_response_) / 8;
  }
  measuring_ = true;
  last_ = now;
}

std::chrono::nanoseconds ReceiveCoalescing::Delay(uint32_t waiting) {
  busy_ = enabled_ && waiting >= kFrom;
  if (!busy_) measuring_ = false;
  if (!busy_ || streaming_ || nanos_per_response_ == 0) return std::chrono::nanoseconds(0);
  const auto quarter = std::chrono::nanoseconds(
      static_cast<int64_t>(nanos_per_response_ * static_cast<double>(waiting / 4)));
  return std::min<std::chrono::nanoseconds>(quarter, kMost);
}

}  // namespace iser
