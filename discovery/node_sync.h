// What `discover -o new|old|delete` does to the node records (iscsiadm's discovery database
// operations), given the targets one SendTargets discovery reported. One read-modify-write cycle
// under the store's lock, so concurrent discoveries into one store serialize.
//
//   new     creates a record (default settings, the given transport) for each reported target and
//           portal that has none;
//   old     refreshes each one that has a record: its tpgt and where it was discovered (address,
//           port, transport), keeping every other setting; an unchanged record is not rewritten;
//   delete  removes each record discovered at this portal (node.discovery_address and
//           node.discovery_port) that the discovery no longer reports.
// Records are named by target and portal; one with a name or host that cannot be a file name
// (CheckNodeIdentity) is skipped and listed in `skipped` with the reason.
#pragma once

#include <string>
#include <vector>

#include "discovery/node_record.h"
#include "discovery/node_store.h"
#include "discovery/sendtargets.h"
#include "initiator/base/status.h"

namespace iser {

struct DiscoveryRecordOps {
  bool add_new = false;
  bool refresh_old = false;
  bool delete_stale = false;
};

struct DiscoverySource {
  Portal portal;                                      // the portal that was asked
  TransportKind transport = TransportKind::kTcp;      // the one SendTargets ran over
  TransportKind new_transport = TransportKind::kTcp;  // for records `new` creates
};

struct NodeChanges {
  std::vector<NodeRecord> added;
  std::vector<NodeRecord> refreshed;  // rewritten because tpgt or discovery source changed
  std::vector<NodeRecord> removed;
  std::vector<std::string> skipped;  // "IQN at PORTAL: reason"
};

Result<NodeChanges> RecordDiscovery(NodeStore& store, const DiscoverySource& source,
                                    const std::vector<DiscoveredTarget>& targets,
                                    DiscoveryRecordOps ops);

}  // namespace iser
