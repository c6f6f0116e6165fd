#include "tests/harness/datamover_contract.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace iser::test {

namespace {

// Written into a buffer once the datamover may no longer read or write it (after Retire, or when
// the connection failed and the session hands the buffer back): these bytes must never reach the
// wire, and must stay.
constexpr uint8_t kMarker = 0xee;
// What a test's NOP-Outs carry to mark the end of what it queued.
constexpr uint32_t kSentinel = 0x5e000000;
// A read large enough for iSER to register the caller's buffer itself (IserMemory::kDirectBytes)
// and small enough for every datamover's MaxTransferBytes.
constexpr uint32_t kReadBytes = 512 * 1024;
constexpr uint32_t kFirstDataIn = 64 * 1024;

bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool IsInitiatorOpcode(Opcode op) {
  switch (op) {
    case Opcode::kNopOut:
    case Opcode::kScsiCommand:
    case Opcode::kTaskMgmtRequest:
    case Opcode::kLoginRequest:
    case Opcode::kTextRequest:
    case Opcode::kDataOut:
    case Opcode::kLogoutRequest:
    case Opcode::kSnackRequest:
      return true;
    default:
      return false;
  }
}

std::string Hex(uint32_t v) {
  char s[16];
  snprintf(s, sizeof s, "0x%x", v);
  return s;
}

std::string Describe(const PeerPdu& p) {
  return std::string(OpcodeName(p.bhs.opcode())) + " ITT " + Hex(p.bhs.itt()) + " (" +
         std::to_string(p.data.size()) + " bytes)";
}

// Every PDU is one the initiator may send, and no command or Data-Out carries a byte written
// after Retire or after the buffer was handed back.
void ExpectWellFramedAndNoMarker(const std::vector<PeerPdu>& pdus, const char* when) {
  for (const PeerPdu& p : pdus) {
    EXPECT_TRUE(IsInitiatorOpcode(p.bhs.opcode()))
        << when << ": a PDU that is not well framed, opcode " << Hex(uint32_t{p.bhs.b[0]});
    if (p.bhs.opcode() != Opcode::kScsiCommand && p.bhs.opcode() != Opcode::kDataOut) continue;
    const auto marker = std::find(p.data.begin(), p.data.end(), kMarker);
    EXPECT_TRUE(marker == p.data.end())
        << when << ": " << Describe(p) << " carries bytes written into its buffer after Retire, "
        << "at offset " << (marker - p.data.begin());
  }
}

const PeerPdu* FindCommand(const std::vector<PeerPdu>& pdus, uint32_t itt) {
  for (const PeerPdu& p : pdus) {
    if (p.bhs.opcode() == Opcode::kScsiCommand && p.bhs.itt() == itt) return &p;
  }
  return nullptr;
}

}  // namespace

DatamoverPeer::~DatamoverPeer() = default;

std::string ContractPeerName(const ::testing::TestParamInfo<ContractPeer>& info) {
  return info.param.name;
}

void PrintTo(const ContractPeer& peer, std::ostream* os) {
  *os << peer.name;
}

void ContractEvents::Post(std::function<void()> fn) {
  MutexLock lock(&mu_);
  posted_.push_back(std::move(fn));
}

uint64_t ContractEvents::ran() {
  MutexLock lock(&mu_);
  return ran_;
}

void ContractEvents::Expose(Task* task) {
  MutexLock lock(&mu_);
  tasks_[task->itt] = task;
}

int ContractEvents::errors() {
  MutexLock lock(&mu_);
  return errors_;
}

std::string ContractEvents::first_error() {
  MutexLock lock(&mu_);
  return first_error_;
}

int ContractEvents::placements() {
  MutexLock lock(&mu_);
  return placements_;
}

void ContractEvents::CheckNotStopped(const char* event) {
  if (!stopped_) return;
  ++late_events_;
  ADD_FAILURE() << event << " ran after Shutdown returned";
}

void ContractEvents::OnWake() {
  CheckNotStopped("OnWake");
  for (;;) {
    std::function<void()> fn;
    {
      MutexLock lock(&mu_);
      if (posted_.empty()) return;
      fn = std::move(posted_.front());
      posted_.pop_front();
    }
    fn();
    MutexLock lock(&mu_);
    ++ran_;
  }
}

void ContractEvents::OnTimer() {
  CheckNotStopped("OnTimer");
}

Status ContractEvents::PlaceDataIn(const Bhs& bhs, uint8_t** destination) {
  CheckNotStopped("PlaceDataIn");
  MutexLock lock(&mu_);
  const auto it = tasks_.find(bhs.itt());
  if (it == tasks_.end()) return Status::ProtocolError("Data-In for unknown ITT " + Hex(bhs.itt()));
  const Task* t = it->second;
  const uint64_t end = uint64_t{bhs.u32(bhs::kBufferOffset)} + bhs.data_segment_length();
  if (t->direction != DataDirection::kRead || end > t->transfer_length) {
    return Status::ProtocolError("Data-In outside the buffer of ITT " + Hex(bhs.itt()));
  }
  ++placements_;
  *destination = t->buffer + bhs.u32(bhs::kBufferOffset);
  return Status::OK();
}

void ContractEvents::OnPdu(const Bhs&, std::span<const uint8_t>) {
  CheckNotStopped("OnPdu");
}

void ContractEvents::OnConnectionError(const Status& status) {
  CheckNotStopped("OnConnectionError");
  std::vector<Task*> tasks;
  {
    MutexLock lock(&mu_);
    if (errors_++ == 0) first_error_ = status.ToString();
    for (const auto& [itt, t] : tasks_) tasks.push_back(t);
  }
  // The session fails every task now and its callers reuse their buffers at once.
  for (Task* t : tasks) std::memset(t->buffer, kMarker, t->transfer_length);
}

void DatamoverContract::SetUp() {
  peer_ = GetParam().make();
  ASSERT_NE(peer_, nullptr);
  dm_ = peer_->Open();
  ASSERT_NE(dm_, nullptr);
  const Status started = dm_->Start(&events_);
  ASSERT_TRUE(started.ok()) << started.ToString();
}

void DatamoverContract::TearDown() {
  if (dm_) Shutdown();
  dm_.reset();
  peer_.reset();
}

void DatamoverContract::OnIoThread(std::function<void()> fn) {
  const uint64_t before = events_.ran();
  events_.Post(std::move(fn));
  dm_->Wake();
  ASSERT_TRUE(WaitUntil([&] { return events_.ran() > before; }))
      << "the I/O thread did not run a wake-up within 20 s";
}

void DatamoverContract::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  std::atomic<bool> done{false};
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::thread watchdog([&done, name] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done) {
      if (std::chrono::steady_clock::now() > deadline) {
        fprintf(stderr, "%s: Datamover::Shutdown did not return within 60 s\n", name.c_str());
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  dm_->Shutdown();
  done = true;
  watchdog.join();
  events_.Stop();
}

Task* DatamoverContract::NewTask(DataDirection direction, uint32_t itt, uint32_t bytes,
                                 uint8_t fill) {
  buffers_.emplace_back(bytes, fill);
  Task& t = tasks_.emplace_back();
  t.direction = direction;
  t.buffer = buffers_.back().data();
  t.transfer_length = bytes;
  t.itt = itt;
  t.bhs.set_opcode(Opcode::kScsiCommand, false);
  t.bhs.set_flags(kFinalBit | (direction == DataDirection::kRead ? kReadBit : kWriteBit));
  t.bhs.set_itt(itt);
  t.bhs.set_u32(bhs::kExpectedDataTransferLength, bytes);
  t.cdb_length = 10;
  t.cdb[0] = direction == DataDirection::kRead ? 0x28 : 0x2a;
  std::memcpy(&t.bhs.b[32], t.cdb, 16);
  events_.Expose(&t);
  return &t;
}

std::vector<PeerPdu> DatamoverContract::ReceiveUntil(uint32_t sentinel_itt) {
  std::vector<PeerPdu> pdus;
  for (;;) {
    PeerPdu p;
    if (!peer_->Receive(&p)) {
      ADD_FAILURE() << "the NOP-Out " << Hex(sentinel_itt) << " queued last never arrived ("
                    << pdus.size() << " PDUs before; connection errors: " << events_.errors() << " "
                    << events_.first_error() << ")";
      return pdus;
    }
    if (p.bhs.opcode() == Opcode::kNopOut && p.bhs.itt() == sentinel_itt) return pdus;
    if (p.bhs.opcode() == Opcode::kNopOut && p.bhs.itt() == kReservedTag) continue;  // Clog's
    pdus.push_back(std::move(p));
  }
}

void DatamoverContract::SendNop(uint32_t itt, std::span<const uint8_t> data) {
  Bhs nop;
  nop.set_opcode(Opcode::kNopOut, true);
  nop.set_flags(kFinalBit);
  nop.set_itt(itt);
  nop.set_u32(bhs::kTtt, kReservedTag);
  nop.set_data_segment_length(static_cast<uint32_t>(data.size()));
  dm_->SendControl(nop, data);
}

// Clause 1(a) and (b). A write command with immediate and unsolicited data and an R2T's Data-Out
// are queued while the peer does not read, so they wait in the datamover (or, over io_uring, in
// a send in flight); then, in a later wake-up, their tasks are retired and the buffers
// overwritten at once, as a caller whose task completed may. Nothing on the wire may carry those
// bytes, and the framing must hold. iSER moves no Data-Out (its target reads a write buffer with
// an RDMA READ through the STag the command advertised): that read must fail after Retire.
TEST_P(DatamoverContract, RetireEndsAccessToTheBufferBeforeItReturns) {
  constexpr uint32_t kWriteItt = 0x100;
  constexpr uint32_t kDataOutItt = 0x200;
  Task* w = NewTask(DataDirection::kWrite, kWriteItt, 64 * 1024, 0x11);
  w->immediate_bytes = 8192;
  w->unsolicited_bytes = 8192;
  w->bhs.set_data_segment_length(w->immediate_bytes);
  Task* d = NewTask(DataDirection::kWrite, kDataOutItt, 64 * 1024, 0x22);
  OnIoThread([&] {
    peer_->Clog(dm_.get());
    dm_->SendCommand(w);
    if (peer_->carries_data_out()) dm_->SendDataOut(d, 7, 0, 32 * 1024);
  });
  // Time for an io_uring datamover to see its first send fall short and post the rest, which
  // then waits for room in the socket: Retire has to end a send in flight.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  OnIoThread([&] {
    dm_->Retire(w);
    dm_->Retire(d);
    std::memset(w->buffer, kMarker, w->transfer_length);
    std::memset(d->buffer, kMarker, d->transfer_length);
    SendNop(kSentinel);
  });
  const std::vector<PeerPdu> pdus = ReceiveUntil(kSentinel);
  ExpectWellFramedAndNoMarker(pdus, "before the NOP-Out queued after Retire");
  // A Data-Out already started when its task ended ends whole; one not started would bring the
  // target data of a task that is over (after a status sent before all solicited data was read,
  // or a Reject): at most one of each task may arrive.
  if (!peer_->sends_when_queued()) {
    for (const uint32_t itt : {kWriteItt, kDataOutItt}) {
      EXPECT_LE(std::count_if(pdus.begin(), pdus.end(),
                              [itt](const PeerPdu& p) {
                                return p.bhs.opcode() == Opcode::kDataOut && p.bhs.itt() == itt;
                              }),
                1)
          << "Data-Out PDUs of ITT " << Hex(itt)
          << " not started when the task was retired went out";
    }
  }
  if (const PeerPdu* command = FindCommand(pdus, kWriteItt); command != nullptr) {
    peer_->ReadAfterRetire(*command);
  }
  Shutdown();
  dm_.reset();
  ExpectWellFramedAndNoMarker(peer_->ReceiveRest(), "after Shutdown");
}

// Clause 1(a), a reused ITT. A write whose Data-Out waits in the datamover is retired, then sent
// again under a new ITT (as after an abort), and its old ITT is taken by a new command. No
// Data-Out goes out under the new ITT (nothing asked for it), nor under the old one after the
// new command that took it. iSER's Data-Out are the unsolicited ones alone.
TEST_P(DatamoverContract, NoStaleDataOutGoesOutUnderAReusedItt) {
  constexpr uint32_t kOldItt = 0x200;
  constexpr uint32_t kNewItt = 0x300;
  Task* d = NewTask(DataDirection::kWrite, kOldItt, 64 * 1024, 0x22);
  d->unsolicited_bytes = 16 * 1024;
  Task* n = NewTask(DataDirection::kRead, kOldItt + 1, 4096, 0);
  OnIoThread([&] {
    peer_->Clog(dm_.get());
    dm_->SendCommand(d);
    if (peer_->carries_data_out()) dm_->SendDataOut(d, 7, 16 * 1024, 48 * 1024);
    dm_->Retire(d);
    d->itt = kNewItt;
    d->bhs.set_itt(kNewItt);
    d->unsolicited_bytes = 0;
    dm_->SendCommand(d);
    n->itt = kOldItt;
    n->bhs.set_itt(kOldItt);
    dm_->SendCommand(n);
    SendNop(kSentinel);
  });
  std::vector<PeerPdu> pdus = ReceiveUntil(kSentinel);
  Shutdown();
  dm_.reset();
  for (PeerPdu& p : peer_->ReceiveRest()) pdus.push_back(std::move(p));
  ExpectWellFramedAndNoMarker(pdus, "after Retire");
  bool new_command_seen = false;
  for (const PeerPdu& p : pdus) {
    if (p.bhs.opcode() == Opcode::kScsiCommand && p.bhs.itt() == kOldItt &&
        (p.bhs.flags() & kReadBit)) {
      new_command_seen = true;
    }
    if (p.bhs.opcode() != Opcode::kDataOut) continue;
    EXPECT_NE(p.bhs.itt(), kNewItt)
        << "a Data-Out queued before Retire went out under the ITT "
        << "the task was sent again with (offset " << p.bhs.u32(bhs::kBufferOffset) << ")";
    EXPECT_FALSE(new_command_seen && p.bhs.itt() == kOldItt)
        << "a Data-Out of the retired task went out after the new command that reused its ITT";
  }
  EXPECT_TRUE(new_command_seen) << "the command that reused the ITT never arrived";
}

// Clause 1(b). A command (with immediate and unsolicited data) still queued in the datamover when
// its task is retired never goes out, nor anything of it. The fake datamover has no queue: it
// hands a PDU over when it is queued, so there the command went out before Retire, with the bytes
// it had then.
TEST_P(DatamoverContract, ACommandRetiredWhileQueuedNeverGoesOut) {
  constexpr uint32_t kItt = 0x400;
  Task* c = NewTask(DataDirection::kWrite, kItt, 32 * 1024, 0x33);
  c->immediate_bytes = 8192;
  c->unsolicited_bytes = 8192;
  c->bhs.set_data_segment_length(c->immediate_bytes);
  OnIoThread([&] {
    peer_->Clog(dm_.get());
    dm_->SendCommand(c);
    dm_->Retire(c);
    std::memset(c->buffer, kMarker, c->transfer_length);
    SendNop(kSentinel);
  });
  std::vector<PeerPdu> pdus = ReceiveUntil(kSentinel);
  Shutdown();
  dm_.reset();
  for (PeerPdu& p : peer_->ReceiveRest()) pdus.push_back(std::move(p));
  ExpectWellFramedAndNoMarker(pdus, "after Retire");
  if (peer_->sends_when_queued()) {
    const PeerPdu* command = FindCommand(pdus, kItt);
    ASSERT_NE(command, nullptr);
    EXPECT_EQ(command->data, std::vector<uint8_t>(8192, 0x33));
    return;
  }
  for (const PeerPdu& p : pdus) {
    EXPECT_NE(p.bhs.itt(), kItt) << "a command retired while still queued went out: "
                                 << Describe(p);
  }
}

// Clause 1(c): retiring a task the datamover never exposed, or one already retired, is no error:
// the connection goes on.
TEST_P(DatamoverContract, RetiringATaskNeverExposedOrAlreadyRetiredIsNoError) {
  Task* never = NewTask(DataDirection::kRead, 0x500, 4096, 0);
  Task* sent = NewTask(DataDirection::kWrite, 0x501, kReadBytes, 0x44);
  OnIoThread([&] { dm_->SendCommand(sent); });
  PeerPdu command;
  ASSERT_TRUE(peer_->Receive(&command));
  EXPECT_EQ(command.bhs.itt(), 0x501u);
  OnIoThread([&] {
    dm_->Retire(never);
    dm_->Retire(sent);
    dm_->Retire(sent);
    SendNop(kSentinel);
  });
  EXPECT_TRUE(ReceiveUntil(kSentinel).empty());
  EXPECT_EQ(events_.errors(), 0) << events_.first_error();
}

// Clause 2: N control PDUs queued in one wake-up each reach the peer once, in order, and nothing
// follows them but what was queued next. 65 is one more than the TCP datamovers' control ring
// held; 1000 many more. An iSER target receives only into the receives it posted, and RFC 7145
// gives the initiator no way to learn their number: the peer caps N at what its target posted.
TEST_P(DatamoverContract, ControlsAreNeverLostOrDoubled) {
  for (const uint32_t wanted : {65u, 1000u}) {
    const uint32_t n = std::min(wanted, peer_->max_controls_in_one_wake());
    const uint32_t base = wanted << 16;
    OnIoThread([&] {
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t data[4] = {static_cast<uint8_t>(i >> 24), static_cast<uint8_t>(i >> 16),
                                 static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
        SendNop(base + i, data);
      }
    });
    for (uint32_t i = 0; i < n; ++i) {
      PeerPdu p;
      ASSERT_TRUE(peer_->Receive(&p)) << "control " << i << " of " << n << " never arrived";
      ASSERT_EQ(p.bhs.itt(), base + i) << "control " << i << " of " << n << ": " << Describe(p);
      const uint8_t data[4] = {static_cast<uint8_t>(i >> 24), static_cast<uint8_t>(i >> 16),
                               static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
      ASSERT_EQ(p.data, std::vector<uint8_t>(data, data + 4)) << "control " << i << " of " << n;
    }
    OnIoThread([&] { SendNop(kSentinel + wanted); });
    PeerPdu next;
    ASSERT_TRUE(peer_->Receive(&next));
    EXPECT_EQ(next.bhs.itt(), kSentinel + wanted)
        << "after " << n << " controls, another arrived: " << Describe(next);
  }
  EXPECT_EQ(events_.errors(), 0) << events_.first_error();
}

// Clause 3. A read's data is partly received into its buffer, more of it waits at our side, and
// the I/O thread fails the connection (Abort). When OnConnectionError runs the session hands
// every buffer back (ContractEvents fills them with the marker): nothing may write into them
// after that, before or during Shutdown. iSER: the target's RDMA WRITE into the read buffer after
// the failure must fail. OnConnectionError runs once.
TEST_P(DatamoverContract, FailNeverCompletesATaskWhoseBufferMayStillBeWritten) {
  Task* r = NewTask(DataDirection::kRead, 0x600, kReadBytes, 0);
  const std::vector<uint8_t> data(kReadBytes, 0x77);
  const std::span<const uint8_t> bytes(data);
  OnIoThread([&] { dm_->SendCommand(r); });
  PeerPdu command;
  ASSERT_TRUE(peer_->Receive(&command));
  ASSERT_EQ(command.bhs.itt(), 0x600u) << Describe(command);
  peer_->BeginDataIn(command, bytes.subspan(0, kFirstDataIn));
  if (dm_->data_in_accounting() == DataInAccounting::kCountedFromPdus) {
    ASSERT_TRUE(WaitUntil([&] { return events_.placements() > 0; }))
        << "the Data-In header never reached PlaceDataIn";
  }
  OnIoThread([&] {
    peer_->QueueMoreDataIn(bytes.subspan(kFirstDataIn, kFirstDataIn));
    dm_->Abort(Status::ConnectionFailed("the contract test fails the connection"));
  });
  ASSERT_TRUE(WaitUntil([&] { return events_.errors() > 0; }))
      << "Abort never reported OnConnectionError";
  peer_->WriteAfterHandBack(command, bytes.subspan(2 * kFirstDataIn));
  Shutdown();
  dm_.reset();
  EXPECT_EQ(events_.errors(), 1) << events_.first_error();
  const auto changed =
      std::find_if(buffers_[0].begin(), buffers_[0].end(), [](uint8_t b) { return b != kMarker; });
  EXPECT_TRUE(changed == buffers_[0].end())
      << "the read buffer was written after OnConnectionError handed it back, at offset "
      << (changed - buffers_[0].begin());
}

// Clause 4. A read's data is partly received, then a send waits for a peer that never reads
// (Clog) and more data waits at our side: Shutdown still returns (the fixture's watchdog aborts
// after a minute), and after it no event runs and the buffer, handed back, stays as its caller
// left it.
TEST_P(DatamoverContract, ShutdownReturnsWhileASendWaitsAndThenNothingRuns) {
  Task* r = NewTask(DataDirection::kRead, 0x700, kReadBytes, 0);
  const std::vector<uint8_t> data(kReadBytes, 0x77);
  const std::span<const uint8_t> bytes(data);
  OnIoThread([&] { dm_->SendCommand(r); });
  PeerPdu command;
  ASSERT_TRUE(peer_->Receive(&command));
  ASSERT_EQ(command.bhs.itt(), 0x700u) << Describe(command);
  peer_->BeginDataIn(command, bytes.subspan(0, kFirstDataIn));
  if (dm_->data_in_accounting() == DataInAccounting::kCountedFromPdus) {
    ASSERT_TRUE(WaitUntil([&] { return events_.placements() > 0; }))
        << "the Data-In header never reached PlaceDataIn";
  }
  OnIoThread([&] { peer_->Clog(dm_.get()); });
  peer_->QueueMoreDataIn(bytes.subspan(kFirstDataIn, kFirstDataIn));
  Shutdown();
  std::memset(r->buffer, kMarker, r->transfer_length);
  peer_->WriteAfterHandBack(command, bytes.subspan(2 * kFirstDataIn));
  EXPECT_LE(events_.errors(), 1) << events_.first_error();
  dm_.reset();
  EXPECT_EQ(events_.late_events(), 0);
  const auto changed =
      std::find_if(buffers_[0].begin(), buffers_[0].end(), [](uint8_t b) { return b != kMarker; });
  EXPECT_TRUE(changed == buffers_[0].end())
      << "the read buffer was written after Shutdown returned, at offset "
      << (changed - buffers_[0].begin());
}

}  // namespace iser::test
