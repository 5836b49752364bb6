// The fixture of the remote-worker end-to-end suites
// (remote_worker_e2e_test.cc, remote_worker_protocol_e2e_test.cc): tiny
// models (one with a stale twin), datasets and keys in a folder of the
// suite's, fca-worker processes, raw stubs on a server, and a database per
// test.
#ifndef FCA_TESTS_E2E_REMOTE_WORKER_FIXTURE_H_
#define FCA_TESTS_E2E_REMOTE_WORKER_FIXTURE_H_

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/file.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "proto/fca/v1/worker_service.grpc.pb.h"
#include "tests/e2e/process.h"
#include "tests/e2e/upload.h"

namespace fca::e2e::remote_worker {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline constexpr char kUserKey[] = "alice-key-0123456789abcdef";
inline constexpr char kWorkerKey[] = "pool-worker-key-0123456789";
inline constexpr char kCarolKey[] =
    "carol-key-0123456789abcdef";  // a member of no project of alice's

inline std::string g_root;  // models/, other-models/, data/, keys, per-test databases

inline void InitModel(const std::string& dir, const std::vector<std::string>& flags) {
  CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, dir, flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// A background process (fca-worker) with its output in files.
class Process {
 public:
  static std::unique_ptr<Process> Start(const std::vector<std::string>& argv) {
    auto p = std::unique_ptr<Process>(new Process());
    p->err_path_ = g_root + "/proc_" + std::to_string(++count_) + ".err";
    WriteFile(p->err_path_, "");
    p->pid_ = fork();
    if (p->pid_ == 0) {
      const int err = open(p->err_path_.c_str(), O_WRONLY | O_TRUNC);
      const int null = open("/dev/null", O_RDWR);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    return p;
  }
  ~Process() {
    if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { kill(pid_, sig); }
  // The exit code; -1 on a signal or after `timeout_s`.
  int Wait(int timeout_s) {
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  bool Running() { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string Stderr() const { return ReadFileOrEmpty(err_path_); }
  // Waits until stderr holds `text` (false if the process ends or
  // `timeout_s` passes first).
  bool WaitForStderr(const std::string& text, int timeout_s) {
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < deadline && Running()) {
      if (Stderr().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Stderr().find(text) != std::string::npos;
  }

 private:
  Process() = default;
  static inline int count_ = 0;
  pid_t pid_ = -1;
  std::string err_path_;
};

// Raw stubs on one server.
struct Client {
  explicit Client(const std::string& address)
      : channel(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        audit(v1::AuditService::NewStub(channel)),
        worker(v1::WorkerService::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::AuditService::Stub> audit;
  std::unique_ptr<v1::WorkerService::Stub> worker;
};

inline std::unique_ptr<grpc::ClientContext> Ctx(const std::string& key) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

inline std::string Describe(const grpc::Status& s) {
  return std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
}

class RemoteWorkerE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = ::testing::TempDir() + "fca_remote_" + std::to_string(getpid());
    fs::create_directories(g_root + "/models");
    fs::create_directories(g_root + "/other-models");
    fs::create_directories(g_root + "/data");
    InitModel(g_root + "/models/fg-a", {"--seed=1", "--controller_out_std=1.0"});
    InitModel(g_root + "/models/fg-b", {"--seed=2", "--controller_out_std=1.0"});
    InitModel(g_root + "/models/dense", {"--family=dense", "--seed=1"});
    // Slow enough (a few seconds on the long dataset) to be interrupted.
    InitModel(g_root + "/models/fg-wide", {"--seed=3", "--controller_out_std=1.0", "--d_model=256",
                                           "--d_ff=1024", "--n_heads=4"});
    // Same name, other weights: a worker on this folder must refuse fg-a.
    InitModel(g_root + "/other-models/fg-a", {"--seed=7", "--controller_out_std=1.0"});
    WriteFile(g_root + "/data/eval.txt", RandomWords(16 * 40, 1));
    WriteFile(g_root + "/data/calib.txt", RandomWords(16 * 30, 2));
    WriteFile(g_root + "/data/long.txt", RandomWords(16 * 160, 3));
    WriteFile(g_root + "/keys", std::string(kUserKey) + " alice user\n" + kWorkerKey +
                                    " pool worker\n" + kCarolKey + " carol user\n");
    fs::permissions(g_root + "/keys", fs::perms::owner_read | fs::perms::owner_write);
    WriteFile(g_root + "/worker.key", std::string(kWorkerKey) + "\n");
    fs::permissions(g_root + "/worker.key", fs::perms::owner_read | fs::perms::owner_write);
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    db_ = g_root + "/" + info->name() + ".sqlite";
  }

  std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--models=" + g_root + "/models", "--db=" + db_, "--threads=1",
                                     "--api_keys=" + g_root + "/keys"};
    args.insert(args.end(), extra.begin(), extra.end());
    return e2e::StartServer(FCA_SERVER_BIN, args);
  }

  std::unique_ptr<Process> StartWorker(const std::string& address, const std::string& name,
                                       const std::string& models = "models") {
    auto worker =
        Process::Start({FCA_WORKER_BIN, "--coordinator=" + address,
                        "--models=" + g_root + "/" + models, "--name=" + name,
                        "--api_key_file=" + g_root + "/worker.key", "--threads=1", "--poll_ms=50"});
    // Until main() has blocked SIGTERM (after the dynamic loader has mapped
    // libtorch: seconds on a loaded machine) a SIGTERM kills the process
    // outright, so a test signals only a worker that has registered.
    EXPECT_TRUE(worker->WaitForStderr("fca-worker: registered with", 60)) << worker->Stderr();
    return worker;
  }

  static void Upload(Client& c, const std::string& name, const std::string& file) {
    const std::string bytes = ReadFileOrEmpty(g_root + "/data/" + file);
    auto context = Ctx(kUserKey);
    const grpc::Status status = testing::UploadText(*c.audit, context.get(), name, bytes);
    ASSERT_TRUE(status.ok()) << Describe(status);
  }

  static v1::AuditSpec Spec(const std::vector<std::string>& models, const std::string& eval) {
    v1::AuditSpec spec;
    for (const std::string& m : models) spec.add_models(m);
    spec.set_eval_dataset(eval);
    spec.set_calib_dataset("calib");
    spec.set_window_length(16);
    spec.set_batch_size(4);
    spec.set_bootstrap_resamples(200);
    spec.set_timing_repeats(2);
    spec.set_seed(5);
    return spec;
  }

  static int64_t Submit(Client& c, const v1::AuditSpec& spec) {
    v1::SubmitAuditRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitAuditResponse response;
    const grpc::Status status = c.audit->SubmitAudit(Ctx(kUserKey).get(), request, &response);
    EXPECT_TRUE(status.ok()) << Describe(status);
    return response.job().id();
  }

  static v1::Job GetJob(Client& c, int64_t id) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::GetJobResponse response;
    c.audit->GetJob(Ctx(kUserKey).get(), request, &response);
    return response.job();
  }

  static bool Terminal(v1::JobState s) {
    return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
           s == v1::JOB_STATE_CANCELLED;
  }

  // Polls until `done(job)` or `seconds` pass; returns the last job seen.
  static v1::Job WaitJob(
      Client& c, int64_t id, int seconds,
      const std::function<bool(const v1::Job&)>& done = [](const v1::Job& j) {
        return Terminal(j.state());
      }) {
    v1::Job job;
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      job = GetJob(c, id);
      if (done(job)) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "job " << id << " still " << v1::JobState_Name(job.state()) << " after "
                  << seconds << " s";
    return job;
  }

  // Every note of a job that has ended, in order, one per line.
  static std::string Notes(Client& c, int64_t id) {
    v1::WatchJobRequest request;
    request.set_job_id(id);
    auto context = Ctx(kUserKey);
    auto reader = c.audit->WatchJob(context.get(), request);
    v1::WatchJobResponse response;
    std::string notes;
    while (reader->Read(&response)) {
      if (response.event().has_message()) notes += response.event().message() + "\n";
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << Describe(status);
    return notes;
  }

  // model/intervention/metric -> row; fails on a row stored twice.
  static std::map<std::string, v1::Result> Results(Client& c, int64_t id) {
    std::map<std::string, v1::Result> rows;
    v1::QueryResultsRequest request;
    request.mutable_filter()->set_job_id(id);
    request.set_page_size(1000);
    do {
      v1::QueryResultsResponse response;
      const grpc::Status status = c.audit->QueryResults(Ctx(kUserKey).get(), request, &response);
      EXPECT_TRUE(status.ok()) << Describe(status);
      if (!status.ok()) break;
      for (const v1::Result& r : response.results()) {
        const std::string key = r.model() + "/" + r.intervention() + "/" + r.metric();
        EXPECT_TRUE(rows.emplace(key, r).second) << "row stored twice: " << key;
      }
      request.set_page_token(response.next_page_token());
    } while (!request.page_token().empty());
    return rows;
  }

  // The NLL rows of a job: deterministic, unlike timings.
  static std::map<std::string, double> Nlls(const std::map<std::string, v1::Result>& rows) {
    std::map<std::string, double> out;
    for (const auto& [key, r] : rows) {
      if (r.metric() == "nll") out[key] = r.value();
    }
    return out;
  }

  // Stops the workers (each still running, exiting 0 on SIGTERM), then the
  // server (after the client's connection, which the drain would wait for).
  static void StopAll(const std::vector<Process*>& workers, std::unique_ptr<Client>* client,
                      ServerProcess* server) {
    for (Process* w : workers) {
      EXPECT_TRUE(w->Running()) << w->Stderr();
      w->Signal(SIGTERM);
      EXPECT_EQ(w->Wait(20), 0) << w->Stderr();
    }
    client->reset();
    server->Signal(SIGTERM);
    EXPECT_EQ(server->Wait(20), 0);
  }

  std::string db_;
};

}  // namespace fca::e2e::remote_worker

#endif  // FCA_TESTS_E2E_REMOTE_WORKER_FIXTURE_H_
