// IoLoop (initiator/transport/io_loop.h), the I/O thread both transports run on: wake-ups,
// descriptor dispatch, the tick, stopping, and checked registrations. Real descriptors (pipes,
// socketpairs, an eventfd and a timerfd) and a real thread throughout; nothing is mocked.
#include "initiator/transport/io_loop.h"

#include <dirent.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "initiator/transport/tcp/tcp_datamover.h"

namespace iser {
namespace {

using std::chrono::milliseconds;

// Polls `done` until it holds or five seconds pass.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Records what the loop calls, and where.
class Recorder : public IoLoopEvents {
 public:
  explicit Recorder(IoLoop* loop) : loop_(loop) {}

  void OnWake() override {
    on_loop_ = on_loop_ && loop_->OnIoThread();
    wake_thread_ = std::this_thread::get_id();
    ++wakes_;
    if (hold_first_wake_ && wakes_ == 1) {
      held_ = true;
      while (hold_first_wake_) std::this_thread::yield();
    }
  }
  void OnTick() override {
    on_loop_ = on_loop_ && loop_->OnIoThread();
    ++ticks_;
  }
  void OnRoundEnd() override { ++rounds_; }
  void OnLoopFailure(const Status& status) override { failure_ = status.ToString(); }

  IoLoop* loop_;
  std::atomic<bool> on_loop_{true};  // every callback so far ran where OnIoThread() held
  std::atomic<std::thread::id> wake_thread_{};
  std::atomic<int> wakes_{0};
  std::atomic<int> ticks_{0};
  std::atomic<int> rounds_{0};
  std::atomic<bool> hold_first_wake_{false};
  std::atomic<bool> held_{false};
  std::string failure_;
};

// The names of this process's threads, from /proc.
std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  closedir(d);
  return names;
}

bool HasThread(const std::string& name) {
  for (const std::string& n : ThreadNames()) {
    if (n == name) return true;
  }
  return false;
}

TEST(IoLoop, WakeFromAnotherThreadRunsOnTheLoopThread) {
  IoLoop loop("test-io-wake", std::chrono::seconds(60));
  Recorder rec(&loop);
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  std::thread waker([&] { loop.Wake(); });
  waker.join();
  ASSERT_TRUE(WaitFor([&] { return rec.wakes_ > 0; }));
  EXPECT_TRUE(rec.on_loop_);
  EXPECT_NE(rec.wake_thread_.load(), std::this_thread::get_id());
  EXPECT_TRUE(HasThread("test-io-wake"));
  loop.Stop();
}

TEST(IoLoop, WakesWhileTheLoopIsBusyCoalesce) {
  IoLoop loop("test-io-burst", std::chrono::seconds(60));
  Recorder rec(&loop);
  rec.hold_first_wake_ = true;
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  loop.Wake();
  ASSERT_TRUE(WaitFor([&] { return rec.held_.load(); }));
  // The loop thread is inside OnWake: these only leave a mark for it.
  for (int i = 0; i < 10000; ++i) loop.Wake();
  rec.hold_first_wake_ = false;
  ASSERT_TRUE(WaitFor([&] { return rec.wakes_ >= 2; }));
  std::this_thread::sleep_for(milliseconds(100));
  // The held one, one for the burst, and at most one more for a wake that also went through
  // the eventfd.
  EXPECT_LE(rec.wakes_, 3);
  loop.Stop();
}

TEST(IoLoop, OnIoThreadOnlyOnTheLoopThread) {
  IoLoop loop("test-io-id", milliseconds(5));
  Recorder rec(&loop);
  EXPECT_FALSE(loop.OnIoThread());
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  std::atomic<bool> elsewhere{false};
  // Asked from other threads while the loop thread starts and runs.
  std::thread other([&] {
    for (int i = 0; i < 10000; ++i) elsewhere = elsewhere || loop.OnIoThread();
  });
  EXPECT_FALSE(loop.OnIoThread());
  other.join();
  ASSERT_TRUE(WaitFor([&] { return rec.ticks_ >= 2; }));
  EXPECT_TRUE(rec.on_loop_);
  EXPECT_FALSE(elsewhere);
  EXPECT_FALSE(loop.OnIoThread());
  loop.Stop();
  EXPECT_FALSE(loop.OnIoThread());
}

TEST(IoLoop, ReadyDescriptorRunsItsCallbackOnTheLoopThread) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  IoLoop loop("test-io-fd", std::chrono::seconds(60));
  Recorder rec(&loop);
  std::atomic<uint32_t> seen{0};
  std::atomic<bool> on_loop{false};
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Add(fds[0], EPOLLIN,
                       [&](uint32_t events) {
                         on_loop = loop.OnIoThread();
                         char c;
                         if (read(fds[0], &c, 1) == 1) seen = events;
                       })
                  .ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  ASSERT_TRUE(WaitFor([&] { return seen != 0; }));
  EXPECT_TRUE(seen & EPOLLIN);
  EXPECT_TRUE(on_loop);
  EXPECT_GE(rec.rounds_, 1);
  loop.Stop();
  close(fds[0]);
  close(fds[1]);
}

TEST(IoLoop, ModifyChangesTheEventsAndRemoveEndsThem) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  IoLoop loop("test-io-mod", std::chrono::seconds(60));
  Recorder rec(&loop);
  std::atomic<int> writable{0};
  std::atomic<int> calls{0};
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Add(sv[0], EPOLLIN,
                       [&](uint32_t events) {
                         ++calls;
                         if (events & EPOLLOUT) {
                           ++writable;
                           // From the callback, on the loop thread: no more events for this socket.
                           EXPECT_TRUE(loop.Remove(sv[0]).ok());
                         }
                       })
                  .ok());
  // Nothing to read: no call until the interest includes EPOLLOUT.
  ASSERT_TRUE(loop.Modify(sv[0], EPOLLIN | EPOLLOUT).ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  ASSERT_TRUE(WaitFor([&] { return writable == 1; }));
  // Level-triggered and still writable, but removed: no further call.
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  loop.Wake();
  ASSERT_TRUE(WaitFor([&] { return rec.wakes_ >= 1; }));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(calls, 1);
  loop.Stop();
  close(sv[0]);
  close(sv[1]);
}

TEST(IoLoop, TheTimerTicks) {
  IoLoop loop("test-io-tick", milliseconds(10));
  Recorder rec(&loop);
  ASSERT_TRUE(loop.Open().ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(loop.Start(&rec).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.ticks_ >= 5; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(40));
  EXPECT_TRUE(rec.on_loop_);
  loop.Stop();
}

TEST(IoLoop, StopJoinsTheThreadAndIsIdempotent) {
  IoLoop never_started("test-io-never", std::chrono::seconds(1));
  never_started.Stop();

  IoLoop loop("test-io-stop", milliseconds(10));
  Recorder rec(&loop);
  ASSERT_TRUE(loop.Open().ok());
  ASSERT_TRUE(loop.Start(&rec).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.ticks_ >= 1; }));
  EXPECT_TRUE(HasThread("test-io-stop"));
  loop.Stop();
  EXPECT_FALSE(HasThread("test-io-stop"));
  const int ticks = rec.ticks_;
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(rec.ticks_, ticks);
  loop.Stop();
  // Wake after Stop only leaves a mark.
  loop.Wake();
  EXPECT_TRUE(rec.failure_.empty()) << rec.failure_;
}

TEST(IoLoop, FailedRegistrationNamesEpollCtl) {
  IoLoop loop("test-io-bad", std::chrono::seconds(1));
  ASSERT_TRUE(loop.Open().ok());
  // Closed after the loop opened its own descriptors, so that none of them reuses the number.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  close(fds[1]);
  Status st = loop.Add(fds[0], EPOLLIN, [](uint32_t) {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("epoll_ctl(EPOLL_CTL_ADD, fd " + std::to_string(fds[0]) + ")"),
            std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("Bad file descriptor"), std::string::npos) << st.ToString();
  // Modifying a descriptor the loop does not watch fails too.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  st = loop.Modify(sv[0], EPOLLIN);
  EXPECT_NE(st.message().find("epoll_ctl(EPOLL_CTL_MOD"), std::string::npos) << st.ToString();
  close(sv[0]);
  close(sv[1]);
}

class NoEvents : public DatamoverEvents {
 public:
  void OnWake() override {}
  void OnTimer() override {}
  Status PlaceDataIn(const Bhs&, uint8_t**) override { return Status::ProtocolError("no"); }
  void OnPdu(const Bhs&, std::span<const uint8_t>) override {}
  void OnConnectionError(const Status&) override {}
};

// Defect 5: the TCP datamover used to ignore epoll_ctl's result and start its thread on a
// socket the loop never watched. A datamover that never connected has no socket to watch.
TEST(IoLoop, TcpDatamoverStartFailsWhenItsSocketCannotBeWatched) {
  TcpDatamover dm;
  NoEvents events;
  Status st = dm.Start(&events);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("epoll_ctl"), std::string::npos) << st.ToString();
  EXPECT_FALSE(HasThread("iscsi-tcp-io"));
}

}  // namespace
}  // namespace iser
