#include "initiator/transport/tcp/tcp_datamover.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "initiator/base/log.h"

namespace iser {

TcpDatamover::~TcpDatamover() {
  Shutdown();
}

Status TcpDatamover::Start(DatamoverEvents* events) {
  StartFraming(events);
  ISER_RETURN_IF_ERROR(loop_.Open());
  ISER_RETURN_IF_ERROR(loop_.Add(fd_, EPOLLIN, [this](uint32_t ready) {
    if (!failed_ && (ready & (EPOLLIN | EPOLLERR | EPOLLHUP))) HandleReadable();
  }));
  return loop_.Start(this);
}

void TcpDatamover::Shutdown() {
  loop_.Stop();
}

void TcpDatamover::OnRoundEnd() {
  if (!failed_) Flush();
}

void TcpDatamover::Fail(Status status) {
  if (failed_) return;
  StopFraming();
  if (Status removed = loop_.Remove(fd_); !removed.ok()) {
    // The socket is shut down next: if it stays in the epoll set it reports a hang-up that no
    // callback takes any more, on every round.
    Log(LogLevel::kWarning, "connection " + Describe() + ": " + removed.ToString());
  }
  ::shutdown(fd_, SHUT_RDWR);
  // The session's messages name the datamover (Describe); the cause names the connection.
  events_->OnConnectionError(status.WithContext("connection TCP " + peer_));
}

void TcpDatamover::HandleReadable() {
  for (;;) {
    // Consume whatever is complete in the staging buffer, then read more.
    ParseReceived();
    if (failed_) return;
    iovec iov[2];
    const int iovcnt = PlanReceive(iov);
    const ssize_t n = readv(fd_, iov, iovcnt);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      Fail(Status::ConnectionFailed(std::string("receive failed: ") + std::strerror(errno)));
      return;
    }
    if (n == 0) {
      Fail(Status::ConnectionFailed("the target closed the connection"));
      return;
    }
    // A short read emptied the socket: parse what came and let epoll say when more arrives,
    // instead of spending a system call to hear EAGAIN.
    if (Received(static_cast<size_t>(n))) {
      ParseReceived();
      return;
    }
  }
}

void TcpDatamover::Flush() {
  for (;;) {
    const std::span<iovec> iov = PendingSend();
    if (iov.empty()) break;
    // sendmsg with MSG_NOSIGNAL, not writev: a target that closed its end must be an error of
    // this connection, not a SIGPIPE that kills whatever program hosts the library.
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      Fail(Status::ConnectionFailed(std::string("send failed: ") + std::strerror(errno)));
      return;
    }
    Sent(static_cast<size_t>(n));
  }
  UpdateWriteInterest();
}

void TcpDatamover::UpdateWriteInterest() {
  const bool want = SendQueued();
  if (want == want_write_) return;
  want_write_ = want;
  Status st = loop_.Modify(fd_, want ? (EPOLLIN | EPOLLOUT) : EPOLLIN);
  if (!st.ok()) Fail(st);
}

}  // namespace iser
