#include "discovery/sendtargets.h"

#include <cctype>

#include "discovery/iscsi_name.h"
#include "initiator/base/log.h"

namespace iser {

Result<std::vector<DiscoveredTarget>> ParseSendTargets(const TextPairs& pairs,
                                                       const Portal& asked) {
  std::vector<DiscoveredTarget> targets;
  // A skipped target's addresses are still parsed (a malformed answer is an error whatever the
  // name) but land here. current stays valid: only a TargetName grows targets, and resets it.
  DiscoveredTarget skipped;
  DiscoveredTarget* current = nullptr;
  for (const TextPair& p : pairs) {
    if (p.key == "TargetName") {
      if (p.value.empty()) return Status::ProtocolError("SendTargets: empty TargetName");
      const Status name = CheckIscsiName(p.value);
      if (name.ok()) {
        targets.push_back({p.value, {}});
        current = &targets.back();
      } else {
        Log(LogLevel::kWarning, "SendTargets: skipping the target '" + EscapeForMessage(p.value) +
                                    "': " + name.message());
        skipped.portals.clear();
        current = &skipped;
      }
    } else if (p.key == "TargetAddress") {
      if (!current) {
        return Status::ProtocolError("SendTargets: TargetAddress '" + EscapeForMessage(p.value) +
                                     "' before any TargetName");
      }
      const size_t comma = p.value.rfind(',');
      const size_t bracket = p.value.rfind(']');
      if (comma == std::string::npos || (bracket != std::string::npos && comma < bracket)) {
        return Status::ProtocolError("SendTargets: TargetAddress '" + EscapeForMessage(p.value) +
                                     "' has no portal group tag");
      }
      const std::string tag = p.value.substr(comma + 1);
      if (tag.empty() || tag.size() > 5 ||
          tag.find_first_not_of("0123456789") != std::string::npos || std::stoul(tag) > 65535) {
        return Status::ProtocolError("SendTargets: bad portal group tag in '" +
                                     EscapeForMessage(p.value) + "'");
      }
      Result<Portal> portal = ParsePortal(p.value.substr(0, comma));
      if (!portal.ok()) {
        return Status::ProtocolError("SendTargets: bad TargetAddress '" +
                                     EscapeForMessage(p.value) + "': " + portal.status().message());
      }
      // A link-local address means nothing without a zone, which the target cannot know (tgt
      // drops it): it is on the link of the portal that was asked.
      current->portals.push_back(
          {OnLinkOf(*portal, asked), static_cast<uint16_t>(std::stoul(tag))});
    }
  }
  for (DiscoveredTarget& t : targets) {
    if (t.portals.empty()) t.portals.push_back({asked, 1});
  }
  return targets;
}

}  // namespace iser
