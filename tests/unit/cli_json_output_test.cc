// The JSON iser-connect prints for ls and discover: the keys and structure scripts read, and
// valid JSON (and UTF-8) even when the target sends names and INQUIRY strings that are not UTF-8.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/json_output.h"

namespace iser::cli {
namespace {

LunInfo Disk() {
  LunInfo l;
  l.lun = 1;
  l.device_type_name = "DIRECT_ACCESS";
  l.vendor = "IET";
  l.product = "VIRTUAL-DISK";
  l.revision = "0001";
  l.serial = "beaf11";
  l.identifier = "naa.60000000000000000e00000000010001";
  l.is_disk = true;
  l.size_bytes = 33554432;
  l.logical_block_size = 512;
  l.physical_block_size = 4096;
  l.max_transfer_bytes = 1 << 20;
  l.thin = true;
  l.unmap = true;
  return l;
}

TEST(CliJson, ListingKeepsTheKeysInOrder) {
  LunInfo controller;
  controller.device_type_name = "STORAGE_ARRAY_CONTROLLER";
  std::vector<TargetListing> listing = {
      {"iqn.2026-11.test:a", {{"127.0.0.1", 3260}, 1}, Status::OK(), {controller, Disk()}},
      {"iqn.2026-11.test:b", {{"::1", 3261}, 2}, Status::AuthFailed("CHAP rejected"), {}}};
  const std::string text = DumpJson(ListingJson(listing));
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_EQ(
      text.rfind(
          "[{\"target\":\"iqn.2026-11.test:a\",\"portal\":{\"address\":\"127.0.0.1\","
          "\"port\":3260,\"tpgt\":1},\"luns\":[{\"lun\":0,\"type\":\"STORAGE_ARRAY_CONTROLLER\",",
          0),
      0u)
      << text;
  const nlohmann::json d = nlohmann::json::parse(text);
  ASSERT_EQ(d.size(), 2u);
  const nlohmann::json& disk = d[0]["luns"][1];
  EXPECT_FALSE(d[0]["luns"][0].contains("size"));
  EXPECT_EQ(disk["size"], 33554432u);
  EXPECT_EQ(disk["logical_block_size"], 512u);
  EXPECT_EQ(disk["physical_block_size"], 4096u);
  EXPECT_EQ(disk["max_transfer"], 1u << 20);
  EXPECT_EQ(disk["thin"], true);
  EXPECT_EQ(disk["lbprz"], false);
  EXPECT_EQ(disk["unmap"], true);
  EXPECT_EQ(disk["serial"], "beaf11");
  EXPECT_EQ(disk["id"], "naa.60000000000000000e00000000010001");
  EXPECT_EQ(d[1]["portal"], nlohmann::json::parse(R"({"address":"::1","port":3261,"tpgt":2})"));
  EXPECT_FALSE(d[1].contains("luns"));
  EXPECT_NE(d[1]["error"].get<std::string>().find("CHAP rejected"), std::string::npos);
}

TEST(CliJson, InvalidUtf8FromTheTargetStillGivesValidJson) {
  LunInfo l = Disk();
  l.vendor = "AC\xe9ME";       // Latin-1, not UTF-8
  l.product = "DISK\xff\xfe";  // never valid in UTF-8
  l.serial = "\xe2\x82";       // a truncated three-byte sequence
  l.revision = "q\"\\\n\x01";  // what must be escaped
  std::vector<TargetListing> listing = {
      {"iqn.2026-11.test:\xc3\x28", {{"127.0.0.1", 3260}, 1}, Status::OK(), {l}}};
  const std::string text = DumpJson(ListingJson(listing));
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(text)) << text;
  EXPECT_EQ(d[0]["target"], "iqn.2026-11.test:\xef\xbf\xbd(");
  const nlohmann::json& lun = d[0]["luns"][0];
  EXPECT_EQ(lun["vendor"], "AC\xef\xbf\xbdME");
  EXPECT_EQ(lun["product"], "DISK\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(lun["serial"], "\xef\xbf\xbd");
  EXPECT_EQ(lun["revision"], "q\"\\\n\x01");
  EXPECT_EQ(lun["size"], 33554432u);
}

TEST(CliJson, DiscoveryHasEveryPortal) {
  std::vector<DiscoveredTarget> targets = {
      {"iqn.2026-11.test:\x80", {{{"192.0.2.1", 3260}, 1}, {{"2001:db8::1", 3262}, 7}}}};
  const std::string text = DumpJson(DiscoveryJson(targets));
  EXPECT_EQ(
      text,
      "[{\"target\":\"iqn.2026-11.test:\xef\xbf\xbd\",\"portals\":[{\"address\":\"192.0.2.1\","
      "\"port\":3260,\"tpgt\":1},{\"address\":\"2001:db8::1\",\"port\":3262,\"tpgt\":7}]}]");
  EXPECT_TRUE(nlohmann::json::accept(text));
  EXPECT_EQ(DumpJson(DiscoveryJson({})), "[]");
}

}  // namespace
}  // namespace iser::cli
