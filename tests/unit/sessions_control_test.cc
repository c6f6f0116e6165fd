// The session daemon's control protocol and state files (sessions/control.h,
// state_dir.h): a login request carries every field of the URL and the options, secrets
// included, and a malformed one is refused without quoting it; state files and directories.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sessions/control.h"
#include "sessions/state_dir.h"

namespace iser::sessions {
namespace {

TEST(FuseControl, LoginRequestKeepsEveryField) {
  Result<IscsiUrl> url = ParseIscsiUrl(
      "iser://alice%s3cret@[::1]:3261/iqn.2026-11.test:disk/3?target_user=bob&target_password="
      "t0p&header_digest=crc32c-none&data_digest=none&auth=sha-256,md5&replacement_timeout=7.5&"
      "command_timeout=0&portal=10.0.0.2:3262&portal=10.0.0.3&multipath=on&nr_sessions=3&"
      "path_selector=round-robin");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  ConnectOptions c;
  c.initiator_name = "iqn.2026-11.test:initiator";
  c.transport = TransportKind::kTcp;
  c.password = "from-file";
  c.target_password = "mutual-file";
  c.password_hint = "--password-file FILE";
  c.login_timeout = std::chrono::milliseconds(2500);
  c.command_timeout = std::chrono::milliseconds(9000);

  // Through a real socket pair, as the daemon receives it.
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ServeOptions serve;
  serve.read_only = true;
  serve.threads = 7;
  ASSERT_TRUE(SendMessage(fds[0], LoginRequest({*url, c, serve})).ok());
  Result<Json> got = ReceiveMessage(fds[1], std::chrono::seconds(5));
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["op"], "login");

  LoginSpec spec;
  ASSERT_TRUE(ParseLoginRequest(*got, &spec).ok());
  const IscsiUrl& u = spec.url;
  const ConnectOptions& o = spec.options;
  EXPECT_EQ(u.transport, TransportKind::kIser);
  EXPECT_EQ(u.portal, (Portal{"::1", 3261}));
  EXPECT_EQ(u.target, "iqn.2026-11.test:disk");
  EXPECT_EQ(u.lun, 3u);
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "s3cret");
  EXPECT_EQ(u.target_user, "bob");
  EXPECT_EQ(u.target_password, "t0p");
  EXPECT_EQ(u.header_digest, url->header_digest);
  EXPECT_EQ(u.data_digest, url->data_digest);
  EXPECT_EQ(u.auth, url->auth);
  EXPECT_EQ(u.replacement_timeout, std::chrono::milliseconds(7500));
  EXPECT_EQ(u.command_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(u.alternate_portals, url->alternate_portals);
  EXPECT_EQ(u.multipath, true);
  EXPECT_EQ(u.nr_sessions, 3u);
  EXPECT_EQ(u.path_selector, "round-robin");
  EXPECT_EQ(o.initiator_name, c.initiator_name);
  EXPECT_EQ(o.transport, TransportKind::kTcp);
  EXPECT_EQ(o.password, "from-file");
  EXPECT_EQ(o.target_password, "mutual-file");
  EXPECT_EQ(o.password_hint, c.password_hint);
  EXPECT_EQ(o.login_timeout, c.login_timeout);
  EXPECT_EQ(o.replacement_timeout, std::nullopt);
  EXPECT_EQ(o.command_timeout, c.command_timeout);
  EXPECT_TRUE(spec.serve.read_only);
  EXPECT_EQ(spec.serve.threads, 7u);
  EXPECT_EQ(spec.serve.page_cache, std::nullopt) << "not given stays not given";
  EXPECT_EQ(spec.serve.allow_other, std::nullopt);
}

// The multipath arguments a URL leaves out stay left out (the holder's defaults apply), and
// multipath=off arrives as off, not as absent.
TEST(FuseControl, LoginRequestKeepsMultipathOffAndAbsentArguments) {
  Result<IscsiUrl> url = ParseIscsiUrl("iscsi://10.0.0.1/iqn.2026-11.test:disk?multipath=off");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  LoginSpec spec;
  ASSERT_TRUE(
      ParseLoginRequest(LoginRequest({*url, ConnectOptions{}, ServeOptions{}}), &spec).ok());
  EXPECT_EQ(spec.url.multipath, false);
  EXPECT_EQ(spec.url.nr_sessions, std::nullopt);
  EXPECT_EQ(spec.url.path_selector, "");
}

TEST(FuseControl, MalformedLoginRequestDoesNotQuoteTheSecret) {
  Json request = LoginRequest(LoginSpec{});
  request["url"]["password"] = "hunter2-secret";
  request["url"]["port_is_missing"] = true;
  request["url"]["portal"].erase("port");
  LoginSpec spec;
  const Status st = ParseLoginRequest(request, &spec);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.ToString().find("hunter2"), std::string::npos) << st.ToString();
}

TEST(FuseControl, RepliesCarryTheStatus) {
  EXPECT_TRUE(StatusOfReply(ReplyFor(Status::OK())).ok());
  const Status st = StatusOfReply(ReplyFor(Status::AuthFailed("CHAP refused")));
  EXPECT_EQ(st.code(), StatusCode::kAuthFailed);
  EXPECT_EQ(st.message(), "CHAP refused");
  EXPECT_EQ(StatusOfReply(Json::object()).code(), StatusCode::kProtocolError);
}

TEST(FuseControl, NobodyListeningIsConnectionFailed) {
  Result<int> fd = ConnectControl("/nonexistent/iser-connect-test.sock");
  EXPECT_EQ(fd.status().code(), StatusCode::kConnectionFailed);
}

class TreePathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iser-tree-paths.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("ISER_CONNECT_RUNTIME_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("ISER_CONNECT_RUNTIME_DIR");
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string dir_;
};

TEST_F(TreePathsTest, PlacesFollowTheRuntimeDirectory) {
  EXPECT_EQ(DefaultTreeRoot().value(), dir_ + "/iser-connect");
  EXPECT_EQ(StateDir(), dir_ + "/iser-connect.d");
  const HolderPaths a = PathsForRoot("/mnt/a");
  const HolderPaths b = PathsForRoot("/mnt/b");
  EXPECT_EQ(a.root, "/mnt/a");
  EXPECT_EQ(a.socket, PathsForRoot("/mnt/a").socket);  // stable: how a later command finds it
  EXPECT_NE(a.socket, b.socket);
  EXPECT_EQ(a.socket.rfind(StateDir() + "/tree-", 0), 0u) << a.socket;
  EXPECT_LT(PathsForRoot("/" + std::string(4000, 'x')).socket.size(), 108u - dir_.size());
}

TEST_F(TreePathsTest, StateDirectoryMustBePrivate) {
  const std::string state = StateDir();
  ASSERT_TRUE(EnsureStateDir(state).ok());
  struct stat st;
  ASSERT_EQ(stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(chmod(state.c_str(), 0755), 0);
  EXPECT_EQ(EnsureStateDir(state).code(), StatusCode::kInvalidArgument);
}

TEST_F(TreePathsTest, StateFileRoundTripsAndIsPrivate) {
  const std::string state = StateDir();
  ASSERT_TRUE(EnsureStateDir(state).ok());
  const HolderPaths p = PathsForRoot("/mnt/with space");
  ASSERT_TRUE(WriteHolderState(p, HolderState{4242, p.root, "mount"}).ok());
  Result<HolderState> back = ReadHolderState(p.state_file);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->root, "/mnt/with space");
  EXPECT_EQ(back->kind, "mount");
  // The writer's name: a live process is this one only under that name (nbdkit's is "nbdkit").
  EXPECT_FALSE(back->comm.empty());
  back->pid = static_cast<int>(getpid());
  EXPECT_TRUE(HolderProcessAlive(*back));
  back->comm = "not-" + back->comm;
  EXPECT_FALSE(HolderProcessAlive(*back));
  struct stat st;
  ASSERT_EQ(stat(p.state_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadHolderState(state + "/missing.state").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace iser::sessions
