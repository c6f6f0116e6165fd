#include "pcap.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "api.h"

namespace softrdma {
namespace {

constexpr size_t kMtu = 4096;

// InfiniBand BTH opcodes (IBA vol. 1, table 38): the RC transport's, and UD SEND Only for MADs.
enum : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImm = 0x0b,
  kReadRequest = 0x0c,
  kReadRespFirst = 0x0d,
  kReadRespMiddle = 0x0e,
  kReadRespLast = 0x0f,
  kReadRespOnly = 0x10,
  kAck = 0x11,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
  kUdSendOnly = 0x64,
};

struct Pcap {
  std::mutex mu;
  int fd = -1;
  std::map<uint32_t, uint32_t> psn;  // next packet sequence number per destination QP
};

Pcap* open_pcap() {
  const char* path = getenv("SOFTRDMA_PCAP");
  if (!path || !*path) return nullptr;
  auto* p = new Pcap;
  p->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (p->fd >= 0) {
    struct {
      uint32_t magic = 0xa1b2c3d4;
      uint16_t major = 2, minor = 4;
      int32_t zone = 0;
      uint32_t sigfigs = 0, snaplen = 262144, linktype = 1;  // Ethernet
    } hdr;
    if (write(p->fd, &hdr, sizeof hdr) != sizeof hdr) p->fd = -1;
  } else {
    // Another process created it: wait for its header, then append.
    p->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    struct stat st {};
    for (int i = 0; i < 100 && p->fd >= 0 && fstat(p->fd, &st) == 0 && st.st_size < 24; i++)
      usleep(1000);
  }
  return p;
}

Pcap* pcap() {
  static Pcap* p = open_pcap();
  return p;
}

uint16_t ip_checksum(const uint8_t* h, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i < n; i += 2) sum += (h[i] << 8) | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}
void put24(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back((v >> 16) & 0xff);
  put16(b, v & 0xffff);
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v >> 16);
  put16(b, v & 0xffff);
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  put32(b, v >> 32);
  put32(b, v & 0xffffffff);
}

// Copies `len` bytes starting `off` bytes into the iovec list.
void gather(std::vector<uint8_t>& b, const iovec* iov, size_t n, size_t off, size_t len) {
  for (size_t i = 0; i < n && len; i++) {
    if (off >= iov[i].iov_len) {
      off -= iov[i].iov_len;
      continue;
    }
    size_t take = std::min(len, iov[i].iov_len - off);
    const auto* p = static_cast<const uint8_t*>(iov[i].iov_base) + off;
    b.insert(b.end(), p, p + take);
    len -= take;
    off = 0;
  }
}

// Writes one frame: `ib` is BTH onwards without padding and ICRC.
void emit(Pcap* p, uint32_t src_qpn, std::vector<uint8_t> ib) {
  size_t pad = (4 - ib.size() % 4) % 4;
  ib[1] |= pad << 4;
  ib.insert(ib.end(), pad + 4, 0);  // padding and ICRC
  std::vector<uint8_t> f;
  static const uint8_t macs[12] = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2};
  f.insert(f.end(), macs, macs + 12);
  put16(f, 0x0800);
  size_t ip = f.size();
  f.push_back(0x45);
  f.push_back(0);
  put16(f, 20 + 8 + ib.size());
  put16(f, 0);
  put16(f, 0x4000);
  f.push_back(64);
  f.push_back(17);
  put16(f, 0);
  put32(f, INADDR_LOOPBACK);
  put32(f, INADDR_LOOPBACK);
  uint16_t cs = ip_checksum(&f[ip], 20);
  f[ip + 10] = cs >> 8;
  f[ip + 11] = cs & 0xff;
  put16(f, 0xc000 | (src_qpn & 0x3fff));
  put16(f, 4791);
  put16(f, 8 + ib.size());
  put16(f, 0);
  f.insert(f.end(), ib.begin(), ib.end());
  timeval tv;
  gettimeofday(&tv, nullptr);
  uint32_t rec[4] = {static_cast<uint32_t>(tv.tv_sec), static_cast<uint32_t>(tv.tv_usec),
                     static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size())};
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(rec), reinterpret_cast<uint8_t*>(rec) + 16);
  out.insert(out.end(), f.begin(), f.end());
  if (write(p->fd, out.data(), out.size()) < 0) p->fd = -1;
}

std::vector<uint8_t> bth(Pcap* p, uint8_t opcode, uint32_t dst_qpn, bool solicited) {
  std::vector<uint8_t> b;
  b.push_back(opcode);
  b.push_back(solicited ? 0x80 : 0);
  put16(b, 0xffff);
  b.push_back(0);
  put24(b, dst_qpn);
  b.push_back(0);
  put24(b, p->psn[dst_qpn]++ & 0xffffff);
  return b;
}

// Emits a message of `len` payload bytes as ONLY or FIRST/MIDDLE/LAST packets.
void segmented(Pcap* p, uint32_t src, uint32_t dst, const uint8_t ops[4], const WireOp* op,
               const iovec* data, size_t n, uint64_t len, bool reth, int aeth_syndrome,
               bool imm_last, bool inv_last) {
  size_t off = 0;
  do {
    size_t chunk = std::min<uint64_t>(kMtu, len - off);
    bool first = off == 0, last = off + chunk == len;
    uint8_t code = first && last ? ops[3] : first ? ops[0] : last ? ops[2] : ops[1];
    auto b = bth(p, code, dst, op->solicited && last);
    if (reth && first) {
      put64(b, op->remote_addr);
      put32(b, op->rkey);
      put32(b, static_cast<uint32_t>(op->total_len));
    }
    if (aeth_syndrome >= 0 && (first || last)) {
      b.push_back(aeth_syndrome);
      put24(b, op->psn & 0xffffff);
    }
    if (last && imm_last)
      b.insert(b.end(), reinterpret_cast<const uint8_t*>(&op->imm),
               reinterpret_cast<const uint8_t*>(&op->imm) + 4);
    if (last && inv_last) put32(b, op->imm);
    gather(b, data, n, off, chunk);
    emit(p, src, std::move(b));
    off += chunk;
  } while (off < len);
}

// Big-endian `bytes`-byte field at `off` of a MAD's data.
void set_be(std::vector<uint8_t>& d, size_t off, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--, v >>= 8) d[off + i] = v & 0xff;
}

void set_bytes(std::vector<uint8_t>& d, size_t off, size_t room, const void* src, size_t n) {
  memcpy(&d[off], src, std::min(n, room));
}

// The GID of either end: the frames' 127.0.0.1, IPv4-mapped (RoCEv2).
void set_gid(std::vector<uint8_t>& d, size_t off) {
  d[off + 10] = d[off + 11] = 0xff;
  set_be(d, off + 12, INADDR_LOOPBACK, 4);
}

uint16_t port_of(const sockaddr_storage& a) {
  // sin_port and sin6_port share their offset.
  return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

// The RDMA CM header that starts a REQ's private data for IP addressing (IBA vol. 1, annex A11):
// version 0, IP version, the active side's port, its address and the passive side's (IPv4 in the
// last 4 of 16 bytes).
void set_ip_cm_header(std::vector<uint8_t>& d, size_t off, const sockaddr_storage& src,
                      const sockaddr_storage& dst) {
  bool v6 = src.ss_family == AF_INET6;
  d[off + 1] = v6 ? 0x60 : 0x40;
  const sockaddr_storage* ends[2] = {&src, &dst};
  for (int i = 0; i < 2; i++) {
    size_t at = off + 4 + 16 * i;
    if (v6) {
      memcpy(&d[at], &reinterpret_cast<const sockaddr_in6*>(ends[i])->sin6_addr, 16);
    } else {
      memcpy(&d[at + 12], &reinterpret_cast<const sockaddr_in*>(ends[i])->sin_addr, 4);
    }
  }
  set_be(d, off + 2, port_of(src), 2);
}

}  // namespace

bool pcap_enabled() {
  Pcap* p = pcap();
  return p && p->fd >= 0;
}

void pcap_request(const WireOp* op, uint32_t src_qpn, uint32_t dst_qpn, const iovec* data,
                  size_t ndata) {
  Pcap* p = pcap();
  std::lock_guard g(p->mu);
  static const uint8_t send[4] = {kSendFirst, kSendMiddle, kSendLast, kSendOnly};
  static const uint8_t send_imm[4] = {kSendFirst, kSendMiddle, kSendLastImm, kSendOnlyImm};
  static const uint8_t send_inv[4] = {kSendFirst, kSendMiddle, kSendLastInv, kSendOnlyInv};
  static const uint8_t write[4] = {kWriteFirst, kWriteMiddle, kWriteLast, kWriteOnly};
  static const uint8_t write_imm[4] = {kWriteFirst, kWriteMiddle, kWriteLastImm, kWriteOnlyImm};
  switch (op->opcode) {
    case IBV_WR_SEND:
      segmented(p, src_qpn, dst_qpn, send, op, data, ndata, op->total_len, false, -1, false, false);
      break;
    case IBV_WR_SEND_WITH_IMM:
      segmented(p, src_qpn, dst_qpn, send_imm, op, data, ndata, op->total_len, false, -1, true,
                false);
      break;
    case IBV_WR_SEND_WITH_INV:
      segmented(p, src_qpn, dst_qpn, send_inv, op, data, ndata, op->total_len, false, -1, false,
                true);
      break;
    case IBV_WR_RDMA_WRITE:
      segmented(p, src_qpn, dst_qpn, write, op, data, ndata, op->total_len, true, -1, false, false);
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      segmented(p, src_qpn, dst_qpn, write_imm, op, data, ndata, op->total_len, true, -1, true,
                false);
      break;
    case IBV_WR_RDMA_READ: {
      auto b = bth(p, kReadRequest, dst_qpn, false);
      put64(b, op->remote_addr);
      put32(b, op->rkey);
      put32(b, static_cast<uint32_t>(op->total_len));
      emit(p, src_qpn, std::move(b));
      break;
    }
    default:
      break;
  }
}

void pcap_response(const WireOp* op, uint32_t src_qpn, uint32_t dst_qpn, const iovec* data,
                   size_t ndata, uint8_t syndrome) {
  Pcap* p = pcap();
  std::lock_guard g(p->mu);
  if (op->opcode == IBV_WR_RDMA_READ && syndrome == 0) {
    static const uint8_t resp[4] = {kReadRespFirst, kReadRespMiddle, kReadRespLast, kReadRespOnly};
    segmented(p, src_qpn, dst_qpn, resp, op, data, ndata, op->total_len, false, 0, false, false);
    return;
  }
  auto b = bth(p, kAck, dst_qpn, false);
  b.push_back(syndrome);
  put24(b, op->psn & 0xffffff);
  emit(p, src_qpn, std::move(b));
}

void pcap_cm(CmMad attr, uint32_t from_qpn, uint32_t to_qpn, const WireConnect* m,
             uint16_t port_space) {
  Pcap* p = pcap();
  constexpr int kRemoteCmTimeout = 20, kLocalCmTimeout = 20, kMaxCmRetries = 15;  // Linux's
  uint64_t guid = be64toh(ibv_get_device_guid(shared_context()->device));
  std::vector<uint8_t> d(232, 0);
  // Both processes must name an exchange alike without telling each other: communication IDs are
  // QPNs, and the transaction ID is the QPN of the side that started the exchange (connect:
  // REQ/REP/RTU/REJ; disconnect: DREQ/DREP). Wireshark pairs a REP with its REQ by it.
  set_be(d, 0, from_qpn, 4);
  if (attr != CmMad::Req) set_be(d, 4, to_qpn, 4);
  bool from_starter = attr == CmMad::Req || attr == CmMad::Rtu || attr == CmMad::Dreq;
  bool disconnect = attr == CmMad::Dreq || attr == CmMad::Drep;
  uint64_t tid = (uint64_t{disconnect ? 2u : 1u} << 32) | (from_starter ? from_qpn : to_qpn);
  switch (attr) {
    case CmMad::Req:
      set_be(d, 8, (uint64_t{port_space} << 16) | port_of(m->dst), 8);  // RDMA CM service ID
      set_be(d, 16, guid, 8);
      set_be(d, 32, from_qpn, 3);
      d[35] = m->responder_resources;
      d[39] = m->initiator_depth;
      d[43] = kRemoteCmTimeout << 3;  // transport service type 0: RC
      d[47] = kLocalCmTimeout << 3 | (m->retry_count & 7);
      set_be(d, 48, 0xffff, 2);  // P_Key
      d[50] = IBV_MTU_4096 << 4 | (m->rnr_retry_count & 7);
      d[51] = kMaxCmRetries << 4 | (m->srq ? 8 : 0);
      set_be(d, 52, 0xffff, 2);  // RoCE has no LIDs: the permissive LID, as Linux writes
      set_be(d, 54, 0xffff, 2);
      set_gid(d, 56);
      set_gid(d, 72);
      d[93] = 64;  // hop limit
      set_ip_cm_header(d, 140, m->src, m->dst);
      set_bytes(d, 176, 56, m->pdata, m->pdata_len);
      break;
    case CmMad::Rep:
      set_be(d, 12, from_qpn, 3);
      d[24] = m->responder_resources;
      d[25] = m->initiator_depth;
      d[27] = (m->rnr_retry_count & 7) << 5 | (m->srq ? 0x10 : 0);
      set_be(d, 28, guid, 8);
      set_bytes(d, 36, 196, m->pdata, m->pdata_len);
      break;
    case CmMad::Rej:
      set_be(d, 10, 28, 2);  // reason: consumer reject (message rejected: REQ)
      set_bytes(d, 84, 148, m->pdata, m->pdata_len);
      break;
    case CmMad::Dreq:
      set_be(d, 8, to_qpn, 3);
      break;
    case CmMad::Rtu:
    case CmMad::Drep:
      break;
  }
  std::lock_guard g(p->mu);
  auto b = bth(p, kUdSendOnly, 1, false);
  put32(b, 0x80010000);  // the GSI's well-known Q_Key
  put32(b, 1);           // source QP: the GSI
  b.push_back(1);        // base version
  b.push_back(0x07);     // management class: CM
  b.push_back(2);        // class version
  b.push_back(0x03);     // method: Send
  put32(b, 0);           // status, class specific
  put64(b, tid);
  put16(b, static_cast<uint16_t>(attr));
  put16(b, 0);
  put32(b, 0);  // attribute modifier
  b.insert(b.end(), d.begin(), d.end());
  emit(p, 1, std::move(b));
}

}  // namespace softrdma
