#include "initiator/session/datamover_factory.h"

#include "initiator/transport/iser/iser_datamover.h"
#include "initiator/transport/tcp/tcp_datamover.h"

namespace iser {

DatamoverFactory DefaultDatamoverFactory() {
  return [](TransportKind kind) -> Result<std::unique_ptr<Datamover>> {
    if (kind == TransportKind::kIser) return std::unique_ptr<Datamover>(new IserDatamover());
    return std::unique_ptr<Datamover>(new TcpDatamover());
  };
}

}  // namespace iser
