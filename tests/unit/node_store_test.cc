#include "discovery/node_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "discovery/node_sync.h"

namespace iser {
namespace {

namespace fs = std::filesystem;

class NodeStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "iser-node-store.XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    root_ = t;
    dir_ = root_ + "/config";
  }
  void TearDown() override { fs::remove_all(root_); }

  NodeStore OpenStore() {
    Result<NodeStore> s = NodeStore::Open(dir_, /*create=*/true);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }

  static NodeRecord Record(const std::string& name, uint16_t port = 3260, uint16_t tpgt = 1) {
    NodeRecord r;
    r.name = name;
    r.portal = {"127.0.0.1", port};
    r.tpgt = tpgt;
    return r;
  }

  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string root_;
  std::string dir_;
};

TEST_F(NodeStoreTest, WritesReadBackWithPrivateModes) {
  const mode_t old_umask = ::umask(0);  // the store must not rely on the caller's umask
  NodeStore store = OpenStore();
  NodeRecord r = Record("iqn.2026-11.io.example:a");
  ASSERT_TRUE(SetNodeKey(&r, "node.session.auth.password", "a-secret-value").ok());
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    ASSERT_TRUE(store.Write(*lock, r).ok());
  }
  ::umask(old_umask);
  const std::string path = dir_ + "/nodes/iqn.2026-11.io.example:a/127.0.0.1,3260,1";
  EXPECT_EQ(store.PathOf(r), path);
  EXPECT_EQ(ModeOf(dir_), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/nodes"), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/nodes/iqn.2026-11.io.example:a"), 0700u);
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ModeOf(dir_ + "/lock"), 0600u);
  Result<std::vector<NodeRecord>> all = store.List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0], r);
}

TEST_F(NodeStoreTest, WriteReplacesAtomicallyAndLeavesNoTemporaryFile) {
  NodeStore store = OpenStore();
  NodeRecord r = Record("iqn.2026-11.io.example:a");
  Result<NodeStore::Lock> lock = store.Acquire();
  ASSERT_TRUE(lock.ok());
  ASSERT_TRUE(store.Write(*lock, r).ok());
  const std::string path = store.PathOf(r);
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  // A temporary file left by a writer that died before its rename.
  std::ofstream(dir_ + "/nodes/iqn.2026-11.io.example:a/.127.0.0.1,3260,1.dead01") << "node.na";
  r.command_timeout = std::chrono::milliseconds(7000);
  ASSERT_TRUE(store.Write(*lock, r).ok());
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "replaced by rename, not rewritten in place";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ + "/nodes/iqn.2026-11.io.example:a")) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"127.0.0.1,3260,1"});
  EXPECT_EQ(Slurp(path), FormatNodeRecord(r));
}

TEST_F(NodeStoreTest, ReadersNeverSeeAPartialRecord) {
  NodeStore store = OpenStore();
  NodeRecord small = Record("iqn.2026-11.io.example:a");
  NodeRecord large = small;
  large.username = std::string(200, 'u');
  large.password = std::string(200, 'p');
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(store.Write(*lock, small).ok());
  }
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!done) {
      std::ifstream in(store.PathOf(small));
      std::stringstream s;
      s << in.rdbuf();
      Result<NodeRecord> r = ParseNodeRecord(s.str(), "r");
      if (!r.ok() || !(*r == small || *r == large)) ++bad;
    }
  });
  for (int i = 0; i < 300; ++i) {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(store.Write(*lock, i % 2 ? small : large).ok());
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad, 0);
}

// Read-modify-write cycles of several processes on one record: the lock serializes them, so no
// increment is lost.
TEST_F(NodeStoreTest, ConcurrentWritersInSeveralProcessesLoseNothing) {
  NodeStore store = OpenStore();
  NodeRecord shared = Record("iqn.2026-11.io.example:shared");
  shared.command_timeout = std::chrono::milliseconds(0);
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(store.Write(*lock, shared).ok());
  }
  constexpr int kChildren = 4;
  constexpr int kRounds = 40;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Result<NodeStore> own = NodeStore::Open(dir_, true);
      if (!own.ok()) ::_exit(2);
      for (int i = 0; i < kRounds; ++i) {
        {
          Result<NodeStore::Lock> lock = own->Acquire();
          if (!lock.ok()) ::_exit(3);
          Result<std::vector<NodeRecord>> found = own->Find(shared.name, std::nullopt, &*lock);
          if (!found.ok() || found->size() != 1) ::_exit(4);
          NodeRecord r = (*found)[0];
          r.command_timeout += std::chrono::milliseconds(1);
          if (!own->Write(*lock, r).ok()) ::_exit(5);
        }  // RecordDiscovery takes the lock itself
        // A target of its own, through the same path discover -o new takes.
        DiscoverySource source;
        source.portal = {"127.0.0.1", 3260};
        DiscoveredTarget t{"iqn.2026-11.io.example:c" + std::to_string(c) + "-" + std::to_string(i),
                           {{{"127.0.0.1", 3260}, 1}}};
        if (!RecordDiscovery(*own, source, {t}, {.add_new = true}).ok()) ::_exit(6);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  Result<std::vector<NodeRecord>> all = store.List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 1u + kChildren * kRounds);
  Result<std::vector<NodeRecord>> found = store.Find(shared.name, std::nullopt);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].command_timeout, std::chrono::milliseconds(kChildren * kRounds));
}

TEST_F(NodeStoreTest, AConfigDirectoryThatCannotBeCreatedIsAnErrorNamingIt) {
  // Under a regular file: fails for root too, who ignores modes.
  std::ofstream(root_ + "/file") << "x";
  const std::string bad = root_ + "/file/config";
  Result<NodeStore> s = NodeStore::Open(bad, /*create=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIoError);
  EXPECT_NE(s.status().message().find(root_ + "/file"), std::string::npos) << s.status().message();
  Result<NodeStore> r = NodeStore::Open(bad, /*create=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
}

TEST_F(NodeStoreTest, AMissingStoreIsEmptyUntilCreated) {
  Result<NodeStore> s = NodeStore::Open(dir_, /*create=*/false);
  ASSERT_TRUE(s.ok());
  Result<std::vector<NodeRecord>> all = s->List();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(NodeStoreTest, ModesOthersCanReadAreRepaired) {
  NodeStore store = OpenStore();
  NodeRecord r = Record("iqn.2026-11.io.example:a");
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(store.Write(*lock, r).ok());
  }
  ASSERT_EQ(::chmod(store.PathOf(r).c_str(), 0644), 0);
  ASSERT_EQ(::chmod((dir_ + "/nodes/" + r.name).c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
  Result<NodeStore> again = NodeStore::Open(dir_, /*create=*/false);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->List().ok());
  EXPECT_EQ(ModeOf(dir_), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/nodes/" + r.name), 0700u);
  EXPECT_EQ(ModeOf(store.PathOf(r)), 0600u);
}

TEST_F(NodeStoreTest, AMalformedRecordIsAnErrorNamingFileAndLine) {
  NodeStore store = OpenStore();
  NodeRecord r = Record("iqn.2026-11.io.example:a");
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    ASSERT_TRUE(store.Write(*lock, r).ok());
  }
  std::ofstream(store.PathOf(r)) << "node.name = iqn.2026-11.io.example:a\nnode.tpgt = x\n";
  Result<std::vector<NodeRecord>> all = store.List();
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kIoError);
  EXPECT_NE(all.status().message().find(store.PathOf(r) + ":2:"), std::string::npos)
      << all.status().message();
  // A record whose contents name another file is as wrong.
  NodeRecord moved = r;
  moved.portal.port = 3999;
  std::ofstream(store.PathOf(r)) << FormatNodeRecord(moved);
  all = store.List();
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("does not match"), std::string::npos);
}

TEST_F(NodeStoreTest, ANewTpgtRenamesTheRecordAndRemoveDeletesIt) {
  NodeStore store = OpenStore();
  NodeRecord r = Record("iqn.2026-11.io.example:a", 3260, 1);
  Result<NodeStore::Lock> lock = store.Acquire();
  ASSERT_TRUE(store.Write(*lock, r).ok());
  const std::string old_path = store.PathOf(r);
  r.tpgt = 2;
  ASSERT_TRUE(store.Write(*lock, r).ok());
  EXPECT_FALSE(fs::exists(old_path));
  Result<std::vector<NodeRecord>> all = store.List(*lock);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].tpgt, 2);
  ASSERT_TRUE(store.Remove(*lock, r).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/nodes/" + r.name));
  EXPECT_EQ(store.Remove(*lock, r).code(), StatusCode::kNotFound);
}

TEST(NodeConfigDirTest, AsIscsiadmAndXdgSay) {
  EXPECT_EQ(*DefaultNodeConfigDir(0, "/x", "/root"), "/etc/iser-connect");
  EXPECT_EQ(*DefaultNodeConfigDir(1000, "/x/cfg", "/home/u"), "/x/cfg/iser-connect");
  EXPECT_EQ(*DefaultNodeConfigDir(1000, "relative", "/home/u"), "/home/u/.config/iser-connect");
  EXPECT_EQ(*DefaultNodeConfigDir(1000, nullptr, "/home/u"), "/home/u/.config/iser-connect");
  EXPECT_FALSE(DefaultNodeConfigDir(1000, nullptr, nullptr).ok());
}

TEST_F(NodeStoreTest, DiscoveryOperationsHaveIscsiadmsMeanings) {
  NodeStore store = OpenStore();
  DiscoverySource source;
  source.portal = {"127.0.0.1", 3260};
  source.new_transport = TransportKind::kIser;
  const Portal p = {"127.0.0.1", 3260};
  std::vector<DiscoveredTarget> targets = {{"iqn.2026-11.t:a", {{p, 1}}},
                                           {"iqn.2026-11.t:b", {{p, 1}}}};
  Result<NodeChanges> c = RecordDiscovery(store, source, targets, {.add_new = true});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->added.size(), 2u);
  EXPECT_EQ(c->added[0].transport, TransportKind::kIser);
  c = RecordDiscovery(store, source, targets, {.add_new = true});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->added.empty() && c->refreshed.empty());

  // A user setting survives `old`, which refreshes the tpgt.
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    Result<std::vector<NodeRecord>> a = store.Find("iqn.2026-11.t:a", p, &*lock);
    ASSERT_TRUE(a.ok() && a->size() == 1);
    NodeRecord r = (*a)[0];
    r.username = "alice";
    ASSERT_TRUE(store.Write(*lock, r).ok());
  }
  targets[0].portals[0].tpgt = 4;
  c = RecordDiscovery(store, source, {targets[0]}, {.refresh_old = true});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->refreshed.size(), 1u);
  Result<std::vector<NodeRecord>> a = store.Find("iqn.2026-11.t:a", p);
  ASSERT_TRUE(a.ok() && a->size() == 1);
  EXPECT_EQ((*a)[0].tpgt, 4);
  EXPECT_EQ((*a)[0].username, "alice");

  // `old` alone keeps b although the portal no longer reports it; `delete` removes it, and not
  // a record discovered elsewhere.
  {
    Result<NodeStore::Lock> lock = store.Acquire();
    NodeRecord elsewhere;
    elsewhere.name = "iqn.2026-11.t:c";
    elsewhere.portal = {"127.0.0.1", 3999};
    elsewhere.discovery_portal = {"127.0.0.1", 3999};
    ASSERT_TRUE(store.Write(*lock, elsewhere).ok());
  }
  c = RecordDiscovery(store, source, {targets[0]}, {.refresh_old = true});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(store.List()->size(), 3u);
  c = RecordDiscovery(store, source, {targets[0]}, {.delete_stale = true});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->removed.size(), 1u);
  EXPECT_EQ(c->removed[0].name, "iqn.2026-11.t:b");
  Result<std::vector<NodeRecord>> left = store.List();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ((*left)[0].name, "iqn.2026-11.t:a");
  EXPECT_EQ((*left)[1].name, "iqn.2026-11.t:c");

  // A name that cannot be a file name is skipped, not written.
  c = RecordDiscovery(store, source, {{"../../etc/evil", {{p, 1}}}}, {.add_new = true});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->added.empty());
  ASSERT_EQ(c->skipped.size(), 1u);
  EXPECT_EQ(store.List()->size(), 2u);
}

}  // namespace
}  // namespace iser
