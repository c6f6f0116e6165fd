// The background loop: one thread per process, started lazily on the first connection (never in a
// constructor: tgtd daemonizes first), with every signal blocked (tgtd reads them via signalfd).
// It waits in epoll on listeners and connections; nothing here polls.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "conn.h"
#include "log.h"

namespace softrdma {
namespace {

struct Listener {
  CmIdImpl* id;
  std::string greeting;  // sent first on every accepted connection (TCP listeners)
};

using Clock = std::chrono::steady_clock;

struct Loop {
  std::mutex mu;
  int ep = -1;
  pid_t owner = 0;
  std::map<int, std::shared_ptr<Conn>> conns;
  std::map<int, Listener> listeners;
  // loop_after's work, by due time; timer_fd is armed for the earliest.
  int timer_fd = -1;
  std::multimap<Clock::time_point, std::function<void()>> timers;
  const CmHooks* hooks = nullptr;
};

Loop& loop() {
  static Loop* l = new Loop;
  return *l;
}

void close_conn(const std::shared_ptr<Conn>& c) {
  Loop& l = loop();
  int fd;
  int timer_fd;
  {
    std::lock_guard g(c->mu);
    timer_fd = c->rnr_timer_fd;
    c->rnr_timer_fd = -1;
  }
  {
    std::lock_guard g(l.mu);
    if (c->closed) return;
    c->closed = true;
    fd = c->fd;
    epoll_ctl(l.ep, EPOLL_CTL_DEL, fd, nullptr);
    l.conns.erase(fd);
    if (timer_fd >= 0) {
      epoll_ctl(l.ep, EPOLL_CTL_DEL, timer_fd, nullptr);
      l.conns.erase(timer_fd);
      close(timer_fd);
    }
  }
  {
    std::lock_guard g(c->out_mu);
    c->fd = -1;
    c->out.clear();
  }
  close(fd);
  if (l.hooks) l.hooks->on_close(c);
}

void dispatch(const std::shared_ptr<Conn>& c, const WireHdr* h) {
  if (h->type == Msg::Op || h->type == Msg::Ack || h->type == Msg::Nak ||
      h->type == Msg::ReadResp || h->type == Msg::Terminate)
    transport_message(c, h);
  else if (loop().hooks)
    loop().hooks->on_message(c, h);
}

// Reads what the socket has and dispatches every complete message. The buffer only grows (no
// per-read clearing); a partial message stays at its front.
void read_conn(const std::shared_ptr<Conn>& c) {
  CompletionBatch completions;  // visible once the acknowledgement below is sent
  constexpr size_t kChunk = 256 * 1024;
  if (c->in.size() < c->in_used + kChunk) c->in.resize(c->in_used + kChunk);
  ssize_t n = recv(c->fd, c->in.data() + c->in_used, c->in.size() - c->in_used, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close_conn(c);
    return;
  }
  c->in_used += n;
  size_t pos = 0;
  while (!c->closed && c->in_used - pos >= sizeof(WireHdr)) {
    const auto* h = reinterpret_cast<const WireHdr*>(c->in.data() + pos);
    if (h->len < sizeof(WireHdr) || h->len > (1u << 30)) {
      log_warn("malformed message on a connection; closing it");
      close_conn(c);
      return;
    }
    if (c->in_used - pos < h->len) break;
    dispatch(c, h);
    pos += h->len;
  }
  if (c->closed) return;
  memmove(c->in.data(), c->in.data() + pos, c->in_used - pos);
  c->in_used -= pos;
  transport_send_ack(c);
}

void accept_on(int lfd, const Listener& listener) {
  for (;;) {
    int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    // A fresh socket's send buffer takes the greeting whole.
    if (!listener.greeting.empty() &&
        send(fd, listener.greeting.data(), listener.greeting.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(listener.greeting.size())) {
      close(fd);
      continue;
    }
    conn_add(fd, listener.id, true);
  }
}

// Caller holds l.mu.
void arm_timer_locked(Loop& l) {
  itimerspec t{};
  if (!l.timers.empty()) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  l.timers.begin()->first.time_since_epoch())
                  .count();
    t.it_value.tv_sec = ns / 1000000000;
    t.it_value.tv_nsec = ns % 1000000000;
  }
  timerfd_settime(l.timer_fd, TFD_TIMER_ABSTIME, &t, nullptr);
}

void run_due_timers() {
  Loop& l = loop();
  uint64_t expirations;
  if (read(l.timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) return;
  std::vector<std::function<void()>> due;
  {
    std::lock_guard g(l.mu);
    const auto now = Clock::now();
    while (!l.timers.empty() && l.timers.begin()->first <= now) {
      due.push_back(std::move(l.timers.begin()->second));
      l.timers.erase(l.timers.begin());
    }
    arm_timer_locked(l);
  }
  for (auto& fn : due) fn();
}

void* run(void*) {
  Loop& l = loop();
  epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(l.ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == l.timer_fd) {
        run_due_timers();
        continue;
      }
      std::shared_ptr<Conn> c;
      std::optional<Listener> listener;
      {
        std::lock_guard g(l.mu);
        if (auto it = l.conns.find(fd); it != l.conns.end()) c = it->second;
        if (auto it = l.listeners.find(fd); it != l.listeners.end()) listener = it->second;
      }
      if (listener) {
        accept_on(fd, *listener);
        continue;
      }
      if (!c) continue;
      if (fd != c->fd) {
        transport_rnr_timer(c);
        continue;
      }
      if (evs[i].events & EPOLLOUT) {
        std::lock_guard g(c->out_mu);
        c->flush_locked();
      }
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_conn(c);
    }
  }
  return nullptr;
}

// Starts the loop thread in this process (again after a fork: threads do not survive it).
void ensure_started() {
  Loop& l = loop();
  std::lock_guard g(l.mu);
  if (l.owner == getpid()) return;
  if (l.ep >= 0) close(l.ep);
  if (l.timer_fd >= 0) close(l.timer_fd);
  l.conns.clear();
  l.listeners.clear();
  l.timers.clear();
  l.ep = epoll_create1(EPOLL_CLOEXEC);
  // CLOCK_MONOTONIC is steady_clock's clock on Linux, so due times can be armed as they are.
  l.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = l.timer_fd;
  epoll_ctl(l.ep, EPOLL_CTL_ADD, l.timer_fd, &ev);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  pthread_create(&t, nullptr, run, nullptr);
  pthread_setname_np(t, "softrdma");  // apart in top -H and in iser-connect bench's CPU split
  pthread_detach(t);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  l.owner = getpid();
}

}  // namespace

// Sends what the socket takes now of the len bytes at p, without blocking; returns how many.
static size_t send_what_fits(int fd, const char* p, size_t len) {
  for (;;) {
    const ssize_t n = ::send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return 0;
  }
}

void Conn::flush_locked() {
  while (!out.empty() && fd >= 0) {
    const size_t n = send_what_fits(fd, out.data(), out.size());
    if (n == 0) break;
    out.erase(0, n);
  }
  watch_output_locked();
}

void Conn::watch_output_locked() {
  bool want = !out.empty() && fd >= 0;
  if (want != want_out && fd >= 0) {
    epoll_event ev{};
    ev.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(loop().ep, EPOLL_CTL_MOD, fd, &ev);
    want_out = want;
  }
}

void Conn::send(const void* data, size_t len) {
  std::lock_guard g(out_mu);
  send_locked(data, len);
}

void Conn::send_locked(const void* data, size_t len) {
  if (fd < 0) return;
  const char* p = static_cast<const char*>(data);
  if (!out.empty()) {
    out.append(p, len);
    flush_locked();
    return;
  }
  // Nothing queued: straight from the caller's bytes, no copy into `out`. What the socket does
  // not take now waits for EPOLLOUT.
  const size_t n = send_what_fits(fd, p, len);
  if (n == len) return;
  out.append(p + n, len - n);
  watch_output_locked();
}

void Conn::cut() {
  std::lock_guard g(out_mu);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

std::shared_ptr<Conn> conn_add(int fd, CmIdImpl* id, bool awaiting_req) {
  ensure_started();
  auto c = std::make_shared<Conn>();
  c->fd = fd;
  c->id = id;
  c->awaiting_req = awaiting_req;
  int big = 8 << 20, one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // a TCP connection (other hosts)
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  ucred cred{};
  socklen_t cl = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) c->peer_pid = cred.pid;
  Loop& l = loop();
  std::lock_guard g(l.mu);
  l.conns[fd] = c;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(l.ep, EPOLL_CTL_ADD, fd, &ev);
  return c;
}

void conn_watch_rnr_timer(const std::shared_ptr<Conn>& c) {
  Loop& l = loop();
  std::lock_guard g(l.mu);
  l.conns[c->rnr_timer_fd] = c;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = c->rnr_timer_fd;
  epoll_ctl(l.ep, EPOLL_CTL_ADD, c->rnr_timer_fd, &ev);
}

void listener_add(int fd, CmIdImpl* listener, std::string greeting) {
  ensure_started();
  Loop& l = loop();
  std::lock_guard g(l.mu);
  l.listeners[fd] = Listener{listener, std::move(greeting)};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(l.ep, EPOLL_CTL_ADD, fd, &ev);
}

void listener_remove(int fd) {
  Loop& l = loop();
  std::lock_guard g(l.mu);
  epoll_ctl(l.ep, EPOLL_CTL_DEL, fd, nullptr);
  l.listeners.erase(fd);
}

void loop_after(std::chrono::milliseconds delay, std::function<void()> fn) {
  ensure_started();
  Loop& l = loop();
  std::lock_guard g(l.mu);
  l.timers.emplace(Clock::now() + delay, std::move(fn));
  arm_timer_locked(l);
}

std::vector<std::shared_ptr<Conn>> loop_connections() {
  Loop& l = loop();
  std::lock_guard g(l.mu);
  std::vector<std::shared_ptr<Conn>> out;
  for (const auto& [fd, c] : l.conns) {
    // A connection with an RNR timer is in the map twice.
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

void set_cm_hooks(const CmHooks* hooks) {
  loop().hooks = hooks;
}

}  // namespace softrdma
