// Fuzzes SendTargets answers end to end from raw text bytes: every parsed target has a name
// that is an iSCSI name (so a safe file name) and at least one portal.
#include <cstdint>
#include <cstdlib>

#include "discovery/iscsi_name.h"
#include "discovery/sendtargets.h"
#include "initiator/base/log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  // Skipped names are logged: keep the fuzzer's output for its findings.
  SetLogSink([](LogLevel, const std::string&) {}, LogLevel::kWarning);
  Result<TextPairs> pairs = ParseText({data, size});
  if (!pairs.ok()) return 0;
  Result<std::vector<DiscoveredTarget>> targets = ParseSendTargets(*pairs, {"192.0.2.1", 3260});
  if (targets.ok()) {
    for (const DiscoveredTarget& t : *targets) {
      if (!CheckIscsiName(t.name).ok() || t.portals.empty()) std::abort();
    }
  }
  return 0;
}
