// Running the real binaries from end-to-end tests.
#ifndef FCA_TESTS_E2E_PROCESS_H_
#define FCA_TESTS_E2E_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"

namespace fca::e2e {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out, err;
};

// Runs argv[0] with arguments, waits at most `timeout_s`, returns its exit
// code and output. `env` entries ("K=V") are added to the environment.
CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                  int timeout_s = 180);

// Writes a tiny random model folder at `out` with fca-local-audit
// (`local_audit`): the shape every end-to-end test audits (d_model 32, two
// layers, G = 4, windows up to 64 tokens; an audit of a few windows takes a
// fraction of a second), then `flags` (a later flag wins).
CommandResult InitTinyModel(const std::string& local_audit, const std::string& out,
                            const std::vector<std::string>& flags = {});

// Replaces `path` with `text`.
void WriteFile(const std::string& path, const std::string& text);

// Calls `done`, then again after every `poll_ms`, until it is true (true),
// at most seconds * 1000 / poll_ms times (false): the sleeps add up to
// `seconds`, the checks' own time comes on top (a check that runs the CLI
// takes a while on a loaded machine; the wait stretches with it).
bool PollUntil(const std::function<bool()>& done, int seconds, int poll_ms = 50);

// A JSON row's string field, "" when absent or not a string.
std::string StringField(const json::Value& row, const char* key);

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
