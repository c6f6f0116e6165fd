#include "discovery/iscsi_name.h"

#include <cstdio>

namespace iser {

namespace {

bool Digit(char c) {
  return c >= '0' && c <= '9';
}

bool Hex(char c) {
  return Digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// What RFC 3722's profile leaves of ASCII: no uppercase, no space, no '/', '_' or other
// punctuation.
bool NameChar(char c) {
  return Digit(c) || (c >= 'a' && c <= 'z') || c == '-' || c == '.' || c == ':';
}

Status HexName(std::string_view digits, std::string_view type, bool allow_32) {
  const bool size_ok = digits.size() == 16 || (allow_32 && digits.size() == 32);
  for (char c : digits) {
    if (!Hex(c)) {
      return Status::InvalidArgument(std::string(type) + " name: not a hexadecimal number");
    }
  }
  if (!size_ok) {
    return Status::InvalidArgument(std::string(type) + " name: " + (allow_32 ? "16 or 32" : "16") +
                                   " hex digits expected");
  }
  return Status::OK();
}

// iqn.YYYY-MM.<reversed domain name>[:<unique part>] (RFC 7143 §4.2.7.3, type "iqn.").
Status IqnName(std::string_view rest) {
  const bool date_ok = rest.size() > 8 && Digit(rest[0]) && Digit(rest[1]) && Digit(rest[2]) &&
                       Digit(rest[3]) && rest[4] == '-' && Digit(rest[5]) && Digit(rest[6]) &&
                       rest[7] == '.';
  const int month = date_ok ? (rest[5] - '0') * 10 + (rest[6] - '0') : 0;
  if (!date_ok || month < 1 || month > 12) {
    return Status::InvalidArgument("iqn. name: a date yyyy-mm and a naming authority expected");
  }
  const std::string_view authority = rest.substr(8);
  if (!Digit(authority[0]) && !(authority[0] >= 'a' && authority[0] <= 'z')) {
    return Status::InvalidArgument("iqn. name: the naming authority must start with a letter");
  }
  for (char c : authority) {
    if (!NameChar(c)) {
      return Status::InvalidArgument(
          "iqn. name: only lowercase letters, digits, '-', '.' and ':' are allowed");
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckIscsiName(std::string_view name) {
  if (name.size() > kMaxIscsiNameLength) {
    return Status::InvalidArgument("longer than " + std::to_string(kMaxIscsiNameLength) + " bytes");
  }
  const std::string_view type = name.substr(0, 4);
  const std::string_view rest = name.substr(type.size());
  if (type == "iqn.") return IqnName(rest);
  if (type == "eui.") return HexName(rest, "eui.", false);
  if (type == "naa.") return HexName(rest, "naa.", true);
  return Status::InvalidArgument("not an iSCSI name: it must start with iqn., eui. or naa.");
}

std::string EscapeForMessage(std::string_view text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

}  // namespace iser
