#include "discovery/node_record.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>

#include "discovery/seconds.h"

namespace iser {

namespace {

// RFC 3720 §3.2.6.1: iSCSI names are at most 223 bytes.
constexpr size_t kMaxNameLength = 223;
// Host names (RFC 1035) and CHAP names and secrets in practice stay far below this; the limit
// keeps a hand-edited file from holding anything unbounded.
constexpr size_t kMaxTextLength = 255;

using Getter = std::function<std::string(const NodeRecord&)>;
using Setter = std::function<Status(NodeRecord*, std::string_view)>;

struct KeyDef {
  std::string_view name;
  bool secret;
  bool identity;
  Getter get;
  Setter set;
};

std::string Quoted(std::string_view key, std::string_view value) {
  return std::string(key) + " '" + std::string(value) + "'";
}

bool SafeChar(char c, bool host) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == ':' || c == '_' || (host && c == '%');
}

Status CheckComponent(std::string_view key, std::string_view value, bool host, size_t max) {
  if (value.empty()) return Status::InvalidArgument(std::string(key) + ": empty");
  if (value.size() > max) {
    return Status::InvalidArgument(Quoted(key, value.substr(0, 32)) + "...: longer than " +
                                   std::to_string(max) + " bytes");
  }
  if (value.front() == '.') {
    return Status::InvalidArgument(Quoted(key, value) + ": must not start with '.'");
  }
  for (char c : value) {
    if (!SafeChar(c, host)) {
      return Status::InvalidArgument(Quoted(key, value) + ": only letters, digits and \".-:_" +
                                     (host ? "%" : "") + "\" are allowed");
    }
  }
  return Status::OK();
}

// Free text (CHAP names and secrets): printable bytes, no surrounding blanks, so that the file
// reads it back unchanged. A secret's value is never put in a message.
Status CheckText(std::string_view key, std::string_view value, bool secret) {
  const std::string shown = secret ? std::string(key) : Quoted(key, value);
  if (value.size() > kMaxTextLength) {
    return Status::InvalidArgument(shown + ": longer than " + std::to_string(kMaxTextLength) +
                                   " bytes");
  }
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument(shown + ": control characters are not allowed");
    }
  }
  if (!value.empty() && (value.front() == ' ' || value.back() == ' ')) {
    return Status::InvalidArgument(shown + ": must not start or end with a space");
  }
  return Status::OK();
}

Result<uint16_t> ParseNumber(std::string_view key, std::string_view value, uint32_t min,
                             uint32_t max) {
  uint32_t n = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (value.empty() || ec != std::errc() || ptr != end || n < min || n > max) {
    return Status::InvalidArgument(Quoted(key, value) + ": must be a number from " +
                                   std::to_string(min) + " to " + std::to_string(max));
  }
  return static_cast<uint16_t>(n);
}

const char* TransportName(TransportKind t) {
  return t == TransportKind::kIser ? "iser" : "tcp";
}

Result<TransportKind> ParseTransport(std::string_view key, std::string_view value) {
  if (value == "tcp") return TransportKind::kTcp;
  if (value == "iser") return TransportKind::kIser;
  return Status::InvalidArgument(Quoted(key, value) + ": must be tcp or iser");
}

std::string DigestText(const std::vector<DigestType>& order) {
  std::string s;
  for (DigestType d : order) s.append(s.empty() ? "" : ",").append(DigestName(d));
  return s;
}

Result<std::vector<DigestType>> ParseDigest(std::string_view key, std::string_view value) {
  if (value == "None") return std::vector<DigestType>{DigestType::kNone};
  if (value == "CRC32C") return std::vector<DigestType>{DigestType::kCrc32c};
  if (value == "CRC32C,None")
    return std::vector<DigestType>{DigestType::kCrc32c, DigestType::kNone};
  if (value == "None,CRC32C")
    return std::vector<DigestType>{DigestType::kNone, DigestType::kCrc32c};
  return Status::InvalidArgument(Quoted(key, value) +
                                 ": must be None, CRC32C, CRC32C,None or None,CRC32C");
}

KeyDef TextKey(std::string_view name, std::string NodeRecord::*field, bool secret) {
  return {name, secret, false, [field](const NodeRecord& r) { return r.*field; },
          [name, field, secret](NodeRecord* r, std::string_view v) -> Status {
            ISER_RETURN_IF_ERROR(CheckText(name, v, secret));
            r->*field = std::string(v);
            return Status::OK();
          }};
}

KeyDef SecondsKey(std::string_view name, std::chrono::milliseconds NodeRecord::*field,
                  std::chrono::milliseconds min) {
  return {name, false, false, [field](const NodeRecord& r) { return FormatSeconds(r.*field); },
          [name, field, min](NodeRecord* r, std::string_view v) -> Status {
            Result<std::chrono::milliseconds> t = ParseSeconds(name, v, min);
            if (!t.ok()) return t.status();
            r->*field = *t;
            return Status::OK();
          }};
}

KeyDef DigestKey(std::string_view name, std::vector<DigestType> NodeRecord::*field) {
  return {name, false, false, [field](const NodeRecord& r) { return DigestText(r.*field); },
          [name, field](NodeRecord* r, std::string_view v) -> Status {
            Result<std::vector<DigestType>> d = ParseDigest(name, v);
            if (!d.ok()) return d.status();
            r->*field = *d;
            return Status::OK();
          }};
}

KeyDef TransportKey(std::string_view name, TransportKind NodeRecord::*field) {
  return {name, false, false, [field](const NodeRecord& r) { return TransportName(r.*field); },
          [name, field](NodeRecord* r, std::string_view v) -> Status {
            Result<TransportKind> t = ParseTransport(name, v);
            if (!t.ok()) return t.status();
            r->*field = *t;
            return Status::OK();
          }};
}

KeyDef PortKey(std::string_view name, Portal NodeRecord::*field, bool identity) {
  return {name, false, identity,
          [field](const NodeRecord& r) { return std::to_string((r.*field).port); },
          [name, field](NodeRecord* r, std::string_view v) -> Status {
            Result<uint16_t> port = ParseNumber(name, v, 1, 65535);
            if (!port.ok()) return port.status();
            (r->*field).port = *port;
            return Status::OK();
          }};
}

std::vector<KeyDef> MakeKeys() {
  std::vector<KeyDef> keys;
  keys.push_back({"node.name", false, true, [](const NodeRecord& r) { return r.name; },
                  [](NodeRecord* r, std::string_view v) -> Status {
                    ISER_RETURN_IF_ERROR(CheckComponent("node.name", v, false, kMaxNameLength));
                    r->name = std::string(v);
                    return Status::OK();
                  }});
  keys.push_back({"node.tpgt", false, true,
                  [](const NodeRecord& r) { return std::to_string(r.tpgt); },
                  [](NodeRecord* r, std::string_view v) -> Status {
                    Result<uint16_t> n = ParseNumber("node.tpgt", v, 0, 65535);
                    if (!n.ok()) return n.status();
                    r->tpgt = *n;
                    return Status::OK();
                  }});
  keys.push_back({"node.startup", false, false,
                  [](const NodeRecord& r) {
                    return std::string(r.startup_automatic ? "automatic" : "manual");
                  },
                  [](NodeRecord* r, std::string_view v) -> Status {
                    if (v != "manual" && v != "automatic") {
                      return Status::InvalidArgument(Quoted("node.startup", v) +
                                                     ": must be manual or automatic");
                    }
                    r->startup_automatic = v == "automatic";
                    return Status::OK();
                  }});
  keys.push_back(
      {"node.conn[0].address", false, true, [](const NodeRecord& r) { return r.portal.host; },
       [](NodeRecord* r, std::string_view v) -> Status {
         ISER_RETURN_IF_ERROR(CheckComponent("node.conn[0].address", v, true, kMaxTextLength));
         r->portal.host = std::string(v);
         return Status::OK();
       }});
  keys.push_back(PortKey("node.conn[0].port", &NodeRecord::portal, true));
  keys.push_back(TransportKey("iface.transport_name", &NodeRecord::transport));
  keys.push_back({"node.session.auth.authmethod", false, false,
                  [](const NodeRecord& r) {
                    return std::string(r.auth == AuthMethod::kChap ? "CHAP" : "None");
                  },
                  [](NodeRecord* r, std::string_view v) -> Status {
                    if (v != "None" && v != "CHAP") {
                      return Status::InvalidArgument(Quoted("node.session.auth.authmethod", v) +
                                                     ": must be None or CHAP");
                    }
                    r->auth = v == "CHAP" ? AuthMethod::kChap : AuthMethod::kNone;
                    return Status::OK();
                  }});
  keys.push_back(TextKey("node.session.auth.username", &NodeRecord::username, false));
  keys.push_back(TextKey("node.session.auth.password", &NodeRecord::password, true));
  keys.push_back(TextKey("node.session.auth.username_in", &NodeRecord::username_in, false));
  keys.push_back(TextKey("node.session.auth.password_in", &NodeRecord::password_in, true));
  keys.push_back(DigestKey("node.conn[0].iscsi.HeaderDigest", &NodeRecord::header_digest));
  keys.push_back(DigestKey("node.conn[0].iscsi.DataDigest", &NodeRecord::data_digest));
  keys.push_back(SecondsKey("node.conn[0].timeo.login_timeout", &NodeRecord::login_timeout,
                            std::chrono::milliseconds(1)));
  keys.push_back(SecondsKey("node.session.timeo.replacement_timeout",
                            &NodeRecord::replacement_timeout, std::chrono::milliseconds(0)));
  keys.push_back(SecondsKey("node.session.timeo.command_timeout", &NodeRecord::command_timeout,
                            std::chrono::milliseconds(0)));
  keys.push_back({"node.discovery_address", false, false,
                  [](const NodeRecord& r) { return r.discovery_portal.host; },
                  [](NodeRecord* r, std::string_view v) -> Status {
                    if (!v.empty()) {
                      ISER_RETURN_IF_ERROR(
                          CheckComponent("node.discovery_address", v, true, kMaxTextLength));
                    }
                    r->discovery_portal.host = std::string(v);
                    return Status::OK();
                  }});
  keys.push_back(PortKey("node.discovery_port", &NodeRecord::discovery_portal, false));
  keys.push_back(TransportKey("node.discovery_transport", &NodeRecord::discovery_transport));
  return keys;
}

const std::vector<KeyDef>& Keys() {
  static const std::vector<KeyDef> keys = MakeKeys();
  return keys;
}

Result<const KeyDef*> FindKey(std::string_view key) {
  for (const KeyDef& k : Keys()) {
    if (k.name == key) return &k;
  }
  return Status::InvalidArgument("unknown key '" + std::string(key) +
                                 "' (docs/nodes.md lists the keys; `node --op show` prints them)");
}

std::string_view Trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

std::string HostInName(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

const std::vector<std::string_view>& NodeRecordKeys() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> n;
    for (const KeyDef& k : Keys()) n.push_back(k.name);
    return n;
  }();
  return names;
}

bool IsSecretNodeKey(std::string_view key) {
  Result<const KeyDef*> k = FindKey(key);
  return k.ok() && (*k)->secret;
}

bool UpdatableNodeKey(std::string_view key) {
  Result<const KeyDef*> k = FindKey(key);
  return k.ok() && !(*k)->identity;
}

Result<std::string> GetNodeKey(const NodeRecord& record, std::string_view key) {
  Result<const KeyDef*> k = FindKey(key);
  if (!k.ok()) return k.status();
  return (*k)->get(record);
}

Result<std::string> NodeShowValue(const NodeRecord& record, std::string_view key) {
  Result<const KeyDef*> k = FindKey(key);
  if (!k.ok()) return k.status();
  std::string value = (*k)->get(record);
  if (value.empty()) return std::string("<empty>");
  if ((*k)->secret) return std::string("********");
  return value;
}

Status SetNodeKey(NodeRecord* record, std::string_view key, std::string_view value) {
  Result<const KeyDef*> k = FindKey(key);
  if (!k.ok()) return k.status();
  return (*k)->set(record, value);
}

std::string FormatNodeRecord(const NodeRecord& record) {
  std::string out =
      "# iser-connect node record (docs/nodes.md). It may hold CHAP secrets: keep it mode 0600.\n";
  for (const KeyDef& k : Keys()) out.append(k.name).append(" = ").append(k.get(record)) += '\n';
  return out;
}

Result<NodeRecord> ParseNodeRecord(std::string_view text, std::string_view source) {
  NodeRecord record;
  std::map<std::string_view, size_t> seen;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t eol = text.find('\n');
    const std::string_view raw = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    const std::string where = std::string(source) + ":" + std::to_string(line_number) + ": ";
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(where + "expected 'key = value'");
    }
    const std::string_view key = Trim(line.substr(0, eq));
    Result<const KeyDef*> k = FindKey(key);
    if (!k.ok()) return Status::InvalidArgument(where + k.status().message());
    if (auto [it, fresh] = seen.emplace((*k)->name, line_number); !fresh) {
      return Status::InvalidArgument(where + std::string(key) + " given again (first on line " +
                                     std::to_string(it->second) + ")");
    }
    Status set = (*k)->set(&record, Trim(line.substr(eq + 1)));
    if (!set.ok()) return Status::InvalidArgument(where + set.message());
  }
  for (std::string_view key : {"node.name", "node.conn[0].address"}) {
    if (!seen.contains(key)) {
      return Status::InvalidArgument(std::string(source) + ": missing key " + std::string(key));
    }
  }
  return record;
}

Status CheckNodeIdentity(const NodeRecord& record) {
  ISER_RETURN_IF_ERROR(CheckComponent("node.name", record.name, false, kMaxNameLength));
  return CheckComponent("node.conn[0].address", record.portal.host, true, kMaxTextLength);
}

std::string NodeRecordDirName(const NodeRecord& record) {
  return record.name;
}

std::string NodeRecordFileName(const NodeRecord& record) {
  return HostInName(record.portal.host) + "," + std::to_string(record.portal.port) + "," +
         std::to_string(record.tpgt);
}

IscsiUrl NodeRecordUrl(const NodeRecord& record) {
  IscsiUrl url;
  url.transport = record.transport;
  url.portal = record.portal;
  url.target = record.name;
  url.header_digest = record.header_digest;
  url.data_digest = record.data_digest;
  if (record.auth == AuthMethod::kChap) {
    url.user = record.username;
    url.password = record.password;
    if (!record.username_in.empty()) {
      url.target_user = record.username_in;
      url.target_password = record.password_in;
    }
  }
  return url;
}

ConnectOptions NodeRecordConnectOptions(const NodeRecord& record, ConnectOptions base) {
  base.transport = record.transport;
  base.login_timeout = record.login_timeout;
  base.replacement_timeout = record.replacement_timeout;
  base.command_timeout = record.command_timeout;
  return base;
}

}  // namespace iser
