// The 28-byte iSER header that precedes every iSCSI PDU in an RDMA SEND (RFC 7145 §9.2, the
// layout tgt, LIO, SCST, libiscsi and Linux agree on; see docs/iser-wire.md, "The iSER header"):
//   byte 0  flags: 0x10 iSCSI control-type PDU, | 0x08 WSV (Write STag/VA valid),
//                  | 0x04 RSV (Read STag/VA valid)
//   4..7    Write STag (rkey the target RDMA-READs our write data with)
//   8..15   Write VA   (absolute address of the first byte not sent as immediate data)
//   16..19  Read STag  (rkey the target RDMA-WRITEs read data with)
//   20..27  Read VA
// "Read" and "write" are from the initiator's side. The iSCSI BHS follows at byte 28, with no
// padding in between; there are no digests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "initiator/pdu/bhs.h"

namespace iser {

inline constexpr size_t kIserHeaderLength = 28;
inline constexpr uint8_t kIserControl = 0x10;
inline constexpr uint8_t kIserWsv = 0x08;
inline constexpr uint8_t kIserRsv = 0x04;
// CM private data flags in our connect request: we use no zero-based VAs (0x80) and accept no
// Send-with-Invalidate (0x40), because our STags are ordinary MRs.
inline constexpr uint8_t kIserCmZbvaNotSupported = 0x80;
inline constexpr uint8_t kIserCmSendWithInvalidateNotSupported = 0x40;

inline void BuildIserHeader(uint8_t* h, uint8_t flags, uint32_t write_stag, uint64_t write_va,
                            uint32_t read_stag, uint64_t read_va) {
  h[0] = flags;
  h[1] = h[2] = h[3] = 0;
  StoreBe32(h + 4, write_stag);
  StoreBe64(h + 8, write_va);
  StoreBe32(h + 16, read_stag);
  StoreBe64(h + 20, read_va);
}

}  // namespace iser
