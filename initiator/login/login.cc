#include "initiator/login/login.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstdio>

#include "initiator/base/log.h"
#include "initiator/text/text.h"

namespace iser {

namespace {

constexpr uint8_t kStageSecurity = 0;
constexpr uint8_t kStageOperational = 1;
constexpr uint8_t kStageFullFeature = 3;
constexpr int kMaxRounds = 16;
constexpr size_t kLoginDataLimit = 8192;  // MaxRecvDataSegmentLength default during login
constexpr size_t kChapChallengeBytes = 32;

struct LoginResponse {
  bool transit = false;
  uint8_t csg = 0;
  uint8_t nsg = 0;
  TextPairs pairs;
};

const char* StageName(uint8_t stage) {
  switch (stage) {
    case kStageSecurity:
      return "security negotiation";
    case kStageOperational:
      return "operational negotiation";
    case kStageFullFeature:
      return "full feature phase";
  }
  return "reserved stage";
}

std::string Describe(const TextPairs& pairs) {
  std::string s;
  for (const TextPair& p : pairs) s += " " + p.key + "=" + p.value;
  return s;
}

bool IsAuthKey(const std::string& key) {
  return key == "AuthMethod" || key.rfind("CHAP_", 0) == 0;
}

class LoginExchange {
 public:
  LoginExchange(Datamover& dm, const LoginRequestParams& req, Deadline deadline, LoginOutcome* out)
      : dm_(dm), req_(req), deadline_(deadline), out_(out) {}

  Status Run();

 private:
  Status Exchange(uint8_t csg, uint8_t nsg, bool transit, const TextPairs& pairs,
                  LoginResponse* resp);
  Status SecurityNone(LoginResponse* resp);
  Status SecurityChap(LoginResponse* resp);
  Status Operational(const TextPairs& earlier);
  Status Fail(StatusCode code, const std::string& what) const {
    return Status(code, "login to " + dm_.Describe() +
                            (req_.target_name.empty() ? "" : " target ") + req_.target_name +
                            " failed in " + StageName(stage_) + ": " + what);
  }
  // The target's refusal: its status says why. Every login starts in security negotiation, CHAP
  // or not: the stage is named only for an authentication failure where CHAP was under way (a
  // target that does not exist says so whatever the initiator offered).
  Status Refused(StatusCode code, const std::string& what) const {
    if (stage_ == kStageSecurity && code == StatusCode::kAuthFailed && !req_.chap.user.empty()) {
      return Fail(code, what);
    }
    return Status(code, "login to " + dm_.Describe() +
                            (req_.target_name.empty() ? "" : " target ") + req_.target_name +
                            " refused: " + what);
  }

  Datamover& dm_;
  const LoginRequestParams& req_;
  Deadline deadline_;
  LoginOutcome* out_;
  uint8_t stage_ = kStageSecurity;
  bool first_ = true;
};

Status LoginExchange::Exchange(uint8_t csg, uint8_t nsg, bool transit, const TextPairs& pairs,
                               LoginResponse* resp) {
  stage_ = csg;
  const std::string text = EncodeText(pairs);
  if (text.size() > kLoginDataLimit) {
    return Fail(StatusCode::kInvalidArgument, "login keys exceed 8192 bytes");
  }
  TextAccumulator acc(kLoginDataLimit * 8);
  bool continuing = false;
  for (int pdu = 0;; ++pdu) {
    if (pdu > kMaxRounds) return Fail(StatusCode::kProtocolError, "endless login continuation");
    Bhs bhs;
    bhs.set_opcode(Opcode::kLoginRequest, true);
    bhs.set_flags(static_cast<uint8_t>((transit && !continuing ? kTransitBit : 0) | csg << 2 |
                                       (transit && !continuing ? nsg : 0)));
    std::copy(req_.isid.begin(), req_.isid.end(), bhs.b.begin() + 8);
    bhs.set_u16(14, out_->tsih != 0 ? out_->tsih : req_.tsih);
    bhs.set_itt(req_.itt);
    bhs.set_u16(20, req_.cid);
    bhs.set_u32(bhs::kCmdSN, req_.cmdsn);
    bhs.set_u32(bhs::kExpStatSN, out_->exp_statsn);
    std::span<const uint8_t> data;
    if (!continuing) {
      data = {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
      if (LogEnabled(LogLevel::kDebug)) {
        Log(LogLevel::kDebug, "login request to " + dm_.Describe() + " (" + StageName(csg) +
                                  (transit ? ", transit" : "") + "):" + Describe(pairs));
      }
    }
    bhs.set_data_segment_length(static_cast<uint32_t>(data.size()));
    Status st = dm_.SendPdu(bhs, data, deadline_);
    if (!st.ok()) return Fail(st.code(), st.message());

    Bhs rsp;
    std::vector<uint8_t> rdata;
    st = dm_.ReceivePdu(&rsp, &rdata, deadline_);
    if (!st.ok()) return Fail(st.code(), st.message());
    if (rsp.opcode() != Opcode::kLoginResponse) {
      return Fail(
          StatusCode::kProtocolError,
          std::string("expected a Login Response, target sent ") + OpcodeName(rsp.opcode()));
    }
    if (rsp.itt() != req_.itt) {
      return Fail(StatusCode::kProtocolError, "Login Response for another task tag");
    }
    if (rsp.b[3] != 0) {
      return Fail(StatusCode::kFatalLogin,
                  "target speaks iSCSI version " + std::to_string(rsp.b[3]) + ", we speak 0");
    }
    const uint8_t status_class = rsp.b[36];
    const uint8_t status_detail = rsp.b[37];
    out_->exp_statsn = rsp.u32(bhs::kStatSN) + 1;
    out_->exp_cmdsn = rsp.u32(bhs::kExpCmdSN);
    out_->max_cmdsn = rsp.u32(bhs::kMaxCmdSN);
    if (status_class == 0) {
      const uint16_t tsih = rsp.u16(14);
      if (tsih != 0) out_->tsih = tsih;
    }
    first_ = false;
    st = acc.Append(rdata);
    if (!st.ok()) return Fail(StatusCode::kProtocolError, st.message());

    if (status_class == 1) {
      Result<TextPairs> pairs_or = acc.Finish();
      const TextPair* addr = pairs_or.ok() ? FindKey(*pairs_or, "TargetAddress") : nullptr;
      if (addr == nullptr) {
        return Fail(StatusCode::kProtocolError, "redirect without a TargetAddress");
      }
      const std::string hostport = addr->value.substr(0, addr->value.rfind(','));
      Result<Portal> portal = ParsePortal(hostport);
      if (!portal.ok()) {
        return Fail(StatusCode::kProtocolError,
                    "redirect to a bad TargetAddress '" + addr->value + "'");
      }
      out_->redirect = *portal;
      out_->redirect_permanent = status_detail == 2;
      return Status::OK();
    }
    if (status_class != 0) {
      // A target that does not exist (2/3, 2/4) is a fatal login error, as iscsiadm says.
      StatusCode code = StatusCode::kFatalLogin;
      if (status_class == 2 && (status_detail == 1 || status_detail == 2)) {
        code = StatusCode::kAuthFailed;
      } else if (status_class == 3) {
        code = StatusCode::kLoginFailed;
      }
      return Refused(code, "target answered " + LoginStatusText(status_class, status_detail));
    }
    continuing = rsp.flags() & kContinueBit;
    if (continuing) continue;
    Result<TextPairs> pairs_or = acc.Finish();
    if (!pairs_or.ok()) return Fail(StatusCode::kProtocolError, pairs_or.status().message());
    resp->pairs = std::move(*pairs_or);
    if (LogEnabled(LogLevel::kDebug)) {
      Log(LogLevel::kDebug, "login response from " + dm_.Describe() + ":" + Describe(resp->pairs));
    }
    resp->transit = rsp.flags() & kTransitBit;
    resp->csg = (rsp.flags() >> 2) & 3;
    resp->nsg = rsp.flags() & 3;
    if (resp->csg != csg) {
      return Fail(StatusCode::kProtocolError,
                  std::string("target answered in stage ") + StageName(resp->csg));
    }
    if (resp->transit && resp->nsg != nsg) {
      return Fail(StatusCode::kProtocolError, std::string("target moved to ") +
                                                  StageName(resp->nsg) + ", we asked for " +
                                                  StageName(nsg));
    }
    return Status::OK();
  }
}

TextPairs FirstPairs(const LoginRequestParams& req, const char* auth_method) {
  TextPairs p;
  p.push_back({"InitiatorName", req.initiator_name});
  if (!req.initiator_alias.empty()) p.push_back({"InitiatorAlias", req.initiator_alias});
  p.push_back(
      {"SessionType", req.session_type == SessionType::kDiscovery ? "Discovery" : "Normal"});
  if (req.session_type == SessionType::kNormal) p.push_back({"TargetName", req.target_name});
  p.push_back({"AuthMethod", auth_method});
  return p;
}

Status LoginExchange::SecurityNone(LoginResponse* resp) {
  Status st = Exchange(kStageSecurity, kStageOperational, true, FirstPairs(req_, "None"), resp);
  if (out_->redirect) return Status::OK();
  if (st.code() == StatusCode::kAuthFailed) {
    return Status(st.code(), st.message() +
                                 "; the target requires authentication: give a CHAP user and "
                                 "password");
  }
  ISER_RETURN_IF_ERROR(st);
  const TextPair* method = FindKey(resp->pairs, "AuthMethod");
  if (method != nullptr && method->value != "None") {
    return Fail(StatusCode::kAuthFailed,
                "the target requires authentication (it answered AuthMethod=" + method->value +
                    "); give a CHAP user and password");
  }
  for (int round = 0; !resp->transit; ++round) {
    if (round > kMaxRounds) return Fail(StatusCode::kProtocolError, "security stage never ends");
    ISER_RETURN_IF_ERROR(Exchange(kStageSecurity, kStageOperational, true, {}, resp));
    if (out_->redirect) return Status::OK();
  }
  return Status::OK();
}

Status LoginExchange::SecurityChap(LoginResponse* resp) {
  const ChapCredentials& chap = req_.chap;
  const bool mutual = !chap.target_user.empty() || !chap.target_secret.empty();
  if (mutual && chap.target_secret == chap.secret) {
    return Fail(StatusCode::kInvalidArgument,
                "the target's CHAP secret must differ from the initiator's (RFC 7143 §12.1.3)");
  }
  ISER_RETURN_IF_ERROR(
      Exchange(kStageSecurity, kStageOperational, false, FirstPairs(req_, "CHAP,None"), resp));
  if (out_->redirect) return Status::OK();
  const TextPair* method = FindKey(resp->pairs, "AuthMethod");
  if (method == nullptr || method->value != "CHAP") {
    if (mutual || method == nullptr || method->value != "None") {
      return Fail(StatusCode::kAuthFailed,
                  "the target does not accept CHAP (it answered AuthMethod=" +
                      (method ? method->value : std::string("<nothing>")) + ")");
    }
    // The target needs no authentication; it may already be moving on.
    while (!resp->transit) {
      ISER_RETURN_IF_ERROR(Exchange(kStageSecurity, kStageOperational, true, {}, resp));
    }
    return Status::OK();
  }
  if (chap.algorithms.empty()) {
    return Fail(StatusCode::kInvalidArgument, "no CHAP algorithm to offer");
  }
  const std::string offer = ChapAlgorithmOffer(chap.algorithms);
  // Until the target picks one of them, whatever goes wrong means it refused all we offered.
  const std::string refused_all = "; " + ChapFailureHint(chap.algorithms);
  Status st = Exchange(kStageSecurity, kStageOperational, false, {{"CHAP_A", offer}}, resp);
  if (!st.ok()) {
    if (st.code() != StatusCode::kAuthFailed && st.code() != StatusCode::kFatalLogin) return st;
    return Status(StatusCode::kAuthFailed,
                  st.message() + " (after our offer CHAP_A=" + offer + ")" + refused_all);
  }
  const TextPair* a = FindKey(resp->pairs, "CHAP_A");
  const TextPair* i = FindKey(resp->pairs, "CHAP_I");
  const TextPair* c = FindKey(resp->pairs, "CHAP_C");
  if (a == nullptr || i == nullptr || c == nullptr) {
    return Fail(StatusCode::kAuthFailed, "the target did not answer our offer CHAP_A=" + offer +
                                             " with CHAP_A, CHAP_I and CHAP_C" + refused_all);
  }
  Result<ChapAlgorithm> alg = ParseChapAlgorithmNumber(a->value);
  if (!alg.ok() ||
      std::find(chap.algorithms.begin(), chap.algorithms.end(), *alg) == chap.algorithms.end()) {
    return Fail(StatusCode::kAuthFailed, "the target answered CHAP_A=" + a->value +
                                             " to our offer CHAP_A=" + offer + refused_all);
  }
  char* end = nullptr;
  const unsigned long id = std::strtoul(i->value.c_str(), &end, 0);
  if (i->value.empty() || *end != '\0' || id > 255) {
    return Fail(StatusCode::kProtocolError, "bad CHAP_I '" + i->value + "'");
  }
  Result<std::vector<uint8_t>> challenge = DecodeChapBinary(c->value);
  if (!challenge.ok() || challenge->empty()) {
    return Fail(StatusCode::kProtocolError, "bad CHAP_C: " + challenge.status().message());
  }
  const std::vector<uint8_t> secret(chap.secret.begin(), chap.secret.end());
  TextPairs answer = {
      {"CHAP_N", chap.user},
      {"CHAP_R", EncodeChapHex(ChapResponse(*alg, static_cast<uint8_t>(id), secret, *challenge))}};
  std::vector<uint8_t> our_challenge;
  uint8_t our_id = 0;
  if (mutual) {
    our_challenge = ChapRandomBytes(kChapChallengeBytes);
    our_id = ChapRandomBytes(1)[0];
    answer.push_back({"CHAP_I", std::to_string(our_id)});
    answer.push_back({"CHAP_C", EncodeChapHex(our_challenge)});
  }
  out_->chap_algorithm = *alg;
  st = Exchange(kStageSecurity, kStageOperational, true, answer, resp);
  if (!st.ok()) {
    // Targets answer a bad CHAP_R with 0x0201, or (tgt) with a bare initiator error 0x0200.
    if (st.code() != StatusCode::kAuthFailed && st.code() != StatusCode::kFatalLogin) return st;
    // Every target verifies MD5, so a failure with it is the credentials'; with another
    // algorithm it may be the target's (tgt 1.0.85 picks SHA-256, then cannot decode CHAP_R).
    std::string hint = "; " + ChapFailureHint({});
    if (*alg != ChapAlgorithm::kMd5) {
      const ChapAlgorithm mishandled[] = {*alg};
      hint += ", or " + ChapFailureHint(mishandled);
    }
    return Status(StatusCode::kAuthFailed, st.message() + " (CHAP user '" + chap.user + "', " +
                                               ChapAlgorithmName(*alg) + ")" + hint);
  }
  if (mutual) {
    const TextPair* n = FindKey(resp->pairs, "CHAP_N");
    const TextPair* r = FindKey(resp->pairs, "CHAP_R");
    if (n == nullptr || r == nullptr) {
      return Fail(StatusCode::kAuthFailed, "the target did not answer our mutual CHAP challenge");
    }
    if (n->value != chap.target_user) {
      return Fail(StatusCode::kAuthFailed, "the target authenticated as '" + n->value +
                                               "', expected '" + chap.target_user + "'");
    }
    const std::vector<uint8_t> tsecret(chap.target_secret.begin(), chap.target_secret.end());
    const std::vector<uint8_t> expected = ChapResponse(*alg, our_id, tsecret, our_challenge);
    Result<std::vector<uint8_t>> got = DecodeChapBinary(r->value);
    if (!got.ok() || got->size() != expected.size() ||
        CRYPTO_memcmp(got->data(), expected.data(), expected.size()) != 0) {
      return Fail(StatusCode::kAuthFailed,
                  "the target's mutual CHAP response is wrong (wrong target secret for '" +
                      chap.target_user + "'?)");
    }
  }
  out_->authenticated = true;
  while (!resp->transit) {
    ISER_RETURN_IF_ERROR(Exchange(kStageSecurity, kStageOperational, true, {}, resp));
  }
  return Status::OK();
}

Status LoginExchange::Operational(const TextPairs& earlier) {
  OperationalNegotiator negotiator(req_.session_type, req_.offer);
  TextPairs replies;
  TextPairs declared;
  for (const TextPair& p : earlier) {
    if (!IsAuthKey(p.key)) declared.push_back(p);
  }
  Status st = negotiator.HandleResponse(declared, &replies);
  if (!st.ok()) return Fail(StatusCode::kProtocolError, st.message());
  TextPairs send = negotiator.Proposals();
  send.insert(send.end(), replies.begin(), replies.end());
  for (int round = 0; round < kMaxRounds; ++round) {
    LoginResponse resp;
    ISER_RETURN_IF_ERROR(Exchange(kStageOperational, kStageFullFeature, true, send, &resp));
    if (out_->redirect) return Status::OK();
    TextPairs filtered;
    for (TextPair& p : resp.pairs) {
      if (!IsAuthKey(p.key)) filtered.push_back(std::move(p));
    }
    replies.clear();
    st = negotiator.HandleResponse(filtered, &replies);
    if (!st.ok()) return Fail(StatusCode::kProtocolError, st.message());
    if (resp.transit) {
      out_->params = negotiator.params();
      return Status::OK();
    }
    send = std::move(replies);
  }
  return Fail(StatusCode::kProtocolError, "operational negotiation did not converge");
}

Status LoginExchange::Run() {
  LoginResponse resp;
  Status st = req_.chap.user.empty() ? SecurityNone(&resp) : SecurityChap(&resp);
  if (!st.ok() || out_->redirect) return st;
  return Operational(resp.pairs);
}

}  // namespace

ConnectionParams ConnectionParamsOf(const NegotiatedParams& params) {
  ConnectionParams c;
  c.header_digest = params.header_digest == DigestType::kCrc32c;
  c.data_digest = params.data_digest == DigestType::kCrc32c;
  c.initiator_max_recv_data_segment_length = params.initiator_max_recv_data_segment_length;
  c.target_max_recv_data_segment_length = params.target_max_recv_data_segment_length;
  c.rdma_extensions = params.rdma_extensions;
  c.target_recv_data_segment_length = params.target_recv_data_segment_length;
  return c;
}

Status Login(Datamover& dm, const LoginRequestParams& req, Deadline deadline, LoginOutcome* out) {
  *out = LoginOutcome{};
  LoginExchange exchange(dm, req, deadline, out);
  return exchange.Run();
}

std::string LoginStatusText(uint8_t status_class, uint8_t status_detail) {
  const char* text = "unknown status";
  const uint16_t code = static_cast<uint16_t>(status_class << 8 | status_detail);
  switch (code) {
    case 0x0000:
      text = "Success";
      break;
    case 0x0101:
      text = "Target moved temporarily";
      break;
    case 0x0102:
      text = "Target moved permanently";
      break;
    case 0x0200:
      text = "Initiator error";
      break;
    case 0x0201:
      text = "Authentication failure: the initiator could not be authenticated";
      break;
    case 0x0202:
      text = "Authorization failure: the initiator may not access this target";
      break;
    case 0x0203:
      text = "Not found: no such target";
      break;
    case 0x0204:
      text = "Target removed";
      break;
    case 0x0205:
      text = "Unsupported iSCSI version";
      break;
    case 0x0206:
      text = "Too many connections";
      break;
    case 0x0207:
      text = "Missing parameter";
      break;
    case 0x0208:
      text = "Cannot include connection in session";
      break;
    case 0x0209:
      text = "Session type not supported";
      break;
    case 0x020a:
      text = "Session does not exist";
      break;
    case 0x020b:
      text = "Invalid request during login";
      break;
    case 0x0300:
      text = "Target error";
      break;
    case 0x0301:
      text = "Service unavailable";
      break;
    case 0x0302:
      text = "Out of resources";
      break;
  }
  char buf[200];
  snprintf(buf, sizeof buf, "%s (status 0x%02x%02x)", text, status_class, status_detail);
  return buf;
}

std::array<uint8_t, 6> RandomIsid() {
  const std::vector<uint8_t> r = ChapRandomBytes(3);
  return {0x80, r[0], r[1], r[2], 0x00, 0x01};
}

}  // namespace iser
