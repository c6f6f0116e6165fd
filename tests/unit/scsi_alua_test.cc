// ALUA and multipath identity: the REPORT TARGET PORT GROUPS CDB and parser, the designators of
// VPD page 0x83, TPGS of standard INQUIRY data and the ALUA sense codes, on hand-built bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "initiator/scsi/alua.h"
#include "initiator/scsi/commands.h"
#include "initiator/scsi/sense.h"

namespace iser::scsi {
namespace {

bool Mentions(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// Group 0x0011 active/optimized and preferred, with relative target ports 1 and 2; group 0x0102
// active/non-optimized with port 3.
std::vector<uint8_t> TwoGroups() {
  return {
      0,    0,    0,    28,    // RETURN DATA LENGTH: 12 + 16 bytes
      0x80, 0x83, 0x00, 0x11,  // PREF, active/optimized; T_SUP AN_SUP AO_SUP; group 0x11
      0,    0x02, 0,    2,     // STATUS CODE 2, two ports
      0,    0,    0,    1,     //
      0,    0,    0,    2,     //
      0x01, 0x83, 0x01, 0x02,  // active/non-optimized; group 0x102
      0,    0,    0,    1,     // one port
      0,    0,    0,    3,
  };
}

TEST(AluaTest, ReportTargetPortGroupsCdb) {
  Task t;
  uint8_t buf[16];
  ReportTargetPortGroups(t, buf, 0x01020304);
  EXPECT_EQ(t.cdb_length, 12);
  EXPECT_EQ(t.cdb[0], 0xa3);
  EXPECT_EQ(t.cdb[1], 0x0a) << "service action 0x0A, PARAMETER DATA FORMAT 000b";
  EXPECT_EQ(t.cdb[6], 0x01);
  EXPECT_EQ(t.cdb[7], 0x02);
  EXPECT_EQ(t.cdb[8], 0x03);
  EXPECT_EQ(t.cdb[9], 0x04);
  EXPECT_EQ(t.cdb[11], 0);
  EXPECT_EQ(t.direction, DataDirection::kRead);
  EXPECT_EQ(t.buffer, buf);
  EXPECT_EQ(t.transfer_length, 0x01020304u);
}

TEST(AluaTest, ParsesTwoGroupsWithPorts) {
  auto r = ParseReportTargetPortGroups(TwoGroups());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->needed_bytes, 0u);
  ASSERT_EQ(r->groups.size(), 2u);
  const TargetPortGroup& a = r->groups[0];
  EXPECT_EQ(a.id, 0x11);
  EXPECT_EQ(a.state, AluaState::kActiveOptimized);
  EXPECT_TRUE(a.preferred);
  EXPECT_EQ(a.supported, 0x83);
  EXPECT_EQ(a.status_code, 2);
  EXPECT_EQ(a.relative_target_ports, (std::vector<uint16_t>{1, 2}));
  const TargetPortGroup& b = r->groups[1];
  EXPECT_EQ(b.id, 0x102);
  EXPECT_EQ(b.state, AluaState::kActiveNonOptimized);
  EXPECT_FALSE(b.preferred);
  EXPECT_EQ(b.status_code, 0);
  EXPECT_EQ(b.relative_target_ports, (std::vector<uint16_t>{3}));
}

TEST(AluaTest, ParsesExtendedHeader) {
  std::vector<uint8_t> d = {
      0,    0,    0, 16,  // RETURN DATA LENGTH: 4 + 12 bytes
      0x10, 60,   0, 0,   // FORMAT TYPE 001b, IMPLICIT TRANSITION TIME 60
      0x02, 0x04, 0, 7,   // standby, S_SUP, group 7
      0,    0,    0, 1,   //
      0,    0,    0, 9,   // port 9
  };
  auto r = ParseReportTargetPortGroups(d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->groups.size(), 1u);
  EXPECT_EQ(r->groups[0].id, 7);
  EXPECT_EQ(r->groups[0].state, AluaState::kStandby);
  EXPECT_EQ(r->groups[0].supported, 0x04);
  EXPECT_EQ(r->groups[0].relative_target_ports, (std::vector<uint16_t>{9}));
  d[3] = 2;  // an extended header needs a RETURN DATA LENGTH of at least 4
  d.resize(6);
  auto bad = ParseReportTargetPortGroups(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "REPORT TARGET PORT GROUPS")) << bad.status().ToString();
}

TEST(AluaTest, NamesEveryState) {
  EXPECT_STREQ(AluaStateName(AluaState::kActiveOptimized), "active/optimized");
  EXPECT_STREQ(AluaStateName(AluaState::kActiveNonOptimized), "active/non-optimized");
  EXPECT_STREQ(AluaStateName(AluaState::kStandby), "standby");
  EXPECT_STREQ(AluaStateName(AluaState::kUnavailable), "unavailable");
  EXPECT_STREQ(AluaStateName(AluaState::kLogicalBlockDependent), "lba-dependent");
  EXPECT_STREQ(AluaStateName(AluaState::kOffline), "offline");
  EXPECT_STREQ(AluaStateName(AluaState::kTransitioning), "transitioning");
  EXPECT_STREQ(AluaStateName(static_cast<AluaState>(5)), "reserved");
  EXPECT_STREQ(AluaStateName(static_cast<AluaState>(0xd)), "reserved");
}

TEST(AluaTest, ParsesEveryStateFromItsDescriptor) {
  for (uint8_t state : {0, 1, 2, 3, 4, 0xe, 0xf}) {
    std::vector<uint8_t> d = {0, 0, 0, 8, static_cast<uint8_t>(0x80 | state), 0, 0, 1, 0, 0, 0, 0};
    auto r = ParseReportTargetPortGroups(d);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->groups.size(), 1u);
    EXPECT_EQ(static_cast<uint8_t>(r->groups[0].state), state);
    EXPECT_TRUE(r->groups[0].preferred) << "PREF is not part of the state";
    EXPECT_TRUE(r->groups[0].relative_target_ports.empty());
  }
}

TEST(AluaTest, DescriptorPastTheDataIsAnError) {
  std::vector<uint8_t> d = TwoGroups();
  d[4 + 16 + 7] = 2;  // the second group claims two ports, and the data holds one
  auto r = ParseReportTargetPortGroups(d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
  EXPECT_TRUE(Mentions(r.status(), "REPORT TARGET PORT GROUPS")) << r.status().ToString();
  EXPECT_TRUE(Mentions(r.status(), "byte 20")) << r.status().ToString();

  std::vector<uint8_t> header_only = {0, 0, 0, 5, 0,
                                      0, 0, 0, 0};  // 5 bytes of an 8-byte descriptor
  EXPECT_FALSE(ParseReportTargetPortGroups(header_only).ok());
  auto short_data = ParseReportTargetPortGroups(std::vector<uint8_t>{0, 0, 0});
  ASSERT_FALSE(short_data.ok());
  EXPECT_TRUE(Mentions(short_data.status(), "REPORT TARGET PORT GROUPS"));
}

TEST(AluaTest, ReturnLengthBeyondTheBufferReportsNeededBytes) {
  std::vector<uint8_t> d = TwoGroups();
  d.resize(4 + 16 + 6);  // an allocation of 26 bytes cut the second descriptor
  auto r = ParseReportTargetPortGroups(d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->needed_bytes, 32u);
  ASSERT_EQ(r->groups.size(), 1u);
  EXPECT_EQ(r->groups[0].id, 0x11);
  EXPECT_EQ(r->groups[0].relative_target_ports, (std::vector<uint16_t>{1, 2}));

  std::vector<uint8_t> header = {0, 0, 0x10, 0};  // 4-byte allocation: only the length
  r = ParseReportTargetPortGroups(header);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->needed_bytes, 0x1004u);
  EXPECT_TRUE(r->groups.empty());
}

TEST(AluaTest, BytesPastTheReturnLengthAreIgnored) {
  std::vector<uint8_t> d = TwoGroups();
  d[3] = 16;  // only the first group
  d.resize(64, 0xff);
  auto r = ParseReportTargetPortGroups(d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->needed_bytes, 0u);
  ASSERT_EQ(r->groups.size(), 1u);
  EXPECT_EQ(r->groups[0].id, 0x11);
}

// A VPD page 0x83 holding `descriptors`.
std::vector<uint8_t> Page83(std::vector<uint8_t> descriptors) {
  std::vector<uint8_t> d = {0, 0x83, static_cast<uint8_t>(descriptors.size() >> 8),
                            static_cast<uint8_t>(descriptors.size())};
  d.insert(d.end(), descriptors.begin(), descriptors.end());
  return d;
}

const std::vector<uint8_t> kT10Vendor = {0x02, 0x01, 0, 8, 'L', 'I', 'O', '-', 'O', 'R', 'G', ' '};
const std::vector<uint8_t> kEui64 = {0x01, 0x02, 0,    8,    0x00, 0x11,
                                     0x22, 0x33, 0x44, 0x55, 0x66, 0x77};
const std::vector<uint8_t> kNaa = {0x01, 0x03, 0,    16,   0x60, 0x01, 0x40, 0x5a, 0xbc, 0xde,
                                   0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12};
const std::vector<uint8_t> kPortNaa = {
    0x01, 0x13, 0,    8,    0x50, 0x01,
    0x40, 0x50, 0x00, 0x00, 0x00, 0x01};  // association 01b: the port's
const std::vector<uint8_t> kRelativePort = {0x01, 0x14, 0, 4, 0, 0, 0x00, 0x02};
const std::vector<uint8_t> kPortGroup = {0x01, 0x15, 0, 4, 0, 0, 0x01, 0x02};

std::vector<uint8_t> Concat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(AluaTest, DeviceIdentifiersNaaRelativePortAndGroup) {
  const std::vector<uint8_t> page =
      Page83(Concat({kT10Vendor, kPortNaa, kEui64, kNaa, kRelativePort, kPortGroup}));
  auto ids = ParseDeviceIdentifiers(page);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->lu_name, "naa.6001405abcdef0123456789abcdef012") << "NAA wins over EUI-64";
  ASSERT_TRUE(ids->relative_target_port.has_value());
  EXPECT_EQ(*ids->relative_target_port, 2);
  ASSERT_TRUE(ids->target_port_group.has_value());
  EXPECT_EQ(*ids->target_port_group, 0x102);
  auto shown = ParseDeviceIdentification(page);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(*shown, ids->lu_name) << "both read the same designator";
}

TEST(AluaTest, DeviceIdentifiersEuiOnly) {
  auto ids = ParseDeviceIdentifiers(Page83(Concat({kPortNaa, kEui64, kT10Vendor})));
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->lu_name, "eui.0011223344556677");
  EXPECT_FALSE(ids->relative_target_port.has_value());
  EXPECT_FALSE(ids->target_port_group.has_value());
}

TEST(AluaTest, DeviceIdentifiersT10VendorIdAloneIsNoName) {
  const std::vector<uint8_t> page = Page83(Concat({kT10Vendor, kPortNaa, kRelativePort}));
  auto ids = ParseDeviceIdentifiers(page);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->lu_name, "");
  ASSERT_TRUE(ids->relative_target_port.has_value());
  EXPECT_EQ(*ids->relative_target_port, 2);
  auto shown = ParseDeviceIdentification(page);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(*shown, "t10.LIO-ORG") << "the display name still uses it";
}

TEST(AluaTest, DesignatorPastThePageIsAnError) {
  std::vector<uint8_t> descriptors = Concat({kEui64, kNaa});
  descriptors[12 + 3] = 20;  // the NAA designator claims 4 bytes more than the page holds
  const std::vector<uint8_t> page = Page83(descriptors);
  auto ids = ParseDeviceIdentifiers(page);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kProtocolError);
  EXPECT_TRUE(Mentions(ids.status(), "VPD page 0x83")) << ids.status().ToString();
  EXPECT_TRUE(Mentions(ids.status(), "byte 16")) << ids.status().ToString();
  auto shown = ParseDeviceIdentification(page);
  ASSERT_TRUE(shown.ok()) << "unchanged: it keeps what came before";
  EXPECT_EQ(*shown, "eui.0011223344556677");

  auto walk = ParseDesignators(page);
  ASSERT_TRUE(walk.ok());
  EXPECT_EQ(walk->incomplete_at, 16u);
  ASSERT_EQ(walk->list.size(), 1u);
  EXPECT_EQ(walk->list[0].type, designator_type::kEui64);
}

TEST(AluaTest, DeviceIdentifiersRejectsShortPortDesignatorsAndOtherPages) {
  const std::vector<uint8_t> short_group = {0x01, 0x15, 0, 2, 0x01, 0x02};
  auto ids = ParseDeviceIdentifiers(Page83(Concat({kNaa, short_group})));
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(Mentions(ids.status(), "target port group")) << ids.status().ToString();
  std::vector<uint8_t> page80 = Page83(kNaa);
  page80[1] = 0x80;
  EXPECT_FALSE(ParseDeviceIdentifiers(page80).ok());
  EXPECT_FALSE(ParseDeviceIdentifiers(std::vector<uint8_t>{0, 0x83, 0}).ok());
}

TEST(AluaTest, InquiryTpgs) {
  std::vector<uint8_t> d(36, 0);
  for (uint8_t tpgs = 0; tpgs < 4; ++tpgs) {
    d[5] = static_cast<uint8_t>(tpgs << 4 | 0x01);  // PROTECT set besides
    EXPECT_EQ(InquiryTpgs(d), tpgs);
  }
  d[5] = 0xff;
  EXPECT_EQ(InquiryTpgs(d), 3);
  EXPECT_EQ(InquiryTpgs(std::vector<uint8_t>(5, 0xff)), 0) << "shorter than 6 bytes";
}

Sense MakeSense(uint8_t key, uint8_t asc, uint8_t ascq) {
  Sense s;
  s.valid = true;
  s.key = key;
  s.asc = asc;
  s.ascq = ascq;
  return s;
}

TEST(AluaTest, ClassifiesAluaSense) {
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kNotReady, 0x04, 0x0a)),
            AluaSense::kTransitioning);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kNotReady, 0x04, 0x0b)), AluaSense::kStandby);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kNotReady, 0x04, 0x0c)),
            AluaSense::kUnavailable);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kUnitAttention, 0x2a, 0x06)),
            AluaSense::kStateChanged);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kUnitAttention, 0x2a, 0x07)),
            AluaSense::kImplicitTransitionFailed);
  // Descriptor-format sense data, decoded the way tasks' sense is.
  const uint8_t standby[8] = {0x72, 0x02, 0x04, 0x0b};
  EXPECT_EQ(ClassifyAluaSense(DecodeSense(standby)), AluaSense::kStandby);
}

TEST(AluaTest, UnrelatedSenseIsNone) {
  EXPECT_EQ(ClassifyAluaSense(Sense{}), AluaSense::kNone);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kNotReady, 0x04, 0x01)), AluaSense::kNone);
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kUnitAttention, 0x2a, 0x09)), AluaSense::kNone)
      << "CAPACITY DATA HAS CHANGED";
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kUnitAttention, 0x04, 0x0b)), AluaSense::kNone)
      << "the ASC/ASCQ of standby under another sense key";
  EXPECT_EQ(ClassifyAluaSense(MakeSense(sense_key::kIllegalRequest, 0x2a, 0x06)), AluaSense::kNone);
  Sense invalid = MakeSense(sense_key::kNotReady, 0x04, 0x0a);
  invalid.valid = false;
  EXPECT_EQ(ClassifyAluaSense(invalid), AluaSense::kNone);
}

}  // namespace
}  // namespace iser::scsi
