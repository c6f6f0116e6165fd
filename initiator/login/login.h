// The login phase of one connection (RFC 7143 §6.3, §11.12-13): the security stage with
// AuthMethod None or CHAP (one-way or mutual), the operational stage through
// OperationalNegotiator, and the transition to full feature phase. Runs on the caller's thread
// over a Datamover's synchronous PDU exchange, bounded by one deadline.
//
// Contract: on success the outcome holds the negotiated parameters and the sequence numbers to
// start full feature phase with. A redirect (status class 1) is not an error: the outcome names
// the new portal and the caller reconnects. Every failure names the phase and what the target
// said (status class and detail decoded), with a code the CLI maps to iscsiadm's exit codes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/login/chap.h"
#include "initiator/login/negotiation.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/portal.h"

namespace iser {

struct ChapCredentials {
  std::string user;  // empty: no CHAP
  std::string secret;
  std::string target_user;  // mutual CHAP when both are set
  std::string target_secret;
  std::vector<ChapAlgorithm> algorithms{kDefaultChapAlgorithms.begin(),
                                        kDefaultChapAlgorithms.end()};  // CHAP_A, preferred first
};

struct LoginRequestParams {
  std::string initiator_name;
  std::string initiator_alias;
  std::string target_name;  // empty for a Discovery session
  SessionType session_type = SessionType::kNormal;
  std::array<uint8_t, 6> isid{};
  uint16_t tsih = 0;  // 0: new session
  uint16_t cid = 0;
  uint32_t cmdsn = 1;
  uint32_t itt = 0;
  OperationalOffer offer;
  ChapCredentials chap;
};

struct LoginOutcome {
  NegotiatedParams params;
  uint16_t tsih = 0;
  uint32_t exp_statsn = 0;  // last StatSN + 1
  uint32_t exp_cmdsn = 0;
  uint32_t max_cmdsn = 0;
  std::optional<Portal> redirect;  // status class 1: log in there instead
  bool redirect_permanent = false;
  ChapAlgorithm chap_algorithm{};  // when CHAP was used
  bool authenticated = false;
};

// The part of the outcome the datamover applies to the connection.
ConnectionParams ConnectionParamsOf(const NegotiatedParams& params);

Status Login(Datamover& dm, const LoginRequestParams& req, Deadline deadline, LoginOutcome* out);

// "Authentication failure (0x0201): the initiator could not be authenticated or authorized".
std::string LoginStatusText(uint8_t status_class, uint8_t status_detail);

// Random ISID with the "random" qualifier type (RFC 7143 §11.12.5: T=10b).
std::array<uint8_t, 6> RandomIsid();

}  // namespace iser
