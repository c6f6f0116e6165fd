#include "discovery/discovery.h"

#include "initiator/base/log.h"
#include "initiator/session/connect_login.h"
#include "initiator/text/text.h"

namespace iser {

namespace {

constexpr int kMaxTextPdus = 1024;

// One SendTargets=<value> exchange on a discovery session in full feature phase (immediate
// Text Requests: CmdSN does not advance). exp_statsn follows the responses.
Result<TextPairs> AskSendTargets(Datamover& dm, const std::string& value, uint32_t itt,
                                 uint32_t cmdsn, uint32_t* exp_statsn, Deadline deadline,
                                 const std::string& where) {
  uint32_t ttt = kReservedTag;
  std::string text;
  AppendTextPair(text, "SendTargets", value);
  TextAccumulator acc(16u << 20);
  for (int pdu = 0;; ++pdu) {
    if (pdu >= kMaxTextPdus) return Status::ProtocolError(where + ": endless Text continuation");
    Bhs req;
    req.set_opcode(Opcode::kTextRequest, true);
    req.set_flags(kFinalBit);
    req.set_itt(itt);
    req.set_u32(bhs::kTtt, ttt);
    req.set_u32(bhs::kCmdSN, cmdsn);
    req.set_u32(bhs::kExpStatSN, *exp_statsn);
    std::span<const uint8_t> data;
    if (pdu == 0) data = {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
    req.set_data_segment_length(static_cast<uint32_t>(data.size()));
    Status st = dm.SendPdu(req, data, deadline);
    if (!st.ok()) return st.WithContext(where);
    Bhs rsp;
    std::vector<uint8_t> rdata;
    // Targets may interleave NOP-In pings; only Text Responses for our ITT count.
    for (;;) {
      st = dm.ReceivePdu(&rsp, &rdata, deadline);
      if (!st.ok()) return st.WithContext(where);
      if (rsp.opcode() == Opcode::kNopIn && rsp.itt() == kReservedTag) continue;
      break;
    }
    if (rsp.opcode() == Opcode::kReject) {
      return Status::NotSupported(where + ": the target rejected the Text Request (reason " +
                                  std::to_string(rsp.b[2]) + ")");
    }
    if (rsp.opcode() != Opcode::kTextResponse || rsp.itt() != itt) {
      return Status::ProtocolError(where + ": expected a Text Response, got " +
                                   OpcodeName(rsp.opcode()));
    }
    *exp_statsn = rsp.u32(bhs::kStatSN) + 1;
    st = acc.Append(rdata);
    if (!st.ok()) return st.WithContext(where);
    if (rsp.final()) break;
    ttt = rsp.u32(bhs::kTtt);
    if (ttt == kReservedTag) {
      return Status::ProtocolError(where + ": Text Response continues (F=0) without a TTT");
    }
  }
  Result<TextPairs> pairs = acc.Finish();
  if (!pairs.ok()) return pairs.status().WithContext(where);
  return pairs;
}

bool Lists(const std::vector<DiscoveredTarget>& targets, const std::string& name) {
  for (const DiscoveredTarget& t : targets) {
    if (t.name == name) return true;
  }
  return false;
}

}  // namespace

Result<std::vector<DiscoveredTarget>> DiscoverTargets(const SessionOptions& options,
                                                      const std::string& only_target) {
  std::unique_ptr<Datamover> dm;
  LoginOutcome outcome;
  Portal portal;
  ISER_RETURN_IF_ERROR(ConnectAndLogin(options, SessionType::kDiscovery, &dm, &outcome, &portal));
  const std::string where = "SendTargets at " + dm->Describe();
  // The datamover still holds incoming PDUs to the login phase's 8 KiB; the Text Responses may be
  // as long as the MaxRecvDataSegmentLength we declared (tgtd sends a whole SendTargets answer in
  // one PDU, 13 KiB for 200 targets).
  Status entered = dm->EnterFullFeature(ConnectionParamsOf(outcome.params));
  if (!entered.ok()) return entered.WithContext(where);
  const Deadline deadline = Clock::now() + options.login_timeout;
  uint32_t exp_statsn = outcome.exp_statsn;
  const uint32_t cmdsn = 1;
  uint32_t itt = 1;
  Result<TextPairs> pairs = AskSendTargets(*dm, only_target.empty() ? "All" : only_target, itt,
                                           cmdsn, &exp_statsn, deadline, where);
  Result<std::vector<DiscoveredTarget>> found =
      pairs.ok() ? ParseSendTargets(*pairs, portal)
                 : Result<std::vector<DiscoveredTarget>>(pairs.status());
  // SendTargets=<name> is optional outside a normal session for some targets: one that refuses
  // it, or answers without the target, is asked for All on the same session.
  const bool refused = !found.ok() && found.status().code() == StatusCode::kNotSupported;
  if (!only_target.empty() && (refused || (found.ok() && !Lists(*found, only_target)))) {
    Log(LogLevel::kDebug,
        where + ": no answer for SendTargets=" + only_target + "; asking for All");
    pairs = AskSendTargets(*dm, "All", ++itt, cmdsn, &exp_statsn, deadline, where);
    found = pairs.ok() ? ParseSendTargets(*pairs, portal)
                       : Result<std::vector<DiscoveredTarget>>(pairs.status());
  }
  if (!found.ok() && found.status().code() == StatusCode::kNotSupported) {
    found = Status::ProtocolError(found.status().message());
  }
  if (!found.ok()) return found.status();

  // Logout (close the session); a target that just drops the connection is fine too.
  Bhs logout;
  logout.set_opcode(Opcode::kLogoutRequest, true);
  logout.set_flags(kFinalBit);
  logout.set_itt(itt + 1);
  logout.set_u32(bhs::kCmdSN, cmdsn);
  logout.set_u32(bhs::kExpStatSN, exp_statsn);
  if (dm->SendPdu(logout, {}, deadline).ok()) {
    Bhs rsp;
    std::vector<uint8_t> rdata;
    Status st = dm->ReceivePdu(&rsp, &rdata, deadline);
    if (!st.ok()) Log(LogLevel::kDebug, "discovery logout: " + st.message());
  }
  return found;
}

}  // namespace iser
