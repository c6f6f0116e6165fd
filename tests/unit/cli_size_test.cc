// iser-connect's byte-count options (--bs, --size): every accepted form, and every bad one an
// InvalidArgument naming the option and the text, never a wrapped or saturated number.
#include <gtest/gtest.h>

#include <string>

#include "cli/size.h"

namespace iser::cli {
namespace {

uint64_t Parsed(const std::string& text) {
  Result<uint64_t> r = ParseSize("--size", text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : 0;
}

void ExpectRejected(const std::string& text, const std::string& why, uint64_t min = 0,
                    uint64_t max = UINT64_MAX) {
  Result<uint64_t> r = ParseSize("--bs", text, min, max);
  ASSERT_FALSE(r.ok()) << "'" << text << "' parsed as " << *r;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string message = r.status().ToString();
  EXPECT_NE(message.find("--bs '" + text + "'"), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message;
}

TEST(CliSize, UnitsArePowersOf1024InAnyCase) {
  EXPECT_EQ(Parsed("4096"), 4096u);
  EXPECT_EQ(Parsed("0"), 0u);
  EXPECT_EQ(Parsed("512b"), 512u);
  EXPECT_EQ(Parsed("4k"), 4096u);
  EXPECT_EQ(Parsed("4K"), 4096u);
  EXPECT_EQ(Parsed("4kb"), 4096u);
  EXPECT_EQ(Parsed("4KiB"), 4096u);
  EXPECT_EQ(Parsed("1m"), 1u << 20);
  EXPECT_EQ(Parsed("3MiB"), 3u << 20);
  EXPECT_EQ(Parsed("2g"), 2ull << 30);
  EXPECT_EQ(Parsed("5T"), 5ull << 40);
  EXPECT_EQ(Parsed("7pib"), 7ull << 50);
}

TEST(CliSize, LargestValuesFitExactly) {
  EXPECT_EQ(Parsed("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(Parsed("16383p"), 16383ull << 50);
  EXPECT_EQ(Parsed("17179869183g"), 17179869183ull << 30);
}

TEST(CliSize, OverflowIsAnErrorNotAWrap) {
  ExpectRejected("18446744073709551616", "too large");
  ExpectRejected("99999999999999999999999", "too large");
  ExpectRejected("17179869184g", "too large");  // 2^34 GiB = 2^64 bytes, used to wrap to 0
  ExpectRejected("16384p", "too large");
  ExpectRejected("18014398509481984k", "too large");
}

TEST(CliSize, SignsSpacesAndGarbageAreErrors) {
  ExpectRejected("-1", "not a size");
  ExpectRejected("+4k", "not a size");
  ExpectRejected(" 4k", "not a size");
  ExpectRejected("", "empty");
  ExpectRejected("k", "not a size");
  ExpectRejected("0x10", "unknown unit");
  ExpectRejected("1.5m", "unknown unit");
  ExpectRejected("4k ", "unknown unit");
  ExpectRejected("4kk", "unknown unit");
  ExpectRejected("4e", "unknown unit");
  ExpectRejected("4kibb", "unknown unit");
  ExpectRejected("4ib", "unknown unit");
}

TEST(CliSize, BoundsAreEnforced) {
  ExpectRejected("0", "between 1 B and 64.0 MiB", 1, 64u << 20);
  ExpectRejected("65537k", "between 1 B and 64.0 MiB", 1, 64u << 20);
  ExpectRejected("1k", "at least 4.0 KiB", 4096);
  Result<uint64_t> r = ParseSize("--bs", "64m", 1, 64u << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 64u << 20);
}

TEST(CliSize, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(32u << 20), "32.0 MiB");
}

}  // namespace
}  // namespace iser::cli
