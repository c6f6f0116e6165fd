#include "initiator/login/chap.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace iser {

namespace {

const EVP_MD* Md(ChapAlgorithm a) {
  switch (a) {
    case ChapAlgorithm::kMd5:
      return EVP_md5();
    case ChapAlgorithm::kSha1:
      return EVP_sha1();
    case ChapAlgorithm::kSha256:
      return EVP_sha256();
    case ChapAlgorithm::kSha3_256:
      return EVP_sha3_256();
  }
  return EVP_md5();
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

Result<std::vector<uint8_t>> DecodeHex(std::string_view body) {
  std::vector<uint8_t> out;
  size_t i = 0;
  if (body.size() % 2 == 1) {
    const int v = HexValue(body[0]);
    if (v < 0) return Status::InvalidArgument("bad hex digit in CHAP value");
    out.push_back(static_cast<uint8_t>(v));
    i = 1;
  }
  for (; i < body.size(); i += 2) {
    const int hi = HexValue(body[i]);
    const int lo = HexValue(body[i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("bad hex digit in CHAP value");
    out.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return out;
}

// EVP_DecodeBlock checks the characters but not where '=' stands (it decodes a '=' in the middle
// as zero bits), wants whole 4-character groups, and returns the padding as trailing zero bytes:
// so the shape is checked here, missing padding restored, and the true length computed.
Result<std::vector<uint8_t>> DecodeBase64(std::string_view body) {
  const size_t data = body.find_first_not_of(kBase64Alphabet);
  const size_t digits = data == std::string_view::npos ? body.size() : data;
  const size_t pad = body.size() - digits;
  if (const size_t bad = body.find_first_not_of('=', digits); bad != std::string_view::npos) {
    return Status::InvalidArgument(
        body[digits] == '=' ? std::string("bad base64 in CHAP value: '=' padding before the end")
                            : "bad base64 in CHAP value: '" + std::string(1, body[bad]) +
                                  "' is not a base64 character");
  }
  if (digits % 4 == 1 || pad > 2 || (pad > 0 && (digits + pad) % 4 != 0)) {
    return Status::InvalidArgument("bad base64 in CHAP value: " + std::to_string(digits) +
                                   " characters and " + std::to_string(pad) +
                                   " '=' do not make whole groups of 4");
  }
  std::string padded(body.substr(0, digits));
  padded.append((4 - digits % 4) % 4, '=');
  std::vector<uint8_t> out(padded.size() / 4 * 3);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(padded.data()),
                                static_cast<int>(padded.size()));
  if (n < 0) return Status::InvalidArgument("bad base64 in CHAP value");
  out.resize(digits * 6 / 8);
  return out;
}

}  // namespace

const char* ChapAlgorithmName(ChapAlgorithm a) {
  switch (a) {
    case ChapAlgorithm::kMd5:
      return "MD5";
    case ChapAlgorithm::kSha1:
      return "SHA1";
    case ChapAlgorithm::kSha256:
      return "SHA256";
    case ChapAlgorithm::kSha3_256:
      return "SHA3-256";
  }
  return "unknown";
}

Result<ChapAlgorithm> ParseChapAlgorithmName(std::string_view name) {
  const std::string n = Lower(name);
  if (n == "md5") return ChapAlgorithm::kMd5;
  if (n == "sha1" || n == "sha-1") return ChapAlgorithm::kSha1;
  if (n == "sha256" || n == "sha-256") return ChapAlgorithm::kSha256;
  if (n == "sha3-256" || n == "sha3_256") return ChapAlgorithm::kSha3_256;
  return Status::InvalidArgument("unknown CHAP algorithm '" + std::string(name) +
                                 "' (use md5, sha1, sha-256 or sha3-256)");
}

Result<std::vector<ChapAlgorithm>> ParseChapAlgorithmList(std::string_view list) {
  std::vector<ChapAlgorithm> out;
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    if (name.empty()) {
      return Status::InvalidArgument("empty name in the CHAP algorithm list");
    }
    Result<ChapAlgorithm> a = ParseChapAlgorithmName(name);
    if (!a.ok()) return a.status();
    if (std::find(out.begin(), out.end(), *a) != out.end()) {
      return Status::InvalidArgument("CHAP algorithm '" + std::string(name) + "' is listed twice");
    }
    out.push_back(*a);
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

std::string ChapAlgorithmOffer(std::span<const ChapAlgorithm> algorithms) {
  std::string out;
  for (ChapAlgorithm a : algorithms) {
    if (!out.empty()) out += ",";
    out += std::to_string(static_cast<int>(a));
  }
  return out;
}

std::string ChapFailureHint(std::span<const ChapAlgorithm> refused) {
  if (refused.empty()) return "check the CHAP user name and secret";
  auto is_refused = [&](ChapAlgorithm a) {
    return std::find(refused.begin(), refused.end(), a) != refused.end();
  };
  std::string names;
  for (ChapAlgorithm a : refused) {
    names += (names.empty() ? "" : ", ") + std::string(ChapAlgorithmName(a));
  }
  std::string hint = "the target refused or could not verify " + names;
  std::string others;
  if (!is_refused(ChapAlgorithm::kMd5)) {
    others = Lower(ChapAlgorithmName(ChapAlgorithm::kMd5));
  } else {
    // SHA-256 first: after MD5 it is the one targets implement most.
    for (ChapAlgorithm a :
         {ChapAlgorithm::kSha256, ChapAlgorithm::kSha3_256, ChapAlgorithm::kSha1}) {
      if (!is_refused(a)) others += (others.empty() ? "" : ",") + Lower(ChapAlgorithmName(a));
    }
  }
  if (others.empty()) return hint + ", and we implement no other CHAP algorithm";
  return hint + ": try auth=" + others + " in the URL";
}

Result<ChapAlgorithm> ParseChapAlgorithmNumber(std::string_view number) {
  if (number == "5") return ChapAlgorithm::kMd5;
  if (number == "6") return ChapAlgorithm::kSha1;
  if (number == "7") return ChapAlgorithm::kSha256;
  if (number == "8") return ChapAlgorithm::kSha3_256;
  return Status::NotSupported("CHAP_A=" + std::string(number) + " is not an algorithm we know");
}

std::vector<uint8_t> ChapResponse(ChapAlgorithm a, uint8_t identifier,
                                  std::span<const uint8_t> secret,
                                  std::span<const uint8_t> challenge) {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  // A provider may refuse an algorithm (MD5 under FIPS): the empty response then fails the
  // login as an authentication error instead of sending a wrong digest.
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, Md(a), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, &identifier, 1) == 1 &&
                  EVP_DigestUpdate(ctx, secret.data(), secret.size()) == 1 &&
                  EVP_DigestUpdate(ctx, challenge.data(), challenge.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out.data(), &len) == 1;
  EVP_MD_CTX_free(ctx);
  out.resize(ok ? len : 0);
  return out;
}

Result<std::vector<uint8_t>> DecodeChapBinary(std::string_view text) {
  if (text.size() < 3 || text[0] != '0') {
    return Status::InvalidArgument("CHAP value must start with 0x (hex) or 0b (base64)");
  }
  const char form = static_cast<char>(std::tolower(static_cast<unsigned char>(text[1])));
  if (form == 'x') return DecodeHex(text.substr(2));
  if (form == 'b') return DecodeBase64(text.substr(2));
  return Status::InvalidArgument("CHAP value must start with 0x (hex) or 0b (base64)");
}

std::string EncodeChapHex(std::span<const uint8_t> bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::vector<uint8_t> ChapRandomBytes(size_t n) {
  std::vector<uint8_t> out(n);
  if (RAND_bytes(out.data(), static_cast<int>(n)) != 1) {
    // Without a working CSPRNG a CHAP challenge would be guessable: refuse to go on.
    std::fprintf(stderr, "iser-connect: OpenSSL RAND_bytes failed\n");
    std::abort();
  }
  return out;
}

}  // namespace iser
