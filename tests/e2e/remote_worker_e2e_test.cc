// Remote workers end to end: the real fca-server (--workers=0) with real
// fca-worker processes on 127.0.0.1, over gRPC, on a real SQLite file:
// results equal to an in-process worker's, a worker killed with SIGKILL
// (its lease runs out, another worker finishes), a coordinator killed and
// restarted under a running worker (nothing lost), bad input on the
// worker protocol through raw stubs (each refused with its code; the server
// keeps serving), and workers with a stale copy of a model refusing its
// task without spending its attempts (a good worker runs it; with none, the
// job fails naming them), and GetQueue showing the models remote workers
// hold loaded until they stop calling.
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

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kUserKey[] = "alice-key-0123456789abcdef";
constexpr char kWorkerKey[] = "pool-worker-key-0123456789";
constexpr char kCarolKey[] = "carol-key-0123456789abcdef";  // a member of no project of alice's

std::string g_root;  // models/, other-models/, data/, keys, per-test databases

void InitModel(const std::string& dir, const std::vector<std::string>& flags) {
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

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& key) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

std::string Describe(const grpc::Status& s) {
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
    v1::UploadDatasetResponse response;
    auto writer = c.audit->UploadDataset(context.get(), &response);
    v1::UploadDatasetRequest part;
    part.mutable_header()->set_name(name);
    part.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
    part.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    ASSERT_TRUE(writer->Write(part));
    part.set_chunk(bytes);
    ASSERT_TRUE(writer->Write(part));
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
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

// (a) Two remote workers give the numbers an in-process worker gives.
TEST_F(RemoteWorkerE2ETest, RemoteWorkersMatchAnInProcessWorker) {
  const v1::AuditSpec spec = Spec({"fg-a", "fg-b"}, "eval");
  std::map<std::string, double> local;
  {
    auto server = StartServer({"--workers=1"});
    ASSERT_NE(server, nullptr);
    {
      Client c(server->address());
      Upload(c, "eval", "eval.txt");
      Upload(c, "calib", "calib.txt");
      const int64_t job = Submit(c, spec);
      ASSERT_EQ(WaitJob(c, job, 60).state(), v1::JOB_STATE_SUCCEEDED);
      local = Nlls(Results(c, job));
    }
    // (Its connection closed: the drain would wait for it.)
    server->Signal(SIGTERM);
    EXPECT_EQ(server->Wait(20), 0);
  }
  db_ += ".remote";
  auto server = StartServer({"--workers=0"});
  ASSERT_NE(server, nullptr);
  auto w1 = StartWorker(server->address(), "w1");
  auto w2 = StartWorker(server->address(), "w2");
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  const int64_t job = Submit(c, spec);
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("running on worker w"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("local/"), std::string::npos) << notes;
  // Each task's provenance came with FinishTask from the worker that ran
  // it, stored under the lease holder ("w1@<user>").
  ASSERT_EQ(done.tasks_size(), 2);
  for (const v1::JobTask& t : done.tasks()) {
    const v1::TaskProvenance& p = t.provenance();
    EXPECT_EQ(p.worker().rfind("w", 0), 0u) << p.worker();
    EXPECT_NE(p.worker().find('@'), std::string::npos) << p.worker();
    EXPECT_FALSE(p.host().empty());
    EXPECT_FALSE(p.engine_version().empty());
    EXPECT_FALSE(p.torch_version().empty());
    EXPECT_EQ(p.device(), "cpu");
    EXPECT_EQ(p.dtype(), "float32");
    EXPECT_GT(p.threads(), 0);
    EXPECT_EQ(p.weights_sha256().size(), 64u);
    EXPECT_GT(p.eval_windows(), 0);
    EXPECT_TRUE(p.has_finished_at());
  }
  const std::map<std::string, double> remote = Nlls(Results(c, job));
  ASSERT_GE(local.size(), 12u);
  ASSERT_EQ(remote.size(), local.size());
  for (const auto& [key, value] : local) {
    ASSERT_EQ(remote.count(key), 1u) << key;
    // Bitwise: the same engine on the same data, wherever it runs.
    EXPECT_EQ(std::memcmp(&remote.at(key), &value, sizeof(double)), 0)
        << key << ": " << remote.at(key) << " vs " << value;
  }
  for (auto* w : {w1.get(), w2.get()}) {
    EXPECT_TRUE(w->Running()) << w->Stderr();
    w->Signal(SIGTERM);
    EXPECT_EQ(w->Wait(20), 0) << w->Stderr();
  }
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (b) kill -9 of the worker running a task: its lease runs out, another
// worker claims the task and the job succeeds, every row once.
TEST_F(RemoteWorkerE2ETest, KilledWorkerLosesItsLeaseAndAnotherFinishes) {
  auto server = StartServer({"--workers=0", "--lease_seconds=2"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "long", "long.txt");
  Upload(c, "calib", "calib.txt");
  auto doomed = StartWorker(server->address(), "doomed");
  const int64_t job = Submit(c, Spec({"fg-wide"}, "long"));
  // The only worker holds the task once the job runs.
  WaitJob(c, job, 30, [](const v1::Job& j) { return j.state() != v1::JOB_STATE_QUEUED; });
  doomed->Signal(SIGKILL);
  doomed->Wait(10);
  auto rescuer = StartWorker(server->address(), "rescuer");
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("worker doomed@pool lost its lease"), std::string::npos) << notes;
  EXPECT_NE(notes.find("running on worker rescuer@pool (attempt 2)"), std::string::npos) << notes;
  const std::map<std::string, v1::Result> rows = Results(c, job);  // fails on a row twice
  EXPECT_GE(Nlls(rows).size(), 6u);
  rescuer->Signal(SIGTERM);
  EXPECT_EQ(rescuer->Wait(20), 0) << rescuer->Stderr();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (c) The coordinator killed and restarted (same database, same port) while
// a remote worker runs: the worker carries on, nothing is redone or lost.
TEST_F(RemoteWorkerE2ETest, CoordinatorRestartLosesNothing) {
  auto server = StartServer({"--workers=0", "--lease_seconds=10"});
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto c = std::make_unique<Client>(address);
  Upload(*c, "long", "long.txt");
  Upload(*c, "calib", "calib.txt");
  auto worker = StartWorker(address, "steady");
  const int64_t job = Submit(*c, Spec({"fg-wide", "fg-a"}, "long"));
  // Progress: the worker has its claim (not only the store) and audits.
  WaitJob(*c, job, 30, [](const v1::Job& j) { return j.progress() > 0; });
  server->Signal(SIGKILL);
  server->Wait(10);
  server = StartServer({"--workers=0", "--lease_seconds=10", "--listen=" + address});
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(server->address(), address);
  c = std::make_unique<Client>(address);
  const v1::Job done = WaitJob(*c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(*c, job);
  // Each task ran once: no lease was lost, nothing was queued again.
  EXPECT_EQ(notes.find("queued again"), std::string::npos) << notes << worker->Stderr();
  EXPECT_EQ(notes.find("attempt 2"), std::string::npos) << notes;
  const std::map<std::string, v1::Result> rows = Results(*c, job);
  // 2 models x 9 interventions (all but random_route, for routers only),
  // each once.
  EXPECT_EQ(Nlls(rows).size(), 18u);
  std::set<std::string> models;
  for (const auto& [key, r] : rows) models.insert(r.model());
  EXPECT_EQ(models, (std::set<std::string>{"fg-a", "fg-wide"}));
  EXPECT_TRUE(worker->Running()) << worker->Stderr();
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0) << worker->Stderr();
  c.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (d) Bad input on the worker protocol, each refused with its code; a
// worker whose weights differ refuses the task; the server keeps serving.
TEST_F(RemoteWorkerE2ETest, BadInputIsRefusedAndTheServerKeepsServing) {
  // A worker key in the store (the schema accepts the role).
  CommandResult created =
      e2e::Run({FCA_SERVER_BIN, "--db=" + db_, "--create_api_key=robot", "--role=worker"}, {}, 60);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string robot = created.out.substr(0, created.out.find('\n'));
  ASSERT_EQ(robot.size(), 64u) << created.out;

  auto server = StartServer({"--workers=0", "--lease_seconds=1"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");

  v1::RegisterWorkerRequest reg;
  reg.set_worker("raw");
  reg.set_device("cpu");
  v1::RegisterWorkerResponse reg_response;
  EXPECT_EQ(c.worker->RegisterWorker(Ctx("unknown-key-0123456789").get(), reg, &reg_response)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(c.worker->RegisterWorker(Ctx(kUserKey).get(), reg, &reg_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ClaimTaskRequest claim;
  claim.set_worker("raw");
  v1::ClaimTaskResponse claimed;
  EXPECT_EQ(c.worker->ClaimTask(Ctx(kUserKey).get(), claim, &claimed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A worker key reads no user's data.
  v1::ListJobsResponse jobs;
  EXPECT_EQ(c.audit->ListJobs(Ctx(robot).get(), v1::ListJobsRequest(), &jobs).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::QueryResultsRequest query;
  query.mutable_filter()->set_job_id(1);
  v1::QueryResultsResponse results;
  EXPECT_EQ(c.audit->QueryResults(Ctx(robot).get(), query, &results).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ListDatasetsResponse datasets;
  EXPECT_EQ(c.audit->ListDatasets(Ctx(kWorkerKey).get(), v1::ListDatasetsRequest(), &datasets)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Names that could pose as the server's own workers are refused.
  reg.set_worker("local/0");
  EXPECT_EQ(c.worker->RegisterWorker(Ctx(robot).get(), reg, &reg_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  reg.set_worker("raw");
  grpc::Status status = c.worker->RegisterWorker(Ctx(robot).get(), reg, &reg_response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(reg_response.holder(), "raw@robot");
  EXPECT_EQ(reg_response.lease_ms(), 1000);

  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  status = c.worker->ClaimTask(Ctx(robot).get(), claim, &claimed);
  ASSERT_TRUE(status.ok()) << Describe(status);
  ASSERT_TRUE(claimed.has_assignment());
  const v1::TaskAssignment& task = claimed.assignment();
  EXPECT_EQ(task.job_id(), job);
  EXPECT_EQ(task.model(), "fg-a");
  EXPECT_EQ(task.weights_sha256().size(), 64u);
  EXPECT_EQ(task.spec().models(0), "fg-a");

  v1::ReportRowsRequest rows;
  rows.set_worker("raw");
  *rows.mutable_lease() = task.lease();
  rows.set_model("fg-a");
  rows.set_weights_sha256(task.weights_sha256());
  v1::Result* row = rows.add_rows();
  row->set_intervention("correct");
  row->set_metric("nll");
  row->set_value(1.5);
  row->set_defined(true);
  row->set_n(1);
  v1::ReportRowsResponse rows_response;
  // A task it does not hold, another worker's name, another key's worker.
  v1::ReportRowsRequest other = rows;
  other.mutable_lease()->set_task_id(task.lease().task_id() + 1000);
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  other = rows;
  other.set_worker("someone-else");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(c.worker->ReportRows(Ctx(kWorkerKey).get(), rows, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Malformed reports on a held lease.
  other = rows;
  other.set_model("fg-b");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  other = rows;
  other.mutable_rows(0)->set_model("dense");
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  other = rows;
  other.set_weights_sha256(std::string(64, '0'));
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), other, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::ReportProgressRequest progress;
  progress.set_worker("raw");
  *progress.mutable_lease() = task.lease();
  progress.mutable_progress()->set_fraction(std::nan(""));
  v1::ReportProgressResponse progress_response;
  EXPECT_EQ(c.worker->ReportProgress(Ctx(robot).get(), progress, &progress_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::FinishTaskRequest finish;
  finish.set_worker("raw");
  *finish.mutable_lease() = task.lease();
  finish.mutable_outcome()->set_code(99);
  v1::FinishTaskResponse finish_response;
  EXPECT_EQ(c.worker->FinishTask(Ctx(robot).get(), finish, &finish_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    // An entry over the limit, then chunks past the announced size.
    for (const int64_t announced : {int64_t{2} << 30, int64_t{4}}) {
      auto context = Ctx(robot);
      v1::PutCoefficientsResponse put_response;
      auto writer = c.worker->PutCoefficients(context.get(), &put_response);
      v1::PutCoefficientsRequest put;
      v1::PutCoefficientsHeader* header = put.mutable_header();
      header->set_worker("raw");
      *header->mutable_lease() = task.lease();
      header->mutable_key()->set_weights_sha256(task.weights_sha256());
      header->mutable_key()->set_window_hash("w");
      header->mutable_key()->set_dtype("float32");
      header->mutable_key()->set_device("cpu");
      header->set_size_bytes(announced);
      writer->Write(put);
      put.set_chunk(std::string(8, 'x'));
      writer->Write(put);
      writer->WritesDone();
      EXPECT_EQ(writer->Finish().error_code(), announced > 4 ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                                             : grpc::StatusCode::INVALID_ARGUMENT);
    }
  }
  // The lease works meanwhile; then it runs out (1 s, never renewed), and
  // the sweep queues the task again.
  status = c.worker->ReportRows(Ctx(robot).get(), rows, &rows_response);
  EXPECT_TRUE(status.ok()) << Describe(status);
  v1::GetCoefficientsRequest probe;  // checks the lease, changes nothing
  probe.set_worker("raw");
  *probe.mutable_lease() = task.lease();
  *probe.mutable_key() = v1::CoefficientKey();
  probe.mutable_key()->set_weights_sha256(task.weights_sha256());
  probe.mutable_key()->set_window_hash("w");
  probe.mutable_key()->set_dtype("float32");
  probe.mutable_key()->set_device("cpu");
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto context = Ctx(robot);
    auto reader = c.worker->GetCoefficients(context.get(), probe);
    v1::GetCoefficientsResponse part;
    while (reader->Read(&part)) {
    }
    status = reader->Finish();
  } while (status.ok() && Clock::now() < deadline);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(status);
  v1::RenewLeaseRequest renew;
  renew.set_worker("raw");
  *renew.mutable_lease() = task.lease();
  v1::RenewLeaseResponse renew_response;
  EXPECT_EQ(c.worker->RenewLease(Ctx(robot).get(), renew, &renew_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(c.worker->ReportRows(Ctx(robot).get(), rows, &rows_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  finish.mutable_outcome()->set_code(0);
  EXPECT_EQ(c.worker->FinishTask(Ctx(robot).get(), finish, &finish_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::ReadDatasetRequest read;
  read.set_worker("raw");
  *read.mutable_lease() = task.lease();
  {
    auto context = Ctx(robot);
    auto reader = c.worker->ReadDataset(context.get(), read);
    v1::ReadDatasetResponse part;
    while (reader->Read(&part)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }

  // A real worker whose fg-a differs refuses the (queued again) task; it is
  // the only live worker (raw's last claim is older than a lease), so the
  // task fails.
  auto stranger = StartWorker(server->address(), "stranger", "other-models");
  const v1::Job failed = WaitJob(c, job, 60);
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed.error().find("differ"), std::string::npos) << failed.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("worker stranger@pool refused it"), std::string::npos) << notes;
  EXPECT_NE(notes.find("differ from the coordinator's"), std::string::npos) << notes;
  // The stored row of the expired lease stays the only one.
  EXPECT_EQ(Results(c, job).size(), 1u);

  // A model the worker cannot load fails that task, not the worker.
  const int64_t missing = Submit(c, Spec({"fg-b"}, "eval"));
  const v1::Job missing_done = WaitJob(c, missing, 60);
  EXPECT_EQ(missing_done.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(missing_done.error().find("fg-b"), std::string::npos) << missing_done.error();
  EXPECT_TRUE(stranger->Running()) << stranger->Stderr();

  // The server still serves.
  v1::ListModelsResponse models;
  status = c.audit->ListModels(Ctx(kUserKey).get(), v1::ListModelsRequest(), &models);
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_GE(models.models_size(), 4);
  stranger->Signal(SIGTERM);
  EXPECT_EQ(stranger->Wait(20), 0) << stranger->Stderr();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (e) Issue 22: a worker whose fg-a folder holds other weights refuses the
// task without spending its attempts and is backed off, so the good worker,
// busy with another job meanwhile, runs it once free.
TEST_F(RemoteWorkerE2ETest, StaleWorkerRefusesAndAGoodWorkerRunsTheTask) {
  auto server = StartServer({"--workers=0"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "long", "long.txt");
  Upload(c, "calib", "calib.txt");
  auto good = StartWorker(server->address(), "good");
  const int64_t busy = Submit(c, Spec({"fg-wide"}, "long"));
  WaitJob(c, busy, 30, [](const v1::Job& j) { return j.state() != v1::JOB_STATE_QUEUED; });
  // Only the stale worker is idle when the job comes: it claims the task
  // first and refuses it, again and again before the fix.
  auto stale = StartWorker(server->address(), "stale", "other-models");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job done = WaitJob(c, job, 120);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error() << "\n" << Notes(c, job);
  EXPECT_EQ(WaitJob(c, busy, 60).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(done.tasks_size(), 1);
  const v1::TaskProvenance& p = done.tasks(0).provenance();
  EXPECT_EQ(p.worker(), "good@pool");
  EXPECT_EQ(p.attempt(), 1);  // the refusals spent none
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("model fg-a: worker stale@pool refused it: the weights of model 'fg-a' "
                       "on this worker"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("queued again for the other workers"), std::string::npos) << notes;
  EXPECT_GE(Nlls(Results(c, job)).size(), 8u);
  StopAll({good.get(), stale.get()}, &client, server.get());
}

// (f) Only stale workers: once each has refused, the job fails naming them
// and their reasons.
TEST_F(RemoteWorkerE2ETest, OnlyStaleWorkersFailTheJobNamingThem) {
  auto server = StartServer({"--workers=0"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  auto stale1 = StartWorker(server->address(), "stale1", "other-models");
  auto stale2 = StartWorker(server->address(), "stale2", "other-models");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job failed = WaitJob(c, job, 60);
  ASSERT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  const std::string& error = failed.error();
  EXPECT_NE(error.find("no worker can run model fg-a: every live worker refused it: "),
            std::string::npos)
      << error;
  for (const char* name :
       {"stale1@pool (the weights of model 'fg-a'", "stale2@pool (the weights of model 'fg-a'"}) {
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
  EXPECT_TRUE(Results(c, job).empty());
  StopAll({stale1.get(), stale2.get()}, &client, server.get());
}

// GetQueue as `key` sees it; fails the test on an error.
v1::GetQueueResponse Queue(Client& c, const std::string& key) {
  v1::GetQueueResponse response;
  const grpc::Status status = c.audit->GetQueue(Ctx(key).get(), v1::GetQueueRequest(), &response);
  EXPECT_TRUE(status.ok()) << Describe(status);
  return response;
}

// model -> loaded_on, for the models some worker holds.
std::map<std::string, std::vector<std::string>> LoadedOn(const v1::GetQueueResponse& q) {
  std::map<std::string, std::vector<std::string>> out;
  for (const v1::ModelQueue& m : q.models()) {
    if (!m.loaded_on().empty()) out[m.model()] = {m.loaded_on().begin(), m.loaded_on().end()};
  }
  return out;
}

// Polls GetQueue as `key` until `done` or `seconds` pass; returns the last.
v1::GetQueueResponse WaitQueue(Client& c, const std::string& key, int seconds,
                               const std::function<bool(const v1::GetQueueResponse&)>& done) {
  v1::GetQueueResponse q;
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    q = Queue(c, key);
    if (done(q)) return q;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "GetQueue still " << q.ShortDebugString() << " after " << seconds << " s";
  return q;
}

// (g) A remote worker that ran a task holds its model loaded and says so
// with every poll: GetQueue's loaded_on names it ("<worker>@<key user>") to
// every caller, while a non-member learns no project, owner or job through
// the rest. Names the server does not hold show nothing; an overlong list
// is refused. A lease after a worker's last call it is forgotten.
TEST_F(RemoteWorkerE2ETest, GetQueueShowsTheModelsRemoteWorkersHoldLoaded) {
  auto server = StartServer({"--workers=0", "--lease_seconds=2"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  EXPECT_TRUE(LoadedOn(Queue(c, kUserKey)).empty()) << "nothing is loaded before a task ran";

  auto holder = StartWorker(server->address(), "holder");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  using Loaded = std::map<std::string, std::vector<std::string>>;
  const Loaded after_task = {{"fg-a", {"holder@pool"}}};
  // Its next poll after the task reports the model.
  v1::GetQueueResponse q = WaitQueue(
      c, kUserKey, 30, [&](const v1::GetQueueResponse& r) { return LoadedOn(r) == after_task; });
  EXPECT_EQ(LoadedOn(q), after_task);

  // A raw worker, polling like fca-worker, reports names the server does
  // not hold (a model it lacks, names no folder could have) next to one it
  // does: only that one is shown, once, next to the other worker's.
  v1::ClaimTaskRequest raw;
  raw.set_worker("raw");
  raw.set_task_id(1000000);  // no such task: nothing is claimed
  for (const std::string& name :
       {std::string("no-such-model"), std::string("../models/fg-a"), std::string(5000, 'x'),
        std::string("fg-b"), std::string("fg-b")}) {
    raw.add_loaded_models(name);
  }
  const auto report = [&] {
    v1::ClaimTaskResponse claimed;
    const grpc::Status status = c.worker->ClaimTask(Ctx(kWorkerKey).get(), raw, &claimed);
    EXPECT_TRUE(status.ok()) << Describe(status);
    EXPECT_FALSE(claimed.has_assignment());
  };
  const Loaded both = {{"fg-a", {"holder@pool"}}, {"fg-b", {"raw@pool"}}};
  q = WaitQueue(c, kUserKey, 30, [&](const v1::GetQueueResponse& r) {
    if (LoadedOn(r) == both) return true;
    report();
    return false;
  });
  EXPECT_EQ(LoadedOn(q), both);
  // More names than any worker sends: refused, the server serves on.
  v1::ClaimTaskRequest flood;
  flood.set_worker("flood");
  for (int i = 0; i < 65; ++i) flood.add_loaded_models("fg-a");
  v1::ClaimTaskResponse claimed;
  const grpc::Status refused = c.worker->ClaimTask(Ctx(kWorkerKey).get(), flood, &claimed);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(refused);
  EXPECT_NE(refused.error_message().find("at most 64"), std::string::npos) << Describe(refused);
  holder->Signal(SIGTERM);
  EXPECT_EQ(holder->Wait(20), 0) << holder->Stderr();

  // alice's job waits in her personal project (no worker runs now): carol,
  // no member of it, sees the loaded model but no project name, owner, job
  // or the job's model; alice sees her job and its model.
  const int64_t waiting = Submit(c, Spec({"fg-wide"}, "eval"));
  const v1::GetQueueResponse seen = WaitQueue(c, kCarolKey, 30, [&](const v1::GetQueueResponse& r) {
    if (LoadedOn(r).count("fg-b") > 0) return true;
    report();
    return false;
  });
  EXPECT_EQ(LoadedOn(seen)["fg-b"], std::vector<std::string>{"raw@pool"})
      << seen.ShortDebugString();
  EXPECT_EQ(seen.jobs_size(), 0);
  ASSERT_EQ(seen.projects_size(), 1) << seen.ShortDebugString();
  EXPECT_EQ(seen.projects(0).project(), "");
  EXPECT_EQ(seen.projects(0).queued_jobs(), 1);
  for (const v1::ModelQueue& m : seen.models()) EXPECT_NE(m.model(), "fg-wide");
  EXPECT_EQ(seen.ShortDebugString().find("alice"), std::string::npos) << seen.ShortDebugString();
  q = Queue(c, kUserKey);
  ASSERT_EQ(q.jobs_size(), 1);
  EXPECT_EQ(q.jobs(0).job_id(), waiting);
  EXPECT_EQ(q.jobs(0).position(), 1);

  // Neither worker calls again: a lease (2 s) later both are forgotten.
  q = WaitQueue(c, kUserKey, 30, [](const v1::GetQueueResponse& r) { return LoadedOn(r).empty(); });
  EXPECT_TRUE(LoadedOn(q).empty()) << q.ShortDebugString();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

}  // namespace
}  // namespace fca::e2e
