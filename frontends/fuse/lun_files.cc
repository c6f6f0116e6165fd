#include "frontends/fuse/lun_files.h"

#include "initiator/base/log.h"
#include "initiator/block/lun_info.h"

namespace iser::fuse {

std::string LunFileName(uint64_t lun) {
  return "lun" + std::to_string(lun);
}

namespace {

Status OpenOne(const std::shared_ptr<PathSet>& paths, uint64_t lun, std::vector<LunFile>* files) {
  Result<std::unique_ptr<BlockDevice>> dev = BlockDevice::Open(paths, lun);
  if (!dev.ok()) return dev.status();
  const LunInfo& i = (*dev)->info();
  if (LogEnabled(LogLevel::kDebug)) {
    Log(LogLevel::kDebug,
        LunFileName(lun) + ": " + std::to_string(i.size_bytes) + " bytes, block " +
            std::to_string(i.logical_block_size) + "/" + std::to_string(i.physical_block_size) +
            ", max transfer " + std::to_string(i.max_transfer_bytes) +
            (i.read_only ? ", read-only" : "") + (i.write_cache ? ", write cache" : "") +
            (i.fua ? ", FUA" : "") + (i.thin ? ", thin" : "") + (i.unmap ? ", UNMAP" : "") +
            (i.write_same_unmap ? ", WRITE SAME UNMAP" : "") +
            (i.unmapped_reads_zero ? ", LBPRZ" : ""));
  }
  files->push_back(LunFile{LunFileName(lun), std::move(dev.value())});
  return Status::OK();
}

}  // namespace

bool SameLun(const LunIdentity& was, const LunIdentity& now) {
  auto same = [](const std::string& a, const std::string& b) {
    return a.empty() || b.empty() || a == b;
  };
  return same(was.identifier, now.identifier) && same(was.serial, now.serial);
}

bool KeepCachedPages(const LunFile& f, const LunIdentity& now, uint64_t size) {
  CachedLun& c = *f.cached;
  MutexLock lock(&c.mu);
  if (!c.known) {
    const LunInfo& opened = f.device->info();
    c.identity = {opened.identifier, opened.serial};
    c.size = opened.size_bytes;
    c.known = true;
  }
  const bool same = SameLun(c.identity, now);
  if (!same) {
    Log(LogLevel::kWarning, f.name +
                                " is another LUN now (the target created it again under its "
                                "number): the file serves the new one, its cached pages dropped");
  }
  const bool keep = same && size == c.size;
  if (!keep) c.changes.fetch_add(1);
  c.identity = now;
  c.size = size;
  return keep;
}

Result<std::vector<LunFile>> OpenLunFiles(const std::shared_ptr<PathSet>& paths,
                                          std::optional<uint64_t> lun) {
  std::vector<LunFile> files;
  if (lun) {
    ISER_RETURN_IF_ERROR(OpenOne(paths, *lun, &files));
    return files;
  }
  Result<std::vector<uint64_t>> luns = ReportLuns(*paths);
  if (!luns.ok()) return luns.status();
  for (uint64_t n : *luns) {
    // Probe first: a target's controller and other non-disk LUNs are skipped, not errors.
    Result<LunInfo> info = ProbeLun(*paths, n);
    if (!info.ok()) return info.status();
    if (info->is_disk) ISER_RETURN_IF_ERROR(OpenOne(paths, n, &files));
  }
  if (files.empty()) {
    return Status::NotFound("target " + paths->target_name() + " has no disk LUN");
  }
  return files;
}

}  // namespace iser::fuse
