#include "cli/mount_options.h"

#include <algorithm>
#include <array>

#include "discovery/seconds.h"

namespace iser::cli {

namespace {

// Options of mount(8) and fstab that concern when and by whom the mount is made, or device and
// setuid files, which a file system of LUN images never has.
constexpr std::array<std::string_view, 14> kIgnored = {
    "_netdev",  "nofail", "noauto", "auto", "user",   "nouser", "users",
    "defaults", "dev",    "nodev",  "suid", "nosuid", "exec",   "noexec"};

Status Seconds(std::string_view key, std::string_view value, std::optional<std::string>* out) {
  Result<std::chrono::milliseconds> t = ParseSeconds(key, value);
  if (!t.ok()) return t.status();
  *out = std::string(value);
  return Status::OK();
}

Status Path(std::string_view key, std::string_view value, std::optional<std::string>* out) {
  if (value.empty()) return Status::InvalidArgument(std::string(key) + "= needs a file name");
  *out = std::string(value);
  return Status::OK();
}

Status ParseOne(std::string_view item, MountOptionList* out) {
  const size_t eq = item.find('=');
  const std::string_view key = item.substr(0, eq);
  const std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
  const bool has_value = eq != std::string_view::npos;
  if (!has_value) {
    if (item == "ro" || item == "rw") {
      out->read_only = item == "ro";
      return Status::OK();
    }
    if (item == "allow_other") {
      out->allow_other = true;
      return Status::OK();
    }
    if (item == "page_cache") {
      out->page_cache = true;
      return Status::OK();
    }
    if (item == "new_session") {
      out->new_session = true;
      return Status::OK();
    }
    if (std::find(kIgnored.begin(), kIgnored.end(), item) != kIgnored.end()) return Status::OK();
  }
  if (key.starts_with("x-")) return Status::OK();
  if (has_value) {
    if (key == "replacement_timeout") return Seconds(key, value, &out->replacement_timeout);
    if (key == "command_timeout") return Seconds(key, value, &out->command_timeout);
    if (key == "login_timeout") {
      Result<std::chrono::milliseconds> t = ParseSeconds(key, value, std::chrono::milliseconds(1));
      if (!t.ok()) return t.status();
      out->login_timeout = std::string(value);
      return Status::OK();
    }
    if (key == "transport") {
      if (value != "tcp" && value != "iser") {
        return Status::InvalidArgument("transport=" + std::string(value) +
                                       ": expected tcp or iser");
      }
      out->transport = std::string(value);
      return Status::OK();
    }
    if (key == "password_file") return Path(key, value, &out->password_file);
    if (key == "target_password_file") return Path(key, value, &out->target_password_file);
    if (key == "password" || key == "target_password") {
      // The value is never echoed: it is the secret.
      return Status::InvalidArgument(std::string(key) +
                                     "= is refused: mount options are readable by every user; "
                                     "put the secret in a file only root can read and give " +
                                     std::string(key) + "_file=FILE");
    }
  }
  return Status::InvalidArgument("unknown mount option '" + std::string(item) +
                                 "' (docs/fstab.md lists the options)");
}

}  // namespace

Status ParseMountOptionList(std::string_view text, MountOptionList* out) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (!item.empty()) ISER_RETURN_IF_ERROR(ParseOne(item, out));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return Status::OK();
}

Result<std::vector<std::string>> MountHelperArgs(const std::vector<std::string>& args) {
  std::vector<std::string> out = {"mount"};
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-o" || a == "-t") {
      if (i + 1 == args.size()) return Status::InvalidArgument(a + " needs a value");
      const std::string& value = args[++i];
      if (a == "-t" && value != kFuseType && value != "iser-connect") {
        return Status::InvalidArgument("-t " + value + ": this helper mounts " +
                                       std::string(kFuseType));
      }
      if (a == "-o") out.insert(out.end(), {"-o", value});
    } else if (a.starts_with("-o")) {
      out.insert(out.end(), {"-o", a.substr(2)});
    } else if (a == "-n" || a == "-s" || a == "-v") {
      continue;
    } else if (a.starts_with("-")) {
      return Status::InvalidArgument("unknown mount helper option '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    return Status::InvalidArgument("usage: iser-connect URL MOUNTPOINT [-o OPTIONS]");
  }
  out.insert(out.begin() + 1, positional.begin(), positional.end());
  return out;
}

}  // namespace iser::cli
