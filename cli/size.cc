#include "cli/size.h"

#include <cctype>
#include <cstdio>

namespace iser::cli {

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

namespace {

Status Invalid(std::string_view option, std::string_view text, const std::string& why) {
  return Status::InvalidArgument(std::string(option) + " '" + std::string(text) + "': " + why);
}

// The power of 1024 a unit names, or -1.
int UnitShift(std::string unit) {
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return 0;
  static constexpr std::string_view kPrefixes = "kmgtp";
  const size_t prefix = kPrefixes.find(unit[0]);
  if (prefix == std::string_view::npos) return -1;
  const std::string_view rest = std::string_view(unit).substr(1);
  if (!rest.empty() && rest != "b" && rest != "ib") return -1;
  return static_cast<int>(prefix + 1) * 10;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view option, std::string_view text, uint64_t min,
                           uint64_t max) {
  if (text.empty()) return Invalid(option, text, "empty size");
  size_t digits = 0;
  uint64_t n = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (; digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])); ++digits) {
    const uint64_t d = static_cast<uint64_t>(text[digits] - '0');
    if (n > (kMax - d) / 10) return Invalid(option, text, "too large");
    n = n * 10 + d;
  }
  if (digits == 0) {
    return Invalid(option, text, "not a size (digits with an optional unit k, m, g, t or p)");
  }
  const int shift = UnitShift(std::string(text.substr(digits)));
  if (shift < 0) return Invalid(option, text, "unknown unit (use k, m, g, t or p)");
  if (shift > 0 && n > (kMax >> shift)) return Invalid(option, text, "too large");
  n <<= shift;
  if (n < min || n > max) {
    return Invalid(option, text,
                   max == kMax ? "must be at least " + HumanBytes(min)
                               : "must be between " + HumanBytes(min) + " and " + HumanBytes(max));
  }
  return n;
}

}  // namespace iser::cli
