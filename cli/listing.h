// TargetListing: what `iser-connect ls` found on one target: its name and portal, its LUNs,
// or the failure (login, REPORT LUNS, a probe) that ended the listing.
#pragma once

#include <string>
#include <vector>

#include "discovery/sendtargets.h"
#include "initiator/base/status.h"
#include "initiator/block/lun_info.h"

namespace iser::cli {

struct TargetListing {
  std::string name;
  TargetPortal portal;
  Status status;              // OK, or why the listing stopped
  std::vector<LunInfo> luns;  // probed before any failure
};

}  // namespace iser::cli
