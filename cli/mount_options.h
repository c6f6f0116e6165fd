// The mount option list of `iser-connect mount -o OPTS` and of the mount helper form that
// mount(8) and fstab use (`iser-connect URL DIR -o OPTS`, run by mount.fuse3 for the type
// fuse.iser-connect, or by util-linux as mount.fuse.iser-connect). docs/fstab.md lists them.
//
// Contract: OPTS is a comma list. ro and rw (the last one wins), allow_other and page_cache set
// the mount's flags, new_session lets it log in to a target another tree or mount holds;
// replacement_timeout=, command_timeout=, login_timeout= (seconds, as discovery/seconds.h reads
// them), transport=tcp|iser, password_file= and target_password_file= set the session's options. A
// secret itself (password=, target_password=) is refused: fstab is readable by every user. The
// generic options of mount(8) and fstab that mean nothing to this file system are accepted and
// ignored: _netdev, nofail, noauto, auto, user, nouser, users, defaults, dev, nodev, suid, nosuid,
// exec, noexec, and every x-* (x-systemd.automount, ...). Anything else, or a bad value, is an
// InvalidArgument naming the option; empty items (",,") are skipped.
//
// MountHelperArgs turns the helper form's arguments (after the program name) into those of the
// `mount` subcommand: SOURCE DIR, then -o OPTS (also -oOPTS) any number of times, -t TYPE (the
// type mount(8) was given; checked, then dropped), and util-linux's -n, -s, -v (dropped: the
// mount table is the kernel's, options are never sloppy, messages are the same either way).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "initiator/base/status.h"

namespace iser::cli {

struct MountOptionList {
  std::optional<bool> read_only;
  bool allow_other = false;
  bool page_cache = false;
  bool new_session = false;
  std::optional<std::string> replacement_timeout;
  std::optional<std::string> command_timeout;
  std::optional<std::string> login_timeout;
  std::optional<std::string> transport;
  std::optional<std::string> password_file;
  std::optional<std::string> target_password_file;
};

// Adds the options of one comma list to *out (later values replace earlier ones).
Status ParseMountOptionList(std::string_view text, MountOptionList* out);

// The mount(8) type names this program serves, as given to mount -t and in fstab.
inline constexpr std::string_view kFuseType = "fuse.iser-connect";

Result<std::vector<std::string>> MountHelperArgs(const std::vector<std::string>& args);

}  // namespace iser::cli
