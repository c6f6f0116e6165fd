// CHAP for iSCSI login (RFC 7143 §12.1.3, RFC 1994), with the digest algorithms that Linux and
// open-iscsi negotiate through CHAP_A: 5 = MD5, 6 = SHA-1, 7 = SHA-256, 8 = SHA3-256. Hashes come
// from OpenSSL's EVP interface.
//
// Response = H(identifier byte || secret || challenge). Binary values travel as "0x" + hex (we
// send that) or "0b" + base64 (we accept both; RFC 7143 §6.1).
//
// We offer MD5 alone unless told otherwise, as open-iscsi (node.session.auth.chap_algs) and
// libiscsi do: it is the algorithm every target implements, while some get the others wrong (tgt
// 1.0.85 picks SHA-256 from a longer list and then cannot check the response). Stronger ones are
// opt-in, in the user's order of preference.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "initiator/base/status.h"

namespace iser {

enum class ChapAlgorithm : uint8_t { kMd5 = 5, kSha1 = 6, kSha256 = 7, kSha3_256 = 8 };

inline constexpr std::array<ChapAlgorithm, 1> kDefaultChapAlgorithms{ChapAlgorithm::kMd5};

// "MD5", "SHA1", "SHA256", "SHA3-256".
const char* ChapAlgorithmName(ChapAlgorithm a);
// Accepts the names above case-insensitively plus the URL spellings "md5", "sha1", "sha-1",
// "sha-256", "sha256", "sha3-256".
Result<ChapAlgorithm> ParseChapAlgorithmName(std::string_view name);
// A comma list of those names in order of preference ("sha-256,md5"). InvalidArgument naming the
// culprit for an unknown name, an empty item or a name given twice.
Result<std::vector<ChapAlgorithm>> ParseChapAlgorithmList(std::string_view list);
// The CHAP_A value offering `algorithms` in that order: "7,5".
std::string ChapAlgorithmOffer(std::span<const ChapAlgorithm> algorithms);
// Parses a CHAP_A value ("5", "7", ...); NotSupported for numbers we do not implement.
Result<ChapAlgorithm> ParseChapAlgorithmNumber(std::string_view number);

// Advice to append to a failed CHAP login. `refused`: the algorithms the target refused or could
// not verify during this login; the advice never suggests one of them (it suggests auth=md5
// while MD5 is not among them). Empty `refused` means the target took our algorithm and found
// the response wrong, so the advice is to check the user name and secret.
std::string ChapFailureHint(std::span<const ChapAlgorithm> refused);

std::vector<uint8_t> ChapResponse(ChapAlgorithm a, uint8_t identifier,
                                  std::span<const uint8_t> secret,
                                  std::span<const uint8_t> challenge);

// "0x..." (hex, either case; an odd digit count has its leading zero left out) or "0b..."
// (base64, RFC 4648 alphabet, "=" padding optional). InvalidArgument on anything else or empty.
Result<std::vector<uint8_t>> DecodeChapBinary(std::string_view text);
std::string EncodeChapHex(std::span<const uint8_t> bytes);  // "0x" + lowercase hex

// Cryptographically random bytes (OpenSSL RAND_bytes), for challenges and identifiers.
std::vector<uint8_t> ChapRandomBytes(size_t n);

}  // namespace iser
