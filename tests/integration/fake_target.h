// FakeTarget: a small scripted iSCSI target inside the test process, for the faults a real
// target cannot be made to produce (malformed PDUs, lies, garbage keys). It is a mock by
// necessity: tgtd never sends these, so tests that need them use this instead, and say so.
//
// It accepts one connection, answers the login (or misbehaves in it, as configured), then runs
// the test's script with blocking helpers to read the initiator's PDUs and send raw bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "initiator/pdu/bhs.h"
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

class FakeTarget : public FakeTargetBase {
 public:
  using LoginBehavior = FakeLoginBehavior;
  using Script = std::function<void(FakeTarget& t)>;

  FakeTarget(LoginBehavior login, Script script);
  ~FakeTarget() override;

  uint16_t port() const { return port_; }

  // For scripts (run on the target's thread).
  bool Read(FakePdu* pdu) override;
  void Send(const Bhs& bhs, const std::vector<uint8_t>& data = {}) override;
  void SendRaw(const void* p, size_t n);
  void Close();

 private:
  void Run(LoginBehavior login, Script script);
  bool ReadExact(void* p, size_t n);

  int listen_fd_ = -1;
  int fd_ = -1;
  uint16_t port_ = 0;
  bool digest_ = false;
  std::thread thread_;
};

// A Login Response / SCSI Response / Data-In header with the usual fields filled.
Bhs ResponseHeader(Opcode op, uint32_t itt, uint32_t statsn, uint32_t exp_cmdsn,
                   uint32_t max_cmdsn);

}  // namespace iser::test
