// Operational parameter negotiation for the login operational stage (RFC 7143 §6.2, §13; RFC
// 7145 §6 for the iSER keys). The initiator proposes every operational key it cares about; the
// target answers each, may propose keys of its own (we are then the acceptor and must reply), and
// declares its own values for declarative keys.
//
// Result functions (RFC 7143 §6.2.2):
//   Boolean AND: ImmediateData, IFMarker, OFMarker, RDMAExtensions
//   Boolean OR:  InitialR2T, DataPDUInOrder, DataSequenceInOrder
//   Numerical min: MaxConnections, MaxBurstLength, FirstBurstLength, MaxOutstandingR2T,
//                  DefaultTime2Retain, ErrorRecoveryLevel
//   Numerical max: DefaultTime2Wait
//   List (first of ours the target accepts): HeaderDigest, DataDigest
//   Declarative: MaxRecvDataSegmentLength (each side declares what it can receive),
//                InitiatorRecvDataSegmentLength / TargetRecvDataSegmentLength (iSER: we take
//                min(ours, answer), as open-iscsi and libiscsi do), TargetAlias,
//                TargetPortalGroupTag, TargetAddress
// Special answers: "Irrelevant" (key does not apply; keep the default), "NotUnderstood" (target
// does not know the key; keep the default), "Reject" (target refuses; keep the default).
//
// Contract: an answer that breaks the rules (a Boolean AND answered Yes when we offered No, a
// number outside the allowed range or above what we offered for a min key, a digest we did not
// offer, a malformed number, a key answered twice) is a ProtocolError naming the key, our offer
// and the target's answer. In a Discovery session only the keys that apply there are proposed
// (digests, MaxRecvDataSegmentLength, DefaultTime2Wait/Retain, ErrorRecoveryLevel); under iSER
// (rdma_extensions) digests are forced to None and MaxRecvDataSegmentLength is not sent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/text/text.h"

namespace iser {

enum class SessionType { kNormal, kDiscovery };
enum class DigestType { kNone, kCrc32c };

// What we propose. Defaults are open-iscsi's (docs/interop.md, "Negotiation defaults"), except
// MaxRecvDataSegmentLength: the RFC's maximum rather than 256 KiB, so that a target sends a read
// of up to 16 MiB as one Data-In PDU. Data-In lands in the command's buffer whatever its size, and
// each PDU a target does not have to build saves it a header and a socket write (tgtd spends about
// 10% less CPU per 1 MiB read).
struct OperationalOffer {
  std::vector<DigestType> header_digest{DigestType::kNone};  // preference order
  std::vector<DigestType> data_digest{DigestType::kNone};
  uint32_t max_connections = 1;
  bool initial_r2t = false;
  bool immediate_data = true;
  uint32_t max_recv_data_segment_length = 16777215;
  uint32_t max_burst_length = 16776192;
  uint32_t first_burst_length = 262144;
  uint32_t default_time2wait = 2;
  uint32_t default_time2retain = 0;
  uint32_t max_outstanding_r2t = 1;
  bool data_pdu_in_order = true;
  bool data_sequence_in_order = true;
  uint32_t error_recovery_level = 0;
  // iSER (RFC 7145). When true, the session runs in iSER-assisted mode.
  bool rdma_extensions = false;
  uint32_t initiator_recv_data_segment_length = 8192;
  uint32_t target_recv_data_segment_length = 8192;
};

// The outcome. Values start at the RFC defaults and change only through negotiation.
struct NegotiatedParams {
  DigestType header_digest = DigestType::kNone;
  DigestType data_digest = DigestType::kNone;
  uint32_t max_connections = 1;
  bool initial_r2t = true;
  bool immediate_data = true;
  // What we declared we can receive (bounds Data-In and every PDU the target sends us).
  uint32_t initiator_max_recv_data_segment_length = 8192;
  // What the target declared (bounds our Data-Out and immediate data). Default 8192.
  uint32_t target_max_recv_data_segment_length = 8192;
  uint32_t max_burst_length = 262144;
  uint32_t first_burst_length = 65536;
  uint32_t default_time2wait = 2;
  uint32_t default_time2retain = 20;
  uint32_t max_outstanding_r2t = 1;
  bool data_pdu_in_order = true;
  bool data_sequence_in_order = true;
  uint32_t error_recovery_level = 0;
  bool if_marker = false;
  bool of_marker = false;
  bool rdma_extensions = false;
  uint32_t initiator_recv_data_segment_length = 8192;
  uint32_t target_recv_data_segment_length = 8192;
  std::string target_alias;
  std::optional<uint16_t> target_portal_group_tag;
};

class OperationalNegotiator {
 public:
  OperationalNegotiator(SessionType type, const OperationalOffer& offer);

  // The keys for our first operational-stage Login Request, in a stable order.
  TextPairs Proposals() const;

  // Processes the pairs of one Login Response (security-stage keys AuthMethod/CHAP_* must be
  // filtered out by the caller). Answers to our proposals update params(); keys the target
  // proposes are answered into *replies (appended), with "NotUnderstood" for unknown keys and
  // "Irrelevant" for keys that do not apply to this session type.
  Status HandleResponse(const TextPairs& pairs, TextPairs* replies);

  // True once every key we proposed has been answered (or declared, for declarative keys).
  bool AllAnswered() const;

  const NegotiatedParams& params() const { return params_; }

 private:
  SessionType type_;
  OperationalOffer offer_;
  NegotiatedParams params_;
  std::vector<std::string> pending_;  // proposed keys still unanswered
  std::vector<std::string> answered_;
};

const char* DigestName(DigestType d);  // "None", "CRC32C"

}  // namespace iser
