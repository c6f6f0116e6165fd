// CHAP responses, algorithm names and binary value encodings.
#include <gtest/gtest.h>

#include "initiator/login/chap.h"

namespace iser {
namespace {

// Expected values computed independently with the OpenSSL command line:
//   printf '\x01secret\x0a\x0b\x0c\x0d' | openssl dgst -md5 (and -sha1, -sha256, -sha3-256)
TEST(Chap, ResponsesMatchIndependentlyComputedVectors) {
  const std::vector<uint8_t> secret = {'s', 'e', 'c', 'r', 'e', 't'};
  const std::vector<uint8_t> challenge = {0x0a, 0x0b, 0x0c, 0x0d};
  EXPECT_EQ(EncodeChapHex(ChapResponse(ChapAlgorithm::kMd5, 1, secret, challenge)),
            "0xa8da0387c9b287629085bcbd3e9f9490");
  EXPECT_EQ(EncodeChapHex(ChapResponse(ChapAlgorithm::kSha1, 1, secret, challenge)),
            "0xbce21b202314171129a9231d7522ec98373f4fcc");
  EXPECT_EQ(EncodeChapHex(ChapResponse(ChapAlgorithm::kSha256, 1, secret, challenge)),
            "0x5889b20858f223453de3e4ddfddd4ad9f80a37dc64441f3123557eebdd57f41d");
  EXPECT_EQ(EncodeChapHex(ChapResponse(ChapAlgorithm::kSha3_256, 1, secret, challenge)),
            "0x5d998962c63da3b1575ec2a3a6a901c2ffa05c8f16349fb0fe779ccf1c0e0355");
}

TEST(Chap, IdentifierIsPartOfTheHash) {
  const std::vector<uint8_t> s = {1, 2, 3};
  const std::vector<uint8_t> c = {4, 5, 6};
  EXPECT_NE(ChapResponse(ChapAlgorithm::kMd5, 1, s, c), ChapResponse(ChapAlgorithm::kMd5, 2, s, c));
}

TEST(Chap, AlgorithmNamesAndNumbers) {
  EXPECT_EQ(*ParseChapAlgorithmName("sha-256"), ChapAlgorithm::kSha256);
  EXPECT_EQ(*ParseChapAlgorithmName("SHA3-256"), ChapAlgorithm::kSha3_256);
  EXPECT_EQ(*ParseChapAlgorithmName("md5"), ChapAlgorithm::kMd5);
  EXPECT_EQ(*ParseChapAlgorithmName("sha1"), ChapAlgorithm::kSha1);
  EXPECT_FALSE(ParseChapAlgorithmName("sha512").ok());
  EXPECT_EQ(*ParseChapAlgorithmNumber("5"), ChapAlgorithm::kMd5);
  EXPECT_EQ(*ParseChapAlgorithmNumber("8"), ChapAlgorithm::kSha3_256);
  EXPECT_EQ(ParseChapAlgorithmNumber("9").status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kMd5), 16u);
  EXPECT_EQ(ChapDigestLength(ChapAlgorithm::kSha3_256), 32u);
}

TEST(Chap, DecodesHexAndBase64) {
  EXPECT_EQ(*DecodeChapBinary("0x0aFF"), (std::vector<uint8_t>{0x0a, 0xff}));
  EXPECT_EQ(*DecodeChapBinary("0Xabc"), (std::vector<uint8_t>{0x0a, 0xbc})) << "odd digit count";
  EXPECT_EQ(*DecodeChapBinary("0bAQID"), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(*DecodeChapBinary("0bAQI="), (std::vector<uint8_t>{1, 2}));
  EXPECT_FALSE(DecodeChapBinary("abc").ok());
  EXPECT_FALSE(DecodeChapBinary("0x").ok());
  EXPECT_FALSE(DecodeChapBinary("0xzz").ok());
  EXPECT_FALSE(DecodeChapBinary("0b!!!!").ok());
  EXPECT_FALSE(DecodeChapBinary("0bA=B=").ok());
}

TEST(Chap, RandomBytesDiffer) {
  EXPECT_EQ(ChapRandomBytes(32).size(), 32u);
  EXPECT_NE(ChapRandomBytes(16), ChapRandomBytes(16));
}

}  // namespace
}  // namespace iser
