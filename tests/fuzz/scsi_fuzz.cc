// Fuzzes the parsers of data targets return for SCSI commands, the sense decoder and the check
// of incoming PDU headers.
#include <cstdint>

#include "initiator/pdu/bhs.h"
#include "initiator/scsi/alua.h"
#include "initiator/scsi/commands.h"
#include "initiator/scsi/sense.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  const std::span<const uint8_t> d(data, size);
  (void)scsi::ParseStandardInquiry(d);
  (void)scsi::ParseSupportedVpdPages(d);
  (void)scsi::ParseUnitSerialNumber(d);
  (void)scsi::ParseDeviceIdentification(d);
  (void)scsi::ParseBlockLimits(d);
  (void)scsi::ParseRotationRate(d);
  (void)scsi::ParseProvisioning(d);
  (void)scsi::ParseReadCapacity10(d);
  (void)scsi::ParseReadCapacity16(d);
  (void)scsi::ParseReportLuns(d);
  (void)scsi::ParseModeSense10(d);
  (void)scsi::ParseGetLbaStatus(d);
  (void)scsi::ParseReportTargetPortGroups(d);
  (void)scsi::ParseDesignators(d);
  (void)scsi::ParseDeviceIdentifiers(d);
  (void)scsi::InquiryTpgs(d);
  (void)scsi::ClassifyAluaSense(DecodeSense(d));
  (void)DecodeSense(d).ToString();
  if (size >= kBhsLength) {
    Bhs bhs;
    std::copy(data, data + kBhsLength, bhs.b.begin());
    (void)ValidateTargetBhs(bhs, 262144, 1020);
  }
  return 0;
}
