// iSCSI names (RFC 7143 §4.2.7) as this initiator accepts them from a target: the name a
// SendTargets answer reports becomes a directory of the session tree and of the node store, and
// an nbdkit export name, so a name those cannot hold safely must not get past discovery.
//
// Accepted: the three types of §4.2.7.3 in the form the iSCSI stringprep profile (RFC 3722)
// leaves them in, restricted to ASCII: lowercase letters, digits, '-', '.' and ':', at most 223
// bytes (§4.2.7.1):
//   iqn.YYYY-MM.<reversed domain>[:<anything of those characters>]
//   eui.<16 hex digits>                (EUI-64)
//   naa.<16 or 32 hex digits>          (RFC 3980: NAA 64-bit or 128-bit)
// The hex digits of eui. and naa. may be uppercase, as the RFCs' own examples write them. Names
// with other Unicode characters, which the RFC allows after stringprep, are refused too: no
// target seen in practice uses them, and refusing them keeps every accepted name a plain,
// case-stable file name ('/' and the names "." and ".." can never pass).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "initiator/base/status.h"

namespace iser {

// RFC 7143 §4.2.7.1: an iSCSI name is at most 223 bytes.
inline constexpr size_t kMaxIscsiNameLength = 223;

// OK for an accepted name; otherwise InvalidArgument saying what is wrong (the message does not
// repeat the name: callers quote it with EscapeForMessage).
Status CheckIscsiName(std::string_view name);

// text made safe to print in a one-line message: printable ASCII other than '\' as is, every
// other byte as \xHH, and at most max_bytes of text shown, followed by "..." when cut.
std::string EscapeForMessage(std::string_view text, size_t max_bytes = 64);

}  // namespace iser
