// How the session's log lines and error messages write numbers: tags, opcodes and durations,
// the same way in every file of the session layer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace iser {

// "0x0000002a": ITTs, TTTs and other 32-bit fields.
std::string HexTag(uint32_t value);
// "0x2a": opcodes and one-byte codes.
std::string HexByte(uint8_t value);
// "2.5 s": one decimal, for timeouts and how long something took.
std::string SecondsText(std::chrono::nanoseconds duration);

}  // namespace iser
