// Asymmetric logical unit access (ALUA, SPC-5 5.16) and the identity multipath needs: the REPORT
// TARGET PORT GROUPS builder and parser (SPC-5 6.37), the designators of the Device
// Identification VPD page (SPC-5 7.7.6) that name a logical unit, a target port and its target
// port group, the TPGS field of standard INQUIRY data, and the sense data that report an ALUA
// state or a change of one. Parsers take untrusted bytes: every length is checked and malformed
// data yields an error naming the command or page, never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/scsi/sense.h"
#include "initiator/task/task.h"

namespace iser::scsi {

namespace opcode {
inline constexpr uint8_t kMaintenanceIn = 0xa3;
}  // namespace opcode

// MAINTENANCE IN / REPORT TARGET PORT GROUPS with the length-only header (PARAMETER DATA FORMAT
// 000b): every ALUA target supports it, while some refuse the extended one.
void ReportTargetPortGroups(Task& t, uint8_t* buf, uint32_t alloc);

// ASYMMETRIC ACCESS STATE; 5 to 0xD are reserved.
enum class AluaState : uint8_t {
  kActiveOptimized = 0,
  kActiveNonOptimized = 1,
  kStandby = 2,
  kUnavailable = 3,
  kLogicalBlockDependent = 4,
  kOffline = 0xE,
  kTransitioning = 0xF,
};
// "active/optimized", "standby", ... as multipath -ll and sg_rtpg print them; "reserved" else.
const char* AluaStateName(AluaState state);

struct TargetPortGroup {
  uint16_t id = 0;
  AluaState state = AluaState::kActiveOptimized;
  bool preferred = false;  // PREF
  // T_SUP 0x80, O_SUP 0x40, LBD_SUP 0x10, U_SUP 0x08, S_SUP 0x04, AN_SUP 0x02, AO_SUP 0x01.
  uint8_t supported = 0;
  // 0 none, 1 state altered by SET TARGET PORT GROUPS, 2 altered by implicit asymmetric access.
  uint8_t status_code = 0;
  std::vector<uint16_t> relative_target_ports;
};

struct TargetPortGroups {
  std::vector<TargetPortGroup> groups;
  // Non-zero when the allocation length cut the data short: the allocation length that returns
  // all of it (RETURN DATA LENGTH + 4). `groups` then holds the descriptors that arrived whole;
  // re-issue with this length for the rest. A target that sends less than it announces whatever
  // the allocation looks the same, so re-issue once, not until this is 0.
  uint32_t needed_bytes = 0;
};
// Either header format (length-only, or extended when byte 4 says so). A descriptor that runs
// past the returned data while the data is complete is an error.
Result<TargetPortGroups> ParseReportTargetPortGroups(std::span<const uint8_t> d);

namespace association {
inline constexpr uint8_t kLogicalUnit = 0;
inline constexpr uint8_t kTargetPort = 1;
}  // namespace association

namespace designator_type {
inline constexpr uint8_t kT10VendorId = 0x1;
inline constexpr uint8_t kEui64 = 0x2;
inline constexpr uint8_t kNaa = 0x3;
inline constexpr uint8_t kRelativeTargetPort = 0x4;
inline constexpr uint8_t kTargetPortGroup = 0x5;
}  // namespace designator_type

// One designation descriptor of VPD page 0x83; `designator` points into the page.
struct Designator {
  uint8_t code_set = 0;  // 1 binary, 2 ASCII, 3 UTF-8
  uint8_t association = 0;
  uint8_t type = 0;
  std::span<const uint8_t> designator;
};
struct Designators {
  std::vector<Designator> list;  // in page order, up to the first incomplete descriptor
  // The page offset of a descriptor that runs past the page, where the walk stopped; 0 if none.
  size_t incomplete_at = 0;
};
// The walk over VPD page 0x83 that ParseDeviceIdentification and ParseDeviceIdentifiers share.
// Only a short page header or another page is an error: each caller decides what an incomplete
// descriptor means to it.
Result<Designators> ParseDesignators(std::span<const uint8_t> d);

// What multipath needs from VPD page 0x83.
struct DeviceIdentifiers {
  // The logical unit's name, the same through every path to it: its NAA designator, else its
  // EUI-64 one, as lowercase hex ("naa.6001405...", "eui.0123..."); empty when it has neither. A
  // T10 vendor ID designator does not count: T10 does not require its vendor-specific part to be
  // unique, so two logical units could carry the same one and be taken for one, mixing their data.
  std::string lu_name;
  std::optional<uint16_t> relative_target_port;  // of the target port the page came through
  std::optional<uint16_t> target_port_group;     // that port's group, as RTPG reports it
};
// Unlike ParseDeviceIdentification, an incomplete descriptor is an error: the part of the page
// that did not arrive may hold the NAA designator, and the EUI-64 one in its stead would make
// this path look like another logical unit.
Result<DeviceIdentifiers> ParseDeviceIdentifiers(std::span<const uint8_t> d);

// TPGS of standard INQUIRY data: 0 no ALUA, 1 implicit, 2 explicit, 3 both; 0 for data shorter
// than 6 bytes.
uint8_t InquiryTpgs(std::span<const uint8_t> standard_inquiry);

// The sense data by which a logical unit reports its ALUA state through this path, or a change
// of the states that calls for REPORT TARGET PORT GROUPS again.
enum class AluaSense : uint8_t {
  kNone,
  kTransitioning,             // NOT READY, 04/0A ASYMMETRIC ACCESS STATE TRANSITION
  kStandby,                   // NOT READY, 04/0B TARGET PORT IN STANDBY STATE
  kUnavailable,               // NOT READY, 04/0C TARGET PORT IN UNAVAILABLE STATE, or 04/12
                              // LOGICAL UNIT NOT READY, OFFLINE (LIO's offline state)
  kStateChanged,              // UNIT ATTENTION, 2A/06 ASYMMETRIC ACCESS STATE CHANGED
  kImplicitTransitionFailed,  // UNIT ATTENTION, 2A/07 IMPLICIT ... TRANSITION FAILED
};
AluaSense ClassifyAluaSense(const Sense& sense);

}  // namespace iser::scsi
