#include "cli/bench/thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

namespace iser::cli {

CpuByName CpuByThreadName() {
  CpuByName cpu;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return cpu;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    const std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // "tid (comm) state ...": comm may hold spaces and parentheses, so it ends at the last ')'.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 > stat.size()) {
      continue;  // the thread exited between readdir and open
    }
    // After comm: state (field 3), ...; utime and stime are fields 14 and 15, in clock ticks.
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    cpu[stat.substr(open + 1, close - open - 1)] += static_cast<double>(utime + stime) / tick;
  }
  closedir(dir);
  return cpu;
}

CpuByName CpuSpent(const CpuByName& before, const CpuByName& after) {
  CpuByName spent;
  for (const auto& [name, seconds] : after) {
    const auto it = before.find(name);
    spent[name] = std::max(0.0, it == before.end() ? seconds : seconds - it->second);
  }
  return spent;
}

}  // namespace iser::cli
