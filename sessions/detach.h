// Detach: going to the background the way a mount command should, i.e. only once the mount
// works. The caller forks before starting any thread (threads do not survive fork); the child
// does the real work and reports through a pipe, either "ready" (the parent returns OK and the
// shell gets its prompt back with the mount in place) or the Status that stopped it (the parent
// returns that Status, so errors look the same as in the foreground).
#pragma once

#include <memory>

#include "initiator/base/status.h"

namespace iser::sessions {

// The child's end of the pipe.
class ReadyReporter {
 public:
  explicit ReadyReporter(int fd) : fd_(fd) {}
  ReadyReporter(const ReadyReporter&) = delete;
  ReadyReporter& operator=(const ReadyReporter&) = delete;
  ~ReadyReporter();

  // Reports success, then detaches fully: new session leader already, stdin/stdout/stderr to
  // /dev/null, working directory "/". Library messages go to syslog from then on.
  void Ready();
  // Reports a failure (only before Ready; later failures are logged).
  void Fail(const Status& status);
  bool reported() const { return reported_; }

 private:
  int fd_;
  bool reported_ = false;
};

// Forks. In the child returns a reporter (the child is a new session leader). In the parent waits
// for the child's report and returns nullptr with *parent_result set to it.
std::unique_ptr<ReadyReporter> ForkDetached(Status* parent_result);

}  // namespace iser::sessions
