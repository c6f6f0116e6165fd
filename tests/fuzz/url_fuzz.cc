// Fuzzes URL and portal parsing: no crash, and a parsed URL's portal prints and re-parses to
// itself, in a portal's form and in a URL's.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "discovery/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<IscsiUrl> url = ParseIscsiUrl(text);
  if (url.ok()) {
    Result<Portal> again = ParsePortal(url->portal.ToString());
    if (!again.ok() || !(*again == url->portal)) std::abort();
    (void)url->Redacted();
    // The URL form of the portal (an IPv6 zone as %25) reads back as the same portal.
    IscsiUrl portal_only;
    portal_only.portal = url->portal;
    Result<IscsiUrl> back = ParseIscsiUrl(portal_only.Redacted());
    if (!back.ok() || !(back->portal == url->portal)) std::abort();
  }
  Result<Portal> portal = ParsePortal(text);
  if (portal.ok()) {
    Result<Portal> again = ParsePortal(portal->ToString());
    if (!again.ok() || !(*again == *portal)) std::abort();
  }
  return 0;
}
