// Portal: where a target listens (RFC 7143 §4.1's network portal: a host and a TCP port), and
// which transport carries the session there. The transports connect to a Portal; URLs, login
// redirects and SendTargets answers produce them.
//
// ParsePortal accepts "host", "host:port", "[v6]", "[v6]:port" and a bare IPv6 address without
// a port; anything else is an InvalidArgument naming the offending part. An IPv6 address may
// carry a zone (RFC 4007 §11: "fe80::1%eth0", "[fe80::1%2]:3260"), which link-local addresses
// need to say which link they are on: an interface name or index of letters, digits, '-', '.'
// and '_' (RFC 6874's unreserved characters but '~'), at most 15 of them (IFNAMSIZ - 1). The
// zone stays part of the host, where getaddrinfo(3) and so both transports' connects honour it,
// and ToString shows it as iscsiadm does: "[fe80::1%eth0]:3260". A URL writes it "%25eth0"
// (discovery/url.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "initiator/base/status.h"

namespace iser {

enum class TransportKind { kTcp, kIser };

inline constexpr uint16_t kDefaultIscsiPort = 3260;

struct Portal {
  std::string host;  // without brackets, even for IPv6; with its zone if any: "fe80::1%eth0"
  uint16_t port = kDefaultIscsiPort;
  std::string ToString() const;  // "host:port" or "[v6]:port"
  bool operator==(const Portal&) const = default;
};

Result<Portal> ParsePortal(std::string_view text);

// A link-local address a target reports (SendTargets' TargetAddress) is on the link the report
// came over, whatever zone the target gave it (tgt gives none; another would name its own
// interface): it takes the zone of `asked`, the portal the session went to, when that has one.
// Other portals are returned as they are.
Portal OnLinkOf(Portal reported, const Portal& asked);

}  // namespace iser
