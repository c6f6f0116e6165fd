// Fuzzes URL and portal parsing: no crash, and a parsed URL's portal prints and re-parses to
// itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "discovery/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<IscsiUrl> url = ParseIscsiUrl(text);
  if (url.ok()) {
    (void)url->Redacted();
    Result<Portal> again = ParsePortal(url->portal.ToString());
    if (!again.ok() || !(*again == url->portal)) std::abort();
  }
  Result<Portal> portal = ParsePortal(text);
  if (portal.ok()) {
    Result<Portal> again = ParsePortal(portal->ToString());
    if (!again.ok() || !(*again == *portal)) std::abort();
  }
  return 0;
}
