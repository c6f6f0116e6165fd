// ResolveCredentials: where CHAP secrets come from, and what the error says when one is missing.
// SessionOptionsFor: which recovery settings win, and the portals recovery tries.
#include <gtest/gtest.h>

#include <cstdlib>

#include "discovery/connect.h"

namespace iser {
namespace {

class ResolveCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"LIBISCSI_CHAP_USERNAME", "LIBISCSI_CHAP_PASSWORD",
                             "LIBISCSI_CHAP_TARGET_USERNAME", "LIBISCSI_CHAP_TARGET_PASSWORD"}) {
      unsetenv(name);
    }
  }
};

// The error names the ways the program at hand takes a secret, and the environment variable.
TEST_F(ResolveCredentialsTest, UserWithoutPasswordNamesTheWaysToGiveOne) {
  IscsiUrl url;
  url.user = "alice";
  ConnectOptions options;
  options.password_hint = "password=- (prompt), password=+FILE or password=-FD";
  Status st = ResolveCredentials(&url, options);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "CHAP user 'alice' has no password: give password=- (prompt), password=+FILE or "
            "password=-FD, or set LIBISCSI_CHAP_PASSWORD");
}

TEST_F(ResolveCredentialsTest, MutualUserWithoutPasswordNamesTheWaysToGiveOne) {
  IscsiUrl url;
  url.user = "alice";
  url.password = "secret-1";
  url.target_user = "bob";
  ConnectOptions options;
  options.target_password_hint = "--target-password-file FILE";
  Status st = ResolveCredentials(&url, options);
  EXPECT_EQ(st.message(),
            "mutual CHAP user 'bob' has no password: give --target-password-file FILE, or set "
            "LIBISCSI_CHAP_TARGET_PASSWORD");
}

TEST_F(ResolveCredentialsTest, WithoutAHintOnlyTheEnvironmentIsNamed) {
  IscsiUrl url;
  url.user = "alice";
  Status st = ResolveCredentials(&url, ConnectOptions());
  EXPECT_EQ(st.message(), "CHAP user 'alice' has no password: set LIBISCSI_CHAP_PASSWORD");
}

// A secret given with no user anywhere would be left unused (a login without CHAP): an error
// that says where a user goes. --username (ConnectOptions::user) is one of those places.
TEST_F(ResolveCredentialsTest, SecretWithoutUserSaysWhereAUserGoes) {
  IscsiUrl url;
  ConnectOptions options;
  options.password = "s3cret";
  options.password_hint = "--password-file FILE";
  options.user_hint = "--username USER";
  Status st = ResolveCredentials(&url, options);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "a CHAP secret was given (--password-file FILE) but no CHAP user: name it in the URL "
            "(iscsi://USER@HOST/TARGET), with --username USER, in $LIBISCSI_CHAP_USERNAME, or in "
            "the node record's node.session.auth.username");
  EXPECT_EQ(st.message().find("s3cret"), std::string::npos);

  options.user = "carol";
  ASSERT_TRUE(ResolveCredentials(&url, options).ok());
  EXPECT_EQ(url.user, "carol");
  EXPECT_EQ(url.password, "s3cret");

  IscsiUrl named;
  named.user = "dave";
  ASSERT_TRUE(ResolveCredentials(&named, options).ok());
  EXPECT_EQ(named.user, "dave") << "the URL's user wins over --username";

  IscsiUrl mutual;
  ConnectOptions m;
  m.user = "carol";
  m.password = "s3cret";
  m.target_password = "t0p";
  m.target_password_hint = "--target-password-file FILE";
  st = ResolveCredentials(&mutual, m);
  EXPECT_NE(st.message().find("a mutual CHAP secret was given (--target-password-file FILE) but "
                              "no mutual CHAP user"),
            std::string::npos)
      << st.ToString();
}

TEST_F(ResolveCredentialsTest, PasswordFromTheEnvironment) {
  setenv("LIBISCSI_CHAP_PASSWORD", "from-env", 1);
  IscsiUrl url;
  url.user = "alice";
  ASSERT_TRUE(ResolveCredentials(&url, ConnectOptions()).ok());
  EXPECT_EQ(url.password, "from-env");
}

// An option (command line, nbdkit parameter) beats the URL's argument, which beats the default.
TEST(SessionOptionsFor, RecoverySettingsPrecedence) {
  Result<IscsiUrl> url = ParseIscsiUrl("iscsi://h/iqn.x?replacement_timeout=5&command_timeout=7");
  ASSERT_TRUE(url.ok());
  ConnectOptions options;
  options.initiator_name = "iqn.2026-11.test:i";
  Result<SessionOptions> so = SessionOptionsFor(*url, options);
  ASSERT_TRUE(so.ok());
  EXPECT_EQ(so->replacement_timeout, std::chrono::seconds(5));
  EXPECT_EQ(so->command_timeout, std::chrono::seconds(7));

  options.replacement_timeout = std::chrono::milliseconds(0);
  options.command_timeout = std::chrono::milliseconds(1500);
  so = SessionOptionsFor(*url, options);
  ASSERT_TRUE(so.ok());
  EXPECT_EQ(so->replacement_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(so->command_timeout, std::chrono::milliseconds(1500));

  url = ParseIscsiUrl("iscsi://h/iqn.x");
  ASSERT_TRUE(url.ok());
  so = SessionOptionsFor(*url, ConnectOptions());
  ASSERT_TRUE(so.ok());
  EXPECT_EQ(so->replacement_timeout, SessionOptions().replacement_timeout);
  EXPECT_EQ(so->command_timeout, SessionOptions().command_timeout);
  EXPECT_EQ(so->replacement_timeout, std::chrono::seconds(120)) << "open-iscsi's default";
  EXPECT_EQ(so->command_timeout, std::chrono::seconds(30)) << "Linux's SCSI command timeout";
}

// The URL's portal= list, in order, without the URL's own portal and without repeats.
TEST(SessionOptionsFor, UrlPortalsBecomeAlternatePortals) {
  Result<IscsiUrl> url = ParseIscsiUrl(
      "iscsi://h:3261/iqn.x?portal=h2&portal=h:3261&portal=[fec0::1]:3262&portal=h2:3260");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  Result<SessionOptions> so = SessionOptionsFor(*url, ConnectOptions());
  ASSERT_TRUE(so.ok());
  EXPECT_EQ(so->portal, (Portal{"h", 3261}));
  EXPECT_EQ(so->alternate_portals, (std::vector<Portal>{{"h2", 3260}, {"fec0::1", 3262}}));
}

}  // namespace
}  // namespace iser
