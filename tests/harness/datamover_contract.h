// The datamover contract suite: what initiator/transport/datamover.h promises the session, tested
// once, to be run on every datamover. tests/unit/datamover_contract_test.cc runs it on epoll,
// io_uring and the fake the session tests use; tests/integration/iser_datamover_contract_test.cc
// on iSER (a scripted iSER target over softrdma).
// The session's own tests run on the fake datamover, which copies every header and byte when they
// are queued; the real datamovers read them later, so only a test against the contract itself
// shows whether they keep it. The clauses:
//  1. Retire ends all access before it returns: nothing sent after it carries bytes written into
//     the task's buffer after it, no stale Data-Out goes out under a reused ITT, a command still
//     queued never goes out, the target's RDMA access through the task's STag fails (iSER), and
//     retiring a task never exposed or already retired is no error.
//  2. Control PDUs are never lost or doubled: N SendControl calls in one wake-up reach the peer
//     each exactly once, in order.
//  3. Fail never completes a task whose buffer may still be written: once OnConnectionError ran
//     (the session then hands every buffer back), nothing the peer sends reaches a buffer, and
//     OnConnectionError runs once.
//  4. Close drains: Shutdown returns while a send waits for a peer that never reads, and after it
//     no event runs and no buffer is touched.
//
// A transport takes part through a DatamoverPeer: the target's side of one real connection (a
// plain socket for iSCSI/TCP, the fake's FakeConnection).
// The test binary instantiates the suite with its peers:
//   INSTANTIATE_TEST_SUITE_P(Name, DatamoverContract, ::testing::Values(ContractPeer{...}, ...),
//                            ContractPeerName);
// Where a clause cannot apply to a transport as written (iSER has no Data-Out or R2T: the target
// reads a write buffer with an RDMA READ through the STag the command advertised, and writes a
// read buffer with an RDMA WRITE), the peer implements that transport's equivalent and says so.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/pdu/bhs.h"
#include "initiator/task/task.h"
#include "initiator/transport/datamover.h"

namespace iser::test {

// One PDU as the peer received it.
struct PeerPdu {
  Bhs bhs;
  std::vector<uint8_t> data;
  // iSER: what the command's iSER header advertised (zero elsewhere).
  uint32_t read_stag = 0;
  uint64_t read_va = 0;
  uint32_t write_stag = 0;
  uint64_t write_va = 0;
};

// The target's side of one datamover's connection. Everything is called on the test's thread
// unless it says otherwise; a failure inside a peer is a gtest failure naming what went wrong.
class DatamoverPeer {
 public:
  virtual ~DatamoverPeer();

  // A datamover connected to this peer and in full feature phase (login done where the transport
  // needs one), with the target's MaxRecvDataSegmentLength 8192; not started. nullptr after a
  // failure.
  virtual std::unique_ptr<Datamover> Open() = 0;
  // The next PDU the datamover sent; false when none arrives within a generous bound or the
  // connection ended (and then a PDU that is not well framed is a failure).
  virtual bool Receive(PeerPdu* pdu) = 0;
  // Once the datamover is destroyed: every PDU it sent that Receive has not returned yet.
  virtual std::vector<PeerPdu> ReceiveRest() = 0;

  // Whether Data-Out PDUs cross this transport (not iSER: the target reads by RDMA READ).
  virtual bool carries_data_out() const { return true; }
  // Whether the datamover hands each PDU over when it is queued (the fake): nothing waits in it,
  // so there is nothing for Retire to stop, only what was sent before it.
  virtual bool sends_when_queued() const { return false; }
  // How many control PDUs one wake-up may queue (what the target has room for).
  virtual uint32_t max_controls_in_one_wake() const { return UINT32_MAX; }

  // On the I/O thread: queues control PDUs with ITT kReservedTag that leave the datamover's later
  // sends waiting while the peer does not read (more than the socket buffers hold; more than the
  // target posted receives for).
  virtual void Clog(Datamover* dm) = 0;

  // The target starts writing a read task's buffer, whose command it received: the first `bytes`
  // of its data. TCP: a Data-In header for the whole transfer and those bytes; iSER: an RDMA
  // WRITE through the advertised STag (which must succeed).
  virtual void BeginDataIn(const PeerPdu& command, std::span<const uint8_t> bytes) = 0;
  // More of that data, sent just before the connection ends (TCP: the next bytes of the segment,
  // left queued on the datamover's socket). May run on the I/O thread.
  virtual void QueueMoreDataIn(std::span<const uint8_t> bytes) = 0;
  // After the connection failed or shut down: the target writes the rest. The buffer must not
  // change; where the target learns the outcome (iSER) the write must fail.
  virtual void WriteAfterHandBack(const PeerPdu& command, std::span<const uint8_t> bytes) = 0;
  // After the write task whose command this is was retired: the target reads what the command
  // advertised, which must fail (iSER's RDMA READ through the write STag). TCP's reads are
  // Data-Out, which the test checks on the wire instead: nothing to do there.
  virtual void ReadAfterRetire(const PeerPdu& command) { (void)command; }
};

// One instantiation: a name for the test and how to make a fresh peer for each case.
struct ContractPeer {
  std::string name;
  std::function<std::unique_ptr<DatamoverPeer>()> make;
};
std::string ContractPeerName(const ::testing::TestParamInfo<ContractPeer>& info);
// For gtest's messages: the peer's name.
void PrintTo(const ContractPeer& peer, std::ostream* os);

// The DatamoverEvents of the suite: the test's tasks by ITT (PlaceDataIn places into them), code
// to run on the I/O thread, and what happened.
class ContractEvents : public DatamoverEvents {
 public:
  // Runs `fn` on the I/O thread at the next wake-up.
  void Post(std::function<void()> fn);
  // How many posted functions have run.
  uint64_t ran();
  void Expose(Task* task);
  // Called with every exposed buffer when the connection fails: the session would hand them
  // back now.
  std::function<void(Task* task)> on_hand_back;
  // After Shutdown returned: any event from now on is a failure.
  void Stop() { stopped_ = true; }

  int errors();
  std::string first_error();
  int placements();
  int late_events() { return late_events_.load(); }

  void OnWake() override;
  void OnTimer() override;
  Status PlaceDataIn(const Bhs& bhs, uint8_t** destination) override;
  void OnPdu(const Bhs& bhs, std::span<const uint8_t> data) override;
  void OnConnectionError(const Status& status) override;

 private:
  void CheckNotStopped(const char* event);

  Mutex mu_;
  std::deque<std::function<void()>> posted_ ISER_GUARDED_BY(mu_);
  uint64_t ran_ ISER_GUARDED_BY(mu_) = 0;
  std::map<uint32_t, Task*> tasks_ ISER_GUARDED_BY(mu_);
  int errors_ ISER_GUARDED_BY(mu_) = 0;
  std::string first_error_ ISER_GUARDED_BY(mu_);
  int placements_ ISER_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<int> late_events_{0};
};

class DatamoverContract : public ::testing::TestWithParam<ContractPeer> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Runs `fn` on the I/O thread and waits (a generous bound) until it has.
  void OnIoThread(std::function<void()> fn);
  // Shutdown, bounded: a Shutdown that has not returned after a minute aborts the process with a
  // message, since a hung Shutdown cannot be recovered from.
  void Shutdown();
  // A task of this direction and size with this ITT, its buffer filled with `fill`.
  Task* NewTask(DataDirection direction, uint32_t itt, uint32_t bytes, uint8_t fill);
  // Receives PDUs until the NOP-Out with this ITT; everything before it, clog excluded.
  std::vector<PeerPdu> ReceiveUntil(uint32_t sentinel_itt);
  // Queues a NOP-Out with this ITT (on the I/O thread).
  void SendNop(uint32_t itt, std::span<const uint8_t> data = {});

  std::unique_ptr<DatamoverPeer> peer_;
  ContractEvents events_;
  std::unique_ptr<Datamover> dm_;
  bool shut_down_ = false;
  // Tasks and their buffers outlive the datamover.
  std::deque<Task> tasks_;
  std::deque<std::vector<uint8_t>> buffers_;
};

}  // namespace iser::test
