// Portal: where a target listens (RFC 7143 §4.1's network portal: a host and a TCP port), and
// which transport carries the session there. The transports connect to a Portal; URLs, login
// redirects and SendTargets answers produce them.
//
// ParsePortal accepts "host", "host:port", "[v6]", "[v6]:port" and a bare IPv6 address without
// a port; anything else is an InvalidArgument naming the offending part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "initiator/base/status.h"

namespace iser {

enum class TransportKind { kTcp, kIser };

inline constexpr uint16_t kDefaultIscsiPort = 3260;

struct Portal {
  std::string host;  // without brackets, even for IPv6
  uint16_t port = kDefaultIscsiPort;
  std::string ToString() const;  // "host:port" or "[v6]:port"
  bool operator==(const Portal&) const = default;
};

Result<Portal> ParsePortal(std::string_view text);

}  // namespace iser
