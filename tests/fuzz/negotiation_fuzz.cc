// Fuzzes operational negotiation with arbitrary target answers, for every session kind: no
// crash, and whatever is accepted stays within the RFC's bounds.
#include <cstdint>
#include <cstdlib>

#include "initiator/login/negotiation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  if (size < 1) return 0;
  Result<TextPairs> pairs = ParseText({data + 1, size - 1});
  if (!pairs.ok()) return 0;
  OperationalOffer offer;
  offer.rdma_extensions = data[0] & 1;
  offer.header_digest = {DigestType::kCrc32c, DigestType::kNone};
  OperationalNegotiator n(data[0] & 2 ? SessionType::kDiscovery : SessionType::kNormal, offer);
  TextPairs replies;
  if (n.HandleResponse(*pairs, &replies).ok()) {
    const NegotiatedParams& p = n.params();
    if (p.max_burst_length < 512 || p.max_burst_length > offer.max_burst_length) std::abort();
    // Mid-negotiation one of the two may still hold its RFC default; judge the settled pair.
    if (n.AllAnswered() && p.first_burst_length > p.max_burst_length) std::abort();
    if (p.target_max_recv_data_segment_length < 512) std::abort();
    if (p.error_recovery_level > 2) std::abort();
  }
  return 0;
}
