// The messages two softrdma endpoints exchange over their local stream socket.
// Contract: every message starts with WireHdr whose `len` counts the whole message; connection
// management (REQ/REP/RTU/REJ/DREQ) and RC transport (OP/ACK/NAK) share the stream, so a
// disconnect is ordered after all data. Payloads of more than 1 KiB normally never travel here:
// the responder moves them with process_vm_readv/writev against the requester's SGEs, which stay
// valid until acknowledged. When that is refused (checked per connection at set-up), or for small
// SEND/WRITE payloads, they follow the messages.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace softrdma {

// A TCP listener's first bytes on every connection it accepts: its SOFTRDMA_NAMESPACE. TCP ports
// are shared by every namespace of a host, and namespaces must not meet (tests run side by side
// in them), so a connector that finds another namespace there hangs up and looks further.
constexpr size_t kTcpGreetingLength = 64;

inline std::string tcp_greeting() {
  const char* ns = getenv("SOFTRDMA_NAMESPACE");
  std::string g = std::string("softrdma namespace ") + (ns ? ns : "");
  g.resize(kTcpGreetingLength);  // cut or padded with zeros
  return g;
}

enum class Msg : uint32_t { Req = 1, Rep, Rtu, Rej, Dreq, Op, Ack, Nak, ReadResp, Terminate };

struct WireHdr {
  Msg type;
  uint32_t len;
};

constexpr unsigned kMaxPrivateData = 256;

struct WireConnect {  // REQ, REP and REJ
  WireHdr hdr;
  uint32_t qpn;
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint8_t pdata_len;
  uint8_t sender_reaches_you;  // REP, RTU: the sender's cross-memory probe of the receiver worked
  uint8_t pad;
  uint64_t probe_addr;  // a byte in the sender the receiver probes with process_vm_readv
  sockaddr_storage src;
  sockaddr_storage dst;
  uint8_t pdata[kMaxPrivateData];
};
static_assert(kMaxPrivateData > UINT8_MAX, "any pdata_len fits in pdata");

struct WireSge {
  uint64_t addr;
  uint64_t len;
};

struct WireOp {
  WireHdr hdr;
  uint32_t psn;
  uint8_t opcode;  // ibv_wr_opcode
  uint8_t num_sge;
  uint8_t rnr_retry;
  uint8_t solicited;
  // SEND/WRITE payloads follow the SGE array (small ones always; all of them, and READ data in a
  // ReadResp message before the acknowledgement, when the responder cannot reach our memory).
  uint8_t pushed;
  uint8_t pad[3];
  uint32_t imm;  // immediate data or the rkey to invalidate
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t total_len;
  WireSge sge[];
};

struct WireReadResp {  // RDMA READ data for the requester's SGEs of `psn` (fallback path)
  WireHdr hdr;
  uint32_t psn;
  uint32_t pad;
  uint8_t data[];
};

// ACK: every PSN up to `psn` done. NAK: `psn` failed with `status`. Terminate (iWARP): every PSN
// up to `psn` done, and the responder ends the connection (the rest flushes).
struct WireAck {
  WireHdr hdr;
  uint32_t psn;
  uint32_t status;
};

}  // namespace softrdma
