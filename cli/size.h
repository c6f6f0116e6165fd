// Byte counts on the command line (--bs, --size): "4096", "4k", "512KiB", "1m", "2G", "1t",
// and back to text for people ("64.0 MiB").
//
// ParseSize(option, text, min, max) accepts decimal digits followed by an optional unit, case
// insensitive: none or b (bytes), k/kb/kib, m/mb/mib, g/gb/gib, t/tb/tib, p/pb/pib (powers of
// 1024, as fio counts them by default). It returns InvalidArgument, naming the option and the
// text, for empty text, a sign, spaces or any other character, an unknown unit, a value that
// does not fit in 64 bits, and a value outside [min, max]; it never wraps or saturates.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "initiator/base/status.h"

namespace iser::cli {

std::string HumanBytes(uint64_t bytes);  // "64.0 MiB", "512 B"

Result<uint64_t> ParseSize(std::string_view option, std::string_view text, uint64_t min = 0,
                           uint64_t max = std::numeric_limits<uint64_t>::max());

}  // namespace iser::cli
