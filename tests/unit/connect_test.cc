// ResolveCredentials: where CHAP secrets come from, and what the error says when one is missing.
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

TEST_F(ResolveCredentialsTest, PasswordFromTheEnvironment) {
  setenv("LIBISCSI_CHAP_PASSWORD", "from-env", 1);
  IscsiUrl url;
  url.user = "alice";
  ASSERT_TRUE(ResolveCredentials(&url, ConnectOptions()).ok());
  EXPECT_EQ(url.password, "from-env");
}

}  // namespace
}  // namespace iser
