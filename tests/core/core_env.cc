#include "tests/core/core_env.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/jobs/model_registry.h"
#include "tests/testing/test_models.h"

namespace fca::core::testing {
namespace {

namespace fs = std::filesystem;

absl::Status WriteModel(const std::string& dir, const std::string& family, uint64_t seed,
                        double controller_out_std) {
  engine::InitOptions init;
  init.seed = seed;
  init.controller_out_std = controller_out_std;
  return engine::WriteRandomTransformerModelDir(dir, engine::testing::TinyConfig(family), init);
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string BuildModelRoot() {
  const fs::path root = engine::testing::TempDir("core_repo");
  absl::Status st = WriteModel((root / kGateA).string(), "featuregate", 11, 1.0);
  if (st.ok()) st = WriteModel((root / kGateB).string(), "featuregate", 12, 1.0);
  if (st.ok()) st = WriteModel((root / kDense).string(), "dense", 11, 0.0);
  if (!st.ok()) {
    std::fprintf(stderr, "cannot write the test models: %s\n", st.ToString().c_str());
    std::abort();
  }
  fs::create_directories(root / kBroken);
  WriteFile(root / kBroken / "config.json", "{");
  fs::create_directories(root / kNoConfig);
  WriteFile(root / kNoConfig / "README", "not a model");
  fs::create_directories(root / kHidden);
  WriteFile(root / kHidden / "config.json", "{}");
  fs::create_directories(root / "bad name");
  WriteFile(root / "bad name" / "config.json", "{}");
  WriteFile(root / "stray_file", "a file, not a folder");
  return root.string();
}

Caller MakeCaller(const std::string& user, bool admin) {
  Caller c;
  c.user = user;
  c.admin = admin;
  return c;
}

}  // namespace

const std::string& ModelRoot() {
  static const std::string* root = new std::string(BuildModelRoot());
  return *root;
}

std::string RandomText(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + rng.Uniform(26)));
  return s;
}

std::string EvalText() { return RandomText(size_t{16} * 6, 1); }
std::string CalibText() { return RandomText(size_t{16} * 4, 2); }

v1::AuditSpec SmallSpec(const std::vector<std::string>& models, const std::string& eval,
                        const std::string& calib) {
  v1::AuditSpec spec;
  for (const std::string& m : models) spec.add_models(m);
  spec.set_eval_dataset(eval);
  spec.set_calib_dataset(calib);
  spec.set_window_length(16);
  spec.set_max_eval_windows(6);
  spec.set_max_calib_windows(4);
  spec.set_batch_size(2);
  spec.set_seed(7);
  spec.set_bootstrap_resamples(100);
  spec.set_timing_repeats(1);
  return spec;
}

RunOptions FastRunOptions() {
  RunOptions o;
  o.coordinator.sweep_interval = std::chrono::milliseconds(10);
  o.coordinator.progress_interval = std::chrono::milliseconds(0);
  o.worker.name = std::string(jobs::Coordinator::kLocalWorkerPrefix) + "0";
  o.worker.poll_interval = std::chrono::milliseconds(10);
  o.worker.progress_interval = std::chrono::milliseconds(0);
  o.worker.heartbeat_interval = std::chrono::milliseconds(20);
  return o;
}

absl::StatusOr<std::optional<storage::TaskClaim>> ClaimAsLocalWorker(storage::Store* store) {
  storage::ClaimRequest request;
  request.worker = std::string(jobs::Coordinator::kLocalWorkerPrefix) + "0";
  request.lease_us = int64_t{3600} * 1000 * 1000;
  return store->ClaimTask(request);
}

absl::StatusOr<int64_t> CrashRecovery(storage::Store* store) {
  FCA_ASSIGN_OR_RETURN(storage::ExpiredTasks lost,
                       store->ExpireLeases(0, jobs::Coordinator::kLocalWorkerPrefix, "crash"));
  return static_cast<int64_t>(lost.requeued.size());
}

Caller Alice() { return MakeCaller("alice", false); }
Caller Bob() { return MakeCaller("bob", false); }
Caller Admin() { return MakeCaller("root", true); }

CoreEnv::CoreEnv(ServiceLimits limits, RunOptions options, storage::StoreOptions store_options) {
  if (store_options.path.empty()) store_options.path = ":memory:";
  auto store = storage::Store::Open(store_options);
  if (!store.ok()) std::abort();
  store_ = std::move(*store);
  runtime::ModelRepository::Options repo_options;
  repo_options.root = ModelRoot();
  repo_options.on_load = jobs::RecordLoadsIn(store_.get());
  auto models = runtime::ModelRepository::Open(repo_options);
  if (!models.ok()) std::abort();
  models_ = std::move(*models);
  options_ = std::move(options);
  if (options_.coordinator.models == nullptr) options_.coordinator.models = models_.get();
  MakeRunners(limits);
}

void CoreEnv::MakeRunners(const ServiceLimits& limits) {
  coordinator_ = std::make_unique<jobs::Coordinator>(store_.get(), &hub_, options_.coordinator);
  worker_ = std::make_unique<runtime::Worker>(coordinator_.get(), models_.get(), options_.worker);
  runtime::Worker* worker = worker_.get();
  coordinator_->AddStopListener([worker](int64_t job_id) { worker->StopJob(job_id); });
  coordinator_->AddWakeListener([worker] { worker->Wake(); });
  core_ = std::make_unique<AuditServiceCore>(store_.get(), models_.get(), coordinator_.get(), &hub_,
                                             limits);
}

CoreEnv::~CoreEnv() {
  hub_.Shutdown();
  Stop();
}

absl::Status CoreEnv::Start() {
  FCA_RETURN_IF_ERROR(coordinator_->Start());
  worker_->Start();
  return absl::OkStatus();
}

void CoreEnv::Stop() {
  worker_->Stop();
  coordinator_->Stop();
  // A stopped worker or coordinator cannot start again: fresh ones, as a
  // restarted server would have.
  MakeRunners(ServiceLimits(core_->limits()));
}

absl::StatusOr<v1::UploadDatasetResponse> CoreEnv::Upload(const Caller& caller,
                                                          const std::string& name,
                                                          const std::string& bytes,
                                                          v1::DatasetKind kind,
                                                          const std::string& project) {
  DatasetUpload upload(caller, store_.get(), core_->limits());
  v1::UploadDatasetHeader header;
  header.set_name(name);
  header.set_kind(kind);
  header.set_size_bytes(static_cast<int64_t>(bytes.size()));
  header.set_project(project);
  FCA_RETURN_IF_ERROR(upload.Start(header));
  constexpr size_t kChunk = 1 << 20;
  for (size_t off = 0; off < bytes.size(); off += kChunk) {
    FCA_RETURN_IF_ERROR(upload.Append(bytes.substr(off, kChunk)));
  }
  return upload.Finish();
}

absl::Status CoreEnv::UploadEvalAndCalib(const Caller& caller) {
  FCA_RETURN_IF_ERROR(Upload(caller, "eval", EvalText()).status());
  return Upload(caller, "calib", CalibText()).status();
}

absl::StatusOr<v1::Job> CoreEnv::Submit(const Caller& caller, const v1::AuditSpec& spec) {
  v1::SubmitAuditRequest request;
  *request.mutable_spec() = spec;
  FCA_ASSIGN_OR_RETURN(v1::SubmitAuditResponse response, core_->SubmitAudit(caller, request));
  return response.job();
}

absl::StatusOr<v1::Job> CoreEnv::RunNext() {
  FCA_ASSIGN_OR_RETURN(std::vector<storage::TaskRecord> queued,
                       store_->ListTasksInState(storage::JobState::kQueued, 1));
  if (queued.empty()) return absl::NotFoundError("no queued job");
  const int64_t job_id = queued[0].job_id;
  FCA_ASSIGN_OR_RETURN(std::vector<storage::TaskRecord> tasks, store_->ListTasks(job_id));
  for (const storage::TaskRecord& task : tasks) {
    if (task.state != storage::JobState::kQueued) continue;
    FCA_RETURN_IF_ERROR(worker_->RunOne(task.id).status());
  }
  coordinator_->SweepOnce();
  return Get(Admin(), job_id);
}

absl::StatusOr<std::vector<v1::WatchJobResponse>> CoreEnv::Watch(const Caller& caller,
                                                                 int64_t job_id,
                                                                 int64_t after_seq) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  std::vector<v1::WatchJobResponse> out;
  // A watch that never ends fails the test instead of hanging it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  FCA_RETURN_IF_ERROR(core_->WatchJob(
      caller, request,
      [&](const v1::WatchJobResponse& r) {
        out.push_back(r);
        return true;
      },
      [&] { return std::chrono::steady_clock::now() > deadline; }));
  return out;
}

absl::StatusOr<v1::Job> CoreEnv::Get(const Caller& caller, int64_t job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  FCA_ASSIGN_OR_RETURN(v1::GetJobResponse response, core_->GetJob(caller, request));
  return response.job();
}

}  // namespace fca::core::testing
