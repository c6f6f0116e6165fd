#include "initiator/text/text.h"

#include <cstring>

namespace iser {

namespace {

bool IsKeyChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '+' || c == '@' || c == '_';
}

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (s.size() > 64) out += "...";
  return out;
}

}  // namespace

void AppendTextPair(std::string& out, std::string_view key, std::string_view value) {
  out.append(key);
  out.push_back('=');
  out.append(value);
  out.push_back('\0');
}

std::string EncodeText(const TextPairs& pairs) {
  std::string out;
  for (const TextPair& p : pairs) AppendTextPair(out, p.key, p.value);
  return out;
}

Result<TextPairs> ParseText(std::span<const uint8_t> data) {
  TextPairs pairs;
  std::string_view rest(reinterpret_cast<const char*>(data.data()), data.size());
  while (!rest.empty()) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) {
      return Status::ProtocolError("text pair '" + Printable(rest) + "' is not NUL-terminated");
    }
    const std::string_view pair = rest.substr(0, nul);
    rest.remove_prefix(nul + 1);
    if (pair.empty()) {
      // Only padding may follow: NULs to the end.
      if (rest.find_first_not_of('\0') != std::string_view::npos) {
        return Status::ProtocolError("empty text pair before more keys");
      }
      break;
    }
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      return Status::ProtocolError("text pair '" + Printable(pair) + "' has no '='");
    }
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = pair.substr(eq + 1);
    if (key.empty() || key.size() > kMaxTextKeyLength) {
      return Status::ProtocolError("text key '" + Printable(key) + "' is empty or longer than " +
                                   std::to_string(kMaxTextKeyLength) + " characters");
    }
    for (char c : key) {
      if (!IsKeyChar(c)) {
        return Status::ProtocolError("text key '" + Printable(key) + "' has a bad character");
      }
    }
    if (value.size() > kMaxTextValueLength) {
      return Status::ProtocolError("value of text key '" + std::string(key) + "' is " +
                                   std::to_string(value.size()) + " bytes, more than " +
                                   std::to_string(kMaxTextValueLength));
    }
    pairs.push_back({std::string(key), std::string(value)});
  }
  return pairs;
}

const TextPair* FindKey(const TextPairs& pairs, std::string_view key) {
  for (const TextPair& p : pairs) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

Status TextAccumulator::Append(std::span<const uint8_t> segment) {
  if (segment.size() > max_total_ - data_.size()) {
    return Status::ProtocolError("text response longer than " + std::to_string(max_total_) +
                                 " bytes");
  }
  data_.insert(data_.end(), segment.begin(), segment.end());
  return Status::OK();
}

Result<TextPairs> TextAccumulator::Finish() {
  Result<TextPairs> pairs = ParseText(data_);
  data_.clear();
  return pairs;
}

}  // namespace iser
