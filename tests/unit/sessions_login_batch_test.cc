// Logins in batches (sessions/client.h LoginAllToDaemon, holder.h HolderServer): every login of
// a batch ends once, with its own outcome; a holder runs several at once but never more than
// kParallelLogins; and a daemon that predates the batches (it answers "unknown control request")
// still gets every login, one request each.
//
// The holder here is a stand-in that only counts and answers (the real tree's logins run in
// tests/fuse/big_portal.sh and node_login.sh). The old daemon is a stand-in too, a fault no build
// of this tree can produce: it is the reply an older session daemon gives.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sessions/client.h"
#include "sessions/control.h"
#include "sessions/holder.h"
#include "sessions/state_dir.h"

namespace iser::sessions {
namespace {

class CountingHolder : public Holder {
 public:
  Status Login(const LoginSpec& spec, bool* exists) override {
    const int now = ++running_;
    int seen = max_running_.load();
    while (now > seen && !max_running_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    --running_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_[spec.url.target];
    }
    *exists = spec.url.target.ends_with(":held");
    if (spec.url.target.ends_with(":refused"))
      return Status::AuthFailed("refused " + spec.url.target);
    return Status::OK();
  }
  Json Logout(const Json&, bool* last) override {
    *last = false;
    return ReplyFor(Status::NotSupported("no logout here"));
  }
  Json Sessions(const std::string&) override { return Json::array(); }
  void Rescan(int fd) override {
    if (fd >= 0) close(fd);
  }
  void End() override {}

  std::atomic<int> running_{0};
  std::atomic<int> max_running_{0};
  std::mutex mu_;
  std::map<std::string, int> calls_;
};

class LoginBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iser-login-batch.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("ISER_CONNECT_RUNTIME_DIR", dir_.c_str(), 1);
    root_ = dir_ + "/tree";
    paths_ = PathsForRoot(root_);
  }
  void TearDown() override {
    unsetenv("ISER_CONNECT_RUNTIME_DIR");
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // n specs for targets iqn.2026-11.test:t<i>, with the suffixes given at some indexes.
  static std::vector<LoginSpec> Specs(size_t n, const std::map<size_t, std::string>& suffixes) {
    std::vector<LoginSpec> specs(n);
    for (size_t i = 0; i < n; ++i) {
      specs[i].url.portal = Portal{"127.0.0.1", 3260};
      specs[i].url.target = "iqn.2026-11.test:t" + std::to_string(i);
      if (auto s = suffixes.find(i); s != suffixes.end()) specs[i].url.target += s->second;
      specs[i].options.initiator_name = "iqn.2026-11.test:initiator";
    }
    return specs;
  }

  // LoginAllToDaemon against the holder registered at root_: no daemon may be started.
  std::vector<std::vector<Result<DaemonLogin>>> Run(std::vector<LoginSpec> specs) {
    std::vector<std::vector<Result<DaemonLogin>>> ends(specs.size());
    LoginAllToDaemon(
        std::move(specs), root_,
        [](const HolderPaths&, const LoginSpec&, ReadyReporter*) {
          ADD_FAILURE() << "a daemon was started though one runs";
          return Status::OK();
        },
        false, [&](size_t i, const Result<DaemonLogin>& r) { ends.at(i).push_back(r); });
    return ends;
  }

  std::string dir_, root_;
  HolderPaths paths_;
};

TEST_F(LoginBatchTest, EveryLoginEndsOnceWithItsOwnOutcomeAndABoundedNumberRunAtOnce) {
  CountingHolder holder;
  HolderServer server(paths_, "daemon");
  ASSERT_TRUE(server.Register().ok());
  server.Start(&holder);

  // More than one request's worth (64), with a refusal and a held target among them, and one
  // spec that never reaches the daemon (no target).
  std::vector<LoginSpec> specs = Specs(100, {{7, ":refused"}, {70, ":held"}});
  specs[42].url.target.clear();
  const auto ends = Run(specs);
  server.Stop();

  for (size_t i = 0; i < ends.size(); ++i) {
    ASSERT_EQ(ends[i].size(), 1u) << "login " << i << " ended " << ends[i].size() << " times";
    const Result<DaemonLogin>& r = ends[i][0];
    if (i == 7) {
      EXPECT_EQ(r.status().code(), StatusCode::kAuthFailed) << r.status().ToString();
      EXPECT_NE(r.status().message().find(":refused"), std::string::npos);
    } else if (i == 42) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    } else {
      ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
      EXPECT_EQ(r->exists, i == 70) << i;
      EXPECT_EQ(r->root, root_);
    }
  }
  EXPECT_EQ(holder.calls_.size(), 99u);
  for (const auto& [target, calls] : holder.calls_) EXPECT_EQ(calls, 1) << target;
  EXPECT_GT(holder.max_running_.load(), 1) << "the batch ran one login at a time";
  EXPECT_LE(holder.max_running_.load(), static_cast<int>(kParallelLogins));
}

// An older session daemon: "logins" is unknown to it, "login" it answers; it holds nothing.
void OldDaemon(int listen_fd, std::atomic<int>* singles, std::atomic<bool>* stop) {
  while (!*stop) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Result<Json> request = ReceiveMessage(fd, std::chrono::seconds(5));
    Json reply;
    const std::string op = request.ok() ? request->value("op", std::string()) : "";
    if (op == "login") {
      ++*singles;
      reply = ReplyFor(Status::OK());
      reply["exists"] = false;
    } else if (op == "status") {
      reply = ReplyFor(Status::OK());
      reply["root"] = "/elsewhere";
      reply["sessions"] = Json::array();
    } else {
      reply = ReplyFor(Status::InvalidArgument("unknown control request " + op));
    }
    SendMessage(fd, reply).IgnoreError();
    close(fd);
  }
}

TEST_F(LoginBatchTest, ADaemonWithoutBatchesGetsOneRequestPerLogin) {
  ASSERT_TRUE(EnsureStateDir(paths_.state_dir).ok());
  Result<int> listen_fd = ListenControl(paths_);
  ASSERT_TRUE(listen_fd.ok()) << listen_fd.status().ToString();
  std::atomic<int> singles{0};
  std::atomic<bool> stop{false};
  std::thread daemon(OldDaemon, *listen_fd, &singles, &stop);

  const auto ends = Run(Specs(5, {}));
  stop = true;
  shutdown(*listen_fd, SHUT_RDWR);  // accept4 returns, the thread sees stop
  daemon.join();
  close(*listen_fd);

  for (size_t i = 0; i < ends.size(); ++i) {
    ASSERT_EQ(ends[i].size(), 1u) << i;
    EXPECT_TRUE(ends[i][0].ok()) << i << ": " << ends[i][0].status().ToString();
  }
  EXPECT_EQ(singles.load(), 5);
}

}  // namespace
}  // namespace iser::sessions
