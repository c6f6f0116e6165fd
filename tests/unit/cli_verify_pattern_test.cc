// bench --verify's units: a round trip is good, and each way data can go wrong (corruption, a
// write at the wrong offset, a lost write of this run or data from before it) is reported as such.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/bench/verify_pattern.h"

namespace iser::cli {
namespace {

constexpr uint64_t kSeed = 0x1234567890abcdefULL;

TEST(VerifyPattern, RoundTrip) {
  std::vector<uint8_t> block(4096);
  FillUnits(block.data(), 8192, 4096, kSeed, 3);
  std::string error;
  EXPECT_EQ(CheckUnits(block.data(), 8192, 4096, kSeed, 3, &error), 0u);
  EXPECT_TRUE(error.empty()) << error;
  for (uint32_t i = 0; i < 4096; i += kVerifyUnit) {
    EXPECT_EQ(CheckUnit(block.data() + i, 8192 + i, kSeed, 3), UnitVerdict::kGood);
  }
}

TEST(VerifyPattern, UnitsDifferByOffsetSeedAndGeneration) {
  std::vector<uint8_t> a(kVerifyUnit), b(kVerifyUnit);
  FillUnit(a.data(), 0, kSeed, 1);
  FillUnit(b.data(), 512, kSeed, 1);
  EXPECT_NE(a, b);
  FillUnit(b.data(), 0, kSeed + 2, 1);
  EXPECT_NE(a, b);
  FillUnit(b.data(), 0, kSeed, 2);
  EXPECT_NE(a, b);
  FillUnit(b.data(), 0, kSeed, 1);
  EXPECT_EQ(a, b);
}

TEST(VerifyPattern, AnyFlippedBitIsCorruption) {
  std::vector<uint8_t> unit(kVerifyUnit);
  FillUnit(unit.data(), 4096, kSeed, 1);
  for (uint32_t byte : {0u, 9u, 17u, 21u, 24u, 300u, 511u}) {
    std::vector<uint8_t> bad = unit;
    bad[byte] ^= 0x10;
    EXPECT_EQ(CheckUnit(bad.data(), 4096, kSeed, 1), UnitVerdict::kCorrupted) << "byte " << byte;
  }
  std::vector<uint8_t> zeroes(kVerifyUnit);
  EXPECT_EQ(CheckUnit(zeroes.data(), 4096, kSeed, 1), UnitVerdict::kCorrupted);
}

TEST(VerifyPattern, MisplacedWrite) {
  std::vector<uint8_t> unit(kVerifyUnit);
  FillUnit(unit.data(), 4096, kSeed, 2);
  EXPECT_EQ(CheckUnit(unit.data(), 8192, kSeed, 2), UnitVerdict::kMisplaced);
}

TEST(VerifyPattern, LostWriteLeavesAnOlderGeneration) {
  // The prefill wrote generation 1; the run wrote generation 2 there, which never arrived.
  std::vector<uint8_t> block(4096);
  FillUnits(block.data(), 65536, 4096, kSeed, 1);
  std::string error;
  EXPECT_EQ(CheckUnits(block.data(), 65536, 4096, kSeed, 2, &error), 4096u / kVerifyUnit);
  EXPECT_EQ(error, "at byte offset 65536: data of an older write to this block (lost write)");
  EXPECT_EQ(CheckUnit(block.data(), 65536, kSeed, 2), UnitVerdict::kLostWrite);
}

TEST(VerifyPattern, DataFromAnEarlierRun) {
  std::vector<uint8_t> unit(kVerifyUnit);
  FillUnit(unit.data(), 0, kSeed ^ 0x100, 5);
  EXPECT_EQ(CheckUnit(unit.data(), 0, kSeed, 5), UnitVerdict::kEarlierRun);
}

TEST(VerifyPattern, NewerGenerationThanWritten) {
  std::vector<uint8_t> unit(kVerifyUnit);
  FillUnit(unit.data(), 0, kSeed, 4);
  EXPECT_EQ(CheckUnit(unit.data(), 0, kSeed, 3), UnitVerdict::kUnknownGeneration);
}

TEST(VerifyPattern, CountsEachBadUnitAndNamesTheFirst) {
  std::vector<uint8_t> block(8 * kVerifyUnit);
  FillUnits(block.data(), 0, 8 * kVerifyUnit, kSeed, 7);
  block[3 * kVerifyUnit + 100] ^= 1;
  FillUnit(block.data() + 5 * kVerifyUnit, 5 * kVerifyUnit, kSeed, 6);  // a torn, older write
  std::string error;
  EXPECT_EQ(CheckUnits(block.data(), 0, 8 * kVerifyUnit, kSeed, 7, &error), 2u);
  EXPECT_EQ(error, "at byte offset 1536: checksum mismatch (corrupted data)");
  std::string kept = "an earlier error";
  EXPECT_EQ(CheckUnits(block.data(), 0, 8 * kVerifyUnit, kSeed, 7, &kept), 2u);
  EXPECT_EQ(kept, "an earlier error");
}

}  // namespace
}  // namespace iser::cli
