// Fuzzes the text codec: any bytes parse or fail cleanly; what parses re-encodes to the same
// pairs; the accumulator agrees with one-shot parsing however the bytes are split.
#include <cstdint>
#include <cstdlib>

#include "initiator/text/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  Result<TextPairs> pairs = ParseText({data, size});
  if (pairs.ok()) {
    const std::string again = EncodeText(*pairs);
    Result<TextPairs> back =
        ParseText({reinterpret_cast<const uint8_t*>(again.data()), again.size()});
    if (!back.ok() || *back != *pairs) std::abort();
  }
  TextAccumulator acc;
  const size_t split = size ? data[0] % (size + 1) : 0;
  if (!acc.Append({data, split}).ok() || !acc.Append({data + split, size - split}).ok()) {
    std::abort();
  }
  Result<TextPairs> joined = acc.Finish();
  if (joined.ok() != pairs.ok()) std::abort();
  return 0;
}
