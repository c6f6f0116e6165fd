// Running one command of our own and waiting for it: what reads a LUN's properties (lun_info)
// and what probes it through one path (paths) share. The executor is a session or a set of
// paths (initiator/task/executor.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "initiator/base/status.h"
#include "initiator/scsi/alua.h"
#include "initiator/task/executor.h"
#include "initiator/task/task.h"

namespace iser::scsi {

// Runs the task built by a scsi:: builder on LUN `lun` and returns its outcome, naming the
// command and the LUN ("INQUIRY on LUN 1: ...").
Status Run(Executor& executor, Task& t, uint64_t lun);

// INQUIRY of LUN `lun`: the standard data without a page, else the VPD page; the bytes the
// target returned (at most 1024).
Result<std::vector<uint8_t>> RunInquiry(Executor& executor, uint64_t lun,
                                        std::optional<uint8_t> page);

// REPORT TARGET PORT GROUPS of LUN `lun`, parsed. Asked with 4 KiB first; when the target
// announces more, asked once again with what it announced (up to kMaxTargetPortGroupsBytes), so
// that every group's descriptor arrives (scsi/alua.h: needed_bytes is then still set only for a
// target that sends less than it announces, or more than that bound).
constexpr uint32_t kMaxTargetPortGroupsBytes = 64 * 1024;
Result<TargetPortGroups> RunReportTargetPortGroups(Executor& executor, uint64_t lun);

}  // namespace iser::scsi
