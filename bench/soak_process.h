// fca_soak_bench: the fca-server child process, helper commands and
// /proc/PID/status sampling. No gtest, no gRPC.
#ifndef FCA_BENCH_SOAK_PROCESS_H_
#define FCA_BENCH_SOAK_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fca::soak {

// Runs argv (argv[0] an absolute path) with stdout and stderr captured, waits
// at most `timeout_s`. exit_code is -1 when it was killed by a signal or
// timed out.
struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};
CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s);

// How a child process ended.
struct ExitInfo {
  bool exited = false;  // it has ended (and was reaped)
  bool by_signal = false;
  int code = 0;  // exit code, or the signal number when by_signal
  std::string Describe() const;
};

// One fca-server process: `binary --listen=127.0.0.1:0 args...`, stdout and
// stderr to files in `dir`.
class ServerProcess {
 public:
  // Starts it and waits (at most `start_timeout_s`) for "listening on
  // 127.0.0.1:PORT". nullptr and `*error` when it does not come.
  static std::unique_ptr<ServerProcess> Start(const std::string& binary,
                                              const std::vector<std::string>& args,
                                              const std::string& dir, int start_timeout_s,
                                              std::string* error);
  ~ServerProcess();  // SIGKILLs a server still running

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int http_port() const { return http_port_; }  // 0: no "http listening on" line
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string stderr_path() const { return err_path_; }

  // Non-blocking: reaps the child if it has ended. Thread-safe.
  ExitInfo Poll();
  // Sends `sig` unless the process has already been reaped.
  void Signal(int sig);
  // Waits at most `timeout_s` for the end; SIGKILLs it after that (then
  // `*killed` is true).
  ExitInfo Wait(int timeout_s, bool* killed);

 private:
  ServerProcess() = default;
  std::mutex mu_;
  pid_t pid_ = -1;
  int port_ = 0;
  int http_port_ = 0;
  ExitInfo exit_;
  std::string out_path_, err_path_;
};

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
