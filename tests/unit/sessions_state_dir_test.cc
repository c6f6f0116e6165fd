// The state directory's checks (sessions/state_dir.h, sessions/client.h): only a directory of
// this user's alone is used, by login and equally by session, logout and rescan, which would
// otherwise hand requests to, or believe, sockets another user planted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sessions/client.h"
#include "sessions/state_dir.h"

namespace iser::sessions {
namespace {

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iser-state-dir.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("ISER_CONNECT_RUNTIME_DIR", dir_.c_str(), 1);
    state_ = StateDir();
  }
  void TearDown() override {
    unsetenv("ISER_CONNECT_RUNTIME_DIR");
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  // The message of a refused directory, "" when it was accepted.
  std::string Refusal(const std::string& dir) {
    const Status st = CheckStateDir(dir);
    if (st.ok()) return "";
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    return st.message();
  }
  std::string dir_;
  std::string state_;
};

TEST_F(StateDirTest, OnlyAPrivateDirectoryOfThisUserIsAccepted) {
  EXPECT_EQ(CheckStateDir(state_).code(), StatusCode::kNotFound);
  ASSERT_TRUE(EnsureStateDir(state_).ok());
  EXPECT_EQ(Refusal(state_), "");

  ASSERT_EQ(chmod(state_.c_str(), 0755), 0);
  EXPECT_NE(Refusal(state_).find("mode is 0755, not 0700"), std::string::npos) << Refusal(state_);
  ASSERT_EQ(chmod(state_.c_str(), 0700), 0);

  // A link to a directory that would pass: whoever made the link can point it elsewhere later.
  const std::string link = dir_ + "/link.d";
  ASSERT_EQ(symlink(state_.c_str(), link.c_str()), 0);
  EXPECT_NE(Refusal(link).find("symbolic link"), std::string::npos) << Refusal(link);
  EXPECT_FALSE(EnsureStateDir(link).ok());

  const std::string file = dir_ + "/file.d";
  ASSERT_EQ(close(creat(file.c_str(), 0700)), 0);
  EXPECT_NE(Refusal(file).find("not a directory"), std::string::npos) << Refusal(file);
}

TEST_F(StateDirTest, ADirectoryOfAnotherUserIsRefused) {
  // As root, a directory given to nobody; otherwise / (root's) stands for another user's.
  std::string theirs = "/";
  if (geteuid() == 0) {
    theirs = dir_ + "/theirs.d";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  }
  EXPECT_NE(Refusal(theirs).find("belongs to uid"), std::string::npos) << Refusal(theirs);
  EXPECT_FALSE(EnsureStateDir(theirs).ok());
}

TEST_F(StateDirTest, SessionLogoutAndRescanCheckItAsLoginDoes) {
  // No directory: no tree process, nothing refused.
  Result<std::vector<Json>> none = HolderStatuses();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(LogoutOfHolders({.all = true}).status.code(), StatusCode::kNotFound);

  ASSERT_EQ(mkdir(state_.c_str(), 0777), 0);
  ASSERT_EQ(chmod(state_.c_str(), 0777), 0);
  EXPECT_EQ(HolderStatuses().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RescanHolders().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LogoutOfHolders({.all = true}).status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LogoutOfHolders({.target = "iqn.2026-11.test:t1"}).status.code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(HolderStatuses().status().message().find(state_), std::string::npos);
}

}  // namespace
}  // namespace iser::sessions
