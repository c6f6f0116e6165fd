// Fuzzes the node record parser (a file users may edit by hand): no crash, and a record it
// accepts formats to text that parses back to the same record, whose `--op show` never prints a
// secret.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "discovery/node_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<NodeRecord> record = ParseNodeRecord(text, "fuzz");
  if (!record.ok()) return 0;
  Result<NodeRecord> again = ParseNodeRecord(FormatNodeRecord(*record), "formatted");
  if (!again.ok() || !(*again == *record)) std::abort();
  for (std::string_view key : NodeRecordKeys()) {
    Result<std::string> shown = NodeShowValue(*record, key);
    if (!shown.ok()) std::abort();
    if (IsSecretNodeKey(key) && *shown != "********" && *shown != "<empty>") std::abort();
  }
  return 0;
}
