#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/file.h"

namespace fca::e2e {
namespace {

using Clock = std::chrono::steady_clock;

// fork + exec with stdout/stderr redirected to files and `env` added; -1
// when fork fails.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& out_path, const std::string& err_path) {
  // Everything exec needs is prepared before fork: the child of a
  // multi-threaded parent may only call async-signal-safe functions.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> added;
  for (const std::string& e : env) added.push_back(const_cast<char*>(e.c_str()));
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int null = open("/dev/null", O_RDONLY);
  if (out < 0 || err < 0 || null < 0) _exit(126);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  dup2(null, STDIN_FILENO);
  for (char* e : added) putenv(e);
  // The parent blocks no signals that the child should get, but be sure:
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(args[0], args.data());
  _exit(127);
}

ExitInfo FromStatus(int status) {
  ExitInfo e;
  e.exited = true;
  if (WIFSIGNALED(status)) {
    e.by_signal = true;
    e.code = WTERMSIG(status);
  } else {
    e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return e;
}

// A new empty file in $TMPDIR (else /tmp).
std::string TempFile(const std::string& tag) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fca_" + tag + "_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd >= 0) close(fd);
  return std::string(buf.data());
}

// Whether the server was started with its HTTP gateway: the last
// --http_listen of `args` is not empty.
bool HttpOn(const std::vector<std::string>& args) {
  bool on = true;
  for (const std::string& a : args) {
    if (a.rfind("--http_listen=", 0) == 0) on = a != "--http_listen=";
  }
  return on;
}

}  // namespace

std::string ExitInfo::Describe() const {
  if (!exited) return "still running";
  if (by_signal) return "killed by signal " + std::to_string(code) + " (" + strsignal(code) + ")";
  return "exit code " + std::to_string(code);
}

CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  int timeout_s) {
  const std::string out = TempFile("command_out"), err = TempFile("command_err");
  CommandResult r;
  const pid_t pid = Spawn(argv, env, out, err);
  if (pid > 0) {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    } else if (got == pid && WIFEXITED(status)) {
      r.exit_code = WEXITSTATUS(status);
    }
  }
  r.out = ReadFileOrEmpty(out);
  r.err = ReadFileOrEmpty(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

std::unique_ptr<ServerProcess> ServerProcess::Start(const std::string& binary,
                                                    const std::vector<std::string>& args,
                                                    const std::string& dir, int start_timeout_s,
                                                    std::string* error) {
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  server->out_path_ = dir + "/server.out";
  server->err_path_ = dir + "/server.err";
  // Port 0 for both: tests run side by side.
  std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  server->pid_ = Spawn(argv, {}, server->out_path_, server->err_path_);
  if (server->pid_ < 0) {
    *error = std::string("fork failed: ") + strerror(errno);
    return nullptr;
  }
  const bool http = HttpOn(args);
  const std::string marker = "listening on 127.0.0.1:", http_marker = "http " + marker;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(start_timeout_s);
  while (Clock::now() < deadline) {
    // fca-server prints the gRPC line first, then the HTTP one.
    const std::string text = ReadFileOrEmpty(server->out_path_);
    const size_t at = text.find(marker);
    const size_t http_at = text.find(http_marker);
    const size_t last = http ? http_at : at;
    if (at != std::string::npos && last != std::string::npos &&
        text.find('\n', last) != std::string::npos) {
      server->port_ = std::atoi(text.c_str() + at + marker.size());
      if (http) server->http_port_ = std::atoi(text.c_str() + http_at + http_marker.size());
      if (server->port_ > 0) return server;
    }
    const ExitInfo e = server->Poll();
    if (e.exited) {
      *error = "fca-server ended before listening (" + e.Describe() +
               "): " + ReadFileOrEmpty(server->err_path_);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "fca-server printed no 'listening on' line within " + std::to_string(start_timeout_s) +
           " s: " + ReadFileOrEmpty(server->err_path_);
  return nullptr;  // the destructor kills it
}

ServerProcess::~ServerProcess() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid_ > 0 && !exit_.exited) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ServerProcess::Stderr() const { return ReadFileOrEmpty(err_path_); }

ExitInfo ServerProcess::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid_ <= 0 || exit_.exited) return exit_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) exit_ = FromStatus(status);
  return exit_;
}

void ServerProcess::Signal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid_ > 0 && !exit_.exited) kill(pid_, sig);
}

ExitInfo ServerProcess::Wait(int timeout_s, bool* killed) {
  *killed = false;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (Clock::now() < deadline) {
    const ExitInfo e = Poll();
    if (e.exited) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_.exited) return exit_;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_ = FromStatus(status);
  *killed = true;
  return exit_;
}

int ServerProcess::Wait(int timeout_s) {
  bool killed = false;
  const ExitInfo e = Wait(timeout_s, &killed);
  return e.by_signal ? -1 : e.code;
}

}  // namespace fca::e2e
