#include "sessions/detach.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "initiator/base/log.h"

namespace iser::sessions {

namespace {

bool WriteAll(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t len) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Report: int32 status code, uint32 message length, message.
bool SendStatus(int fd, const Status& st) {
  const int32_t code = static_cast<int32_t>(st.code());
  const auto len = static_cast<uint32_t>(st.message().size());
  return WriteAll(fd, &code, sizeof(code)) && WriteAll(fd, &len, sizeof(len)) &&
         WriteAll(fd, st.message().data(), len);
}

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return LOG_DEBUG;
    case LogLevel::kInfo:
      return LOG_INFO;
    case LogLevel::kWarning:
      return LOG_WARNING;
    case LogLevel::kError:
      return LOG_ERR;
  }
  return LOG_ERR;
}

void SyslogSink(LogLevel level, const std::string& message) {
  syslog(SyslogPriority(level), "%s", message.c_str());
}

// Keeps the verbosity the program chose for its own sink.
LogLevel CurrentMinLevel() {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning}) {
    if (LogEnabled(l)) return l;
  }
  return LogLevel::kError;
}

}  // namespace

ReadyReporter::~ReadyReporter() {
  if (fd_ >= 0) close(fd_);
}

void ReadyReporter::Ready() {
  if (reported_) return;
  reported_ = true;
  SendStatus(fd_, Status::OK());
  close(fd_);
  fd_ = -1;
  const LogLevel min_level = CurrentMinLevel();
  openlog("iser-connect", LOG_PID, LOG_DAEMON);
  SetLogSink(SyslogSink, min_level);
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
  if (chdir("/") != 0) Log(LogLevel::kWarning, "cannot change directory to /");
}

void ReadyReporter::Fail(const Status& status) {
  if (reported_) return;
  reported_ = true;
  SendStatus(
      fd_, status.ok() ? Status(StatusCode::kAborted, "mount ended before it was ready") : status);
  close(fd_);
  fd_ = -1;
}

std::unique_ptr<ReadyReporter> ForkDetached(Status* parent_result) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *parent_result = Status::ResourceExhausted(std::string("pipe: ") + std::strerror(errno));
    return nullptr;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    *parent_result = Status::ResourceExhausted(std::string("fork: ") + std::strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return nullptr;
  }
  if (pid == 0) {
    close(fds[0]);
    setsid();  // no controlling terminal: a closed shell does not SIGHUP the mount
    return std::make_unique<ReadyReporter>(fds[1]);
  }
  close(fds[1]);
  int32_t code = 0;
  uint32_t len = 0;
  std::string message;
  bool got = ReadAll(fds[0], &code, sizeof(code)) && ReadAll(fds[0], &len, sizeof(len));
  if (got) {
    message.resize(len);
    got = ReadAll(fds[0], message.data(), len);
  }
  close(fds[0]);
  if (got) {
    *parent_result = code == 0 ? Status::OK() : Status(static_cast<StatusCode>(code), message);
    // A failed child exits right after reporting; reap it so no zombie is left.
    if (code != 0) waitpid(pid, nullptr, 0);
    return nullptr;
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  *parent_result = Status::IoError("the mount process ended without reporting (" +
                                   (WIFSIGNALED(wstatus)
                                        ? "killed by signal " + std::to_string(WTERMSIG(wstatus))
                                        : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
                                   ")");
  return nullptr;
}

}  // namespace iser::sessions
