// A Discovery session (RFC 7143 §4.3, appendix C): log in with SessionType=Discovery, send
// SendTargets=All in a Text Request, follow Text Response continuation (F=0 with a TTT, and the
// C bit for pairs split across PDUs; tgt splits without C, so the data of all PDUs is joined
// before parsing), then log out. Runs on the caller's thread, bounded by the login timeout.
// A Text Response may be as long as the MaxRecvDataSegmentLength we declared in the login
// (16777215 over TCP: tgt sends a big portal's whole answer in one PDU); the whole answer is
// bounded at 16 MiB.
#pragma once

#include <vector>

#include "discovery/sendtargets.h"
#include "discovery/url.h"
#include "initiator/base/status.h"
#include "initiator/session/session.h"

namespace iser {

// options.portal is the portal to ask; options.target_name is ignored. only_target: ask for that
// target alone (SendTargets=<name>, RFC 7143 appendix C), where the caller needs one target's
// portals: a portal of 1000 targets answers 1000 times less; a target that rejects that form, or
// answers it without the target, is asked for All on the same session. Empty: SendTargets=All.
Result<std::vector<DiscoveredTarget>> DiscoverTargets(const SessionOptions& options,
                                                      const std::string& only_target = "");

}  // namespace iser
