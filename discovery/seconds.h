// Durations that users give in seconds: URL arguments (replacement_timeout=), command-line
// options (--replacement-timeout, --time) and nbdkit parameters, all parsed here so that they
// accept and refuse the same texts.
//
// ParseSeconds(name, text, min, max) accepts decimal digits with an optional fraction of at most
// three digits ("30", "0.5", "2.125": millisecond resolution) and nothing else: no sign, exponent,
// spaces, "inf" or "nan". Anything else, and a value outside [min, max], is InvalidArgument
// naming `name` and the text. The default maximum, one year, keeps every deadline computed from a
// value far inside the range of the clocks' durations, so no conversion can overflow.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "initiator/base/status.h"

namespace iser {

inline constexpr std::chrono::milliseconds kMaxSettingSeconds = std::chrono::hours(24 * 365);

Result<std::chrono::milliseconds> ParseSeconds(
    std::string_view name, std::string_view text,
    std::chrono::milliseconds min = std::chrono::milliseconds(0),
    std::chrono::milliseconds max = kMaxSettingSeconds);

// The shortest text ParseSeconds reads back as the same value: "120", "0.5", "2.125".
std::string FormatSeconds(std::chrono::milliseconds duration);

}  // namespace iser
