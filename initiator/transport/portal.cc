#include "initiator/transport/portal.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace iser {

namespace {

Result<uint16_t> ParsePort(std::string_view s, std::string_view whole) {
  if (s.empty() || s.size() > 5) {
    return Status::InvalidArgument("bad port '" + std::string(s) + "' in '" + std::string(whole) +
                                   "'");
  }
  uint32_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("bad port '" + std::string(s) + "' in '" + std::string(whole) +
                                     "'");
    }
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535) {
    return Status::InvalidArgument("port " + std::string(s) + " out of range in '" +
                                   std::string(whole) + "'");
  }
  return static_cast<uint16_t>(v);
}

bool ValidHostName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

// inet_pton stops at a NUL, so check the characters first: an address must be all of itself.
bool ValidIpv6(const std::string& h) {
  if (h.empty() || h.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
    return false;
  }
  in6_addr a6;
  return inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

// A Linux interface name has at most IFNAMSIZ - 1 bytes; an index has fewer digits.
constexpr size_t kMaxZone = 15;

bool ZoneChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// "addr" or "addr%zone". Zones are limited to characters that are safe in a file name (node
// records name their files after the portal) and in a URL without escaping.
Status CheckIpv6(const std::string& h, std::string_view whole) {
  const size_t pct = h.find('%');
  const std::string address = h.substr(0, pct);
  if (!ValidIpv6(address)) return Status::InvalidArgument("bad IPv6 address '" + address + "'");
  if (pct == std::string::npos) return Status::OK();
  const std::string zone = h.substr(pct + 1);
  if (zone.empty()) {
    return Status::InvalidArgument("empty zone after '%' in '" + std::string(whole) +
                                   "' (e.g. fe80::1%eth0: the link of interface eth0)");
  }
  if (zone.size() > kMaxZone || !std::all_of(zone.begin(), zone.end(), ZoneChar)) {
    return Status::InvalidArgument("bad zone '" + zone + "' in '" + std::string(whole) +
                                   "': an interface name or index, at most 15 letters, digits, "
                                   "'-', '.' or '_'");
  }
  return Status::OK();
}

}  // namespace

std::string Portal::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<Portal> ParsePortal(std::string_view text) {
  Portal p;
  if (text.empty()) return Status::InvalidArgument("empty portal");
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("unclosed '[' in portal '" + std::string(text) + "'");
    }
    p.host = std::string(text.substr(1, close - 1));
    ISER_RETURN_IF_ERROR(CheckIpv6(p.host, text));
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return Status::InvalidArgument("unexpected '" + std::string(rest) + "' after ']' in '" +
                                       std::string(text) + "'");
      }
      Result<uint16_t> port = ParsePort(rest.substr(1), text);
      if (!port.ok()) return port.status();
      p.port = *port;
    }
    return p;
  }
  const size_t first = text.find(':');
  if (first != std::string_view::npos && text.find(':', first + 1) != std::string_view::npos) {
    // Several colons and no brackets: a bare IPv6 address without a port.
    p.host = std::string(text);
    if (const Status st = CheckIpv6(p.host, text); !st.ok()) {
      return Status::InvalidArgument("bad portal '" + std::string(text) + "': " + st.message() +
                                     " (write IPv6 addresses as [addr]:port)");
    }
    return p;
  }
  p.host = std::string(text.substr(0, first));
  if (!ValidHostName(p.host)) {
    return Status::InvalidArgument("bad host '" + p.host + "' in portal '" + std::string(text) +
                                   "'");
  }
  if (first != std::string_view::npos) {
    Result<uint16_t> port = ParsePort(text.substr(first + 1), text);
    if (!port.ok()) return port.status();
    p.port = *port;
  }
  return p;
}

Portal OnLinkOf(Portal reported, const Portal& asked) {
  const size_t zone = asked.host.find('%');
  if (zone == std::string::npos) return reported;
  const std::string address = reported.host.substr(0, reported.host.find('%'));
  in6_addr a6;
  if (inet_pton(AF_INET6, address.c_str(), &a6) != 1 || !IN6_IS_ADDR_LINKLOCAL(&a6)) {
    return reported;
  }
  reported.host = address + asked.host.substr(zone);
  return reported;
}

}  // namespace iser
