#include "initiator/session/datamover_factory.h"

#include "initiator/transport/iser/iser_datamover.h"
#include "initiator/transport/tcp/tcp_datamover_choice.h"

namespace iser {

DatamoverFactory DefaultDatamoverFactory() {
  return [](TransportKind kind) -> Result<std::unique_ptr<Datamover>> {
    if (kind == TransportKind::kIser) return std::unique_ptr<Datamover>(new IserDatamover());
    // Chosen once per process, at its first iSCSI/TCP connection, which logs the choice.
    static const Result<TcpDatamoverChoice> tcp = ChooseTcpDatamover();
    if (!tcp.ok()) return tcp.status();
    return NewTcpDatamover(tcp->kind);
  };
}

}  // namespace iser
