#include "frontends/fuse/unmount_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "initiator/base/log.h"

namespace iser::fuse {

namespace {

// How long the guard leaves fusermount3 to remove the mount first.
constexpr int kGraceSteps = 20;
constexpr useconds_t kGraceStepUs = 50 * 1000;

// /proc/self/mountinfo writes a space, tab, newline or backslash in a path as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct MountEntry {
  long id = -1;
  std::string point;   // unescaped
  std::string fstype;  // "fuse.iser-connect" for ours
};

// The mounts of this mount namespace, oldest first, from /proc/self/mountinfo.
std::vector<MountEntry> Mounts() {
  std::vector<MountEntry> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    std::istringstream fields(line);
    MountEntry m;
    std::string parent, dev, root, point, field;
    if (!(fields >> m.id >> parent >> dev >> root >> point)) continue;
    while (fields >> field && field != "-") {
    }
    if (!(fields >> m.fstype)) continue;
    m.point = Unescape(point);
    mounts.push_back(std::move(m));
  }
  return mounts;
}

// The ID of the newest FUSE mount on mountpoint, or -1.
long NewestFuseMount(const std::string& mountpoint) {
  long found = -1;
  for (const MountEntry& m : Mounts()) {
    if (m.point == mountpoint && m.fstype.rfind("fuse", 0) == 0) found = m.id;
  }
  return found;
}

bool StillMounted(long id, const std::string& mountpoint) {
  for (const MountEntry& m : Mounts()) {
    if (m.id == id && m.point == mountpoint) return true;
  }
  return false;
}

// The guard process. Runs single-threaded (forked before any thread started); never returns.
[[noreturn]] void Guard(int fd, const std::string& mountpoint) {
  // Out of the caller's session and signals (a Ctrl-C or a group kill of the mount must leave
  // it to clean up), holding nothing of the caller's but the pipe.
  setsid();
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, nullptr);
  if (dup2(fd, 3) < 0) _exit(1);
  const int null = open("/dev/null", O_RDWR);
  for (int std_fd = 0; std_fd < 3; ++std_fd) dup2(null, std_fd);
  close_range(4, UINT_MAX, 0);
  if (chdir("/") != 0) _exit(1);

  int64_t id = -1;
  size_t got = 0;
  while (got < sizeof id) {
    const ssize_t n = read(3, reinterpret_cast<char*>(&id) + got, sizeof id - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // never armed: the mount was not made
    got += static_cast<size_t>(n);
  }
  char byte;
  for (;;) {
    const ssize_t n = read(3, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  for (int step = 0; step < kGraceSteps; ++step) {
    if (!StillMounted(id, mountpoint)) _exit(0);
    usleep(kGraceStepUs);
  }
  if (!StillMounted(id, mountpoint)) _exit(0);
  execlp("fusermount3", "fusermount3", "-u", "-z", "--", mountpoint.c_str(),
         static_cast<char*>(nullptr));
  _exit(127);
}

}  // namespace

std::unique_ptr<UnmountGuard> UnmountGuard::Start(const std::string& mountpoint) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    Log(LogLevel::kWarning, std::string("no unmount guard (pipe: ") + std::strerror(errno) + ")");
    return nullptr;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    Log(LogLevel::kWarning, std::string("no unmount guard (fork: ") + std::strerror(errno) + ")");
    close(fds[0]);
    close(fds[1]);
    return nullptr;
  }
  if (pid == 0) {
    close(fds[1]);
    Guard(fds[0], mountpoint);
  }
  close(fds[0]);
  return std::unique_ptr<UnmountGuard>(new UnmountGuard(fds[1], mountpoint));
}

UnmountGuard::~UnmountGuard() {
  close(fd_);
}

void UnmountGuard::Arm() {
  const int64_t id = NewestFuseMount(mountpoint_);
  if (id < 0) {
    Log(LogLevel::kWarning, "unmount guard: no FUSE mount found on " + mountpoint_);
    return;
  }
  if (write(fd_, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
    Log(LogLevel::kWarning, std::string("unmount guard: ") + std::strerror(errno));
  }
}

}  // namespace iser::fuse
