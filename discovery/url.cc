#include "discovery/url.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "discovery/seconds.h"

namespace iser {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> PercentDecode(std::string_view s, const char* what) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) {
      return Status::InvalidArgument(std::string("truncated percent-escape in the ") + what);
    }
    const int hi = HexValue(s[i + 1]);
    const int lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(std::string("bad percent-escape in the ") + what);
    }
    out += static_cast<char>(hi << 4 | lo);
    i += 2;
  }
  return out;
}

Result<std::vector<DigestType>> ParseDigestArg(std::string_view v, const char* name) {
  if (v == "none") return std::vector<DigestType>{DigestType::kNone};
  if (v == "crc32c") return std::vector<DigestType>{DigestType::kCrc32c};
  if (v == "crc32c-none") return std::vector<DigestType>{DigestType::kCrc32c, DigestType::kNone};
  if (v == "none-crc32c") return std::vector<DigestType>{DigestType::kNone, DigestType::kCrc32c};
  return Status::InvalidArgument(std::string("bad ") + name + " '" + std::string(v) +
                                 "' (use none, crc32c, crc32c-none or none-crc32c)");
}

// The argument text ParseDigestArg reads back as `order`.
std::string DigestArgText(const std::vector<DigestType>& order) {
  std::string s;
  for (DigestType d : order)
    s.append(s.empty() ? "" : "-").append(d == DigestType::kNone ? "none" : "crc32c");
  return s;
}

// A bracketed host's zone delimiter in a URL is "%25" (RFC 6874): a bare '%' there would start a
// percent-escape. Taking a bare '%' for the delimiter too made URLs ambiguous: "[fe80::1%251]" is
// zone "1" by RFC 6874 and zone "251" (an interface index) as iscsiadm writes it, and was
// silently read as the former. An IPv6 address with a '%' and no brackets is a
// zone as iscsiadm writes it, misplaced. `text` is the portal as the URL writes it, which the
// error quotes with the form to write instead.
Status CheckZoneDelimiter(std::string_view text) {
  const size_t pct = text.find('%');
  if (pct == std::string_view::npos) return Status::OK();
  const std::string before(text.substr(0, pct));
  const std::string after(text.substr(pct + 1));
  if (text.front() != '[') {
    // Two colons make an IPv6 address (ParsePortal's reading too); anything else with a '%' is
    // a name or an IPv4 address, which ParsePortal refuses with its own reason.
    if (std::count(before.begin(), before.end(), ':') < 2) return Status::OK();
    // A zone holds no ':' (portal.h): one after it starts the port.
    const size_t colon = after.find(':');
    const std::string zone = after.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : after.substr(colon);
    return Status::InvalidArgument("'" + std::string(text) +
                                   "': an IPv6 address in a URL is in brackets, and its zone " +
                                   "follows %25 (RFC 6874): write [" + before + "%" +
                                   (zone.rfind("25", 0) == 0 ? "" : "25") + zone + "]" + port);
  }
  const size_t close = text.find(']');
  if (close == std::string_view::npos || pct > close || after.rfind("25", 0) == 0) {
    return Status::OK();
  }
  return Status::InvalidArgument("'" + std::string(text) +
                                 "': in a URL the '%' before an IPv6 zone is written %25 (RFC " +
                                 "6874): write " + before + "%25" + after);
}

// The authority's "[v6%25zone]:port" as ParsePortal reads it: "[v6%zone]:port". The zone may hold
// percent-escapes; ParsePortal then checks what they decode to.
Result<std::string> PortalText(std::string_view authority) {
  ISER_RETURN_IF_ERROR(CheckZoneDelimiter(authority));
  const size_t close = authority.find(']');
  const size_t pct = authority.find('%');
  if (authority.empty() || authority.front() != '[' || close == std::string_view::npos ||
      pct > close) {
    return std::string(authority);
  }
  const size_t zone = pct + 3;
  Result<std::string> decoded = PercentDecode(authority.substr(zone, close - zone), "zone");
  if (!decoded.ok()) return decoded.status();
  return std::string(authority.substr(0, pct + 1)) + *decoded +
         std::string(authority.substr(close));
}

// A portal in a URL: the '%' before an IPv6 zone is escaped (zones hold no other character that
// needs it, portal.h).
std::string UrlPortal(const Portal& portal) {
  std::string s = portal.ToString();
  if (const size_t pct = s.find('%'); pct != std::string::npos) s.insert(pct + 1, "25");
  return s;
}

// Error messages quote the URL, and they end up in logs: the password must not.
std::string WithoutPassword(std::string_view text) {
  std::string out(text);
  const size_t start = out.find("://");
  if (start == std::string::npos) return out;
  const size_t end = std::min(out.find('?', start), out.size());
  const size_t at = out.rfind('@', end);
  const size_t pct = out.find('%', start + 3);
  if (at != std::string::npos && at > start && pct < at) out.replace(pct + 1, at - pct - 1, "***");
  // The replacement above moved the query: look for it again.
  const size_t arg = out.find("target_password=", std::min(out.find('?', start), out.size()));
  if (arg != std::string::npos) {
    const size_t value = arg + 16;
    out.replace(value, std::min(out.find('&', value), out.size()) - value, "***");
  }
  return out;
}

}  // namespace

// Built with append only: GCC 12 at -O2 reports a false -Wrestrict overlap in the inlined
// operator+(const char*, std::string&&) that "/" + target would use.
std::string IscsiUrl::Redacted() const {
  std::string s = transport == TransportKind::kIser ? "iser://" : "iscsi://";
  if (!user.empty()) s.append(user).append(password.empty() ? "" : "%***").append("@");
  s.append(UrlPortal(portal));
  if (!target.empty()) s.append("/").append(target);
  if (lun) s.append("/").append(std::to_string(*lun));
  std::vector<std::string> args;
  if (!target_user.empty()) args.push_back("target_user=" + target_user);
  if (!target_password.empty()) args.push_back("target_password=***");
  if (header_digest) args.push_back("header_digest=" + DigestArgText(*header_digest));
  if (data_digest) args.push_back("data_digest=" + DigestArgText(*data_digest));
  if (!auth.empty()) {
    std::string list;
    for (ChapAlgorithm a : auth) list.append(list.empty() ? "" : ",").append(ChapAlgorithmName(a));
    args.push_back("auth=" + list);
  }
  if (replacement_timeout) {
    args.push_back("replacement_timeout=" + FormatSeconds(*replacement_timeout));
  }
  if (command_timeout) args.push_back("command_timeout=" + FormatSeconds(*command_timeout));
  for (const Portal& p : alternate_portals) args.push_back("portal=" + UrlPortal(p));
  if (multipath) args.push_back(*multipath ? "multipath=on" : "multipath=off");
  if (nr_sessions) args.push_back("nr_sessions=" + std::to_string(*nr_sessions));
  if (!path_selector.empty()) args.push_back("path_selector=" + path_selector);
  for (size_t i = 0; i < args.size(); ++i) s.append(i == 0 ? "?" : "&").append(args[i]);
  return s;
}

Result<IscsiUrl> ParseIscsiUrl(std::string_view text) {
  IscsiUrl url;
  const std::string whole = WithoutPassword(text);
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("bad URL '" + whole + "': " + what);
  };
  // Schemes are case-insensitive (RFC 3986 3.1).
  auto starts_with = [&](std::string_view prefix) {
    return text.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
             return a == std::tolower(static_cast<unsigned char>(b));
           });
  };
  if (starts_with("iscsi://")) {
    text.remove_prefix(8);
  } else if (starts_with("iser://")) {
    url.transport = TransportKind::kIser;
    text.remove_prefix(7);
  } else if (starts_with("iscsi:") || starts_with("iser:")) {
    return bad("two slashes follow the scheme: " + std::string(kUrlForm));
  } else {
    return bad("it must start with iscsi:// or iser:// (" + std::string(kUrlForm) + ")");
  }
  std::string_view query;
  if (const size_t q = text.find('?'); q != std::string_view::npos) {
    query = text.substr(q + 1);
    text = text.substr(0, q);
  }
  if (const size_t at = text.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = text.substr(0, at);
    text.remove_prefix(at + 1);
    const size_t pct = userinfo.find('%');
    // libiscsi's form is user%password; a %XX escape inside the user name is not possible there.
    Result<std::string> user = PercentDecode(userinfo.substr(0, pct), "user name");
    if (!user.ok()) return bad(user.status().message());
    url.user = *user;
    if (pct != std::string_view::npos) {
      Result<std::string> password = PercentDecode(userinfo.substr(pct + 1), "password");
      if (!password.ok()) return bad(password.status().message());
      url.password = *password;
    }
    if (url.user.empty()) return bad("empty user name before '@'");
  }
  const size_t slash = text.find('/');
  Result<std::string> portal_text = PortalText(text.substr(0, slash));
  if (!portal_text.ok()) return bad(portal_text.status().message());
  Result<Portal> portal = ParsePortal(*portal_text);
  if (!portal.ok()) return bad(portal.status().message());
  url.portal = *portal;
  if (slash != std::string_view::npos) {
    std::string_view path = text.substr(slash + 1);
    const size_t slash2 = path.find('/');
    Result<std::string> target = PercentDecode(path.substr(0, slash2), "target name");
    if (!target.ok()) return bad(target.status().message());
    url.target = *target;
    if (slash2 != std::string_view::npos) {
      std::string_view lun = path.substr(slash2 + 1);
      if (!lun.empty()) {
        if (lun.size() > 20 || lun.find_first_not_of("0123456789") != std::string_view::npos) {
          return bad("LUN '" + std::string(lun) + "' is not a number");
        }
        const unsigned long long v = std::strtoull(std::string(lun).c_str(), nullptr, 10);
        if (v > 0xffffffffffffULL) return bad("LUN " + std::string(lun) + " is too large");
        url.lun = v;
      }
    }
    if (url.target.empty() && url.lun) return bad("a LUN without a target name");
  }
  std::vector<std::string> seen;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view arg = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (arg.empty()) continue;
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    if (name != "portal" && std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return bad("argument '" + name + "' given twice");
    }
    seen.push_back(name);
    if (name == "portal" && eq != std::string_view::npos) {
      const Status st = CheckZoneDelimiter(arg.substr(eq + 1));
      if (!st.ok()) return bad("portal " + st.message());
    }
    Result<std::string> value = PercentDecode(
        eq == std::string_view::npos ? std::string_view() : arg.substr(eq + 1), "argument");
    if (!value.ok()) return bad(value.status().message());
    if (name == "iser") {
      if (eq != std::string_view::npos) return bad("'iser' takes no value");
      url.transport = TransportKind::kIser;
    } else if (eq == std::string_view::npos) {
      return bad("argument '" + name + "' needs a value (" + name + "=...)");
    } else if (name == "target_user") {
      url.target_user = *value;
    } else if (name == "target_password") {
      url.target_password = *value;
    } else if (name == "header_digest" || name == "data_digest") {
      Result<std::vector<DigestType>> d = ParseDigestArg(*value, name.c_str());
      if (!d.ok()) return bad(d.status().message());
      (name == "header_digest" ? url.header_digest : url.data_digest) = *d;
    } else if (name == "auth") {
      Result<std::vector<ChapAlgorithm>> list = ParseChapAlgorithmList(*value);
      if (!list.ok()) return bad("auth: " + list.status().message());
      url.auth = std::move(*list);
    } else if (name == "replacement_timeout" || name == "command_timeout") {
      Result<std::chrono::milliseconds> t = ParseSeconds(name, *value);
      if (!t.ok()) return bad(t.status().message());
      (name == "replacement_timeout" ? url.replacement_timeout : url.command_timeout) = *t;
    } else if (name == "portal") {
      Result<Portal> p = ParsePortal(*value);
      if (!p.ok()) return bad("portal '" + *value + "': " + p.status().message());
      url.alternate_portals.push_back(*p);
    } else if (name == "multipath") {
      if (*value != "on" && *value != "off") {
        return bad("multipath '" + *value + "': use multipath=on or multipath=off");
      }
      url.multipath = *value == "on";
    } else if (name == "nr_sessions") {
      const std::string& v = *value;
      if (v.empty() || v.size() > 2 ||
          !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); }) ||
          std::stoul(v) < 1 || std::stoul(v) > 16) {
        return bad("nr_sessions '" + v + "': a number of paths per portal from 1 to 16");
      }
      url.nr_sessions = static_cast<uint32_t>(std::stoul(v));
    } else if (name == "path_selector") {
      if (*value != "queue-length" && *value != "round-robin") {
        return bad("path_selector '" + *value + "': use queue-length or round-robin");
      }
      url.path_selector = *value;
    } else {
      return bad("unknown argument '" + name +
                 "' (known: target_user, target_password, header_digest, data_digest, auth, iser, "
                 "replacement_timeout, command_timeout, portal, multipath, nr_sessions, "
                 "path_selector)");
    }
  }
  return url;
}

}  // namespace iser
