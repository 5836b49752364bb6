// Child processes of the end-to-end tests and the soak bench: a command run
// to its end with its output captured, and a fca-server kept running. No
// gtest, no gRPC (bench/soak links it too); process.h adds what the tests
// want on top.
#ifndef FCA_TESTS_E2E_SERVER_PROCESS_H_
#define FCA_TESTS_E2E_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fca::e2e {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out, err;
};

// Runs argv (argv[0] a path) with stdout and stderr captured and `env`
// entries ("K=V") added to the environment; waits at most `timeout_s`, then
// kills it.
CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                  int timeout_s = 180);

// How a child process ended.
struct ExitInfo {
  bool exited = false;  // it has ended (and was reaped)
  bool by_signal = false;
  int code = 0;  // exit code, or the signal number when by_signal
  std::string Describe() const;
};

// One fca-server process: `binary --listen=127.0.0.1:0
// --http_listen=127.0.0.1:0 args...` (a later flag in `args` wins), stdout
// and stderr to files in `dir`.
class ServerProcess {
 public:
  // Starts it and waits (at most `start_timeout_s`) for its "listening on
  // 127.0.0.1:PORT" line and, unless --http_listen= is empty in `args`, its
  // "http listening on" line. nullptr and `*error` when they do not come.
  static std::unique_ptr<ServerProcess> Start(const std::string& binary,
                                              const std::vector<std::string>& args,
                                              const std::string& dir, int start_timeout_s,
                                              std::string* error);
  ~ServerProcess();  // SIGKILLs a server still running

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int http_port() const { return http_port_; }  // 0: the gateway is off
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string stderr_path() const { return err_path_; }
  std::string Stderr() const;

  // Non-blocking: reaps the child if it has ended. Thread-safe.
  ExitInfo Poll();
  // Sends `sig` unless the process has already been reaped.
  void Signal(int sig);
  // Waits at most `timeout_s` for the end; SIGKILLs it after that (then
  // `*killed` is true).
  ExitInfo Wait(int timeout_s, bool* killed);
  // The same: its exit code, -1 after a signal or the timeout.
  int Wait(int timeout_s);

 private:
  ServerProcess() = default;
  std::mutex mu_;
  pid_t pid_ = -1;
  int port_ = 0;
  int http_port_ = 0;
  ExitInfo exit_;
  std::string out_path_, err_path_;
};

}  // namespace fca::e2e

#endif  // FCA_TESTS_E2E_SERVER_PROCESS_H_
