#include "initiator/scsi/run.h"

#include <algorithm>
#include <string>

#include "initiator/scsi/commands.h"

namespace iser::scsi {

Status Run(Executor& executor, Task& t, uint64_t lun) {
  t.lun = lun;
  executor.Execute(&t);
  return TaskStatus(t, std::string(CommandName(t)) + " on LUN " + std::to_string(lun));
}

Result<std::vector<uint8_t>> RunInquiry(Executor& executor, uint64_t lun,
                                        std::optional<uint8_t> page) {
  std::vector<uint8_t> buf(1024);
  Task t;
  Inquiry(t, buf.data(), static_cast<uint16_t>(buf.size()), page.has_value(), page.value_or(0));
  if (Status st = Run(executor, t, lun); !st.ok()) return st;
  buf.resize(TransferredBytes(t));
  return buf;
}

namespace {

Result<TargetPortGroups> ReportTargetPortGroupsOnce(Executor& executor, uint64_t lun,
                                                    uint32_t alloc) {
  std::vector<uint8_t> buf(alloc);
  Task t;
  ReportTargetPortGroups(t, buf.data(), alloc);
  if (Status st = Run(executor, t, lun); !st.ok()) return st;
  buf.resize(TransferredBytes(t));
  return ParseReportTargetPortGroups(buf);
}

}  // namespace

Result<TargetPortGroups> RunReportTargetPortGroups(Executor& executor, uint64_t lun) {
  constexpr uint32_t kFirstAlloc = 4096;
  Result<TargetPortGroups> groups = ReportTargetPortGroupsOnce(executor, lun, kFirstAlloc);
  if (!groups.ok() || groups->needed_bytes <= kFirstAlloc) return groups;
  return ReportTargetPortGroupsOnce(executor, lun,
                                    std::min(groups->needed_bytes, kMaxTargetPortGroupsBytes));
}

}  // namespace iser::scsi
