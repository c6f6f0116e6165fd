// bench's CPU by thread name: a busy thread's CPU shows under the name it gave itself, threads
// of one name add up, and the difference of two readings never goes negative.
#include <gtest/gtest.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cli/bench/thread_cpu.h"

namespace iser::cli {
namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Threads named name that each spin for seconds of their own CPU time, then wait until
// released (a thread's time is only visible while it lives).
class BusyThreads {
 public:
  BusyThreads(const char* name, int count, double seconds) {
    for (int i = 0; i < count; ++i) {
      threads_.emplace_back([this, name, seconds] {
        pthread_setname_np(pthread_self(), name);
        volatile uint64_t sink = 0;
        while (ThreadCpuSeconds() < seconds) sink = sink + 1;
        ++busy_done_;
        while (!release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    }
    while (busy_done_ < count) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~BusyThreads() {
    release_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<int> busy_done_{0};
  std::atomic<bool> release_{false};
  std::vector<std::thread> threads_;
};

TEST(ThreadCpu, BusyThreadIsAttributedToItsName) {
  const CpuByName before = CpuByThreadName();
  EXPECT_EQ(before.count("cpu-test-busy"), 0u);
  BusyThreads busy("cpu-test-busy", 1, 0.3);
  const CpuByName after = CpuByThreadName();
  ASSERT_EQ(after.count("cpu-test-busy"), 1u);
  // Two clock ticks of slack (_SC_CLK_TCK is 100 on Linux).
  EXPECT_GE(after.at("cpu-test-busy"), 0.28);
  EXPECT_LT(after.at("cpu-test-busy"), 5.0);
  const CpuByName spent = CpuSpent(before, after);
  EXPECT_GE(spent.at("cpu-test-busy"), 0.28);
}

TEST(ThreadCpu, ThreadsOfOneNameAddUp) {
  BusyThreads busy("cpu-test-pair", 2, 0.2);
  const CpuByName cpu = CpuByThreadName();
  ASSERT_EQ(cpu.count("cpu-test-pair"), 1u);
  EXPECT_GE(cpu.at("cpu-test-pair"), 0.38);
}

TEST(ThreadCpu, SpentIsTheDifferenceAndNeverNegative) {
  const CpuByName before = {{"a", 1.0}, {"b", 2.0}, {"gone", 3.0}};
  const CpuByName after = {{"a", 1.5}, {"b", 1.0}, {"new", 0.25}};
  const CpuByName spent = CpuSpent(before, after);
  EXPECT_EQ(spent, (CpuByName{{"a", 0.5}, {"b", 0.0}, {"new", 0.25}}));
}

}  // namespace
}  // namespace iser::cli
