// TgtFixture: a private, unprivileged tgtd for one GoogleTest test, with its own IPC socket and
// temporary directory (so tests run in parallel), configured with tgtadm. Any failure to start or
// configure it fails the test loudly (never a skip).
//
// Two kinds of targets:
//  - kIscsi: tgtd's iSCSI/TCP target on a free 127.0.0.1 port.
//  - kIser: tgtd's iSER target under softrdma, answering TCP discovery and RDMA CM on
//    127.0.0.1:3260 as a real target would. The test process must run in a network namespace of
//    its own with softrdma's verbs in front (tests/harness/iser-netns does both; tgtd inherits
//    it), so parallel tests do not share port 3260. tgt 1.0.85's iSER target admits only
//    initiators bound by name and by address, so targets are bound to `iser_initiator`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace iser::test {

enum class TgtLld { kIscsi, kIser };

class TgtFixture {
 public:
  explicit TgtFixture(TgtLld lld = TgtLld::kIscsi, std::string iser_initiator = "");
  ~TgtFixture();

  // Starts tgtd; returns false (with *error set) if it cannot.
  bool Start(std::string* error);
  // Runs tgtadm with these arguments; returns its exit status (output in *output).
  int Adm(const std::string& args, std::string* output = nullptr);
  // tgtadm that must succeed; aborts the test on failure.
  void MustAdm(const std::string& args);

  // Target tid with name iqn, open to every initiator.
  void AddTarget(int tid, const std::string& iqn);
  // LUN backed by a sparse file of `size` bytes; extra tgtadm options for its creation (e.g.
  // "--blocksize=4096") and LU parameters set afterwards (e.g. "thin_provisioning=1", which
  // tgt 1.0.85 accepts only in an update).
  std::string AddLun(int tid, int lun, uint64_t size, const std::string& options = "",
                     const std::string& params = "");
  void SetTargetParam(int tid, const std::string& name, const std::string& value);
  void AddChap(int tid, const std::string& user, const std::string& secret, bool outgoing = false);

  void Kill();  // SIGKILL, as a target crash
  void Stop();  // orderly
  uint16_t port() const { return port_; }
  std::string portal() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }
  std::string log() const;
  TgtLld lld() const { return lld_; }

 private:
  bool Listening() const;
  std::string Lld() const { return lld_ == TgtLld::kIser ? "--lld iser " : "--lld iscsi "; }

  TgtLld lld_;
  std::string iser_initiator_;
  std::string dir_;
  std::string socket_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// A free TCP port on 127.0.0.1 below the ephemeral range (bound and released).
uint16_t FreePort();

}  // namespace iser::test
