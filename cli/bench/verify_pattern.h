// The data bench --verify writes and checks, in 512-byte units.
//
// Each unit carries its own byte offset on the LUN, the run's seed, the generation of the write
// that put it there (per block, counted by the bench: 1 for the prefill, then one more for each
// write of that block) and a CRC32C over the whole unit except the CRC field; the other bytes
// are pseudo-random, derived from offset, seed and generation. CheckUnit, told what the unit
// at that offset should hold, names what is wrong: a checksum mismatch (corruption), another
// offset (a misplaced write), another seed (data from before this run: a lost write), an older
// generation (a lost write), a newer one (data this run never wrote there).
//
// Layout, in host byte order: [0,8) offset, [8,16) seed, [16,20) generation, [20,24) CRC32C,
// [24,512) pattern.
#pragma once

#include <cstdint>
#include <string>

namespace iser::cli {

inline constexpr uint32_t kVerifyUnit = 512;

enum class UnitVerdict {
  kGood,
  kCorrupted,
  kMisplaced,
  kEarlierRun,
  kLostWrite,
  kUnknownGeneration,
};

// What a bad verdict means, for the report ("checksum mismatch (corrupted data)").
const char* Describe(UnitVerdict verdict);

// unit: kVerifyUnit bytes, written at byte offset on the LUN.
void FillUnit(uint8_t* unit, uint64_t offset, uint64_t seed, uint32_t generation);
UnitVerdict CheckUnit(const uint8_t* unit, uint64_t offset, uint64_t seed, uint32_t generation);

// The same over len bytes (a multiple of kVerifyUnit) at offset, all of one generation.
void FillUnits(uint8_t* buf, uint64_t offset, uint32_t len, uint64_t seed, uint32_t generation);
// Returns how many units are bad; the first bad one is described in *first_error if that is
// still empty ("at byte offset N: <Describe>").
uint64_t CheckUnits(const uint8_t* buf, uint64_t offset, uint32_t len, uint64_t seed,
                    uint32_t generation, std::string* first_error);

}  // namespace iser::cli
