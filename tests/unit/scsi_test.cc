// CDB builders and the parsers for data targets return, on byte vectors; sense decoding.
#include <gtest/gtest.h>

#include <vector>

#include "initiator/scsi/commands.h"
#include "initiator/scsi/sense.h"

namespace iser::scsi {
namespace {

TEST(Cdb, ReadUsesTenByteFormWhenItFitsElseSixteen) {
  Task t;
  uint8_t buf[4096];
  Read(t, 0x12345678, 8, buf, 4096);
  EXPECT_EQ(t.cdb_length, 10);
  EXPECT_EQ(t.cdb[0], 0x28);
  EXPECT_EQ(t.cdb[2], 0x12);
  EXPECT_EQ(t.cdb[5], 0x78);
  EXPECT_EQ(t.cdb[8], 8);
  EXPECT_EQ(t.direction, DataDirection::kRead);
  Read(t, 0x100000000ULL, 8, buf, 4096);
  EXPECT_EQ(t.cdb_length, 16);
  EXPECT_EQ(t.cdb[0], 0x88);
  EXPECT_EQ(t.cdb[5], 0x01);
  EXPECT_EQ(t.cdb[13], 8);
  Read(t, 0, 0x10000, buf, 0x10000 * 512);
  EXPECT_EQ(t.cdb[0], 0x88) << "65536 blocks do not fit READ(10)";
}

TEST(Cdb, WriteFuaAndWriteSameUnmap) {
  Task t;
  uint8_t buf[512] = {};
  Write(t, 5, 1, buf, 512, true);
  EXPECT_EQ(t.cdb[0], 0x2a);
  EXPECT_EQ(t.cdb[1] & 0x08, 0x08);
  WriteSame16(t, 7, 100, buf, 512, true);
  EXPECT_EQ(t.cdb[0], 0x93);
  EXPECT_EQ(t.cdb[1], 0x08);
  EXPECT_EQ(t.cdb[9], 7);
  EXPECT_EQ(t.cdb[13], 100);
  EXPECT_EQ(t.transfer_length, 512u);
}

TEST(Unmap, ParameterList) {
  std::vector<UnmapRange> ranges = {{0x10, 8}, {0x100000000ULL, 2}};
  uint8_t buf[64];
  const uint32_t len = BuildUnmapParameters(ranges, buf);
  EXPECT_EQ(len, 40u);
  EXPECT_EQ(buf[1], 38);  // UNMAP DATA LENGTH
  EXPECT_EQ(buf[3], 32);  // BLOCK DESCRIPTOR DATA LENGTH
  EXPECT_EQ(buf[15], 0x10);
  EXPECT_EQ(buf[19], 8);
  EXPECT_EQ(buf[27], 0x01);  // second LBA 0x100000000
  EXPECT_EQ(buf[31], 0x00);
  EXPECT_EQ(buf[35], 2);
}

TEST(Parse, StandardInquiry) {
  std::vector<uint8_t> d(36, ' ');
  d[0] = 0x00;
  d[1] = 0;
  d[2] = 6;
  d[5] = 0;
  const char* vendor = "IET     VIRTUAL-DISK    0001";
  std::copy(vendor, vendor + 28, d.begin() + 8);
  auto q = ParseStandardInquiry(d);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->vendor, "IET");
  EXPECT_EQ(q->product, "VIRTUAL-DISK");
  EXPECT_EQ(q->revision, "0001");
  EXPECT_FALSE(ParseStandardInquiry(std::vector<uint8_t>(35)).ok());
}

TEST(Parse, ReadCapacity16) {
  std::vector<uint8_t> d(32, 0);
  d[7] = 0xff;   // last LBA 255
  d[10] = 0x10;  // 4096-byte blocks
  d[13] = 3;     // 8 logical per physical
  d[14] = 0xc0;  // LBPME, LBPRZ
  auto c = ParseReadCapacity16(d);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->blocks, 256u);
  EXPECT_EQ(c->block_size, 4096u);
  EXPECT_EQ(c->lbppbe, 3);
  EXPECT_TRUE(c->lbpme);
  EXPECT_TRUE(c->lbprz);
  d[10] = 0;
  EXPECT_FALSE(ParseReadCapacity16(d).ok()) << "block size 0";
}

TEST(Parse, ReportLunsClampsToReturnedBytes) {
  std::vector<uint8_t> d = {0, 0, 0, 24, 0, 0, 0, 0,   // claims 3 LUNs
                            0, 0, 0, 0,  0, 0, 0, 0,   // LUN 0
                            0, 1, 0, 0,  0, 0, 0, 0};  // LUN 1, third missing
  auto luns = ParseReportLuns(d);
  ASSERT_TRUE(luns.ok());
  EXPECT_EQ(*luns, (std::vector<uint64_t>{0, 1}));
}

TEST(Parse, BlockLimitsAndProvisioning) {
  std::vector<uint8_t> b0(64, 0);
  b0[1] = 0xb0;
  b0[3] = 60;
  b0[4 + 7] = 0x80;   // MAXIMUM TRANSFER LENGTH 128
  b0[4 + 19] = 0x20;  // MAXIMUM UNMAP LBA COUNT 32
  auto l = ParseBlockLimits(b0);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->max_transfer_blocks, 128u);
  EXPECT_EQ(l->max_unmap_blocks, 32u);
  std::vector<uint8_t> b2 = {0, 0xb2, 0, 4, 0, 0xe4, 2, 0};
  auto p = ParseProvisioning(b2);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->lbpu);
  EXPECT_TRUE(p->lbpws);
  EXPECT_EQ(p->lbprz, 1);
  EXPECT_EQ(p->type, 2);
  b2[1] = 0xb0;
  EXPECT_FALSE(ParseProvisioning(b2).ok()) << "wrong page code";
}

TEST(Parse, ModeSenseCachingPageAndDpoFua) {
  std::vector<uint8_t> d = {
      0,    26, 0,    0x10, 0, 0, 0, 0,  // header: DPOFUA, no block descriptors
      0x08, 18, 0x04, 0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  auto m = ParseModeSense10(d);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->dpofua);
  EXPECT_TRUE(m->wce);
  EXPECT_FALSE(m->write_protected);
}

TEST(Parse, GetLbaStatus) {
  std::vector<uint8_t> d(8 + 32, 0);
  d[3] = 36;
  d[8 + 7] = 0;    // LBA 0
  d[8 + 11] = 16;  // 16 blocks
  d[8 + 12] = 0;   // mapped
  d[24 + 7] = 16;  // LBA 16
  d[24 + 11] = 48;
  d[24 + 12] = 1;  // deallocated
  auto s = ParseGetLbaStatus(d);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].lba, 16u);
  EXPECT_EQ((*s)[1].blocks, 48u);
  EXPECT_EQ((*s)[1].status, 1);
}

TEST(Sense, FixedAndDescriptorFormatsAndErrnoMapping) {
  const uint8_t fixed[18] = {0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0x00};
  Sense s = DecodeSense(fixed);
  EXPECT_TRUE(s.valid);
  EXPECT_EQ(s.key, 5);
  EXPECT_EQ(s.asc, 0x21);
  EXPECT_EQ(s.ToString(), "ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE (0x21/0x00)");
  EXPECT_EQ(ScsiStatusToStatus(2, s, "READ(16)").code(), StatusCode::kInvalidArgument);
  const uint8_t desc[8] = {0x72, 0x07, 0x27, 0x07};
  s = DecodeSense(desc);
  EXPECT_EQ(s.key, 7);
  EXPECT_EQ(ScsiStatusToStatus(2, s, "WRITE(10)").code(), StatusCode::kNoSpace);
  const uint8_t medium[18] = {0x70, 0, 0x03, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x11, 0x00};
  Status st = ScsiStatusToStatus(2, DecodeSense(medium), "READ(10) at LBA 5");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("UNRECOVERED READ ERROR"), std::string::npos);
  EXPECT_TRUE(ScsiStatusToStatus(0, Sense{}, "x").ok());
  EXPECT_EQ(ScsiStatusToStatus(0x18, Sense{}, "x").code(), StatusCode::kScsiError);
}

}  // namespace
}  // namespace iser::scsi
