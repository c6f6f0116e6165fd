// The key=value text codec and the accumulator for multi-PDU text.
#include <gtest/gtest.h>

#include <string>

#include "initiator/text/text.h"

namespace iser {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Text, EncodesPairsWithNulTerminators) {
  const std::string wire = EncodeText({{"InitiatorName", "iqn.x"}, {"AuthMethod", "None"}});
  EXPECT_EQ(wire, std::string("InitiatorName=iqn.x\0AuthMethod=None\0", 36));
}

TEST(Text, RoundTripKeepsOrderAndEmptyValues) {
  const TextPairs pairs = {{"A", "1"}, {"B", ""}, {"A", "2"}, {"X-com.example.Key", "v=w"}};
  Result<TextPairs> back = ParseText(Bytes(EncodeText(pairs)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, pairs);
}

TEST(Text, TrailingPaddingIsAccepted) {
  Result<TextPairs> p = ParseText(Bytes(std::string("K=v\0\0\0\0", 8)));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 1u);
}

TEST(Text, RejectsMalformedPairs) {
  EXPECT_FALSE(ParseText(Bytes(std::string("NoEquals\0", 9))).ok());
  EXPECT_FALSE(ParseText(Bytes(std::string("K=unterminated", 14))).ok());
  EXPECT_FALSE(ParseText(Bytes(std::string("=v\0", 3))).ok());
  EXPECT_FALSE(ParseText(Bytes(std::string("Bad Key=v\0", 10))).ok());
  EXPECT_FALSE(ParseText(Bytes(std::string("K=v\0\0L=w\0", 9))).ok()) << "pair after padding";
  const std::string long_key(64, 'k');
  EXPECT_FALSE(ParseText(Bytes(long_key + "=v" + std::string(1, '\0'))).ok());
  const std::string long_value(kMaxTextValueLength + 1, 'v');
  EXPECT_FALSE(ParseText(Bytes("K=" + long_value + std::string(1, '\0'))).ok());
  Status st = ParseText(Bytes(std::string("garbage\0", 8))).status();
  EXPECT_NE(st.message().find("garbage"), std::string::npos) << st.message();
}

TEST(TextAccumulator, JoinsPairsSplitAcrossSegments) {
  TextAccumulator acc;
  const std::string all =
      EncodeText({{"TargetName", "iqn.2026-11.example:a"}, {"TargetAddress", "10.0.0.1:3260,1"}});
  ASSERT_TRUE(acc.Append(Bytes(all.substr(0, 7))).ok());  // split inside a key
  ASSERT_TRUE(acc.Append(Bytes(all.substr(7, 20))).ok());
  ASSERT_TRUE(acc.Append(Bytes(all.substr(27))).ok());
  Result<TextPairs> p = acc.Finish();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1].value, "10.0.0.1:3260,1");
  EXPECT_EQ(acc.size(), 0u);
}

TEST(TextAccumulator, BoundsTheTotal) {
  TextAccumulator acc(16);
  EXPECT_TRUE(acc.Append(Bytes(std::string(10, 'a'))).ok());
  EXPECT_FALSE(acc.Append(Bytes(std::string(7, 'a'))).ok());
}

TEST(Text, FindKey) {
  const TextPairs p = {{"A", "1"}, {"B", "2"}};
  ASSERT_NE(FindKey(p, "B"), nullptr);
  EXPECT_EQ(FindKey(p, "B")->value, "2");
  EXPECT_EQ(FindKey(p, "C"), nullptr);
}

}  // namespace
}  // namespace iser
