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
#include "tests/e2e/server_process.h"

namespace fca::e2e {

// CommandResult, Run and ServerProcess: server_process.h.

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

// A fca-server started with `args` (ServerProcess::Start, its files in a new
// temporary folder): nullptr, with a test failure naming why, when it does
// not come up within 60 s.
std::unique_ptr<ServerProcess> StartServer(const std::string& binary,
                                           const std::vector<std::string>& args);

}  // namespace fca::e2e

#endif  // FCA_TESTS_E2E_PROCESS_H_
