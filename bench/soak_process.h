// fca_soak_bench: /proc/PID/status sampling of the fca-server child
// process (tests/e2e/server_process.h). No gtest, no gRPC.
#ifndef FCA_BENCH_SOAK_PROCESS_H_
#define FCA_BENCH_SOAK_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "tests/e2e/server_process.h"

namespace fca::soak {

// The child processes: tests/e2e/server_process.h, shared with the
// end-to-end tests.
using e2e::CommandResult;
using e2e::ExitInfo;
using e2e::Run;
using e2e::ServerProcess;

// The fields of /proc/PID/status the soak follows; nullopt once the process
// is gone.
struct ProcStatus {
  int64_t vm_rss_kb = 0;
  int64_t vm_hwm_kb = 0;
  int64_t threads = 0;
};
std::optional<ProcStatus> ReadProcStatus(pid_t pid);

// Open file descriptors of `pid` (entries of /proc/PID/fd), -1 when unknown.
int64_t CountOpenFds(pid_t pid);

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_PROCESS_H_
