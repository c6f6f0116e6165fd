// session --json: the tree processes' status replies flattened into one list of sessions in SID
// order, each after its parameters its holder's root, pid and kind (and, for a whole-portal
// mount, the portal it discovers at, in the shape of every portal).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/json_output.h"

namespace iser::cli {
namespace {

TEST(CliSessionsJson, FlattensTheTrees) {
  const Json daemon =
      Json::parse(R"({"code":0,"message":"","root":"/run/iser-connect","pid":10,"kind":"daemon",
    "sessions":[{"target":"iqn.a","sid":1,"parameters":{"MaxBurstLength":262144},"transport":"tcp"},
                {"target":"iqn.b","sid":3,"parameters":{},"transport":"iser"}]})");
  const Json portal =
      Json::parse(R"({"code":0,"message":"","root":"/mnt/p","pid":20,"kind":"portal",
    "portal":"[::1]:3261","sessions":[{"target":"iqn.c","sid":2,"parameters":{}}]})");
  const Json empty = Json::parse(R"({"code":0,"message":"","root":"/mnt/e","pid":30,
    "sessions":[]})");
  const Json out = SessionsJson({daemon, portal, empty});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["target"], "iqn.a");
  EXPECT_EQ(out[0]["root"], "/run/iser-connect");
  EXPECT_EQ(out[0]["pid"], 10);
  EXPECT_FALSE(out[0].contains("portal_mount"));
  EXPECT_EQ(out[0]["parameters"]["MaxBurstLength"], 262144);
  EXPECT_EQ(out[1]["target"], "iqn.c");
  EXPECT_EQ(out[1]["root"], "/mnt/p");
  EXPECT_EQ(out[1]["portal_mount"], Json::parse(R"({"address":"::1","port":3261,"tpgt":null})"));
  EXPECT_EQ(out[2]["transport"], "iser");
  EXPECT_EQ(out[0]["kind"], "daemon");
  EXPECT_EQ(out[1]["kind"], "portal");
  std::vector<std::string> keys;
  for (const auto& item : out[0].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"target", "sid", "transport", "parameters", "root",
                                            "pid", "kind"}));
}

TEST(CliSessionsJson, NoTreesNoSessions) {
  EXPECT_TRUE(SessionsJson({}).empty());
}

}  // namespace
}  // namespace iser::cli
