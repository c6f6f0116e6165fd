// Fuzzes SendTargets answers end to end from raw text bytes: every parsed target has a name
// and at least one portal.
#include <cstdint>
#include <cstdlib>

#include "discovery/sendtargets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  Result<TextPairs> pairs = ParseText({data, size});
  if (!pairs.ok()) return 0;
  Result<std::vector<DiscoveredTarget>> targets = ParseSendTargets(*pairs, {"192.0.2.1", 3260});
  if (targets.ok()) {
    for (const DiscoveredTarget& t : *targets) {
      if (t.name.empty() || t.portals.empty()) std::abort();
    }
  }
  return 0;
}
