// LunFiles: the LUNs a mount exposes, each a BlockDevice on one shared session plus the name of
// its file. Opening probes the LUNs; a URL naming a LUN that is not a disk is an error, while a
// whole-target mount skips non-disk LUNs and fails only when none is left.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/block/block_device.h"
#include "initiator/session/session.h"

namespace iser::fuse {

struct LunFile {
  std::string name;  // "lun<N>"
  std::unique_ptr<BlockDevice> device;
};

// lun: the URL's LUN, or nullopt for every disk LUN the target reports (REPORT LUNS).
Result<std::vector<LunFile>> OpenLunFiles(const std::shared_ptr<Session>& session,
                                          std::optional<uint64_t> lun);

std::string LunFileName(uint64_t lun);

// Whether the LUN behind device is still the one it opened, or another one the target created
// under the same number since (a LUN deleted and created again: its blocks are not the file's).
// The LUN is probed again (ProbeLun) and compared on what names it: the Device Identification
// VPD page's (0x83) designator and the Unit Serial Number (VPD 0x80), its device type and logical
// block size. Fails when the probe does. A LUN re-created with the same identity (tgtd derives a
// LUN's from its target and number unless told otherwise) shows only in its capacity, if at all.
Result<bool> SameLun(BlockDevice& device);

}  // namespace iser::fuse
