// FakeTarget: a small scripted iSCSI target inside the test process, for the faults a real
// target cannot be made to produce (malformed PDUs, lies, garbage keys). It is a mock by
// necessity: tgtd never sends these, so tests that need them use this instead, and say so.
//
// FakeTarget accepts one connection, answers the login (or misbehaves in it, as configured), then
// runs the test's script with blocking helpers to read the initiator's PDUs and send raw bytes.
// FakePortal accepts connections over and over and hands each to the test's handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/pdu/bhs.h"
#include "initiator/session/session_options.h"
#include "tests/harness/target_login_keys.h"

namespace iser::test {

struct FakePdu {
  Bhs bhs;
  std::vector<uint8_t> data;
};

// What the fake target answers during login.
struct FakeLoginBehavior {
  std::vector<std::string> operational_keys = DefaultTargetLoginKeys();
  uint8_t status_class = 0;
  uint8_t status_detail = 0;
  std::vector<std::string> status_keys;  // sent with a non-zero status (e.g. TargetAddress)
  bool header_digest = false;  // after login, PDUs carry header digests both ways (TCP only)
};

// The part of a fake target that does not depend on the transport: PDU exchange for scripts
// and the login answers (security stage with AuthMethod=None, then the operational stage).
class FakeTargetBase {
 public:
  virtual ~FakeTargetBase() = default;
  virtual bool Read(FakePdu* pdu) = 0;  // false on EOF/error
  virtual void Send(const Bhs& bhs, const std::vector<uint8_t>& data = {}) = 0;
  uint32_t next_statsn() { return statsn_++; }

 protected:
  // Answers login requests until the login completes (true) or is refused or cut (false).
  bool AnswerLogin(const FakeLoginBehavior& login);

 private:
  uint32_t statsn_ = 1;
};

// One accepted TCP connection of a fake target, for scripts: PDUs in and out, raw bytes, and the
// login answers.
class FakeConnection : public FakeTargetBase {
 public:
  FakeConnection() = default;
  explicit FakeConnection(int fd) { Adopt(fd); }
  ~FakeConnection() override;
  FakeConnection(const FakeConnection&) = delete;
  FakeConnection& operator=(const FakeConnection&) = delete;

  bool Read(FakePdu* pdu) override;
  // Whether the initiator sent something (or closed) within timeout_ms: Read would not block.
  bool Readable(int timeout_ms);
  void Send(const Bhs& bhs, const std::vector<uint8_t>& data = {}) override;
  void SendRaw(const void* p, size_t n);
  // Shuts the connection down (the initiator sees it closed); the descriptor stays until the
  // object goes.
  void Close();
  // Answers the login as configured; true once in full feature phase (from then on PDUs carry
  // header digests if the login says so).
  bool Login(const FakeLoginBehavior& login);
  // The first Login Request of this connection (its ISID and TSIH), once Login has read it.
  const Bhs& first_login_request() const { return first_login_request_; }

 protected:
  // Takes ownership of an accepted socket.
  void Adopt(int fd);
  int fd() const { return fd_; }

 private:
  bool ReadExact(void* p, size_t n);

  int fd_ = -1;
  bool digest_ = false;
  bool in_login_ = false;
  int login_requests_ = 0;
  Bhs first_login_request_;
};

class FakeTarget : public FakeConnection {
 public:
  using LoginBehavior = FakeLoginBehavior;
  using Script = std::function<void(FakeTarget& t)>;

  FakeTarget(LoginBehavior login, Script script);
  ~FakeTarget() override;

  uint16_t port() const { return port_; }

 private:
  void Run(LoginBehavior login, Script script);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// FakePortal: a fake target that keeps accepting connections, for recovery tests, where a
// session that lost its connection comes back and what it finds there is up to the test (a
// refused login, a redirect, a connection dropped at once). Each accepted connection is handed,
// on the portal's thread and one at a time, to the handler set last; the connection closes when
// the handler returns. The portal counts the connections it accepted.
class FakePortal {
 public:
  using Handler = std::function<void(FakeConnection& c)>;

  explicit FakePortal(Handler handler);
  ~FakePortal();
  FakePortal(const FakePortal&) = delete;
  FakePortal& operator=(const FakePortal&) = delete;

  uint16_t port() const { return port_; }
  // For the connections accepted from now on.
  void set_handler(Handler handler);
  int accepted() const { return accepted_.load(); }

 private:
  void Run();

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  Mutex mu_;
  Handler handler_ ISER_GUARDED_BY(mu_);
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The answers of a target that refuses a login with this status (class, detail) and these keys.
FakeLoginBehavior RefusingLogin(uint8_t status_class, uint8_t status_detail,
                                std::vector<std::string> status_keys = {});

// A Login Response / SCSI Response / Data-In header with the usual fields filled.
Bhs ResponseHeader(Opcode op, uint32_t itt, uint32_t statsn, uint32_t exp_cmdsn,
                   uint32_t max_cmdsn);

// For scripts over either transport: reads the initiator's PDUs until one with this opcode
// (false if the connection ends first), and answers a Task Management request with this
// response (0: function complete).
bool ReadUntil(FakeTargetBase& t, Opcode op, FakePdu* pdu);
void AnswerTaskManagement(FakeTargetBase& t, const FakePdu& tmf, uint8_t response);

// Options for a session to a fake target of this process at 127.0.0.1:port under the names the
// fakes answer to, with a 5 s login bound: each test adds what it is about (recovery, timeouts).
SessionOptions LoopbackOptions(uint16_t port, const std::string& target_name);

}  // namespace iser::test
