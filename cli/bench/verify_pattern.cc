#include "cli/bench/verify_pattern.h"

#include <cstring>

#include "initiator/base/crc32c.h"

namespace iser::cli {

namespace {

constexpr uint32_t kOffsetAt = 0;
constexpr uint32_t kSeedAt = 8;
constexpr uint32_t kGenerationAt = 16;
constexpr uint32_t kCrcAt = 20;
constexpr uint32_t kPatternAt = 24;

uint32_t UnitCrc(const uint8_t* unit) {
  const uint32_t head = Crc32cExtend(kCrc32cSeed, unit, kCrcAt);
  return Crc32cFinish(Crc32cExtend(head, unit + kPatternAt, kVerifyUnit - kPatternAt));
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

const char* Describe(UnitVerdict verdict) {
  switch (verdict) {
    case UnitVerdict::kGood:
      return "good";
    case UnitVerdict::kCorrupted:
      return "checksum mismatch (corrupted data)";
    case UnitVerdict::kMisplaced:
      return "data written for another offset (misplaced write)";
    case UnitVerdict::kEarlierRun:
      return "data from before this run (lost write)";
    case UnitVerdict::kLostWrite:
      return "data of an older write to this block (lost write)";
    case UnitVerdict::kUnknownGeneration:
      return "data of a write this run never made to this block";
  }
  return "unknown verdict";
}

void FillUnit(uint8_t* unit, uint64_t offset, uint64_t seed, uint32_t generation) {
  std::memcpy(unit + kOffsetAt, &offset, 8);
  std::memcpy(unit + kSeedAt, &seed, 8);
  std::memcpy(unit + kGenerationAt, &generation, 4);
  // xorshift64, seeded so that units differ in every byte when offset, seed or generation do.
  uint64_t s = (offset * 0x9e3779b97f4a7c15ULL) ^ seed ^
               (static_cast<uint64_t>(generation) * 0xc2b2ae3d27d4eb4fULL) ^ 0x5bd1e995;
  if (s == 0) s = 1;
  for (uint32_t i = kPatternAt; i < kVerifyUnit; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::memcpy(unit + i, &s, 8);
  }
  const uint32_t crc = UnitCrc(unit);
  std::memcpy(unit + kCrcAt, &crc, 4);
}

UnitVerdict CheckUnit(const uint8_t* unit, uint64_t offset, uint64_t seed, uint32_t generation) {
  if (UnitCrc(unit) != Load<uint32_t>(unit + kCrcAt)) return UnitVerdict::kCorrupted;
  if (Load<uint64_t>(unit + kOffsetAt) != offset) return UnitVerdict::kMisplaced;
  if (Load<uint64_t>(unit + kSeedAt) != seed) return UnitVerdict::kEarlierRun;
  const uint32_t got = Load<uint32_t>(unit + kGenerationAt);
  if (got < generation) return UnitVerdict::kLostWrite;
  if (got > generation) return UnitVerdict::kUnknownGeneration;
  return UnitVerdict::kGood;
}

void FillUnits(uint8_t* buf, uint64_t offset, uint32_t len, uint64_t seed, uint32_t generation) {
  for (uint32_t i = 0; i < len; i += kVerifyUnit) FillUnit(buf + i, offset + i, seed, generation);
}

uint64_t CheckUnits(const uint8_t* buf, uint64_t offset, uint32_t len, uint64_t seed,
                    uint32_t generation, std::string* first_error) {
  uint64_t bad = 0;
  for (uint32_t i = 0; i < len; i += kVerifyUnit) {
    const UnitVerdict v = CheckUnit(buf + i, offset + i, seed, generation);
    if (v == UnitVerdict::kGood) continue;
    if (first_error->empty()) {
      *first_error = "at byte offset " + std::to_string(offset + i) + ": " + Describe(v);
    }
    ++bad;
  }
  return bad;
}

}  // namespace iser::cli
