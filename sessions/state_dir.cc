#include "sessions/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace iser::sessions {

namespace {

// /proc/<pid>/comm: "self" or a number.
std::string ProcessName(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// FNV-1a: a stable name for a mount point that fits a socket path (sun_path holds 108 bytes).
std::string HashName(const std::string& root) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : root) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      out.push_back(static_cast<char>(std::strtol(field.substr(i + 1, 3).c_str(), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

// /run is the system's root's. Seen from a user namespace that does not map that root it belongs
// to the overflow uid, and not even uid 0 there can create anything in it.
bool RunIsOurs() {
  struct stat st;
  return geteuid() == 0 && stat("/run", &st) == 0 && S_ISDIR(st.st_mode) &&
         st.st_uid == geteuid() && access("/run", W_OK) == 0;
}

// The effective uid as the initial user namespace sees it (/proc/self/uid_map: "inside outside
// count" ranges), so that users who are all uid 0 in namespaces of their own get different
// fallback directories in the shared /tmp.
uid_t SystemUid() {
  const uid_t uid = geteuid();
  std::ifstream map("/proc/self/uid_map");
  unsigned long long inside = 0, outside = 0, count = 0;
  while (map >> inside >> outside >> count) {
    if (uid >= inside && uid - inside < count) return static_cast<uid_t>(outside + (uid - inside));
  }
  return uid;
}

}  // namespace

std::optional<std::string> RuntimeDir() {
  if (const char* dir = std::getenv("ISER_CONNECT_RUNTIME_DIR"); dir && *dir) return dir;
  if (RunIsOurs()) return "/run";
  if (const char* dir = std::getenv("XDG_RUNTIME_DIR"); dir && *dir) return dir;
  return std::nullopt;
}

Result<std::string> DefaultTreeRoot() {
  std::optional<std::string> dir = RuntimeDir();
  if (!dir) {
    return Status::InvalidArgument(
        "XDG_RUNTIME_DIR is not set, so there is no default place for the tree: give "
        "--mountpoint DIR");
  }
  return *dir + "/iser-connect";
}

std::string StateDir() {
  std::optional<std::string> dir = RuntimeDir();
  if (dir) return *dir + "/iser-connect.d";
  return "/tmp/iser-connect-" + std::to_string(SystemUid()) + ".d";
}

Status CheckStateDir(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    const std::string why = "state directory " + dir + ": " + std::strerror(errno);
    if (errno == ENOENT) return Status::NotFound(why);
    return Status::InvalidArgument(why);
  }
  const std::string refused = "refusing the state directory " + dir + ": ";
  if (S_ISLNK(st.st_mode)) return Status::InvalidArgument(refused + "it is a symbolic link");
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(refused + "it is not a directory");
  if (st.st_uid != geteuid()) {
    return Status::InvalidArgument(refused + "it belongs to uid " + std::to_string(st.st_uid) +
                                   ", not to this user (uid " + std::to_string(geteuid()) + ")");
  }
  if ((st.st_mode & 0777) != 0700) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 0777));
    return Status::InvalidArgument(refused + "its mode is " + mode + ", not 0700");
  }
  return Status::OK();
}

Status EnsureStateDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::InvalidArgument("state directory " + dir + ": " + std::strerror(errno));
  }
  return CheckStateDir(dir);
}

namespace {

int LockStateDir(const std::string& dir, int how) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && flock(fd, how) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int LockStateDir(const std::string& dir) {
  return LockStateDir(dir, LOCK_EX);
}

int TryLockStateDir(const std::string& dir) {
  return LockStateDir(dir, LOCK_EX | LOCK_NB);
}

constexpr std::string_view kSocketSuffix = ".sock";
constexpr std::string_view kStateSuffix = ".state";

HolderPaths PathsForRoot(const std::string& root) {
  HolderPaths p;
  p.root = root;
  p.state_dir = StateDir();
  const std::string base = p.state_dir + "/tree-" + HashName(root);
  p.socket = base + std::string(kSocketSuffix);
  p.state_file = base + std::string(kStateSuffix);
  return p;
}

std::string StateFileOfSocket(const std::string& socket) {
  return socket.substr(0, socket.size() - kSocketSuffix.size()) + std::string(kStateSuffix);
}

std::vector<std::string> ListHolderSockets(const std::string& state_dir) {
  std::vector<std::string> out;
  DIR* dir = opendir(state_dir.c_str());
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("tree-", 0) == 0 && name.size() > 5 && name.ends_with(kSocketSuffix)) {
      out.push_back(state_dir + "/" + name);
    }
  }
  closedir(dir);
  return out;
}

Status WriteHolderState(const HolderPaths& paths, const HolderState& state) {
  const std::string tmp = paths.state_file + ".new";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("state file " + tmp + ": " + std::strerror(errno));
  const std::string text = "pid " + std::to_string(state.pid) + "\nroot " + state.root + "\nkind " +
                           state.kind + "\ncomm " + ProcessName("self") + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok || rename(tmp.c_str(), paths.state_file.c_str()) != 0) {
    unlink(tmp.c_str());
    return Status::IoError("state file " + paths.state_file + ": " + std::strerror(errno));
  }
  return Status::OK();
}

Result<HolderState> ReadHolderState(const std::string& state_file) {
  std::ifstream in(state_file);
  if (!in) return Status::NotFound("no state file " + state_file);
  HolderState state;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("pid ", 0) == 0) state.pid = std::atoi(line.c_str() + 4);
    if (line.rfind("root ", 0) == 0) state.root = line.substr(5);
    if (line.rfind("kind ", 0) == 0) state.kind = line.substr(5);
    if (line.rfind("comm ", 0) == 0) state.comm = line.substr(5);
  }
  if (state.pid <= 0 || state.root.empty()) {
    return Status::InvalidArgument("malformed state file " + state_file);
  }
  return state;
}

bool HolderProcessAlive(const HolderState& state) {
  const std::string pid = std::to_string(state.pid);
  std::ifstream stat_file("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return false;
  // "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z')
    return false;
  return ProcessName(pid) == (state.comm.empty() ? ProcessName("self") : state.comm);
}

bool IsMounted(const std::string& root) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, fs_root, mount_point;
    fields >> id >> parent >> dev >> fs_root >> mount_point;
    if (Unescape(mount_point) == root) return true;
  }
  return false;
}

}  // namespace iser::sessions
