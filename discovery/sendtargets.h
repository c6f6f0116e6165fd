// SendTargets answers (RFC 7143 §13.13 and appendix C): a list of TargetName=<iqn> pairs, each
// followed by zero or more TargetAddress=<host>[:<port>],<tpgt> pairs. IPv6 hosts are in
// brackets. A target with no TargetAddress is reachable at the portal that was asked.
// Contract: a TargetAddress before any TargetName, a bad port or tpgt, or an empty name is a
// ProtocolError naming the pair; other keys are ignored. A TargetName that is not an iSCSI name
// as iscsi_name.h accepts it is skipped with its addresses, and a warning (Log) quotes it
// escaped: every name returned passes CheckIscsiName, so it is safe as a file name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "discovery/url.h"
#include "initiator/base/status.h"
#include "initiator/text/text.h"

namespace iser {

struct TargetPortal {
  Portal portal;
  uint16_t tpgt = 1;
  bool operator==(const TargetPortal&) const = default;
};

struct DiscoveredTarget {
  std::string name;
  std::vector<TargetPortal> portals;  // never empty after parsing
  bool operator==(const DiscoveredTarget&) const = default;
};

// asked: the portal the discovery session talked to; default tpgt for address-less targets: 1.
Result<std::vector<DiscoveredTarget>> ParseSendTargets(const TextPairs& pairs, const Portal& asked);

}  // namespace iser
