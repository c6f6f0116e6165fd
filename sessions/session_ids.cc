#include "sessions/session_ids.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "initiator/base/log.h"

namespace iser::sessions {

SessionIds::SessionIds(std::string state_dir) : state_dir_(std::move(state_dir)) {}

SessionIds::~SessionIds() {
  for (const auto& [target, claim] : claims_) Give(claim);
}

std::string SessionIds::PathOf(int sid) const {
  return state_dir_ + "/sid-" + std::to_string(sid);
}

void SessionIds::Give(const Claim& claim) const {
  // Removed while still locked, so that a claimer that opened it meanwhile finds it gone.
  unlink(PathOf(claim.sid).c_str());
  close(claim.fd);
}

Result<SessionIds::Claim> SessionIds::ClaimLowest() {
  std::set<int> ours;
  for (const auto& [target, claim] : claims_) ours.insert(claim.sid);
  for (int sid = 1; sid < 1 << 20; ++sid) {
    // Ours are known without a system call.
    if (ours.count(sid)) continue;
    const std::string path = PathOf(sid);
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return Status::IoError(path + ": " + std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Its claimer may have removed the file between our open and our lock (Give): then the
      // lock is on a file nobody else will see, and the number is claimed afresh.
      struct stat held, named;
      if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev) {
        return Claim{sid, fd};
      }
      close(fd);
      --sid;
      continue;
    }
    const int err = errno;
    close(fd);
    if (err != EWOULDBLOCK) return Status::IoError("flock " + path + ": " + std::strerror(err));
  }
  return Status::ResourceExhausted("every session ID is taken");
}

int SessionIds::For(const std::string& target) {
  if (auto it = claims_.find(target); it != claims_.end()) return it->second.sid;
  Result<Claim> claim = ClaimLowest();
  if (!claim.ok()) {
    if (!std::exchange(warned_, true)) {
      Log(LogLevel::kWarning, "sessions get no SID: " + claim.status().ToString());
    }
    return 0;
  }
  claims_[target] = *claim;
  return claim->sid;
}

void SessionIds::Release(const std::string& target) {
  if (auto it = claims_.find(target); it != claims_.end()) {
    Give(it->second);
    claims_.erase(it);
  }
}

void SessionIds::Keep(const std::set<std::string>& targets) {
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (targets.count(it->first)) {
      ++it;
      continue;
    }
    Give(it->second);
    it = claims_.erase(it);
  }
  for (const std::string& t : targets) For(t);
}

void RemoveFreeSessionIds(const std::string& state_dir) {
  DIR* dir = opendir(state_dir.c_str());
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (!name.starts_with("sid-")) continue;
    const std::string path = state_dir + "/" + name;
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    // Taken as a claim is, and removed while locked (SessionIds::Give); only if the name still
    // leads to the file locked: its holder may have given it back and another claimed the
    // number afresh between the open and the lock.
    struct stat held, named;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 &&
        stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      unlink(path.c_str());
    }
    close(fd);
  }
  closedir(dir);
}

}  // namespace iser::sessions
