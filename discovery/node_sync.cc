#include "discovery/node_sync.h"

#include <algorithm>

namespace iser {

namespace {

bool SameNode(const NodeRecord& r, const std::string& name, const Portal& portal) {
  return r.name == name && r.portal == portal;
}

}  // namespace

Result<NodeChanges> RecordDiscovery(NodeStore& store, const DiscoverySource& source,
                                    const std::vector<DiscoveredTarget>& targets,
                                    DiscoveryRecordOps ops) {
  NodeChanges changes;
  if (!ops.add_new && !ops.refresh_old && !ops.delete_stale) return changes;
  Result<NodeStore::Lock> lock = store.Acquire();
  if (!lock.ok()) return lock.status();
  Result<std::vector<NodeRecord>> existing = store.List(*lock);
  if (!existing.ok()) return existing.status();

  for (const DiscoveredTarget& t : targets) {
    for (const TargetPortal& p : t.portals) {
      auto it = std::find_if(existing->begin(), existing->end(),
                             [&](const NodeRecord& r) { return SameNode(r, t.name, p.portal); });
      NodeRecord record;
      if (it == existing->end()) {
        if (!ops.add_new) continue;
        record.name = t.name;
        record.portal = p.portal;
        record.transport = source.new_transport;
      } else {
        if (!ops.refresh_old) continue;
        record = *it;
      }
      record.tpgt = p.tpgt;
      record.discovery_portal = source.portal;
      record.discovery_transport = source.transport;
      if (Status ok = CheckNodeIdentity(record); !ok.ok()) {
        changes.skipped.push_back(t.name + " at " + p.portal.ToString() + ": " + ok.message());
        continue;
      }
      if (it != existing->end() && *it == record) continue;
      ISER_RETURN_IF_ERROR(store.Write(*lock, record));
      (it == existing->end() ? changes.added : changes.refreshed).push_back(record);
    }
  }

  if (ops.delete_stale) {
    for (const NodeRecord& r : *existing) {
      if (!(r.discovery_portal == source.portal)) continue;
      const bool reported = std::any_of(targets.begin(), targets.end(), [&](const auto& t) {
        return std::any_of(t.portals.begin(), t.portals.end(),
                           [&](const TargetPortal& p) { return SameNode(r, t.name, p.portal); });
      });
      if (reported) continue;
      ISER_RETURN_IF_ERROR(store.Remove(*lock, r));
      changes.removed.push_back(r);
    }
  }
  return changes;
}

}  // namespace iser
