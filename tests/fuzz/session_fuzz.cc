// Fuzzes the whole receive path of a logged-in session: a scripted target (the fake target of
// the integration tests) logs us in, then sends the fuzz input as its byte stream while a READ
// and a WRITE are in flight. Whatever the bytes, both tasks complete (with data or an error),
// the session closes, and the sanitizers stay quiet.
#include <cstdint>
#include <cstdlib>
#include <semaphore>
#include <vector>

#include "initiator/base/log.h"
#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/integration/fake_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace iser;
  static bool quiet = [] {
    SetLogSink([](LogLevel, const std::string&) {}, LogLevel::kError);
    return true;
  }();
  (void)quiet;
  std::vector<uint8_t> input(data, data + size);
  test::FakeTarget target({}, [&](test::FakeTarget& t) {
    test::FakePdu cmd;
    t.Read(&cmd);
    t.Read(&cmd);
    t.SendRaw(input.data(), input.size());
    t.Close();
  });
  SessionOptions o;
  o.portal = {"127.0.0.1", target.port()};
  o.target_name = "iqn.2026-11.io.iser-connect.fuzz:t";
  o.initiator_name = "iqn.2026-11.io.iser-connect.fuzz:i";
  o.login_timeout = std::chrono::seconds(5);
  o.logout_timeout = std::chrono::milliseconds(50);
  o.nop_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Session>> s = Session::Open(o);
  if (!s.ok()) std::abort();
  std::vector<uint8_t> rbuf(8192), wbuf(8192, 0x5a);
  Task rd, wr;
  scsi::Read(rd, 0, 16, rbuf.data(), 8192);
  scsi::Write(wr, 0, 16, wbuf.data(), 8192, false);
  std::binary_semaphore a(0), b(0);
  rd.context = &a;
  wr.context = &b;
  rd.on_complete =
      wr.on_complete = [](Task* t) { static_cast<std::binary_semaphore*>(t->context)->release(); };
  (*s)->Submit(&rd);
  (*s)->Submit(&wr);
  a.acquire();
  b.acquire();
  (*s)->Close();
  return 0;
}
