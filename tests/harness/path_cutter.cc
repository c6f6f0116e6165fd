#include "tests/harness/path_cutter.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace iser::test {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

// A failure the relay cannot work around (out of descriptors or memory): loud, as the harness is.
[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "path cutter: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

Status SystemError(const std::string& what) {
  return Status::IoError("path cutter: " + what + ": " + std::strerror(errno));
}

// Closes fd so that its peer gets a RST rather than a FIN: the connection is lost, not ended.
void ResetFd(int fd) {
  const linger abortive{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  close(fd);
}

// iSCSI PDUs are small and latency bound: the relay must not add Nagle delays of its own.
void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One direction of a connection: bytes read from one side and not yet written to the other, in
// data[begin, end).
struct Flow {
  std::vector<char> data = std::vector<char>(kBufferBytes);
  size_t begin = 0;
  size_t end = 0;
  bool eof = false;   // the sending side has shut down writing
  bool shut = false;  // and the receiving side's write is shut down, the buffer drained

  bool empty() const { return begin == end; }
  bool full() const { return end - begin == data.size(); }
};

enum class Io { kIdle, kMoved, kFailed };

Io ReadInto(int fd, Flow& flow) {
  if (flow.end == flow.data.size()) {
    std::memmove(flow.data.data(), flow.data.data() + flow.begin, flow.end - flow.begin);
    flow.end -= flow.begin;
    flow.begin = 0;
  }
  const ssize_t n = recv(fd, flow.data.data() + flow.end, flow.data.size() - flow.end, 0);
  if (n > 0) {
    flow.end += static_cast<size_t>(n);
    return Io::kMoved;
  }
  if (n == 0) {
    flow.eof = true;
    return Io::kMoved;
  }
  return errno == EAGAIN || errno == EINTR ? Io::kIdle : Io::kFailed;
}

Io WriteFrom(int fd, Flow& flow, std::atomic<uint64_t>& counter) {
  const ssize_t n = send(fd, flow.data.data() + flow.begin, flow.end - flow.begin, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? Io::kIdle : Io::kFailed;
  flow.begin += static_cast<size_t>(n);
  if (flow.empty()) flow.begin = flow.end = 0;
  counter += static_cast<uint64_t>(n);
  return Io::kMoved;
}

}  // namespace

struct PathCutter::Connection {
  int initiator = -1;
  int target = -1;
  bool connecting = true;  // the non-blocking connect to the target is under way
  Flow to_target;
  Flow to_initiator;

  short InitiatorEvents() const {
    return static_cast<short>((!to_target.eof && !to_target.full() ? POLLIN : 0) |
                              (!to_initiator.empty() ? POLLOUT : 0));
  }
  short TargetEvents() const {
    if (connecting) return POLLOUT;
    return static_cast<short>((!to_initiator.eof && !to_initiator.full() ? POLLIN : 0) |
                              (!to_target.empty() ? POLLOUT : 0));
  }
  void Reset() {
    ResetFd(initiator);
    ResetFd(target);
  }
};

Result<std::unique_ptr<PathCutter>> PathCutter::Start(const std::string& target_host,
                                                      uint16_t target_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(target_host.c_str(), std::to_string(target_port).c_str(), &hints, &found);
  if (rc != 0) {
    return Status::InvalidArgument("path cutter: cannot resolve " + target_host + ": " +
                                   gai_strerror(rc));
  }
  sockaddr_storage target{};
  std::memcpy(&target, found->ai_addr, found->ai_addrlen);
  const auto target_len = static_cast<socklen_t>(found->ai_addrlen);
  freeaddrinfo(found);

  const int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return SystemError("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t address_len = sizeof address;
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listen_fd, SOMAXCONN) != 0 ||
      getsockname(listen_fd, reinterpret_cast<sockaddr*>(&address), &address_len) != 0) {
    Status status = SystemError("listen on 127.0.0.1");
    close(listen_fd);
    return status;
  }
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    Status status = SystemError("eventfd");
    close(listen_fd);
    return status;
  }
  return std::unique_ptr<PathCutter>(
      new PathCutter(listen_fd, wake_fd, ntohs(address.sin_port), target, target_len));
}

PathCutter::PathCutter(int listen_fd, int wake_fd, uint16_t port, const sockaddr_storage& target,
                       socklen_t target_len)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      target_(target),
      target_len_(target_len) {
  thread_ = std::thread([this] { Loop(); });
}

PathCutter::~PathCutter() {
  Run(Command::kQuit);
  thread_.join();
  // Connections still in the backlog are reset with the listening socket.
  close(listen_fd_);
  close(wake_fd_);
}

void PathCutter::Stall() {
  Run(Command::kStall);
}
void PathCutter::Cut() {
  Run(Command::kCut);
}
void PathCutter::Restore() {
  Run(Command::kRestore);
}
void PathCutter::Reset() {
  Run(Command::kReset);
}

void PathCutter::Run(Command command) {
  std::unique_lock lock(mutex_);
  queued_.push_back(command);
  const uint64_t ticket = ++issued_;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) != sizeof one) Die("eventfd write");
  applied_cv_.wait(lock, [&] { return applied_ >= ticket; });
}

bool PathCutter::ApplyCommands() {
  uint64_t count;
  if (read(wake_fd_, &count, sizeof count) < 0 && errno != EAGAIN) Die("eventfd read");
  std::vector<Command> commands;
  {
    std::lock_guard lock(mutex_);
    commands.swap(queued_);
  }
  bool quit = false;
  for (Command command : commands) {
    switch (command) {
      case Command::kStall:
        mode_ = Mode::kStalled;
        break;
      case Command::kCut:
        ResetAll();
        mode_ = Mode::kCut;
        break;
      case Command::kRestore:
        mode_ = Mode::kRelay;
        break;
      case Command::kReset:
        ResetAll();
        break;
      case Command::kQuit:
        ResetAll();
        quit = true;
        break;
    }
  }
  {
    std::lock_guard lock(mutex_);
    applied_ += commands.size();
  }
  applied_cv_.notify_all();
  return !quit;
}

void PathCutter::ResetAll() {
  for (auto& c : connections_) c->Reset();
  connections_.clear();
}

void PathCutter::Loop() {
  std::vector<pollfd> fds;
  for (;;) {
    // Fixed slots: the wake-up, the listener, then each connection's initiator and target side. A
    // slot with nothing to wait for gets fd -1 (poll skips it), so that a hang-up poll would report
    // regardless of the events asked for cannot spin the loop while a buffer is full.
    const bool relaying = mode_ == Mode::kRelay;
    fds.assign(2 + 2 * connections_.size(), pollfd{-1, 0, 0});
    fds[0] = {wake_fd_, POLLIN, 0};
    if (mode_ != Mode::kStalled) fds[1] = {listen_fd_, POLLIN, 0};
    for (size_t i = 0; relaying && i < connections_.size(); ++i) {
      const Connection& c = *connections_[i];
      if (const short events = c.InitiatorEvents()) fds[2 + 2 * i] = {c.initiator, events, 0};
      if (const short events = c.TargetEvents()) fds[3 + 2 * i] = {c.target, events, 0};
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    // A command may have closed connections or changed the mode the slots were made for.
    if (fds[0].revents != 0) {
      if (!ApplyCommands()) return;
      continue;
    }
    const size_t before = connections_.size();
    for (size_t i = 0; i < before; ++i) {
      if (fds[2 + 2 * i].revents == 0 && fds[3 + 2 * i].revents == 0) continue;
      if (!Pump(*connections_[i], fds[3 + 2 * i].revents)) connections_[i].reset();
    }
    std::erase(connections_, nullptr);
    if (fds[1].revents != 0) AcceptAll();
  }
}

void PathCutter::AcceptAll() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN) return;
      // Errors of that one connection (or pending network errors, which accept(2) passes on).
      if (errno == ECONNABORTED || errno == EINTR || errno == EPROTO || errno == EPERM) continue;
      Die("accept");
    }
    if (mode_ == Mode::kCut) {
      ResetFd(fd);
      continue;
    }
    ++connections_accepted_;
    auto c = std::make_unique<Connection>();
    c->initiator = fd;
    c->target = socket(target_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->target < 0) Die("socket");
    SetNoDelay(c->initiator);
    SetNoDelay(c->target);
    if (connect(c->target, reinterpret_cast<const sockaddr*>(&target_), target_len_) == 0) {
      c->connecting = false;
    } else if (errno != EINPROGRESS) {
      c->Reset();  // the target refused at once: the initiator sees its connection reset
      continue;
    }
    connections_.push_back(std::move(c));
  }
}

bool PathCutter::Pump(Connection& c, short target_revents) {
  if (c.connecting && target_revents != 0) {
    int error = 0;
    socklen_t len = sizeof error;
    if (getsockopt(c.target, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      c.Reset();
      return false;
    }
    c.connecting = false;
  }
  // One round each way per wake-up, so that a busy connection cannot hold up the others or a
  // command; poll reports what is left.
  bool failed = false;
  if (c.InitiatorEvents() & POLLIN) failed |= ReadInto(c.initiator, c.to_target) == Io::kFailed;
  if (!failed && !c.connecting && !c.to_target.empty()) {
    failed |= WriteFrom(c.target, c.to_target, bytes_to_target_) == Io::kFailed;
  }
  if (!failed && (c.TargetEvents() & POLLIN)) {
    failed |= ReadInto(c.target, c.to_initiator) == Io::kFailed;
  }
  if (!failed && !c.to_initiator.empty()) {
    failed |= WriteFrom(c.initiator, c.to_initiator, bytes_to_initiator_) == Io::kFailed;
  }
  // A half-close is passed on once everything sent before it has been.
  if (!failed && !c.connecting && c.to_target.eof && c.to_target.empty() && !c.to_target.shut) {
    failed = shutdown(c.target, SHUT_WR) != 0;
    c.to_target.shut = true;
  }
  if (!failed && c.to_initiator.eof && c.to_initiator.empty() && !c.to_initiator.shut) {
    failed = shutdown(c.initiator, SHUT_WR) != 0;
    c.to_initiator.shut = true;
  }
  if (failed) {
    c.Reset();
    return false;
  }
  if (c.to_target.shut && c.to_initiator.shut) {
    close(c.initiator);
    close(c.target);
    return false;
  }
  return true;
}

}  // namespace iser::test
