// LunFiles: the LUNs a mount exposes, each a BlockDevice on the target's shared paths
// (OpenPaths, discovery/connect.h) plus the name of its file. Opening probes the LUNs; a URL naming
// a LUN that is not a disk is an error, while a whole-target mount skips non-disk LUNs and fails
// only when none is left.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/block/block_device.h"
#include "initiator/block/lun_info.h"
#include "initiator/paths/path_set.h"

namespace iser::fuse {

// The LUN whose blocks the kernel's page cache may hold for a file (--page-cache): the one the
// device opened, until a check finds another LUN under its number (KeepCachedPages).
struct CachedLun {
  Mutex mu;
  bool known ISER_GUARDED_BY(mu) = false;  // false: the one the device opened (its info())
  LunIdentity identity ISER_GUARDED_BY(mu);
  uint64_t size ISER_GUARDED_BY(mu) = 0;
  // Times a check found another identity or size (KeepCachedPages returned false, or an open
  // without the page cache read another size): with the paths' lun_changes(), what says that
  // bytes read from the file earlier may be another LUN's (lun_file_ops.cc's read buffer).
  std::atomic<uint64_t> changes{0};
};

struct LunFile {
  std::string name;  // "lun<N>"
  std::unique_ptr<BlockDevice> device;
  // Served read-only whatever the LUN allows: its target was logged in to read-only (login -r).
  bool read_only = false;
  std::unique_ptr<CachedLun> cached = std::make_unique<CachedLun>();
};

// lun: the URL's LUN, or nullopt for every disk LUN the target reports (REPORT LUNS).
Result<std::vector<LunFile>> OpenLunFiles(const std::shared_ptr<PathSet>& paths,
                                          std::optional<uint64_t> lun);

std::string LunFileName(uint64_t lun);

// Whether `now` (ReadLunIdentity) may still be the LUN `was` names, or is another one the target
// created under its number since (a LUN deleted and created again: its blocks are not the
// file's). An empty field was not read (a LUN without that VPD page; ProbeLun also leaves a page
// that failed empty) and is not compared: taking it for another LUN would replace the file of a
// LUN that did not change, and fail every descriptor open on it. A LUN created again with the
// same identity (tgtd derives a LUN's from its target and number unless told otherwise) differs
// at most in its capacity.
bool SameLun(const LunIdentity& was, const LunIdentity& now);

// Whether the pages the kernel cached for f (--page-cache) may stay: they came from the LUN
// behind f now, which has the same identity (`now`, just read) and the same size (`size`, just
// read: a LUN tgtd created again has the deleted one's identity). When not, logs another
// identity and remembers this LUN as the one the pages the kernel reads from then on come from.
// Any thread.
bool KeepCachedPages(const LunFile& f, const LunIdentity& now, uint64_t size);

}  // namespace iser::fuse
