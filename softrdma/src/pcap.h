// SOFTRDMA_PCAP=FILE: the responder side of every RC operation is written to FILE as RoCEv2
// frames (Ethernet, IPv4, UDP 4791, BTH, RETH/AETH/ImmDt/IETH, payload, ICRC), segmented at a 4096
// byte path MTU, and the connection manager's exchange as CM MADs, so tshark decodes it (and
// iSER/iSCSI inside). Contract: several processes may share FILE; each record is appended with one
// write(). ICRC fields are zero; every frame runs between 127.0.0.1 and 127.0.0.1 (GID
// ::ffff:127.0.0.1, as ibv_query_gid reports).
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

// Connection manager messages by MAD attribute ID (IBA vol. 1, 12.6).
enum class CmMad : uint16_t {
  Req = 0x10,
  Rej = 0x12,
  Rep = 0x13,
  Rtu = 0x14,
  Dreq = 0x15,
  Drep = 0x16
};
// A CM message from the side whose QP is `from_qpn` to the side of `to_qpn`, as a MAD to QP1. `m`
// gives the parameters and private data of REQ, REP and REJ; a REQ's service ID is `port_space`
// with m->dst's port, and its private data starts with the RDMA CM IP header (m->src, m->dst).
void pcap_cm(CmMad attr, uint32_t from_qpn, uint32_t to_qpn, const WireConnect* m = nullptr,
             uint16_t port_space = 0);

}  // namespace softrdma
