// iSCSI names from targets (discovery/iscsi_name.h): the three RFC 7143 types are accepted, and
// nothing that could not be a plain file name ('/', ".", "..", control bytes, uppercase IQNs,
// names past 223 bytes) gets through; messages quote names escaped and bounded.
#include "discovery/iscsi_name.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace iser {
namespace {

TEST(IscsiName, TheThreeTypesAreAccepted) {
  for (const char* name :
       {"iqn.2026-11.example:disk", "iqn.2001-04.com.example",
        "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309",
        "iqn.1992-01.com.example:storage.tape1.sys1.xyz", "eui.02004567a425678d",
        "eui.02004567A425678D", "naa.52004567BA64678D", "naa.62004567ba64678d0123456789abcdef"}) {
    EXPECT_TRUE(CheckIscsiName(name).ok()) << name << ": " << CheckIscsiName(name).message();
  }
  const std::string longest = "iqn.2026-11.example:" + std::string(kMaxIscsiNameLength - 20, 'x');
  ASSERT_EQ(longest.size(), 223u);
  EXPECT_TRUE(CheckIscsiName(longest).ok());
}

TEST(IscsiName, WhatCannotBeAFileNameIsRefused) {
  const std::vector<std::string> no_type = {
      "", ".", "..", "/", "t", "disk", "IQN.2026-11.x:a", "xyz.2026-11.example"};
  const std::vector<std::string> bad_characters = {
      "iqn.2026-11.example:a/b",     "iqn.2026-11.example:../..", "iqn.2026-11.example:Disk",
      "iqn.2026-11.example:a b",     "iqn.2026-11.example:a_b",   "iqn.2026-11.example:a\nb",
      "iqn.2026-11.example:\xc3\xa9"};
  const std::vector<std::string> bad_iqn = {"iqn.",
                                            "iqn.2026-11.",
                                            "iqn.2026-11",
                                            "iqn.2026-13.example",
                                            "iqn.2026-00.example",
                                            "iqn.26-11.example",
                                            "iqn.2026-11..example",
                                            "iqn.2026-11.:x"};
  const std::vector<std::string> bad_hex = {"eui.0123", "eui.02004567a425678d0",
                                            "eui.0200456/a425678d", "naa.0123456789abcdef01",
                                            "naa.52004567BA64678G"};
  for (const auto* names : {&no_type, &bad_characters, &bad_iqn, &bad_hex}) {
    for (const std::string& name : *names) {
      EXPECT_EQ(CheckIscsiName(name).code(), StatusCode::kInvalidArgument) << name;
    }
  }
  EXPECT_FALSE(CheckIscsiName(std::string_view("iqn.2026-11.example:a\0b", 23)).ok());
  const std::string too_long = "iqn.2026-11.example:" + std::string(kMaxIscsiNameLength - 19, 'x');
  EXPECT_NE(CheckIscsiName(too_long).message().find("223"), std::string::npos);
}

TEST(IscsiName, MessagesEscapeAndBound) {
  EXPECT_EQ(EscapeForMessage("iqn.2026-11.example:a"), "iqn.2026-11.example:a");
  EXPECT_EQ(EscapeForMessage("a/b\n\x1b[2J\\\xff"), "a/b\\x0a\\x1b[2J\\x5c\\xff");
  EXPECT_EQ(EscapeForMessage(std::string_view("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeForMessage(std::string(1000, 'x')), std::string(64, 'x') + "...");
  EXPECT_EQ(EscapeForMessage("abcdef", 3), "abc...");
}

}  // namespace
}  // namespace iser
