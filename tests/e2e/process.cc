#include "tests/e2e/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/file.h"
#include "common/random.h"

namespace fca::e2e {

CommandResult InitTinyModel(const std::string& local_audit, const std::string& out,
                            const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      local_audit,   "init",         "--out=" + out, "--d_model=32",          "--n_layers=2",
      "--n_heads=2", "--n_groups=4", "--d_ff=64",    "--controller_width=16", "--max_seq_len=64"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return Run(argv);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

bool PollUntil(const std::function<bool()>& done, int seconds, int poll_ms) {
  for (int i = 0; i < seconds * 1000 / poll_ms; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return false;
}

std::string StringField(const json::Value& row, const char* key) {
  const json::Value* v = row.Find(key);
  return v && v->is_string() ? v->as_string() : "";
}

std::string RandomWords(size_t bytes, uint64_t seed) {
  static const char* kWords[] = {"the",   "frozen", "controller", "gate",    "model",
                                 "token", "layer",  "audit",      "replay",  "coefficient",
                                 "of",    "and",    "a",          "dynamic", "inference",
                                 "cost",  "static", "profile"};
  Rng rng(seed);
  std::string s;
  while (s.size() < bytes) {
    s += kWords[rng.Uniform(sizeof(kWords) / sizeof(kWords[0]))];
    s += rng.Uniform(9) == 0 ? ".\n" : " ";
  }
  s.resize(bytes);
  return s;
}

std::unique_ptr<ServerProcess> StartServer(const std::string& binary,
                                           const std::vector<std::string>& args) {
  std::string pattern = ::testing::TempDir() + "fca_e2e_server_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "cannot make a folder for fca-server's output";
    return nullptr;
  }
  std::string error;
  std::unique_ptr<ServerProcess> server =
      ServerProcess::Start(binary, args, buf.data(), 60, &error);
  if (server == nullptr) ADD_FAILURE() << error;
  return server;
}

}  // namespace fca::e2e
