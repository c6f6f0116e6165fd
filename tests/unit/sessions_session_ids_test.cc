// Session IDs (sessions/session_ids.h): the lowest free number, unique among the processes that
// claim in one state directory, the same for a target until it is given back, and free again
// when its claimer ends, however it ends.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sessions/session_ids.h"

namespace iser::sessions {
namespace {

class SessionIdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iser-sids.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  bool Exists(int sid) const {
    return access((dir_ + "/sid-" + std::to_string(sid)).c_str(), F_OK) == 0;
  }
  std::string dir_;
};

TEST_F(SessionIdsTest, LowestFreeAcrossHoldersAndStableForTheSession) {
  SessionIds a(dir_);
  SessionIds b(dir_);
  EXPECT_EQ(a.For("t1"), 1);
  EXPECT_EQ(b.For("t2"), 2);
  EXPECT_EQ(a.For("t3"), 3);
  EXPECT_EQ(a.For("t1"), 1) << "asked again, a session keeps its SID";
  a.Release("t1");
  EXPECT_FALSE(Exists(1)) << "a SID given back leaves no file";
  EXPECT_EQ(b.For("t4"), 1) << "the lowest free number is reused";
  a.Keep({"t3", "t5"});
  EXPECT_EQ(a.For("t5"), 4) << "1, 2 and 3 are taken";
  b.Keep({});
  EXPECT_FALSE(Exists(1));
  EXPECT_FALSE(Exists(2));
  EXPECT_EQ(a.For("t6"), 1);
}

TEST_F(SessionIdsTest, AClaimerThatDiesWithoutGivingBackFreesItsSid) {
  int claimed[2];  // child to parent: the SIDs it took
  int seen[2];     // parent to child: it may end
  ASSERT_EQ(pipe(claimed), 0);
  ASSERT_EQ(pipe(seen), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child's claims are never given back: _exit skips every destructor, as a crash would.
    auto* ids = new SessionIds(dir_);
    const int sid = ids->For("t1") * 10 + ids->For("t2");
    (void)!write(claimed[1], &sid, sizeof sid);
    char c;
    (void)!read(seen[0], &c, 1);
    _exit(0);
  }
  int sids = 0;
  ASSERT_EQ(read(claimed[0], &sids, sizeof sids), static_cast<ssize_t>(sizeof sids));
  EXPECT_EQ(sids, 12);
  {
    SessionIds live(dir_);
    EXPECT_EQ(live.For("t3"), 3) << "1 and 2 are held by a live process";
  }
  (void)!write(seen[1], "x", 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(Exists(1)) << "the dead claimer's file stays";
  SessionIds after(dir_);
  EXPECT_EQ(after.For("t4"), 1);
  RemoveFreeSessionIds(dir_);
  EXPECT_TRUE(Exists(1)) << "a held SID's file stays";
  EXPECT_FALSE(Exists(2)) << "the dead claimer's last file is cleaned up";
  EXPECT_EQ(after.For("t5"), 2);
  for (int fd : {claimed[0], claimed[1], seen[0], seen[1]}) close(fd);
}

TEST_F(SessionIdsTest, AnUnusableDirectoryGivesNoSid) {
  SessionIds ids(dir_ + "/missing");
  EXPECT_EQ(ids.For("t1"), 0);
}

}  // namespace
}  // namespace iser::sessions
