// iSCSI URLs, as libiscsi and QEMU write them (portals themselves: initiator/transport/portal.h):
//   iscsi://[<user>[%<password>]@]<host>[:<port>][/<target-iqn>[/<lun>]][?arg[&arg]...]
//   iser://...      (same; selects the iSER transport, as does the argument "iser")
// host is a name, an IPv4 address or an IPv6 address in brackets; port defaults to 3260. An IPv6
// zone follows "%25", RFC 6874's delimiter, and may itself be percent-escaped:
// [fe80::1%25eth0], [fe80::1%251] (zone "1"). A bare '%' before a zone ([fe80::1%eth0], the form
// of iscsiadm, ip(8) and a portal, initiator/transport/portal.h) is an InvalidArgument that shows
// the "%25" form, in the host and in portal= arguments alike.
// Arguments: target_user, target_password (mutual CHAP), header_digest=crc32c|none|crc32c-none|
// none-crc32c, data_digest=(same), auth=<CHAP algorithms, comma list in order of preference:
// md5, sha1, sha-256, sha3-256>, iser (no value); for session recovery (docs/recovery.md,
// "Settings"): replacement_timeout=SECONDS, command_timeout=SECONDS (discovery/seconds.h: e.g. 30
// or 0.5, at most a year) and portal=HOST[:PORT], which may be repeated: more portals of the same
// target, tried in turn when recovering; for multipath (docs/multipath.md): multipath=on|off,
// nr_sessions=N (1 to 16 paths per portal) and path_selector=queue-length|round-robin. Unknown
// arguments, arguments given twice (all but
// portal), a bad port, a LUN that is not a number and percent-escapes that are malformed are
// InvalidArgument errors naming the offending part. User, password, target name and argument
// values are percent-decoded.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/login/chap.h"
#include "initiator/login/negotiation.h"
#include "initiator/transport/portal.h"

namespace iser {

struct IscsiUrl {
  TransportKind transport = TransportKind::kTcp;
  Portal portal;
  std::string target;  // empty: portal only
  std::optional<uint64_t> lun;
  std::string user;  // CHAP: initiator authenticates to the target
  std::string password;
  std::string target_user;  // mutual CHAP: target authenticates to us
  std::string target_password;
  std::optional<std::vector<DigestType>> header_digest;  // preference order
  std::optional<std::vector<DigestType>> data_digest;
  std::vector<ChapAlgorithm> auth;  // empty: kDefaultChapAlgorithms
  // Unset: ConnectOptions or SessionOptions decide (discovery/connect.h).
  std::optional<std::chrono::milliseconds> replacement_timeout;
  std::optional<std::chrono::milliseconds> command_timeout;
  std::vector<Portal> alternate_portals;  // portal= arguments, in their order
  // Unset: multipath wherever a LUN has several usable paths.
  std::optional<bool> multipath;
  std::optional<uint32_t> nr_sessions;  // paths per portal
  std::string path_selector;            // empty: the default (queue-length)

  // The URL with its arguments and passwords replaced by "***", for logs and messages.
  std::string Redacted() const;
};

// What a URL looks like, for messages about text that is not one.
inline constexpr std::string_view kUrlForm =
    "a URL looks like iscsi://HOST[:PORT]/TARGET[/LUN] or iser://...";

// The scheme is case-insensitive; a mistake is an InvalidArgument that quotes the URL (its
// password left out) and says what is wrong.
Result<IscsiUrl> ParseIscsiUrl(std::string_view text);

}  // namespace iser
