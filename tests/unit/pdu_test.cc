// BHS field codec, incoming-header validation, LUN encoding and CRC32C digests.
#include <gtest/gtest.h>

#include <array>
#include <numeric>

#include "initiator/pdu/bhs.h"
#include "initiator/pdu/digest.h"

namespace iser {
namespace {

TEST(Digest, Rfc3720AppendixB4Vectors) {
  std::array<uint8_t, 32> zeros{};
  std::array<uint8_t, 32> ones;
  ones.fill(0xff);
  std::array<uint8_t, 32> inc;
  std::iota(inc.begin(), inc.end(), 0);
  std::array<uint8_t, 32> dec;
  for (int i = 0; i < 32; ++i) dec[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46dd794eu);
  EXPECT_EQ(Crc32c(dec.data(), 32), 0x113fdb5cu);
}

TEST(Digest, IncrementalEqualsOneShotAndWireOrderIsLittleEndian) {
  std::array<uint8_t, 100> data;
  std::iota(data.begin(), data.end(), 7);
  uint32_t running = Crc32cExtend(kCrc32cSeed, data.data(), 33);
  running = Crc32cExtend(running, data.data() + 33, 67);
  EXPECT_EQ(Crc32cFinish(running), Crc32c(data.data(), data.size()));
  uint8_t wire[4];
  StoreDigest(wire, 0x8a9136aa);
  EXPECT_EQ(wire[0], 0xaa);
  EXPECT_EQ(wire[3], 0x8a);
  EXPECT_EQ(LoadDigest(wire), 0x8a9136aau);
}

TEST(Bhs, ScsiCommandFieldsLandAtTheirOffsets) {
  Bhs b;
  b.set_opcode(Opcode::kScsiCommand, false);
  b.set_flags(kFinalBit | kReadBit | 1);
  b.set_data_segment_length(0x012345);
  b.set_lun(EncodeLun(1));
  b.set_itt(0xdeadbeef);
  b.set_u32(bhs::kExpectedDataTransferLength, 65536);
  b.set_u32(bhs::kCmdSN, 0x1000);
  b.set_u32(bhs::kExpStatSN, 7);
  const std::array<uint8_t, 48> expected = {
      0x01, 0xc1, 0,    0,    0, 0x01, 0x23, 0x45,  // opcode, flags, DSL
      0,    1,    0,    0,    0, 0,    0,    0,     // LUN 1 (peripheral addressing)
      0xde, 0xad, 0xbe, 0xef,                       // ITT
      0,    1,    0,    0,                          // EDTL
      0,    0,    0x10, 0,                          // CmdSN
      0,    0,    0,    7,                          // ExpStatSN
      0,    0,    0,    0,    0, 0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0  // CDB
  };
  EXPECT_EQ(b.b, expected);
  EXPECT_EQ(b.opcode(), Opcode::kScsiCommand);
  EXPECT_EQ(b.data_segment_length(), 0x012345u);
  EXPECT_EQ(DecodeLun(b.lun()), 1u);
}

TEST(Bhs, ImmediateBitAndLoginByte) {
  Bhs b;
  b.set_opcode(Opcode::kLoginRequest, true);
  EXPECT_EQ(b.b[0], 0x43);
  EXPECT_TRUE(b.immediate());
  EXPECT_EQ(b.opcode(), Opcode::kLoginRequest);
}

TEST(Lun, FlatAddressingAboveTwoHundredFiftyFive) {
  EXPECT_EQ(EncodeLun(0), 0u);
  EXPECT_EQ(EncodeLun(255), 0x00ff000000000000ULL);
  EXPECT_EQ(EncodeLun(256), 0x4100000000000000ULL);
  EXPECT_EQ(DecodeLun(EncodeLun(16383)), 16383u);
}

TEST(Validate, AcceptsTargetOpcodesAndRejectsOthers) {
  Bhs b;
  b.set_opcode(Opcode::kNopIn, false);
  b.set_flags(kFinalBit);
  EXPECT_TRUE(ValidateTargetBhs(b, 8192, 0).ok());
  b.set_opcode(Opcode::kScsiCommand, false);
  Status st = ValidateTargetBhs(b, 8192, 0);
  EXPECT_EQ(st.code(), StatusCode::kProtocolError);
  EXPECT_NE(st.message().find("unknown opcode 0x01"), std::string::npos) << st.message();
  b.b[0] = 0x3a;
  EXPECT_FALSE(ValidateTargetBhs(b, 8192, 0).ok());
}

TEST(Validate, DataSegmentBeyondNegotiatedLimitIsAnError) {
  Bhs b;
  b.set_opcode(Opcode::kDataIn, false);
  b.set_data_segment_length(8193);
  Status st = ValidateTargetBhs(b, 8192, 0);
  EXPECT_EQ(st.code(), StatusCode::kProtocolError);
  EXPECT_NE(st.message().find("8193"), std::string::npos);
  b.set_data_segment_length(8192);
  EXPECT_TRUE(ValidateTargetBhs(b, 8192, 0).ok());
}

TEST(Validate, AhsLongerThanAllowedAndStatusWithoutFinal) {
  Bhs b;
  b.set_opcode(Opcode::kScsiResponse, false);
  b.set_flags(kFinalBit);
  b.b[4] = 2;
  EXPECT_FALSE(ValidateTargetBhs(b, 8192, 4).ok());
  EXPECT_TRUE(ValidateTargetBhs(b, 8192, 8).ok());
  Bhs d;
  d.set_opcode(Opcode::kDataIn, false);
  d.set_flags(kStatusBit);
  EXPECT_FALSE(ValidateTargetBhs(d, 8192, 0).ok());
  Bhs r;
  r.set_opcode(Opcode::kR2T, false);
  r.set_flags(kFinalBit);
  EXPECT_FALSE(ValidateTargetBhs(r, 8192, 0).ok()) << "R2T with zero desired length";
}

TEST(Pad, ToFourBytes) {
  EXPECT_EQ(PadLength(0), 0u);
  EXPECT_EQ(PadLength(1), 3u);
  EXPECT_EQ(PadLength(4), 0u);
  EXPECT_EQ(PadLength(6), 2u);
}

}  // namespace
}  // namespace iser
