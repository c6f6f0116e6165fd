// The mount option list (fstab's fourth field, mount -o) and the mount helper's argument form:
// what is taken, what is ignored, and that everything else, secrets above all, is refused with a
// message naming the option.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/mount_options.h"

namespace iser::cli {
namespace {

MountOptionList Parsed(const std::string& text) {
  MountOptionList list;
  Status st = ParseMountOptionList(text, &list);
  EXPECT_TRUE(st.ok()) << text << ": " << st.ToString();
  return list;
}

std::string Refusal(const std::string& text) {
  MountOptionList list;
  Status st = ParseMountOptionList(text, &list);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
  return st.message();
}

TEST(CliMountOptions, ReadOnlyAndFlags) {
  EXPECT_EQ(Parsed("ro").read_only, true);
  EXPECT_EQ(Parsed("rw").read_only, false);
  EXPECT_EQ(Parsed("ro,rw").read_only, false);
  EXPECT_EQ(Parsed("rw,ro").read_only, true);
  EXPECT_FALSE(Parsed("_netdev").read_only.has_value());
  const MountOptionList l = Parsed("allow_other,page_cache");
  EXPECT_TRUE(l.allow_other);
  EXPECT_TRUE(l.page_cache);
  EXPECT_FALSE(Parsed("ro").allow_other);
  EXPECT_FALSE(Parsed("ro").page_cache);
  EXPECT_TRUE(Parsed("ro,new_session").new_session);
  EXPECT_FALSE(Parsed("ro").new_session);
}

TEST(CliMountOptions, SessionSettings) {
  const MountOptionList l = Parsed(
      "replacement_timeout=60,command_timeout=0.5,login_timeout=5,transport=iser,"
      "password_file=/etc/iser/secret,target_password_file=/etc/iser/mutual");
  EXPECT_EQ(l.replacement_timeout, "60");
  EXPECT_EQ(l.command_timeout, "0.5");
  EXPECT_EQ(l.login_timeout, "5");
  EXPECT_EQ(l.transport, "iser");
  EXPECT_EQ(l.password_file, "/etc/iser/secret");
  EXPECT_EQ(l.target_password_file, "/etc/iser/mutual");
  EXPECT_EQ(Parsed("transport=tcp,transport=iser").transport, "iser");
}

TEST(CliMountOptions, GenericOptionsAreIgnored) {
  const MountOptionList l = Parsed(
      "defaults,_netdev,nofail,noauto,auto,user,nouser,users,dev,nodev,suid,nosuid,exec,noexec,"
      "x-systemd.automount,x-systemd.mount-timeout=30,x-initrd.mount,,");
  EXPECT_FALSE(l.read_only.has_value());
  EXPECT_FALSE(l.allow_other);
  EXPECT_FALSE(l.transport.has_value());
  EXPECT_TRUE(Parsed("").replacement_timeout == std::nullopt);
}

TEST(CliMountOptions, UnknownOptionsAndBadValuesAreNamed) {
  EXPECT_NE(Refusal("ro,sync").find("'sync'"), std::string::npos);
  EXPECT_NE(Refusal("ro=1").find("'ro=1'"), std::string::npos);
  EXPECT_NE(Refusal("_netdev=yes").find("'_netdev=yes'"), std::string::npos);
  EXPECT_NE(Refusal("transport=rdma").find("transport=rdma"), std::string::npos);
  EXPECT_NE(Refusal("replacement_timeout=abc").find("replacement_timeout"), std::string::npos);
  EXPECT_NE(Refusal("command_timeout=-1").find("command_timeout"), std::string::npos);
  EXPECT_NE(Refusal("login_timeout=0").find("login_timeout"), std::string::npos);
  EXPECT_NE(Refusal("password_file=").find("password_file"), std::string::npos);
  EXPECT_NE(Refusal("replacement_timeout").find("'replacement_timeout'"), std::string::npos);
}

TEST(CliMountOptions, SecretsAreRefusedWithoutBeingEchoed) {
  for (const char* key : {"password", "target_password"}) {
    const std::string message = Refusal(std::string("ro,") + key + "=s3cr3t-value");
    EXPECT_EQ(message.find("s3cr3t-value"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string(key) + "_file=FILE"), std::string::npos) << message;
  }
}

std::vector<std::string> HelperArgs(const std::vector<std::string>& args) {
  Result<std::vector<std::string>> r = MountHelperArgs(args);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(CliMountHelperArgs, WhatMountFuse3AndUtilLinuxPass) {
  using V = std::vector<std::string>;
  // mount.fuse3: TYPE SOURCE DIR -o OPTS, TYPE being the program itself.
  EXPECT_EQ(HelperArgs({"iscsi://h/iqn.x", "/mnt", "-o", "ro,dev,suid"}),
            (V{"mount", "iscsi://h/iqn.x", "/mnt", "-o", "ro,dev,suid"}));
  // util-linux running mount.fuse.iser-connect itself.
  EXPECT_EQ(HelperArgs({"iscsi://h/iqn.x", "/mnt", "-n", "-s", "-v", "-o", "rw,_netdev", "-t",
                        "fuse.iser-connect"}),
            (V{"mount", "iscsi://h/iqn.x", "/mnt", "-o", "rw,_netdev"}));
  EXPECT_EQ(HelperArgs({"iscsi://h/iqn.x", "/mnt", "-oro", "-o", "allow_other"}),
            (V{"mount", "iscsi://h/iqn.x", "/mnt", "-o", "ro", "-o", "allow_other"}));
  EXPECT_EQ(HelperArgs({"iscsi://h/iqn.x", "/mnt"}), (V{"mount", "iscsi://h/iqn.x", "/mnt"}));
}

TEST(CliMountHelperArgs, Refusals) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"iscsi://h/iqn.x"},
           {"iscsi://h/iqn.x", "/mnt", "/extra"},
           {"iscsi://h/iqn.x", "/mnt", "-o"},
           {"iscsi://h/iqn.x", "/mnt", "-t", "fuse.sshfs"},
           {"iscsi://h/iqn.x", "/mnt", "-N", "/proc/1/ns/mnt"},
       }) {
    Result<std::vector<std::string>> r = MountHelperArgs(args);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << args.back();
  }
}

}  // namespace
}  // namespace iser::cli
