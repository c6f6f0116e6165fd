// SendTargets answers: several targets and portals, IPv6, address-less targets, garbage, names
// that are not iSCSI names.
#include "discovery/sendtargets.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "initiator/base/log.h"

namespace iser {
namespace {

constexpr const char* kName = "iqn.2026-11.example:t";

TEST(SendTargets, TargetsPortalsAndDefaults) {
  const TextPairs pairs = {
      {"TargetName", "iqn.2026-11.example:a"},
      {"TargetAddress", "192.0.2.1:3260,1"},
      {"TargetAddress", "[2001:db8::1]:3261,2"},
      {"TargetName", "iqn.2026-11.example:b"},
      {"SomethingElse", "ignored"},
  };
  Result<std::vector<DiscoveredTarget>> t = ParseSendTargets(pairs, {"198.51.100.7", 3260});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  ASSERT_EQ((*t)[0].portals.size(), 2u);
  EXPECT_EQ((*t)[0].portals[1].portal.host, "2001:db8::1");
  EXPECT_EQ((*t)[0].portals[1].portal.port, 3261);
  EXPECT_EQ((*t)[0].portals[1].tpgt, 2);
  ASSERT_EQ((*t)[1].portals.size(), 1u) << "no address: the portal asked";
  EXPECT_EQ((*t)[1].portals[0].portal.host, "198.51.100.7");
}

TEST(SendTargets, Garbage) {
  const Portal asked{"h", 3260};
  EXPECT_FALSE(ParseSendTargets({{"TargetAddress", "1.2.3.4:3260,1"}}, asked).ok());
  EXPECT_FALSE(ParseSendTargets({{"TargetName", ""}}, asked).ok());
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "1.2.3.4:3260"}}, asked).ok());
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "1.2.3.4:3260,x"}}, asked).ok());
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "1.2.3.4:99999,1"}}, asked).ok());
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "[::1]:3260"}}, asked).ok());
  EXPECT_TRUE(ParseSendTargets({}, asked)->empty());
}

TEST(SendTargets, FromRawTextWithTgtStyleAnswer) {
  // What tgt sends for two targets, one with an IPv4 and an IPv6 portal in the same group.
  const char raw[] =
      "TargetName=iqn.2001-04.com.example:one\0TargetAddress=10.0.0.5:3260,1\0"
      "TargetAddress=[fd00::5]:3260,1\0TargetName=iqn.2001-04.com.example:two\0"
      "TargetAddress=10.0.0.5:3260,1\0";
  Result<TextPairs> pairs = ParseText({reinterpret_cast<const uint8_t*>(raw), sizeof(raw) - 1});
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  Result<std::vector<DiscoveredTarget>> t = ParseSendTargets(*pairs, {"10.0.0.5", 3260});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<DiscoveredTarget> want = {
      {"iqn.2001-04.com.example:one", {{{"10.0.0.5", 3260}, 1}, {{"fd00::5", 3260}, 1}}},
      {"iqn.2001-04.com.example:two", {{{"10.0.0.5", 3260}, 1}}},
  };
  EXPECT_EQ(*t, want);
}

TEST(SendTargets, PortalGroupTagBoundsAndDefaultPort) {
  const Portal asked{"h", 3260};
  Result<std::vector<DiscoveredTarget>> t =
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "host.example,65535"}}, asked);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].portals[0].portal, (Portal{"host.example", 3260}));
  EXPECT_EQ((*t)[0].portals[0].tpgt, 65535);
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "h:1,65536"}}, asked).ok());
  EXPECT_FALSE(ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "h:1,"}}, asked).ok());
  EXPECT_FALSE(ParseSendTargets({{"TargetName", kName}, {"TargetAddress", ",1"}}, asked).ok());
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "[fd00::5,1]:3260"}}, asked).ok());
  const Status st =
      ParseSendTargets({{"TargetName", kName}, {"TargetAddress", "h:x,1"}}, asked).status();
  EXPECT_EQ(st.code(), StatusCode::kProtocolError);
  EXPECT_NE(st.message().find("h:x,1"), std::string::npos) << st.message();
}

std::vector<std::string>* g_warnings = nullptr;

void CaptureWarning(LogLevel level, const std::string& message) {
  if (level == LogLevel::kWarning && g_warnings) g_warnings->push_back(message);
}

// A name with '/' would make the whole-portal tree's listing fail, "." and ".." would be
// unreachable there: such targets are dropped, with their addresses, and each is named in a
// warning, escaped; the targets around them are kept with their own addresses.
TEST(SendTargets, TargetsWhoseNamesAreNotIscsiNamesAreSkippedWithAWarning) {
  std::vector<std::string> warnings;
  g_warnings = &warnings;
  SetLogSink(CaptureWarning, LogLevel::kWarning);
  const TextPairs pairs = {
      {"TargetName", "iqn.2026-11.example:a"},
      {"TargetAddress", "192.0.2.1:3260,1"},
      {"TargetName", "iqn.2026-11.example:x/y"},
      {"TargetAddress", "192.0.2.66:3260,6"},
      {"TargetName", "."},
      {"TargetName", ".."},
      {"TargetName", "evil\n\x1b[2J"},
      {"TargetName", std::string(5000, 'z')},
      {"TargetName", "iqn.2026-11.example:b"},
  };
  Result<std::vector<DiscoveredTarget>> t = ParseSendTargets(pairs, {"198.51.100.7", 3260});
  SetLogSink(nullptr, LogLevel::kWarning);
  g_warnings = nullptr;
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<DiscoveredTarget> want = {
      {"iqn.2026-11.example:a", {{{"192.0.2.1", 3260}, 1}}},
      {"iqn.2026-11.example:b", {{{"198.51.100.7", 3260}, 1}}},
  };
  EXPECT_EQ(*t, want);
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_NE(warnings[0].find("'iqn.2026-11.example:x/y'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("'.'"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("'..'"), std::string::npos) << warnings[2];
  EXPECT_NE(warnings[3].find("'evil\\x0a\\x1b[2J'"), std::string::npos) << warnings[3];
  EXPECT_LT(warnings[4].size(), 200u) << "a long name is cut in the warning";
  EXPECT_NE(warnings[4].find("zzz..."), std::string::npos) << warnings[4];
}

TEST(SendTargets, ASkippedTargetsBadAddressIsStillAnError) {
  const Portal asked{"h", 3260};
  EXPECT_FALSE(
      ParseSendTargets({{"TargetName", "bad/name"}, {"TargetAddress", "1.2.3.4:3260"}}, asked)
          .ok());
}

}  // namespace
}  // namespace iser
