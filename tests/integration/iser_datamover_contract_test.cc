// The datamover contract suite (tests/harness/datamover_contract.h) on the iSER datamover, against
// the scripted FakeIserTarget over softrdma (a mock by necessity: the suite makes the target read
// and write through STags after they were revoked, which tgtd never does). The target's script
// runs on its own thread and serves the test's requests one at a time: read a PDU, RDMA WRITE,
// RDMA READ. Run under tests/harness/iser-netns, as every iSER test.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "initiator/transport/iser/iser_datamover.h"
#include "initiator/transport/portal.h"
#include "tests/harness/datamover_contract.h"
#include "tests/integration/fake_iser_target.h"

namespace iser::test {
namespace {

constexpr uint16_t kPort = 3260;  // each test runs in a network namespace of its own
// The receives FakeIserTarget posts (fake_iser_target.cc): an iSER initiator may have no more
// unanswered PDUs in flight than the target has receives for, and learns nothing of their number
// beyond the login's limits.
constexpr uint32_t kTargetReceives = 512;
constexpr uint8_t kRnrRetryForEver = 7;

class IserPeer : public DatamoverPeer {
 public:
  IserPeer()
      : target_(std::make_unique<FakeIserTarget>(
            kPort, FakeIserTarget::IserLogin(), [this](FakeIserTarget& t) { Serve(t); },
            kRnrRetryForEver)) {}
  ~IserPeer() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    target_.reset();
  }

  std::unique_ptr<Datamover> Open() override {
    if (!target_->error().empty()) {
      ADD_FAILURE() << target_->error();
      return nullptr;
    }
    auto dm = std::make_unique<IserDatamover>();
    const Deadline deadline = Clock::now() + std::chrono::seconds(10);
    Status st = dm->Connect(Portal{"127.0.0.1", kPort}, deadline);
    if (!st.ok()) {
      ADD_FAILURE() << st.ToString();
      return nullptr;
    }
    // One Login Request straight to the operational stage's end; the fake target answers it
    // with the iSER keys and takes the connection to full feature phase.
    Bhs login;
    login.set_opcode(Opcode::kLoginRequest, true);
    login.set_flags(kTransitBit | 1 << 2 | 3);
    login.b[8] = 0x80;  // ISID: a random qualifier
    const std::string keys = std::string("InitiatorName=iqn.2026-11.io.iser-connect.test:i") +
                             '\0' + "RDMAExtensions=Yes" + '\0';
    login.set_data_segment_length(static_cast<uint32_t>(keys.size()));
    st = dm->SendPdu(login, {reinterpret_cast<const uint8_t*>(keys.data()), keys.size()}, deadline);
    Bhs answer;
    std::vector<uint8_t> data;
    if (st.ok()) st = dm->ReceivePdu(&answer, &data, deadline);
    if (!st.ok() || answer.opcode() != Opcode::kLoginResponse || answer.b[36] != 0) {
      ADD_FAILURE() << "login: " << st.ToString() << ", opcode 0x" << std::hex << int{answer.b[0]}
                    << ", status class " << int{answer.b[36]};
      return nullptr;
    }
    ConnectionParams params;
    params.rdma_extensions = true;
    params.target_recv_data_segment_length = 8192;
    params.target_max_recv_data_segment_length = 8192;
    st = dm->EnterFullFeature(params);
    if (!st.ok()) {
      ADD_FAILURE() << st.ToString();
      return nullptr;
    }
    return dm;
  }

  bool Receive(PeerPdu* pdu) override { return ReceiveWithin(pdu, std::chrono::seconds(10)); }

  // What is left arrived before the datamover went: a short wait finds it.
  std::vector<PeerPdu> ReceiveRest() override {
    std::vector<PeerPdu> rest;
    PeerPdu p;
    while (ReceiveWithin(&p, std::chrono::milliseconds(300))) rest.push_back(std::move(p));
    return rest;
  }

  bool carries_data_out() const override { return false; }
  uint32_t max_controls_in_one_wake() const override { return kTargetReceives; }

  // More NOP-Outs than the target posted receives and we have send slots: those past its
  // receives wait for a receive that the target, not reading, never posts (RNR, retried for
  // ever), and the rest wait for our send slots.
  void Clog(Datamover* dm) override {
    Bhs nop;
    nop.set_opcode(Opcode::kNopOut, true);
    nop.set_flags(kFinalBit);
    nop.set_itt(kReservedTag);
    for (uint32_t i = 0; i < kTargetReceives + 200; ++i) dm->SendControl(nop, {});
  }

  void BeginDataIn(const PeerPdu& command, std::span<const uint8_t> bytes) override {
    ASSERT_NE(command.read_stag, 0u) << "the read command advertised no STag";
    ibv_wc_status st = IBV_WC_GENERAL_ERR;
    Run([&](FakeIserTarget& t) {
      st = t.RdmaWrite(command.read_stag, command.read_va, {bytes.begin(), bytes.end()});
    });
    EXPECT_EQ(st, IBV_WC_SUCCESS) << ibv_wc_status_str(st);
  }

  // The target's RDMA WRITEs do not wait at our side: WriteAfterHandBack is their equivalent.
  void QueueMoreDataIn(std::span<const uint8_t>) override {}

  void WriteAfterHandBack(const PeerPdu& command, std::span<const uint8_t> bytes) override {
    ibv_wc_status st = IBV_WC_SUCCESS;
    Run([&](FakeIserTarget& t) {
      st = t.RdmaWrite(command.read_stag, command.read_va, {bytes.begin(), bytes.end()});
    });
    EXPECT_NE(st, IBV_WC_SUCCESS)
        << "the target's RDMA WRITE into a read buffer already handed back succeeded";
  }

  void ReadAfterRetire(const PeerPdu& command) override {
    ASSERT_NE(command.write_stag, 0u) << "the write command advertised no STag";
    ibv_wc_status st = IBV_WC_SUCCESS;
    std::vector<uint8_t> data(4096);
    Run([&](FakeIserTarget& t) { st = t.RdmaRead(command.write_stag, command.write_va, &data); });
    EXPECT_NE(st, IBV_WC_SUCCESS)
        << "the target's RDMA READ through a retired task's STag succeeded";
  }

 private:
  using Job = std::function<void(FakeIserTarget&)>;

  // The target's script: runs the test's jobs until the peer goes.
  void Serve(FakeIserTarget& t) {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job(t);
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  // Runs `job` on the target's thread and waits for it: every job is bounded by the target's
  // own patience (10 s).
  void Run(Job job) {
    std::unique_lock lock(mu_);
    jobs_.push_back(std::move(job));
    const uint64_t ticket = ++queued_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ >= ticket; });
  }

  bool ReceiveWithin(PeerPdu* pdu, std::chrono::milliseconds patience) {
    bool ok = false;
    Run([&](FakeIserTarget& t) {
      FakePdu p;
      ok = t.ReadWithin(&p, patience);
      if (!ok) return;
      pdu->bhs = p.bhs;
      pdu->data = std::move(p.data);
      const IserStags& stags = t.last_stags();
      pdu->read_stag = stags.read_stag;
      pdu->read_va = stags.read_va;
      pdu->write_stag = stags.write_stag;
      pdu->write_va = stags.write_va;
    });
    return ok;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t queued_ = 0;
  uint64_t done_ = 0;
  bool stop_ = false;
  // Last: its thread runs Serve, which uses the members above.
  std::unique_ptr<FakeIserTarget> target_;
};

INSTANTIATE_TEST_SUITE_P(Iser, DatamoverContract,
                         ::testing::Values(ContractPeer{
                             "Iser", [] { return std::make_unique<IserPeer>(); }}),
                         ContractPeerName);

}  // namespace
}  // namespace iser::test
