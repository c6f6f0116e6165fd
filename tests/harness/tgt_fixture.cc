#include "tests/harness/tgt_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace iser::test {

// A port below the kernel's ephemeral range (32768 and up), where no connect() elsewhere can take
// it as its local port between this check and tgtd's bind (other tests connect all the time, and
// a fuzzer running alongside thousands of times a second). Random, so parallel fixtures differ.
uint16_t FreePort() {
  std::random_device random;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const uint16_t port = static_cast<uint16_t>(20000 + random() % 12768);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (free) return port;
  }
  std::fprintf(stderr, "no free port in 20000-32767 after 200 tries\n");
  std::abort();
}

static bool PortOpen(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// softrdma names an RDMA CM listener on port P as the abstract Unix socket
// "@softrdma/<namespace>/4/<address>/P".
static bool RdmaCmListening(uint16_t port) {
  std::ifstream unix_sockets("/proc/net/unix");
  std::string suffix = "/";
  suffix.append(std::to_string(port));
  std::string line;
  while (std::getline(unix_sockets, line)) {
    if (line.find("@softrdma/") != std::string::npos && line.size() > suffix.size() &&
        line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

TgtFixture::TgtFixture(TgtLld lld, std::string iser_initiator)
    : lld_(lld), iser_initiator_(std::move(iser_initiator)) {
  char tmpl[] = "/tmp/iser-test-tgt.XXXXXX";
  dir_ = mkdtemp(tmpl);
  socket_ = dir_ + "/ipc";
}

TgtFixture::~TgtFixture() {
  Stop();
  std::string cmd = "rm -rf '" + dir_ + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir_.c_str());
}

bool TgtFixture::Listening() const {
  return PortOpen(port_) && (lld_ == TgtLld::kIscsi || RdmaCmListening(port_));
}

bool TgtFixture::Start(std::string* error) {
  if (lld_ == TgtLld::kIser) {
    if (std::getenv("ISER_TEST_NETNS") == nullptr) {
      *error =
          "iSER tests must run under tests/harness/iser-netns (a private network namespace "
          "with softrdma in front)";
      return false;
    }
    if (iser_initiator_.empty()) {
      *error = "an iSER target needs the initiator name to bind (tgt 1.0.85)";
      return false;
    }
    port_ = 3260;
  } else {
    port_ = FreePort();
  }
  pid_ = fork();
  if (pid_ == 0) {
    setenv("TGT_IPC_SOCKET", socket_.c_str(), 1);
    const std::string portal = "portal=127.0.0.1:" + std::to_string(port_);
    const std::string iser = "port=" + std::to_string(port_) + ",pool_sz_mb=128";
    const std::string log = dir_ + "/tgtd.log";
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    if (lld_ == TgtLld::kIser) {
      execlp("tgtd", "tgtd", "-f", "--iscsi", portal.c_str(), "--iser", iser.c_str(),
             static_cast<char*>(nullptr));
    } else {
      execlp("tgtd", "tgtd", "-f", "--iscsi", portal.c_str(), static_cast<char*>(nullptr));
    }
    std::fprintf(stderr, "cannot run tgtd (install the Debian package tgt): %s\n",
                 std::strerror(errno));
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *error = "tgtd exited at start: " + log();
      return false;
    }
    if (Listening() && Adm("--op show --mode system") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "tgtd did not start listening on " + portal() +
           (lld_ == TgtLld::kIser ? " (TCP and RDMA CM)" : "") + ": " + log();
  return false;
}

int TgtFixture::Adm(const std::string& args, std::string* output) {
  const std::string cmd = "TGT_IPC_SOCKET='" + socket_ + "' tgtadm " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void TgtFixture::MustAdm(const std::string& args) {
  std::string out;
  const int rc = Adm(args, &out);
  ASSERT_EQ(rc, 0) << "tgtadm " << args << " failed: " << out;
}

void TgtFixture::AddTarget(int tid, const std::string& iqn) {
  MustAdm(Lld() + "--op new --mode target --tid " + std::to_string(tid) + " -T " + iqn);
  MustAdm(Lld() + "--op bind --mode target --tid " + std::to_string(tid) + " -I ALL");
  if (lld_ == TgtLld::kIser) {
    MustAdm(Lld() + "--op bind --mode target --tid " + std::to_string(tid) + " --initiator-name " +
            iser_initiator_);
  }
}

std::string TgtFixture::AddLun(int tid, int lun, uint64_t size, const std::string& options,
                               const std::string& params) {
  const std::string path =
      dir_ + "/lun-" + std::to_string(tid) + "-" + std::to_string(lun) + ".img";
  if (truncate(path.c_str(), 0) != 0) {
    std::ofstream create(path);
  }
  EXPECT_EQ(truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
  MustAdm(Lld() + "--op new --mode logicalunit --tid " + std::to_string(tid) + " --lun " +
          std::to_string(lun) + " -b " + path + " " + options);
  if (!params.empty()) {
    MustAdm(Lld() + "--op update --mode logicalunit --tid " + std::to_string(tid) + " --lun " +
            std::to_string(lun) + " --params " + params);
  }
  return path;
}

void TgtFixture::SetTargetParam(int tid, const std::string& name, const std::string& value) {
  MustAdm(Lld() + "--op update --mode target --tid " + std::to_string(tid) + " --name " + name +
          " --value " + value);
}

void TgtFixture::AddChap(int tid, const std::string& user, const std::string& secret,
                         bool outgoing) {
  MustAdm(Lld() + "--op new --mode account --user " + user + " --password " + secret);
  MustAdm(Lld() + "--op bind --mode account --tid " + std::to_string(tid) + " --user " + user +
          (outgoing ? " --outgoing" : ""));
}

void TgtFixture::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void TgtFixture::Stop() {
  if (pid_ <= 0) return;
  Adm("--op delete --mode system");
  for (int i = 0; i < 10; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Kill();
}

std::string TgtFixture::log() const {
  std::ifstream in(dir_ + "/tgtd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace iser::test
