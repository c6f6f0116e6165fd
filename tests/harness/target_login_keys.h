// The operational keys a plain iSCSI/TCP target answers in login, for the fake targets and the
// fake datamover: RFC 7143's defaults where a test does not care, with ImmediateData=No and
// InitialR2T=Yes so that write data waits for an R2T unless a test changes them.
#pragma once

#include <string>
#include <vector>

namespace iser::test {

inline std::vector<std::string> DefaultTargetLoginKeys() {
  return {"HeaderDigest=None",
          "DataDigest=None",
          "MaxRecvDataSegmentLength=8192",
          "ImmediateData=No",
          "InitialR2T=Yes",
          "MaxBurstLength=262144",
          "FirstBurstLength=65536",
          "MaxConnections=1",
          "DefaultTime2Wait=2",
          "DefaultTime2Retain=0",
          "MaxOutstandingR2T=1",
          "DataPDUInOrder=Yes",
          "DataSequenceInOrder=Yes",
          "ErrorRecoveryLevel=0",
          "IFMarker=No",
          "OFMarker=No"};
}

}  // namespace iser::test
