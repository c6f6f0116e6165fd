#include "cli/json_output.h"

#include <algorithm>

namespace iser::cli {

std::string DumpJson(const Json& document) {
  return document.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json DiscoveryJson(const std::vector<DiscoveredTarget>& targets) {
  Json out = Json::array();
  for (const DiscoveredTarget& t : targets) {
    Json portals = Json::array();
    for (const TargetPortal& p : t.portals) portals.push_back(PortalJson(p.portal, p.tpgt));
    out.push_back({{"target", t.name}, {"portals", std::move(portals)}});
  }
  return out;
}

namespace {

Json LunJson(const LunInfo& l) {
  Json lun = {{"lun", l.lun},         {"type", l.device_type_name}, {"vendor", l.vendor},
              {"product", l.product}, {"revision", l.revision},     {"serial", l.serial},
              {"id", l.identifier}};
  if (l.is_disk) {
    lun["size"] = l.size_bytes;
    lun["logical_block_size"] = l.logical_block_size;
    lun["physical_block_size"] = l.physical_block_size;
    lun["max_transfer"] = l.max_transfer_bytes;
    lun["thin"] = l.thin;
    lun["lbprz"] = l.unmapped_reads_zero;
    lun["unmap"] = l.unmap;
    lun["write_same_unmap"] = l.write_same_unmap;
    lun["write_cache"] = l.write_cache;
    lun["fua"] = l.fua;
    lun["read_only"] = l.read_only;
    lun["rotational"] = l.rotational;
  }
  return lun;
}

}  // namespace

Json ListingJson(const std::vector<TargetListing>& listing) {
  Json out = Json::array();
  for (const TargetListing& t : listing) {
    Json target = {{"target", t.name}, {"portal", PortalJson(t.portal.portal, t.portal.tpgt)}};
    if (!t.status.ok()) {
      target["error"] = t.status.ToString();
    } else {
      Json luns = Json::array();
      for (const LunInfo& l : t.luns) luns.push_back(LunJson(l));
      target["luns"] = std::move(luns);
    }
    out.push_back(std::move(target));
  }
  return out;
}

Json SessionsJson(const std::vector<Json>& tree_statuses) {
  Json out = Json::array();
  for (const Json& tree : tree_statuses) {
    for (Json session : tree.value("sessions", Json::array())) {
      Json parameters = session["parameters"];
      session.erase("parameters");
      session["parameters"] = std::move(parameters);
      session["root"] = tree.value("root", std::string());
      session["pid"] = tree.value("pid", 0);
      session["kind"] = tree.value("kind", std::string());
      if (tree.contains("portal")) {
        // The portal a whole-portal mount discovers at: no portal group of its own.
        Result<Portal> mounted = ParsePortal(tree["portal"].get<std::string>());
        session["portal_mount"] =
            mounted.ok() ? PortalJson(*mounted, std::nullopt) : tree["portal"];
      }
      out.push_back(std::move(session));
    }
  }
  // In SID order, as iscsiadm lists sessions.
  std::stable_sort(out.begin(), out.end(), [](const Json& a, const Json& b) {
    return a.value("sid", 0) < b.value("sid", 0);
  });
  return out;
}

}  // namespace iser::cli
