// What the CDB builders and data parsers of initiator/scsi share (commands.cc, alua.cc): filling
// a task for a command, and the checks and words every parser's errors use. Internal to the
// layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "initiator/base/status.h"
#include "initiator/task/task.h"

namespace iser::scsi {

// Zeroes the CDB and sets its length, the direction (none when bytes is 0), buffer and length.
void Setup(Task& t, uint8_t len, DataDirection dir, const uint8_t* buf, uint32_t bytes);
// "WHAT: GOT bytes returned, at least NEED needed".
Status Short(const char* what, size_t got, size_t need);
// Lowercase hex, two digits a byte.
std::string HexBytes(std::span<const uint8_t> d);
// The body of a VPD page after its header checks: at least 4 bytes and the page asked for; the
// page length is cut to what arrived.
Result<std::span<const uint8_t>> VpdBody(std::span<const uint8_t> d, uint8_t page,
                                         const char* what);

}  // namespace iser::scsi
