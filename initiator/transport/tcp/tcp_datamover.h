// The epoll iSCSI/TCP datamover: the PDU framing of TcpFramedDatamover (tcp_framing.h) driven by
// an IoLoop (transport/io_loop.h), the thread named "iscsi-tcp-io". Level-triggered epoll says
// when the socket is readable; each wake-up reads with readv until a short read (the socket is
// empty), then the round's queued PDUs go out in writev calls, EPOLLOUT watched only while
// some are left. The fallback when io_uring is missing or refused (tcp_datamover_choice.h).
#pragma once

#include "initiator/transport/io_loop.h"
#include "initiator/transport/tcp/tcp_framing.h"

namespace iser {

class TcpDatamover final : public TcpFramedDatamover, private IoLoopEvents {
 public:
  TcpDatamover() : TcpFramedDatamover("epoll") {}
  ~TcpDatamover() override;

  void SetTimerPeriod(std::chrono::milliseconds period) override { loop_.set_tick(period); }
  Status Start(DatamoverEvents* events) override;
  void Wake() override { loop_.Wake(); }
  bool OnIoThread() const override { return loop_.OnIoThread(); }
  void Shutdown() override;

 private:
  // IoLoopEvents.
  void OnWake() override { events_->OnWake(); }
  void OnTick() override { events_->OnTimer(); }
  void OnRoundEnd() override;
  void OnLoopFailure(const Status& status) override { Fail(status); }

  void Fail(Status status) override;
  void HandleReadable();
  void Flush();
  void UpdateWriteInterest();

  IoLoop loop_{"iscsi-tcp-io", std::chrono::seconds(1)};  // the name shows in top -H and bench
  bool want_write_ = false;
};

}  // namespace iser
