// FakeIserTarget: a scripted iSER target inside the test process, for the faults tgtd cannot be
// made to produce over RDMA: RDMA WRITEs and READs through stale, out-of-range or wrong-direction
// STags, SENDs larger than the initiator's receive buffers, Data-In on an iSER connection. It is
// a mock by necessity and the tests that use it say so.
//
// It listens for RDMA CM on 127.0.0.1:port (run it under tests/harness/iser-netns: softrdma in
// front, a network namespace of its own), accepts one connection the way tgt does (one login
// receive, rnr_retry 0 unless the test asks otherwise), answers the login with the iSER key set,
// then runs the test's script on its own thread with blocking helpers: read the initiator's SENDs
// with their iSER headers, send PDUs or raw bytes, and move data with RDMA WRITE/READ, each
// returning its completion status.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "initiator/session/session_options.h"
#include "tests/integration/fake_target.h"

namespace iser::test {

// The STags and addresses of the iSER header in front of a PDU from the initiator.
struct IserStags {
  uint8_t flags = 0;
  uint32_t write_stag = 0;
  uint64_t write_va = 0;
  uint32_t read_stag = 0;
  uint64_t read_va = 0;
};

// A session's options for the FakeIserTarget on this port (of 127.0.0.1), with a short logout
// timeout: scripts do not answer Logout. Recovery is on, as by default.
SessionOptions FakeIserSessionOptions(uint16_t port);

class FakeIserTarget : public FakeTargetBase {
 public:
  using Script = std::function<void(FakeIserTarget& t)>;

  // `rnr_retry`: how often the initiator's SEND is retried when no receive of ours is posted
  // (the accept's rnr_retry_count). 0 as tgt: such a SEND fails the connection. 7 (for ever), as
  // an RC NIC may be told: the initiator's sends wait while the script does not read.
  FakeIserTarget(uint16_t port, FakeLoginBehavior login, Script script, uint8_t rnr_retry = 0);
  ~FakeIserTarget() override;

  // Empty once the target listens; otherwise what went wrong.
  const std::string& error() const { return error_; }
  // Waits until the script has returned (its results are then safe to read).
  void Join();

  // For scripts (run on the target's thread).
  bool Read(FakePdu* pdu) override;
  // Read, giving up after `patience` with no PDU.
  bool ReadWithin(FakePdu* pdu, std::chrono::milliseconds patience);
  void Send(const Bhs& bhs, const std::vector<uint8_t>& data = {}) override;
  const IserStags& last_stags() const { return stags_; }  // of the PDU Read last returned
  // One SEND of exactly these bytes (no iSER header added). Returns its completion status.
  ibv_wc_status SendRaw(const std::vector<uint8_t>& bytes);
  ibv_wc_status RdmaWrite(uint32_t stag, uint64_t va, const std::vector<uint8_t>& data);
  ibv_wc_status RdmaRead(uint32_t stag, uint64_t va, std::vector<uint8_t>* data);
  // Standard iSER keys (RDMAExtensions=Yes, 8 KiB receive segments, tgt's forced values).
  static FakeLoginBehavior IserLogin();

 private:
  bool Listen(uint16_t port);
  void Run(FakeLoginBehavior login, Script script);
  bool Accept();
  void PostReceive();
  // Waits for the completion of the work request with this id (receives are queued).
  ibv_wc_status WaitSend(uint64_t wr_id);
  // One signaled work request on [offset, offset + length) of memory_; waits for it.
  ibv_wc_status Post(ibv_wr_opcode opcode, size_t offset, size_t length, uint32_t stag,
                     uint64_t va);

  std::string error_;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> memory_;  // [receive buffer | send buffer | data buffer]
  std::vector<ibv_wc> received_;
  IserStags stags_;
  uint64_t next_wr_id_ = 1;
  size_t next_receive_ = 0;
  uint8_t rnr_retry_ = 0;
  std::atomic<bool> stop_{false};  // set by the destructor while the script thread polls
  std::thread thread_;
};

}  // namespace iser::test
