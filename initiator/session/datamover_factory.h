// DatamoverFactory: how a session gets a connection's datamover, the seam between the session
// and the outside world (as LevelDB's Env). Production code uses DefaultDatamoverFactory, the one
// place that knows the concrete transports; tests pass a factory that returns a fake datamover and
// so drive the session with no socket and no thread.
//
// The factory is called once per connection attempt (every login redirect, and every reconnect)
// and must return a fresh, unconnected datamover or an error.
#pragma once

#include <functional>
#include <memory>

#include "initiator/base/status.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/portal.h"

namespace iser {

using DatamoverFactory = std::function<Result<std::unique_ptr<Datamover>>(TransportKind)>;

// TCP for TransportKind::kTcp, iSER over rdma-core for TransportKind::kIser.
DatamoverFactory DefaultDatamoverFactory();

}  // namespace iser
