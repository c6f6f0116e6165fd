#include "initiator/base/status.h"

#include <gtest/gtest.h>

#include <string>

namespace iser {
namespace {

TEST(Status, WithContextKeepsTheCodeAndPrefixesTheMessage) {
  const Status s = Status::Timeout("no answer").WithContext("portal 192.0.2.1:3260");
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.message(), "portal 192.0.2.1:3260: no answer");
}

TEST(Result, HoldsAValueOrTheStatusWhyNot) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = Status::NotFound("no LUN 3");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

// Only builds that check Result (debug and sanitizer builds, which scripts/test runs) have this
// behaviour to test; elsewhere reading an error's value is left undefined for speed.
#if ISER_CHECKED_RESULTS
TEST(ResultDeathTest, ReadingTheValueOfAnErrorAbortsNamingTheError) {
  Result<std::string> bad = Status::ConnectionFailed("portal 192.0.2.1:3260 refused");
  EXPECT_DEATH({ (void)bad.value(); }, "failed Result was read: .*192.0.2.1:3260 refused");
  EXPECT_DEATH({ (void)bad->size(); }, "failed Result was read");
}
#endif

}  // namespace
}  // namespace iser
