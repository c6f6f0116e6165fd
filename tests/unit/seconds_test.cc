// ParseSeconds and FormatSeconds: the one parser of durations for URLs, options and parameters.
#include <gtest/gtest.h>

#include "discovery/seconds.h"

namespace iser {
namespace {

using std::chrono::milliseconds;

TEST(Seconds, WholeAndDecimalSeconds) {
  EXPECT_EQ(*ParseSeconds("t", "0"), milliseconds(0));
  EXPECT_EQ(*ParseSeconds("t", "30"), milliseconds(30000));
  EXPECT_EQ(*ParseSeconds("t", "0.5"), milliseconds(500));
  EXPECT_EQ(*ParseSeconds("t", "2.125"), milliseconds(2125));
  EXPECT_EQ(*ParseSeconds("t", "007.05"), milliseconds(7050));
  EXPECT_EQ(*ParseSeconds("t", "31536000"), kMaxSettingSeconds);
}

TEST(Seconds, BadTextNamesTheSettingAndTheText) {
  for (const char* bad : {"", "-1", "+1", "1e3", "1e300", " 1", "1 ", "inf", "nan", "0x10", ".5",
                          "5.", "1.2.3", "1,5", "1s"}) {
    const Status st = ParseSeconds("replacement_timeout", bad).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message(),
              "replacement_timeout '" + std::string(bad) +
                  "': not a number of seconds (digits with an optional fraction, e.g. 30 or 0.5)")
        << bad;
  }
  EXPECT_EQ(ParseSeconds("t", "0.0005").status().message(),
            "t '0.0005': at most 3 digits after the point (milliseconds)");
}

TEST(Seconds, BoundsAreCheckedWithoutOverflow) {
  for (const char* big :
       {"31536000.001", "31536001", "99999999999999999999999999999", "18446744073709551616"}) {
    const Status st = ParseSeconds("--command-timeout", big).status();
    EXPECT_EQ(st.message(), "--command-timeout '" + std::string(big) +
                                "': must be between 0 and 31536000 seconds");
  }
  EXPECT_EQ(ParseSeconds("--time", "0", milliseconds(1)).status().message(),
            "--time '0': must be between 0.001 and 31536000 seconds");
  EXPECT_EQ(*ParseSeconds("--time", "0.001", milliseconds(1)), milliseconds(1));
  EXPECT_FALSE(ParseSeconds("x", "1.6", milliseconds(0), milliseconds(1500)).ok());
  EXPECT_EQ(*ParseSeconds("x", "1.5", milliseconds(0), milliseconds(1500)), milliseconds(1500));
}

TEST(Seconds, FormatReadsBack) {
  EXPECT_EQ(FormatSeconds(milliseconds(120000)), "120");
  EXPECT_EQ(FormatSeconds(milliseconds(500)), "0.5");
  EXPECT_EQ(FormatSeconds(milliseconds(2125)), "2.125");
  EXPECT_EQ(FormatSeconds(milliseconds(1050)), "1.05");
  EXPECT_EQ(FormatSeconds(milliseconds(0)), "0");
  for (int64_t ms : std::initializer_list<int64_t>{0, 1, 10, 999, 1000, 1001, 61500, 31536000000}) {
    EXPECT_EQ(*ParseSeconds("x", FormatSeconds(milliseconds(ms))), milliseconds(ms)) << ms;
  }
}

}  // namespace
}  // namespace iser
