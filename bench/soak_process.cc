#include "bench/soak_process.h"

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace fca::soak {

std::optional<ProcStatus> ReadProcStatus(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  ProcStatus s;
  bool rss = false;
  for (std::string line; std::getline(in, line);) {
    auto field = [&](const char* name, int64_t* out) {
      const size_t n = std::strlen(name);
      if (line.compare(0, n, name) != 0) return false;
      *out = std::atoll(line.c_str() + n);
      return true;
    };
    rss = field("VmRSS:", &s.vm_rss_kb) || rss;
    field("VmHWM:", &s.vm_hwm_kb);
    field("Threads:", &s.threads);
  }
  // A zombie has no VmRSS line: it is gone as far as memory goes.
  if (!rss) return std::nullopt;
  return s;
}

int64_t CountOpenFds(pid_t pid) {
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int64_t n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

}  // namespace fca::soak
