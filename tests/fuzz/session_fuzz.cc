// Fuzzes everything a target can make a logged-in session do, over the fake datamover
// (tests/harness/fake_datamover.h): no socket and no thread, so each input runs in microseconds.
// The session logs in to the fake, submits a READ, a WRITE (with immediate and unsolicited data),
// a short READ and a TEST UNIT READY, then the input is a sequence of events:
//
//   action byte A, then by A & 7:
//     0-3  a target PDU: 48 header bytes, a 2-byte big-endian data length (at most 8192) and the
//          data (both cut to what is left). If A & 0x08, its ITT becomes that of task
//          (A >> 4) & 3; if A & 0x40 also, its DataSN (R2TSN) is that task's next expected one.
//     4    the clock moves by (next byte) x 100 ms and the timer fires
//     5    the connection fails
//     6    task (next byte) & 3 is submitted again if it has completed
//     7    Close
//
// The first input byte sets the CmdSN window the login leaves (0-3 commands past ExpCmdSN), so
// that commands also wait for MaxCmdSN. Whatever the input, every submitted task completes
// exactly once, the session closes, and the sanitizers stay quiet.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/harness/fake_datamover.h"

namespace {

using namespace iser;

constexpr int kTasks = 4;
constexpr size_t kMaxData = 8192;

struct FuzzTask {
  Task task;
  std::vector<uint8_t> buffer;
  int submitted = 0;
  int completed = 0;
};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint8_t Byte() { return p_ < end_ ? *p_++ : 0; }
  size_t Take(uint8_t* out, size_t n) {
    n = std::min<size_t>(n, end_ - p_);
    std::memcpy(out, p_, n);
    p_ += n;
    return n;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

void Submit(Session& s, FuzzTask& t) {
  ++t.submitted;
  s.Submit(&t.task);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = [] {
    SetLogSink([](LogLevel, const std::string&) {}, LogLevel::kError);
    return true;
  }();
  (void)quiet;
  Input in(data, size);
  test::FakeConnectionOptions fo;
  fo.login_cmdsn_window = in.Byte() & 3;
  for (std::string& k : fo.login_keys) {
    if (k.starts_with("ImmediateData=")) k = "ImmediateData=Yes";
    if (k.starts_with("InitialR2T=")) k = "InitialR2T=No";
    if (k.starts_with("FirstBurstLength=")) k = "FirstBurstLength=4096";
    if (k.starts_with("MaxBurstLength=")) k = "MaxBurstLength=16384";
  }
  test::FakeConnection fake(fo);
  FuzzTask tasks[kTasks];
  SessionOptions o;
  o.portal = {"192.0.2.1", 3260};
  o.target_name = "iqn.2026-11.io.iser-connect.fuzz:t";
  o.initiator_name = "iqn.2026-11.io.iser-connect.fuzz:i";
  o.nop_interval = std::chrono::seconds(5);
  o.nop_timeout = std::chrono::seconds(5);
  o.logout_timeout = std::chrono::milliseconds(0);
  o.datamover_factory = fake.Factory();
  // The fake is single-threaded: a recovery thread would race the input. Command timeouts and
  // SCSI retries stay on, driven by the input's clock.
  o.recover = false;
  Result<std::unique_ptr<Session>> opened = Session::Open(o);
  if (!opened.ok()) std::abort();
  Session& s = **opened;

  tasks[0].buffer.resize(8192);
  scsi::Read(tasks[0].task, 0, 16, tasks[0].buffer.data(), 8192);
  tasks[1].buffer.assign(8192, 0x5a);
  scsi::Write(tasks[1].task, 0, 16, tasks[1].buffer.data(), 8192, false);
  tasks[2].buffer.resize(512);
  scsi::Read(tasks[2].task, 8, 1, tasks[2].buffer.data(), 512);
  scsi::TestUnitReady(tasks[3].task);
  for (FuzzTask& t : tasks) {
    t.task.context = &t;
    t.task.on_complete = [](Task* task) { ++static_cast<FuzzTask*>(task->context)->completed; };
    Submit(s, t);
  }

  std::vector<uint8_t> pdu_data(kMaxData);
  bool closed = false;
  while (!in.empty() && !closed) {
    const uint8_t action = in.Byte();
    switch (action & 7) {
      case 4:
        fake.Advance(std::chrono::milliseconds(100) * in.Byte());
        fake.FireTimer();
        break;
      case 5:
        fake.FailConnection(Status::ConnectionFailed("fuzz: connection reset"));
        break;
      case 6: {
        FuzzTask& t = tasks[in.Byte() & 3];
        if (t.completed == t.submitted) Submit(s, t);
        break;
      }
      case 7:
        s.Close().IgnoreError();  // the outcome depends on the input; only termination matters
        closed = true;
        break;
      default: {
        Bhs bhs;
        in.Take(bhs.data(), kBhsLength);
        const size_t want = static_cast<size_t>(in.Byte()) << 8 | in.Byte();
        const size_t len = in.Take(pdu_data.data(), std::min(want, kMaxData));
        if (action & 0x08) {
          const Task& t = tasks[(action >> 4) & 3].task;
          bhs.set_itt(t.itt);
          if (action & 0x40) {
            bhs.set_u32(bhs::kDataSN,
                        bhs.opcode() == Opcode::kR2T ? t.next_r2t_sn : t.next_data_sn);
          }
        }
        fake.Deliver(bhs, {pdu_data.data(), len});
        break;
      }
    }
  }
  if (!closed) s.Close().IgnoreError();  // as above
  for (const FuzzTask& t : tasks) {
    if (t.completed != t.submitted) std::abort();
  }
  return 0;
}
