#include "initiator/login/negotiation.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace iser {

namespace {

enum class Rule { kAnd, kOr, kMin, kMax, kDigestList, kDeclarative, kIserSegment };

struct KeyDef {
  const char* name;
  Rule rule;
  uint32_t lo, hi;    // numeric range
  bool in_discovery;  // the key applies to Discovery sessions
};

constexpr uint32_t k24 = (1u << 24) - 1;

// RFC 7143 §13 and RFC 7145 §6: every operational key an initiator may meet.
constexpr KeyDef kKeys[] = {
    {"HeaderDigest", Rule::kDigestList, 0, 0, true},
    {"DataDigest", Rule::kDigestList, 0, 0, true},
    {"MaxConnections", Rule::kMin, 1, 65535, false},
    {"InitialR2T", Rule::kOr, 0, 0, false},
    {"ImmediateData", Rule::kAnd, 0, 0, false},
    {"MaxRecvDataSegmentLength", Rule::kDeclarative, 512, k24, true},
    {"MaxBurstLength", Rule::kMin, 512, k24, false},
    {"FirstBurstLength", Rule::kMin, 512, k24, false},
    {"DefaultTime2Wait", Rule::kMax, 0, 3600, true},
    {"DefaultTime2Retain", Rule::kMin, 0, 3600, true},
    {"MaxOutstandingR2T", Rule::kMin, 1, 65535, false},
    {"DataPDUInOrder", Rule::kOr, 0, 0, false},
    {"DataSequenceInOrder", Rule::kOr, 0, 0, false},
    {"ErrorRecoveryLevel", Rule::kMin, 0, 2, true},
    {"IFMarker", Rule::kAnd, 0, 0, true},
    {"OFMarker", Rule::kAnd, 0, 0, true},
    {"RDMAExtensions", Rule::kAnd, 0, 0, false},
    {"InitiatorRecvDataSegmentLength", Rule::kIserSegment, 512, k24, false},
    {"TargetRecvDataSegmentLength", Rule::kIserSegment, 512, k24, false},
};

const KeyDef* FindDef(const std::string& name) {
  for (const KeyDef& d : kKeys) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

Result<uint32_t> ParseNumber(const std::string& key, const std::string& value) {
  const std::string bad = "bad number '" + value.substr(0, 32) + "' for " + key;
  if (value.empty() || value.size() > 18) return Status::ProtocolError(bad);
  int base = 10;
  std::string digits = value;
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) {
    base = 16;
    digits = value.substr(2);
  }
  for (char c : digits) {
    if (!(base == 16 ? std::isxdigit(static_cast<unsigned char>(c))
                     : std::isdigit(static_cast<unsigned char>(c)))) {
      return Status::ProtocolError(bad);
    }
  }
  const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  if (v > 0xffffffffULL) return Status::ProtocolError(bad);
  return static_cast<uint32_t>(v);
}

Result<bool> ParseBool(const std::string& key, const std::string& value) {
  if (value == "Yes") return true;
  if (value == "No") return false;
  return Status::ProtocolError("bad Boolean '" + value.substr(0, 32) + "' for " + key);
}

Result<DigestType> ParseDigest(const std::string& value) {
  if (value == "None") return DigestType::kNone;
  if (value == "CRC32C") return DigestType::kCrc32c;
  return Status::NotSupported(value);
}

const char* YesNo(bool b) {
  return b ? "Yes" : "No";
}

bool IsSpecialAnswer(const std::string& v) {
  return v == "Irrelevant" || v == "NotUnderstood" || v == "Reject";
}

}  // namespace

const char* DigestName(DigestType d) {
  return d == DigestType::kCrc32c ? "CRC32C" : "None";
}

OperationalNegotiator::OperationalNegotiator(SessionType type, const OperationalOffer& offer)
    : type_(type), offer_(offer) {
  if (offer_.rdma_extensions) {
    // iSER moves data without digests (RFC 7145 §6.3); targets refuse anything else.
    offer_.header_digest = {DigestType::kNone};
    offer_.data_digest = {DigestType::kNone};
  }
  if (offer_.header_digest.empty()) offer_.header_digest = {DigestType::kNone};
  if (offer_.data_digest.empty()) offer_.data_digest = {DigestType::kNone};
  if (!offer_.rdma_extensions || type_ == SessionType::kDiscovery) {
    params_.initiator_max_recv_data_segment_length = offer_.max_recv_data_segment_length;
  }
  for (const TextPair& p : Proposals()) {
    if (p.key != "MaxRecvDataSegmentLength") pending_.push_back(p.key);
  }
}

TextPairs OperationalNegotiator::Proposals() const {
  auto digests = [](const std::vector<DigestType>& list) {
    std::string s;
    for (DigestType d : list) {
      if (!s.empty()) s += ",";
      s += DigestName(d);
    }
    return s;
  };
  const OperationalOffer& o = offer_;
  TextPairs p;
  p.push_back({"HeaderDigest", digests(o.header_digest)});
  p.push_back({"DataDigest", digests(o.data_digest)});
  const bool iser = o.rdma_extensions && type_ == SessionType::kNormal;
  if (!iser)
    p.push_back({"MaxRecvDataSegmentLength", std::to_string(o.max_recv_data_segment_length)});
  p.push_back({"DefaultTime2Wait", std::to_string(o.default_time2wait)});
  p.push_back({"DefaultTime2Retain", std::to_string(o.default_time2retain)});
  p.push_back({"ErrorRecoveryLevel", std::to_string(o.error_recovery_level)});
  if (type_ == SessionType::kDiscovery) return p;
  p.push_back({"MaxConnections", std::to_string(o.max_connections)});
  p.push_back({"InitialR2T", YesNo(o.initial_r2t)});
  p.push_back({"ImmediateData", YesNo(o.immediate_data)});
  p.push_back({"MaxBurstLength", std::to_string(o.max_burst_length)});
  p.push_back({"FirstBurstLength", std::to_string(o.first_burst_length)});
  p.push_back({"MaxOutstandingR2T", std::to_string(o.max_outstanding_r2t)});
  p.push_back({"DataPDUInOrder", YesNo(o.data_pdu_in_order)});
  p.push_back({"DataSequenceInOrder", YesNo(o.data_sequence_in_order)});
  if (iser) {
    p.push_back({"RDMAExtensions", "Yes"});
    p.push_back(
        {"InitiatorRecvDataSegmentLength", std::to_string(o.initiator_recv_data_segment_length)});
    p.push_back({"TargetRecvDataSegmentLength", std::to_string(o.target_recv_data_segment_length)});
  } else {
    p.push_back({"IFMarker", "No"});
    p.push_back({"OFMarker", "No"});
  }
  return p;
}

namespace {

// Our offered value of a Boolean or numeric key, as the negotiation sees it.
struct Offered {
  bool b = false;
  uint32_t n = 0;
};

Offered OfferedValue(const OperationalOffer& o, const std::string& key) {
  if (key == "MaxConnections") return {false, o.max_connections};
  if (key == "InitialR2T") return {o.initial_r2t, 0};
  if (key == "ImmediateData") return {o.immediate_data, 0};
  if (key == "MaxBurstLength") return {false, o.max_burst_length};
  if (key == "FirstBurstLength") return {false, o.first_burst_length};
  if (key == "DefaultTime2Wait") return {false, o.default_time2wait};
  if (key == "DefaultTime2Retain") return {false, o.default_time2retain};
  if (key == "MaxOutstandingR2T") return {false, o.max_outstanding_r2t};
  if (key == "DataPDUInOrder") return {o.data_pdu_in_order, 0};
  if (key == "DataSequenceInOrder") return {o.data_sequence_in_order, 0};
  if (key == "ErrorRecoveryLevel") return {false, o.error_recovery_level};
  if (key == "RDMAExtensions") return {o.rdma_extensions, 0};
  if (key == "InitiatorRecvDataSegmentLength") return {false, o.initiator_recv_data_segment_length};
  if (key == "TargetRecvDataSegmentLength") return {false, o.target_recv_data_segment_length};
  return {};  // IFMarker, OFMarker: we always offer No
}

void Store(NegotiatedParams& p, const std::string& key, bool b, uint32_t n) {
  if (key == "MaxConnections")
    p.max_connections = n;
  else if (key == "InitialR2T")
    p.initial_r2t = b;
  else if (key == "ImmediateData")
    p.immediate_data = b;
  else if (key == "MaxBurstLength")
    p.max_burst_length = n;
  else if (key == "FirstBurstLength")
    p.first_burst_length = n;
  else if (key == "DefaultTime2Wait")
    p.default_time2wait = n;
  else if (key == "DefaultTime2Retain")
    p.default_time2retain = n;
  else if (key == "MaxOutstandingR2T")
    p.max_outstanding_r2t = n;
  else if (key == "DataPDUInOrder")
    p.data_pdu_in_order = b;
  else if (key == "DataSequenceInOrder")
    p.data_sequence_in_order = b;
  else if (key == "ErrorRecoveryLevel")
    p.error_recovery_level = n;
  else if (key == "IFMarker")
    p.if_marker = b;
  else if (key == "OFMarker")
    p.of_marker = b;
  else if (key == "RDMAExtensions")
    p.rdma_extensions = b;
  else if (key == "InitiatorRecvDataSegmentLength")
    p.initiator_recv_data_segment_length = n;
  else if (key == "TargetRecvDataSegmentLength")
    p.target_recv_data_segment_length = n;
}

}  // namespace

Status OperationalNegotiator::HandleResponse(const TextPairs& pairs, TextPairs* replies) {
  for (const TextPair& pair : pairs) {
    const std::string& key = pair.key;
    const std::string& value = pair.value;
    if (key == "TargetAlias") {
      params_.target_alias = value;
      continue;
    }
    if (key == "TargetPortalGroupTag") {
      Result<uint32_t> tag = ParseNumber(key, value);
      if (!tag.ok() || *tag == 0 || *tag > 65535) {
        return Status::ProtocolError("bad TargetPortalGroupTag '" + value.substr(0, 32) + "'");
      }
      params_.target_portal_group_tag = static_cast<uint16_t>(*tag);
      continue;
    }
    if (key == "TargetAddress" || key == "TargetName") continue;  // declarations, used elsewhere
    const KeyDef* def = FindDef(key);
    if (def == nullptr) {
      replies->push_back({key, "NotUnderstood"});
      continue;
    }
    if (def->rule == Rule::kDeclarative) {
      // MaxRecvDataSegmentLength from the target: what it can receive from us.
      Result<uint32_t> n = ParseNumber(key, value);
      if (!n.ok()) return n.status();
      if (*n < def->lo || *n > def->hi) {
        return Status::ProtocolError("target declared " + key + "=" + value +
                                     ", outside 512..16777215");
      }
      params_.target_max_recv_data_segment_length = *n;
      continue;
    }
    // RDMAExtensions itself applies to every Normal session (we answer No without iSER); the
    // segment lengths are irrelevant unless RDMAExtensions=Yes (RFC 7145 §6).
    const bool applies = (type_ == SessionType::kNormal || def->in_discovery) &&
                         (def->rule != Rule::kIserSegment || offer_.rdma_extensions);
    const auto pending = std::find(pending_.begin(), pending_.end(), key);
    const bool answer = pending != pending_.end();
    if (!answer) {
      if (std::find(answered_.begin(), answered_.end(), key) != answered_.end()) {
        return Status::ProtocolError("target answered " + key + " twice");
      }
      if (!applies) {
        replies->push_back({key, "Irrelevant"});
        continue;
      }
    }
    if (answer) {
      pending_.erase(pending);
      answered_.push_back(key);
      if (IsSpecialAnswer(value)) continue;  // the RFC default stays
    }
    // From here: `value` is either the target's answer to our offer (the result) or its own
    // proposal, to which we reply with the result.
    const Offered ours = OfferedValue(offer_, key);
    const std::string context =
        answer ? "target answered " + key + "=" + value.substr(0, 64) + " to our offer"
               : "target proposed " + key + "=" + value.substr(0, 64);
    switch (def->rule) {
      case Rule::kAnd:
      case Rule::kOr: {
        Result<bool> theirs = ParseBool(key, value);
        if (!theirs.ok()) return theirs.status();
        const bool result = def->rule == Rule::kAnd ? (ours.b && *theirs) : (ours.b || *theirs);
        if (answer && *theirs != result) {
          return Status::ProtocolError(context + " " + YesNo(ours.b) + ", but " + key +
                                       " is a Boolean " + (def->rule == Rule::kAnd ? "AND" : "OR"));
        }
        Store(params_, key, result, 0);
        if (!answer) replies->push_back({key, YesNo(result)});
        break;
      }
      case Rule::kMin:
      case Rule::kMax:
      case Rule::kIserSegment: {
        Result<uint32_t> theirs = ParseNumber(key, value);
        if (!theirs.ok()) return theirs.status();
        if (*theirs < def->lo || *theirs > def->hi) {
          return Status::ProtocolError(context + ": outside " + std::to_string(def->lo) + ".." +
                                       std::to_string(def->hi));
        }
        uint32_t result =
            def->rule == Rule::kMax ? std::max(ours.n, *theirs) : std::min(ours.n, *theirs);
        if (answer && def->rule != Rule::kIserSegment && *theirs != result) {
          return Status::ProtocolError(
              context + " " + std::to_string(ours.n) + ", but " + key +
              (def->rule == Rule::kMin ? " may only go down" : " may only go up"));
        }
        Store(params_, key, false, result);
        if (!answer) replies->push_back({key, std::to_string(result)});
        break;
      }
      case Rule::kDigestList: {
        const std::vector<DigestType>& offered =
            key == "HeaderDigest" ? offer_.header_digest : offer_.data_digest;
        DigestType& slot = key == "HeaderDigest" ? params_.header_digest : params_.data_digest;
        if (answer) {
          Result<DigestType> d = ParseDigest(value);
          if (!d.ok() || std::find(offered.begin(), offered.end(), *d) == offered.end()) {
            std::string list;
            for (DigestType x : offered)
              list += std::string(list.empty() ? "" : ",") + DigestName(x);
            return Status::ProtocolError(context + " " + list + ", which does not include it");
          }
          slot = *d;
        } else {
          // The acceptor picks the first of the proposer's values that it accepts.
          std::string choice = "Reject";
          size_t start = 0;
          while (start <= value.size()) {
            const size_t comma = value.find(',', start);
            const std::string item =
                value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            Result<DigestType> d = ParseDigest(item);
            if (d.ok() && std::find(offered.begin(), offered.end(), *d) != offered.end()) {
              choice = item;
              slot = *d;
              break;
            }
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
          replies->push_back({key, choice});
        }
        break;
      }
      case Rule::kDeclarative:
        break;
    }
    if (!answer) answered_.push_back(key);
  }
  // One Login Response may carry only some answers; judge the pair once both are settled.
  const auto settled = [this](const char* key) {
    return std::find(pending_.begin(), pending_.end(), key) == pending_.end();
  };
  if (settled("MaxBurstLength") && settled("FirstBurstLength") &&
      params_.first_burst_length > params_.max_burst_length) {
    return Status::ProtocolError(
        "negotiated FirstBurstLength " + std::to_string(params_.first_burst_length) +
        " exceeds MaxBurstLength " + std::to_string(params_.max_burst_length));
  }
  return Status::OK();
}

bool OperationalNegotiator::AllAnswered() const {
  return pending_.empty();
}

}  // namespace iser
