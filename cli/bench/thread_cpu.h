// CPU time of this process's threads by thread name, so that a transport's helper threads
// (softrdma's, doing a NIC's work) show apart from the initiator's own in bench's report.
//
// CpuByThreadName reads /proc/self/task/*/stat: user + system seconds of each live thread,
// summed over the threads sharing a name (the kernel's comm, at most 15 bytes, as set by
// pthread_setname_np). Its resolution is the kernel's clock tick (sysconf(_SC_CLK_TCK)).
// CpuSpent(before, after) is what each name used between two readings: names new in after
// count in full; a thread that exited in between takes its time with it, so a name whose sum
// fell is reported as 0, not negative.
#pragma once

#include <map>
#include <string>

namespace iser::cli {

using CpuByName = std::map<std::string, double>;

CpuByName CpuByThreadName();
CpuByName CpuSpent(const CpuByName& before, const CpuByName& after);

}  // namespace iser::cli
