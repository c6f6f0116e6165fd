// iSCSI text: the key=value pairs carried in the data segment of Login and Text PDUs
// (RFC 7143 §6.1). Each pair is "key=value" followed by a NUL. A pair may be split across PDUs
// (the C bit); TextAccumulator joins the data segments of a PDU sequence before parsing, which
// also covers targets (tgt) that split long answers without setting C.
//
// Contract: parsing is strict and bounded. Keys are 1..63 characters of [A-Za-z0-9.+@_-]
// (RFC 7143 §6.1, "standard-label" / "key-name"); values are at most kMaxValueLength bytes; a
// pair without '=' or a missing final NUL is an error naming the offending pair. The order of
// pairs is preserved; duplicate keys are returned as they came (the negotiator rejects them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "initiator/base/status.h"

namespace iser {

struct TextPair {
  std::string key;
  std::string value;
  bool operator==(const TextPair&) const = default;
};
using TextPairs = std::vector<TextPair>;

// RFC 7143 allows 255-byte values for most keys, but SendTargets and TargetAddress lists and
// CHAP challenges (binary, hex-encoded) can be longer; 8192 bounds memory without refusing
// anything a real target sends.
inline constexpr size_t kMaxTextValueLength = 8192;
inline constexpr size_t kMaxTextKeyLength = 63;

// Appends "key=value\0" to out.
void AppendTextPair(std::string& out, std::string_view key, std::string_view value);
std::string EncodeText(const TextPairs& pairs);

// Parses a complete text (all PDUs of a sequence joined). Trailing NUL padding is accepted.
Result<TextPairs> ParseText(std::span<const uint8_t> data);

// Finds the first pair with this key; nullptr if absent.
const TextPair* FindKey(const TextPairs& pairs, std::string_view key);

// Joins the data segments of a Login or Text response sequence (F=0 / C=1 continuation) with a
// bound on the total, so a target cannot make us buffer without limit.
class TextAccumulator {
 public:
  explicit TextAccumulator(size_t max_total = 1 << 20) : max_total_(max_total) {}
  Status Append(std::span<const uint8_t> segment);
  Result<TextPairs> Finish();  // parses and resets
  void Reset() { data_.clear(); }
  size_t size() const { return data_.size(); }

 private:
  size_t max_total_;
  std::vector<uint8_t> data_;
};

}  // namespace iser
