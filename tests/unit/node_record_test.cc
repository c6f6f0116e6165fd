#include "discovery/node_record.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace iser {
namespace {

NodeRecord Sample() {
  NodeRecord r;
  r.name = "iqn.2026-11.io.example:disk1";
  r.portal = {"192.0.2.7", 3261};
  r.tpgt = 5;
  return r;
}

// A value for every key that differs from the default, so a round trip shows each one is kept.
const std::map<std::string, std::string> kChanged = {
    {"node.name", "iqn.2026-11.io.example:other"},
    {"node.tpgt", "7"},
    {"node.startup", "automatic"},
    {"node.conn[0].address", "fe80::1%eth0"},
    {"node.conn[0].port", "3999"},
    {"iface.transport_name", "iser"},
    {"node.session.auth.authmethod", "CHAP"},
    {"node.session.auth.username", "alice"},
    {"node.session.auth.password", "s3cret = with spaces"},
    {"node.session.auth.username_in", "target-bob"},
    {"node.session.auth.password_in", "other#secret"},
    {"node.conn[0].iscsi.HeaderDigest", "CRC32C,None"},
    {"node.conn[0].iscsi.DataDigest", "None,CRC32C"},
    {"node.conn[0].timeo.login_timeout", "2.5"},
    {"node.session.timeo.replacement_timeout", "0"},
    {"node.session.timeo.command_timeout", "45.125"},
    {"node.discovery_address", "portal.example"},
    {"node.discovery_port", "3262"},
    {"node.discovery_transport", "iser"},
};

TEST(NodeRecordTest, EveryKeyHasAChangedValueHere) {
  EXPECT_EQ(NodeRecordKeys().size(), kChanged.size());
  for (std::string_view key : NodeRecordKeys()) {
    EXPECT_TRUE(kChanged.contains(std::string(key))) << key;
  }
}

TEST(NodeRecordTest, DefaultsAreIscsiadms) {
  NodeRecord r = Sample();
  EXPECT_EQ(*GetNodeKey(r, "node.conn[0].timeo.login_timeout"), "15");
  EXPECT_EQ(*GetNodeKey(r, "node.session.timeo.replacement_timeout"), "120");
  EXPECT_EQ(*GetNodeKey(r, "node.session.timeo.command_timeout"), "30");
  EXPECT_EQ(*GetNodeKey(r, "node.session.auth.authmethod"), "None");
  EXPECT_EQ(*GetNodeKey(r, "node.conn[0].iscsi.HeaderDigest"), "None");
  EXPECT_EQ(*GetNodeKey(r, "node.startup"), "manual");
  EXPECT_EQ(*GetNodeKey(r, "iface.transport_name"), "tcp");
}

TEST(NodeRecordTest, EveryKeyRoundTripsThroughTheFile) {
  NodeRecord r = Sample();
  for (const auto& [key, value] : kChanged) {
    ASSERT_TRUE(SetNodeKey(&r, key, value).ok()) << key;
    EXPECT_EQ(*GetNodeKey(r, key), value) << key;
  }
  const std::string text = FormatNodeRecord(r);
  Result<NodeRecord> back = ParseNodeRecord(text, "f");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  for (const auto& [key, value] : kChanged) EXPECT_EQ(*GetNodeKey(*back, key), value) << key;
  EXPECT_EQ(FormatNodeRecord(*back), text);
}

TEST(NodeRecordTest, DefaultRecordRoundTrips) {
  NodeRecord r = Sample();
  Result<NodeRecord> back = ParseNodeRecord(FormatNodeRecord(r), "f");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
}

TEST(NodeRecordTest, ShowMasksSecretsAndMarksEmptyValues) {
  NodeRecord r = Sample();
  EXPECT_EQ(*NodeShowValue(r, "node.session.auth.password"), "<empty>");
  EXPECT_EQ(*NodeShowValue(r, "node.session.auth.username"), "<empty>");
  ASSERT_TRUE(SetNodeKey(&r, "node.session.auth.password", "topsecret-123").ok());
  EXPECT_EQ(*NodeShowValue(r, "node.session.auth.password"), "********");
  EXPECT_EQ(*NodeShowValue(r, "node.name"), r.name);
  EXPECT_TRUE(IsSecretNodeKey("node.session.auth.password_in"));
  EXPECT_FALSE(IsSecretNodeKey("node.session.auth.username_in"));
}

TEST(NodeRecordTest, BadValuesAreRefusedNamingKeyAndValueAndChangeNothing) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"node.tpgt", "65536"},
      {"node.tpgt", "-1"},
      {"node.startup", "onboot"},
      {"node.conn[0].address", "../etc"},
      {"node.conn[0].address", "a/b"},
      {"node.conn[0].port", "0"},
      {"node.conn[0].port", "3260x"},
      {"iface.transport_name", "rdma"},
      {"node.session.auth.authmethod", "chap"},
      {"node.session.auth.username", " alice"},
      {"node.conn[0].iscsi.HeaderDigest", "crc32c"},
      {"node.conn[0].timeo.login_timeout", "0"},
      {"node.session.timeo.replacement_timeout", "1e3"},
      {"node.session.timeo.command_timeout", "-5"},
      {"node.discovery_port", "70000"},
      {"node.discovery_transport", ""},
      {"node.name", ".hidden"},
      {"node.name", "iqn.x/y"},
  };
  for (const auto& [key, value] : bad) {
    NodeRecord r = Sample();
    Status s = SetNodeKey(&r, key, value);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
    if (!value.empty()) {
      EXPECT_NE(s.message().find(value), std::string::npos) << s.message();
    }
    EXPECT_EQ(r, Sample()) << key;
  }
  NodeRecord r = Sample();
  EXPECT_EQ(SetNodeKey(&r, "node.bogus", "1").code(), StatusCode::kInvalidArgument);
}

TEST(NodeRecordTest, ABadSecretIsRefusedWithoutEchoingIt) {
  NodeRecord r = Sample();
  Status s = SetNodeKey(&r, "node.session.auth.password", "leak\tme");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node.session.auth.password"), std::string::npos);
  EXPECT_EQ(s.message().find("leak"), std::string::npos) << s.message();
  Result<NodeRecord> parsed = ParseNodeRecord(
      "node.name = a\nnode.conn[0].address = h\nnode.session.auth.password = x\x01y\n", "f");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message().find("x\x01y"), std::string::npos);
}

TEST(NodeRecordTest, IdentityKeysAreNotUpdatable) {
  for (const char* key : {"node.name", "node.tpgt", "node.conn[0].address", "node.conn[0].port"}) {
    EXPECT_FALSE(UpdatableNodeKey(key)) << key;
  }
  EXPECT_TRUE(UpdatableNodeKey("node.session.auth.password"));
  EXPECT_FALSE(UpdatableNodeKey("node.bogus"));
}

void ExpectParseError(const std::string& text, const std::string& where, const std::string& what) {
  Result<NodeRecord> r = ParseNodeRecord(text, "/cfg/rec");
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(where), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
}

TEST(NodeRecordTest, MalformedFilesNameFileAndLine) {
  const std::string head = "# comment\nnode.name = iqn.x:y\nnode.conn[0].address = h\n";
  ExpectParseError(head + "\nno equals sign\n", "/cfg/rec:5:", "expected 'key = value'");
  ExpectParseError(head + "node.colour = red\n", "/cfg/rec:4:", "unknown key 'node.colour'");
  ExpectParseError(head + "node.tpgt = 1\nnode.tpgt = 2\n",
                   "/cfg/rec:5:", "given again (first on line 4)");
  ExpectParseError(head + "node.conn[0].port = 99999\n", "/cfg/rec:4:", "node.conn[0].port");
  ExpectParseError(head + " = value\n", "/cfg/rec:4:", "unknown key ''");
  ExpectParseError("node.conn[0].address = h\n", "/cfg/rec", "missing key node.name");
  ExpectParseError("node.name = iqn.x:y\n", "/cfg/rec", "missing key node.conn[0].address");
  ExpectParseError("", "/cfg/rec", "missing key node.name");
}

TEST(NodeRecordTest, ParserToleratesBlanksAndComments) {
  Result<NodeRecord> r = ParseNodeRecord(
      "\n  # indented comment\n\tnode.name\t=\tiqn.x:y  \nnode.conn[0].address=h\nnode.tpgt= 9",
      "f");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "iqn.x:y");
  EXPECT_EQ(r->tpgt, 9);
  EXPECT_EQ(r->portal.port, kDefaultIscsiPort);
}

TEST(NodeRecordTest, FileNamesAsOpenIscsi) {
  NodeRecord r = Sample();
  EXPECT_EQ(NodeRecordDirName(r), "iqn.2026-11.io.example:disk1");
  EXPECT_EQ(NodeRecordFileName(r), "192.0.2.7,3261,5");
  r.portal.host = "2001:db8::1";
  EXPECT_EQ(NodeRecordFileName(r), "[2001:db8::1],3261,5");
  EXPECT_TRUE(CheckNodeIdentity(r).ok());
  r.name = "..";
  EXPECT_FALSE(CheckNodeIdentity(r).ok());
  r.name = std::string(224, 'a');
  EXPECT_FALSE(CheckNodeIdentity(r).ok());
}

TEST(NodeRecordTest, UrlAndConnectOptionsCarryTheRecord) {
  NodeRecord r = Sample();
  for (const auto& [key, value] : kChanged) {
    if (UpdatableNodeKey(key)) {
      ASSERT_TRUE(SetNodeKey(&r, key, value).ok()) << key;
    }
  }
  IscsiUrl url = NodeRecordUrl(r);
  EXPECT_EQ(url.transport, TransportKind::kIser);
  EXPECT_EQ(url.portal, r.portal);
  EXPECT_EQ(url.target, r.name);
  EXPECT_EQ(url.user, "alice");
  EXPECT_EQ(url.password, "s3cret = with spaces");
  EXPECT_EQ(url.target_user, "target-bob");
  EXPECT_EQ(url.target_password, "other#secret");
  EXPECT_EQ(*url.header_digest, (std::vector{DigestType::kCrc32c, DigestType::kNone}));
  EXPECT_EQ(*url.data_digest, (std::vector{DigestType::kNone, DigestType::kCrc32c}));
  ConnectOptions c = NodeRecordConnectOptions(r, ConnectOptions{});
  EXPECT_EQ(c.transport, TransportKind::kIser);
  EXPECT_EQ(c.login_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(c.replacement_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(c.command_timeout, std::chrono::milliseconds(45125));

  ASSERT_TRUE(SetNodeKey(&r, "node.session.auth.authmethod", "None").ok());
  url = NodeRecordUrl(r);
  EXPECT_TRUE(url.user.empty() && url.password.empty() && url.target_user.empty());
}

}  // namespace
}  // namespace iser
