#include "discovery/seconds.h"

#include <cctype>
#include <cstdint>

namespace iser {

namespace {

Status Invalid(std::string_view name, std::string_view text, const std::string& why) {
  return Status::InvalidArgument(std::string(name) + " '" + std::string(text) + "': " + why);
}

bool IsDigit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

std::string FormatSeconds(std::chrono::milliseconds duration) {
  const int64_t ms = duration.count();
  std::string s = std::to_string(ms / 1000);
  int64_t fraction = ms % 1000;
  if (fraction == 0) return s;
  std::string digits = std::to_string(1000 + fraction).substr(1);
  while (digits.back() == '0') digits.pop_back();
  return s + "." + digits;
}

Result<std::chrono::milliseconds> ParseSeconds(std::string_view name, std::string_view text,
                                               std::chrono::milliseconds min,
                                               std::chrono::milliseconds max) {
  const size_t point = text.find('.');
  const std::string_view whole = text.substr(0, point);
  const std::string_view fraction =
      point == std::string_view::npos ? std::string_view() : text.substr(point + 1);
  auto all_digits = [](std::string_view s) {
    for (char c : s) {
      if (!IsDigit(c)) return false;
    }
    return true;
  };
  if (whole.empty() || !all_digits(whole) || !all_digits(fraction) ||
      (point != std::string_view::npos && fraction.empty())) {
    return Invalid(name, text,
                   "not a number of seconds (digits with an optional fraction, e.g. "
                   "30 or 0.5)");
  }
  if (fraction.size() > 3) {
    return Invalid(name, text, "at most 3 digits after the point (milliseconds)");
  }
  const std::string limits =
      "must be between " + FormatSeconds(min) + " and " + FormatSeconds(max) + " seconds";
  // Digits past the maximum's are out of range whatever they are; stopping there keeps the
  // arithmetic below far from overflowing.
  int64_t seconds = 0;
  for (char c : whole) {
    seconds = seconds * 10 + (c - '0');
    if (seconds > max.count() / 1000) return Invalid(name, text, limits);
  }
  int64_t ms = seconds * 1000;
  int64_t scale = 100;
  for (char c : fraction) {
    ms += (c - '0') * scale;
    scale /= 10;
  }
  if (ms < min.count() || ms > max.count()) return Invalid(name, text, limits);
  return std::chrono::milliseconds(ms);
}

}  // namespace iser
