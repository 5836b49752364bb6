// Running the real binaries from end-to-end tests.
#ifndef FCA_TESTS_E2E_PROCESS_H_
#define FCA_TESTS_E2E_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fca::e2e {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out, err;
};

// Runs argv[0] with arguments, waits at most `timeout_s`, returns its exit
// code and output. `env` entries ("K=V") are added to the environment.
CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                  int timeout_s = 180);

// English-like text of `bytes` bytes from a fixed word list, different for
// each seed (so two seeds share no window).
std::string RandomWords(size_t bytes, uint64_t seed);

// A fca-server process listening on 127.0.0.1 (port chosen by the OS).
class ServerProcess {
 public:
  // Starts `binary` with `args` plus --listen=127.0.0.1:0 and waits for its
  // "listening on" line. nullptr (with a test failure) if it does not come.
  static std::unique_ptr<ServerProcess> Start(const std::string& binary,
                                              const std::vector<std::string>& args);
  ~ServerProcess();  // SIGKILLs a server still running

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The HTTP gateway's port (0 when it is off).
  int http_port() const { return http_port_; }
  void Signal(int sig);
  // Waits for exit; returns the exit code, or -1 on a signal or timeout.
  int Wait(int timeout_s);
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int http_port_ = 0;
  std::string err_path_;
};

}  // namespace fca::e2e

#endif  // FCA_TESTS_E2E_PROCESS_H_
