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
namespace {

std::string TempPath(const std::string& tag) {
  std::string pattern = ::testing::TempDir() + "fca_e2e_" + tag + "_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd >= 0) close(fd);
  return std::string(buf.data());
}

// fork + exec with stdout/stderr redirected to files.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& out_path, const std::string& err_path) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int out = open(out_path.c_str(), O_WRONLY | O_TRUNC);
  const int err = open(err_path.c_str(), O_WRONLY | O_TRUNC);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  const int null = open("/dev/null", O_RDONLY);
  dup2(null, STDIN_FILENO);
  for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

// Waits for `pid` at most `timeout_s`; -1 when it was killed or timed out.
int WaitFor(pid_t pid, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  int timeout_s) {
  const std::string out = TempPath("out"), err = TempPath("err");
  CommandResult r;
  r.exit_code = WaitFor(Spawn(argv, env, out, err), timeout_s);
  r.out = ReadFileOrEmpty(out);
  r.err = ReadFileOrEmpty(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

std::unique_ptr<ServerProcess> ServerProcess::Start(const std::string& binary,
                                                    const std::vector<std::string>& args) {
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  const std::string out = TempPath("server_out");
  server->err_path_ = TempPath("server_err");
  // Port 0 for HTTP too: tests run side by side (args may override it).
  std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  server->pid_ = Spawn(argv, {}, out, server->err_path_);
  const std::string marker = "listening on 127.0.0.1:";
  for (int i = 0; i < 600; ++i) {  // up to 30 s: loading torch takes a while
    const std::string text = ReadFileOrEmpty(out);
    const size_t at = text.find(marker);
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
      server->port_ = std::stoi(text.substr(at + marker.size()));
      // Printed with the gRPC line, after it.
      const std::string http_marker = "http listening on 127.0.0.1:";
      const size_t http_at = text.find(http_marker);
      if (http_at != std::string::npos) {
        server->http_port_ = std::stoi(text.substr(http_at + http_marker.size()));
      }
      return server;
    }
    int status = 0;
    if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "fca-server did not start: " << ReadFileOrEmpty(server->err_path_);
  return nullptr;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void ServerProcess::Signal(int sig) { kill(pid_, sig); }

int ServerProcess::Wait(int timeout_s) {
  const int code = WaitFor(pid_, timeout_s);
  pid_ = -1;
  return code;
}

std::string ServerProcess::Stderr() const { return ReadFileOrEmpty(err_path_); }

}  // namespace fca::e2e
