// CHAP responses, algorithm names, the CHAP_A offer, failure advice and binary value encodings.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>

#include "initiator/login/chap.h"
#include "initiator/login/login.h"

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
}

TEST(Chap, TheDefaultOfferIsMd5Alone) {
  EXPECT_EQ(ChapAlgorithmOffer(ChapCredentials{}.algorithms), "5");
}

TEST(Chap, AListIsOfferedInItsOrder) {
  Result<std::vector<ChapAlgorithm>> list = ParseChapAlgorithmList("sha-256,md5");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(ChapAlgorithmOffer(*list), "7,5");
  list = ParseChapAlgorithmList("MD5,sha3-256,SHA1,sha256");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(ChapAlgorithmOffer(*list), "5,8,6,7");
  list = ParseChapAlgorithmList("sha1");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(ChapAlgorithmOffer(*list), "6");
}

TEST(Chap, BadListsNameTheCulprit) {
  const Status twice = ParseChapAlgorithmList("md5,sha-256,MD5").status();
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("'MD5' is listed twice"), std::string::npos) << twice.message();
  EXPECT_FALSE(ParseChapAlgorithmList("sha256,sha-256").ok()) << "two spellings of one algorithm";
  const Status unknown = ParseChapAlgorithmList("md5,des").status();
  EXPECT_NE(unknown.message().find("unknown CHAP algorithm 'des'"), std::string::npos)
      << unknown.message();
  for (const char* empty : {"", ",", "md5,", ",md5", "md5,,sha1"}) {
    const Status st = ParseChapAlgorithmList(empty).status();
    EXPECT_NE(st.message().find("empty name"), std::string::npos) << empty << ": " << st.message();
  }
}

// The algorithms a hint tells the user to try: the list after "auth=", parsed as the URL would.
std::vector<ChapAlgorithm> Suggested(const std::string& hint) {
  const size_t at = hint.find("auth=");
  if (at == std::string::npos) return {};
  const size_t start = at + 5;
  Result<std::vector<ChapAlgorithm>> list =
      ParseChapAlgorithmList(hint.substr(start, hint.find(' ', start) - start));
  EXPECT_TRUE(list.ok()) << hint;
  return list.ok() ? *list : std::vector<ChapAlgorithm>{};
}

TEST(Chap, FailureHintNeverSuggestsARefusedAlgorithm) {
  const std::vector<ChapAlgorithm> all = {ChapAlgorithm::kMd5, ChapAlgorithm::kSha1,
                                          ChapAlgorithm::kSha256, ChapAlgorithm::kSha3_256};
  for (unsigned mask = 1; mask < 16; ++mask) {
    std::vector<ChapAlgorithm> refused;
    for (size_t b = 0; b < all.size(); ++b) {
      if (mask & 1u << b) refused.push_back(all[b]);
    }
    const std::string hint = ChapFailureHint(refused);
    const std::vector<ChapAlgorithm> suggested = Suggested(hint);
    for (ChapAlgorithm s : suggested) {
      EXPECT_EQ(std::find(refused.begin(), refused.end(), s), refused.end())
          << "mask " << mask << ": " << hint;
    }
    EXPECT_EQ(suggested.empty(), refused.size() == all.size()) << hint;
    if (std::find(refused.begin(), refused.end(), ChapAlgorithm::kMd5) == refused.end()) {
      EXPECT_EQ(suggested, std::vector<ChapAlgorithm>{ChapAlgorithm::kMd5}) << hint;
    }
    for (ChapAlgorithm r : refused) {
      EXPECT_NE(hint.find(ChapAlgorithmName(r)), std::string::npos)
          << "names what failed: " << hint;
    }
  }
}

TEST(Chap, FailureHintWithNothingRefusedPointsAtTheCredentials) {
  const std::string hint = ChapFailureHint({});
  EXPECT_NE(hint.find("user name and secret"), std::string::npos) << hint;
  EXPECT_EQ(hint.find("auth="), std::string::npos) << hint;
}

TEST(Chap, DecodesHex) {
  EXPECT_EQ(*DecodeChapBinary("0x0aFF"), (std::vector<uint8_t>{0x0a, 0xff}));
  EXPECT_EQ(*DecodeChapBinary("0Xabc"), (std::vector<uint8_t>{0x0a, 0xbc})) << "odd digit count";
  EXPECT_FALSE(DecodeChapBinary("abc").ok());
  EXPECT_FALSE(DecodeChapBinary("0x").ok());
  EXPECT_FALSE(DecodeChapBinary("0xzz").ok());
  EXPECT_FALSE(DecodeChapBinary("0y00").ok());
}

std::vector<uint8_t> Bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

// RFC 4648 §10's test vectors, with and without their padding.
TEST(Chap, DecodesBase64WithAndWithoutPadding) {
  const std::pair<const char*, const char*> vectors[] = {
      {"f", "Zg=="},        {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    Result<std::vector<uint8_t>> got = DecodeChapBinary(std::string("0b") + encoded);
    ASSERT_TRUE(got.ok()) << encoded << ": " << got.status().ToString();
    EXPECT_EQ(*got, Bytes(plain)) << encoded;
    std::string unpadded(encoded);
    unpadded.erase(unpadded.find_last_not_of('=') + 1);
    got = DecodeChapBinary("0B" + unpadded);
    ASSERT_TRUE(got.ok()) << unpadded << ": " << got.status().ToString();
    EXPECT_EQ(*got, Bytes(plain)) << unpadded;
  }
  // Padding must not turn into zero bytes, while real zero bytes stay.
  EXPECT_EQ(*DecodeChapBinary("0bAA=="), std::vector<uint8_t>{0});
  EXPECT_EQ(*DecodeChapBinary("0bAAA="), (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(*DecodeChapBinary("0bAAAA"), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ(*DecodeChapBinary("0b+/+/"), (std::vector<uint8_t>{0xfb, 0xff, 0xbf}));
}

TEST(Chap, RejectsInvalidBase64Clearly) {
  for (const char* bad : {"0b!!!!", "0bZm9v!", "0bZm 9v", "0bZm9v\n", "0bZm9-", "0bZm9_"}) {
    const Status st = DecodeChapBinary(bad).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("is not a base64 character"), std::string::npos)
        << bad << ": " << st.message();
  }
  for (const char* bad : {"0bA=B=", "0bZg=g", "0b=Zg="}) {
    const Status st = DecodeChapBinary(bad).status();
    EXPECT_NE(st.message().find("'=' padding before the end"), std::string::npos)
        << bad << ": " << st.message();
  }
  for (const char* bad : {"0bZ", "0bZm9vY", "0bZg=", "0bZm8==", "0bZm9v=", "0bZg===", "0b===="}) {
    const Status st = DecodeChapBinary(bad).status();
    EXPECT_NE(st.message().find("whole groups of 4"), std::string::npos)
        << bad << ": " << st.message();
  }
  EXPECT_FALSE(DecodeChapBinary("0b").ok());
}

// Every length from 1 to 100 bytes, so each padding case comes up many times: base64 written by
// OpenSSL's encoder (as a target would send it) and our own hex both decode to the bytes.
TEST(Chap, RoundTrips) {
  std::mt19937 rng(7143);
  for (size_t len = 1; len <= 100; ++len) {
    std::vector<uint8_t> bytes(len);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    std::string b64((len + 2) / 3 * 4 + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), bytes.data(),
                                  static_cast<int>(len));
    b64.resize(static_cast<size_t>(n));
    Result<std::vector<uint8_t>> got = DecodeChapBinary("0b" + b64);
    ASSERT_TRUE(got.ok()) << b64 << ": " << got.status().ToString();
    EXPECT_EQ(*got, bytes) << b64;
    got = DecodeChapBinary(EncodeChapHex(bytes));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, bytes) << len;
  }
}

TEST(Chap, RandomBytesDiffer) {
  EXPECT_EQ(ChapRandomBytes(32).size(), 32u);
  EXPECT_NE(ChapRandomBytes(16), ChapRandomBytes(16));
}

}  // namespace
}  // namespace iser
