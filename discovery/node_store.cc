#include "discovery/node_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>

#include "initiator/base/log.h"

namespace iser {

namespace {

constexpr mode_t kDirMode = 0700;
constexpr mode_t kFileMode = 0600;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

Status IoError(const std::string& what, const std::string& path, int error) {
  return Status(StatusCode::kIoError, what + " " + path + ": " + std::strerror(error));
}

// Others must not reach what may hold secrets: a mode that lets them is made private.
Status RepairMode(int fd, const struct stat& st, mode_t wanted, const std::string& path) {
  if ((st.st_mode & 077) == 0) return Status::OK();
  if (::fchmod(fd, wanted) != 0) {
    return IoError("others can access, and cannot chmod,", path, errno);
  }
  char old_mode[8];
  std::snprintf(old_mode, sizeof old_mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  Log(LogLevel::kWarning, path + " was mode " + old_mode + ", open to other users; it is mode " +
                              (wanted == kDirMode ? "0700" : "0600") +
                              " now (change a CHAP secret it held: it may have been read)");
  return Status::OK();
}

Status RepairDirMode(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("cannot open directory", path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return IoError("cannot stat", path, errno);
  return RepairMode(fd.get(), st, kDirMode, path);
}

// mkdir -p with mode 0700 for every directory it creates; an existing one gets RepairDirMode
// only if it is `path` itself (parents such as $HOME/.config are not ours to change).
Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), kDirMode) != 0 && errno != EEXIST) {
      return IoError("cannot create directory", part, errno);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return IoError("cannot access", path, errno);
  if (!S_ISDIR(st.st_mode)) return IoError("cannot use", path, ENOTDIR);
  return RepairDirMode(path);
}

Status SyncDir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) return IoError("cannot sync", path, errno);
  return Status::OK();
}

Result<std::string> ReadRecordFile(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return IoError("cannot read record", path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return IoError("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status(StatusCode::kIoError, "record " + path + " is not a regular file");
  }
  ISER_RETURN_IF_ERROR(RepairMode(fd.get(), st, kFileMode, path));
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read record", path, errno);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > 64 * 1024) {
      return Status(StatusCode::kIoError, "record " + path + " is larger than 64 KiB");
    }
  }
  return text;
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot write", path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

// Names in the directory at `path` other than "." and ".."; a missing directory has none.
Result<std::vector<std::string>> DirEntries(const std::string& path) {
  DirPtr dir(::opendir(path.c_str()));
  if (!dir) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return IoError("cannot read directory", path, errno);
  }
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(dir.get())) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  if (errno != 0) return IoError("cannot read directory", path, errno);
  std::sort(names.begin(), names.end());
  return names;
}

bool Hidden(const std::string& name) {
  return name.empty() || name.front() == '.';
}

auto SortKey(const NodeRecord& r) {
  return std::tie(r.name, r.portal.host, r.portal.port);
}

}  // namespace

Result<std::string> DefaultNodeConfigDir(uid_t euid, const char* xdg_config_home,
                                         const char* home) {
  if (euid == 0) return std::string("/etc/iser-connect");
  if (xdg_config_home != nullptr && xdg_config_home[0] == '/') {
    return std::string(xdg_config_home) + "/iser-connect";
  }
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.config/iser-connect";
  return Status::InvalidArgument(
      "no config directory: $XDG_CONFIG_HOME and $HOME are unset or not absolute (use "
      "--config-dir DIR)");
}

Result<std::string> DefaultNodeConfigDir() {
  return DefaultNodeConfigDir(::geteuid(), std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"));
}

Result<NodeStore> OpenNodeStore(const std::string& config_dir, bool create) {
  if (!config_dir.empty()) return NodeStore::Open(config_dir, create);
  Result<std::string> dir = DefaultNodeConfigDir();
  if (!dir.ok()) return dir.status();
  return NodeStore::Open(*dir, create);
}

NodeStore::Lock::Lock(Lock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

NodeStore::Lock::~Lock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

Result<NodeStore> NodeStore::Open(std::string config_dir, bool create) {
  if (config_dir.empty()) return Status::InvalidArgument("config directory: empty path");
  while (config_dir.size() > 1 && config_dir.back() == '/') config_dir.pop_back();
  if (create) {
    ISER_RETURN_IF_ERROR(MakeDirs(config_dir).WithContext("config directory"));
    ISER_RETURN_IF_ERROR(MakeDirs(config_dir + "/nodes").WithContext("config directory"));
    if (::access(config_dir.c_str(), R_OK | W_OK | X_OK) != 0) {
      return IoError("config directory: cannot write", config_dir, errno);
    }
    return NodeStore(std::move(config_dir));
  }
  struct stat st;
  if (::stat(config_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return NodeStore(std::move(config_dir));
    return IoError("config directory: cannot access", config_dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) return IoError("config directory: cannot use", config_dir, ENOTDIR);
  ISER_RETURN_IF_ERROR(RepairDirMode(config_dir).WithContext("config directory"));
  if (::access(config_dir.c_str(), R_OK | X_OK) != 0) {
    return IoError("config directory: cannot read", config_dir, errno);
  }
  return NodeStore(std::move(config_dir));
}

Result<NodeStore::Lock> NodeStore::Acquire() {
  const std::string path = dir_ + "/lock";
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kFileMode));
  if (fd.get() < 0) return IoError("cannot open the store's lock", path, errno);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return IoError("cannot lock", path, errno);
  }
  return Lock(fd.release());
}

Status NodeStore::LockShared(int* fd) const {
  const std::string path = dir_ + "/lock";
  // No lock file: no writer has ever run, so there is nothing to wait for.
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (*fd < 0) {
    if (errno == ENOENT) return Status::OK();
    return IoError("cannot open the store's lock", path, errno);
  }
  while (::flock(*fd, LOCK_SH) != 0) {
    if (errno != EINTR) {
      Status error = IoError("cannot lock", path, errno);
      ::close(std::exchange(*fd, -1));
      return error;
    }
  }
  return Status::OK();
}

Result<std::vector<NodeRecord>> NodeStore::List() const {
  int raw = -1;
  ISER_RETURN_IF_ERROR(LockShared(&raw));
  Fd fd(raw);
  return ListUnlocked();
}

Result<std::vector<NodeRecord>> NodeStore::List(const Lock& /*lock*/) const {
  return ListUnlocked();
}

Result<std::vector<NodeRecord>> NodeStore::ListUnlocked(std::string_view name) const {
  const std::string nodes = dir_ + "/nodes";
  Result<std::vector<std::string>> targets = DirEntries(nodes);
  if (!targets.ok()) return targets.status();
  std::vector<NodeRecord> records;
  for (const std::string& target : *targets) {
    if (Hidden(target) || (!name.empty() && target != name)) continue;
    const std::string target_dir = nodes + "/" + target;
    ISER_RETURN_IF_ERROR(RepairDirMode(target_dir));
    Result<std::vector<std::string>> files = DirEntries(target_dir);
    if (!files.ok()) return files.status();
    for (const std::string& file : *files) {
      if (Hidden(file)) continue;
      const std::string path = target_dir + "/" + file;
      Result<std::string> text = ReadRecordFile(path);
      if (!text.ok()) return text.status();
      Result<NodeRecord> record = ParseNodeRecord(*text, path);
      if (!record.ok()) {
        return Status(StatusCode::kIoError, "malformed record " + record.status().message());
      }
      if (NodeRecordDirName(*record) != target || NodeRecordFileName(*record) != file) {
        return Status(StatusCode::kIoError,
                      "record " + path + " does not match its contents (expected " +
                          NodeRecordDirName(*record) + "/" + NodeRecordFileName(*record) + ")");
      }
      records.push_back(std::move(*record));
    }
  }
  std::sort(records.begin(), records.end(),
            [](const NodeRecord& a, const NodeRecord& b) { return SortKey(a) < SortKey(b); });
  return records;
}

Result<std::vector<NodeRecord>> NodeStore::Find(std::string_view name,
                                                const std::optional<Portal>& portal,
                                                const Lock* lock) const {
  int raw = -1;
  if (lock == nullptr) ISER_RETURN_IF_ERROR(LockShared(&raw));
  Fd fd(raw);
  Result<std::vector<NodeRecord>> all = ListUnlocked(name);
  if (!all.ok()) return all.status();
  std::vector<NodeRecord> found;
  for (NodeRecord& r : *all) {
    if (!name.empty() && r.name != name) continue;
    if (portal && !(r.portal == *portal)) continue;
    found.push_back(std::move(r));
  }
  return found;
}

std::string NodeStore::PathOf(const NodeRecord& record) const {
  return dir_ + "/nodes/" + NodeRecordDirName(record) + "/" + NodeRecordFileName(record);
}

Status NodeStore::Write(const Lock& /*lock*/, const NodeRecord& record) {
  ISER_RETURN_IF_ERROR(CheckNodeIdentity(record));
  const std::string target_dir = dir_ + "/nodes/" + NodeRecordDirName(record);
  if (::mkdir(target_dir.c_str(), kDirMode) != 0 && errno != EEXIST) {
    return IoError("cannot create directory", target_dir, errno);
  }
  ISER_RETURN_IF_ERROR(RepairDirMode(target_dir));
  const std::string file = NodeRecordFileName(record);
  const std::string portal_prefix = file.substr(0, file.rfind(',') + 1);
  Result<std::vector<std::string>> existing = DirEntries(target_dir);
  if (!existing.ok()) return existing.status();
  // Holding the lock, no other writer is between mkstemp and rename: hidden files are leftovers
  // of one that died there.
  for (const std::string& name : *existing) {
    if (!Hidden(name)) continue;
    const std::string path = target_dir + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return IoError("cannot remove", path, errno);
  }
  const std::string path = target_dir + "/" + file;
  std::string temp = target_dir + "/." + file + ".XXXXXX";
  Fd fd(::mkstemp(temp.data()));
  if (fd.get() < 0) return IoError("cannot create a file in", target_dir, errno);
  Status written = WriteAll(fd.get(), FormatNodeRecord(record), temp);
  if (written.ok() && ::fchmod(fd.get(), kFileMode) != 0)
    written = IoError("cannot chmod", temp, errno);
  if (written.ok() && ::fsync(fd.get()) != 0) written = IoError("cannot sync", temp, errno);
  if (written.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    written = IoError("cannot rename " + temp + " to", path, errno);
  }
  if (!written.ok()) {
    // The temporary file holds a secret: it must not stay behind.
    ::unlink(temp.c_str());
    return written;
  }
  for (const std::string& name : *existing) {
    if (name == file || Hidden(name) || !name.starts_with(portal_prefix)) continue;
    const std::string old = target_dir + "/" + name;
    if (::unlink(old.c_str()) != 0 && errno != ENOENT) return IoError("cannot remove", old, errno);
  }
  return SyncDir(target_dir);
}

Status NodeStore::Remove(const Lock& /*lock*/, const NodeRecord& record) {
  ISER_RETURN_IF_ERROR(CheckNodeIdentity(record));
  const std::string path = PathOf(record);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return Status::NotFound("no record " + path);
    return IoError("cannot remove", path, errno);
  }
  const std::string target_dir = dir_ + "/nodes/" + NodeRecordDirName(record);
  ISER_RETURN_IF_ERROR(SyncDir(target_dir));
  if (::rmdir(target_dir.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST) {
    return IoError("cannot remove", target_dir, errno);
  }
  return SyncDir(dir_ + "/nodes");
}

}  // namespace iser
