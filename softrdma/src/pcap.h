// SOFTRDMA_PCAP=FILE: the responder side of every RC operation is written to FILE as RoCEv2
// frames (Ethernet, IPv4, UDP 4791, BTH, RETH/AETH/ImmDt/IETH, payload, ICRC), segmented at a 4096
// byte path MTU, so tshark decodes it (and iSER/iSCSI inside). Contract: several processes may
// share FILE; each record is appended with one write(). ICRC fields are zero.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "wire.h"

namespace softrdma {

bool pcap_enabled();
// An operation arriving from requester QP `src_qpn` at responder QP `dst_qpn`, with its payload
// (for SEND and WRITE; for READ the data goes in the response) now in `data`.
void pcap_request(const WireOp* op, uint32_t src_qpn, uint32_t dst_qpn, const iovec* data,
                  size_t ndata);
// The responder's answer: READ response data, or an ACK/NAK (`syndrome` as in the AETH).
void pcap_response(const WireOp* op, uint32_t src_qpn, uint32_t dst_qpn, const iovec* data,
                   size_t ndata, uint8_t syndrome);

}  // namespace softrdma
