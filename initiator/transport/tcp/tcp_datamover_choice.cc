#include "initiator/transport/tcp/tcp_datamover_choice.h"

#include <cstdlib>
#include <fstream>

#include "initiator/base/log.h"
#include "initiator/transport/tcp/tcp_datamover.h"
#include "initiator/transport/tcp/uring_datamover.h"

namespace iser {

namespace {

constexpr const char* kVariable = "ISER_CONNECT_TCP_DATAMOVER";

// kernel.io_uring_disabled (Linux 6.6): 1 lets only the io_uring_group use io_uring, 2 nobody.
std::string DisabledBySysctl() {
  std::ifstream f("/proc/sys/kernel/io_uring_disabled");
  int value = 0;
  if (!(f >> value) || value == 0) return "";
  return "; kernel.io_uring_disabled=" + std::to_string(value);
}

}  // namespace

Result<TcpDatamoverChoice> ChooseTcpDatamover() {
  TcpDatamoverChoice choice;
  const char* forced = std::getenv(kVariable);
  const std::string value = forced ? forced : "";
  if (value == "epoll") {
    choice.reason = std::string(kVariable) + "=epoll";
  } else if (!value.empty() && value != "io_uring") {
    return Status::InvalidArgument(std::string(kVariable) + "=" + value +
                                   ": must be io_uring or epoll");
  } else if (Status probe = UringDatamover::Probe(); probe.ok()) {
    choice.kind = TcpDatamoverKind::kIoUring;
    if (!value.empty()) choice.reason = std::string(kVariable) + "=io_uring";
  } else if (!value.empty()) {
    return Status::NotSupported(std::string(kVariable) + "=io_uring, but " + probe.message());
  } else {
    choice.reason = probe.message() + DisabledBySysctl();
  }
  Log(LogLevel::kInfo, std::string("iSCSI/TCP datamover: ") +
                           (choice.kind == TcpDatamoverKind::kIoUring ? "io_uring" : "epoll") +
                           (choice.reason.empty() ? "" : " (" + choice.reason + ")"));
  return choice;
}

std::unique_ptr<Datamover> NewTcpDatamover(TcpDatamoverKind kind) {
  if (kind == TcpDatamoverKind::kIoUring) return std::make_unique<UringDatamover>();
  return std::make_unique<TcpDatamover>();
}

}  // namespace iser
