// A complete core (store on ":memory:" or a file, model repository over a temporary
// folder of tiny models, event hub, coordinator, one worker, service) for tests of
// server/core and of the gRPC layer above it. No gRPC here.
#ifndef FCA_TESTS_CORE_CORE_ENV_H_
#define FCA_TESTS_CORE_CORE_ENV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/service.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/event_hub.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/worker.h"
#include "storage/store.h"

namespace fca::core::testing {

// Folders of the test repository (ModelRoot()).
inline constexpr char kGateA[] = "fg_a";          // featuregate, input-dependent gates
inline constexpr char kGateB[] = "fg_b";          // the same family, another seed
inline constexpr char kDense[] = "dense";         // the dense twin of fg_a
inline constexpr char kBroken[] = "broken";       // config.json is "{"
inline constexpr char kNoConfig[] = "no_config";  // a folder without config.json
inline constexpr char kHidden[] = ".hidden";      // config.json, but not a valid name

// The repository, written once per process into a temporary folder.
const std::string& ModelRoot();

// `n` random lower-case letters (deterministic for a seed).
std::string RandomText(size_t n, uint64_t seed);

// The texts CoreEnv::UploadEvalAndCalib uploads as "eval" (6 windows of
// 16) and "calib" (4 other windows).
std::string EvalText();
std::string CalibText();

// A small, fast spec: T = 16, 6 eval and 4 calib windows, batch 2,
// bootstrap 100, one timed repeat.
v1::AuditSpec SmallSpec(const std::vector<std::string>& models, const std::string& eval,
                        const std::string& calib);

// Coordinator and worker options for tests: poll quickly, never throttle
// progress.
struct RunOptions {
  jobs::Coordinator::Options coordinator;
  runtime::Worker::Options worker;
};
RunOptions FastRunOptions();

// Claims the oldest queued task as the server's own worker "local/0"
// would (a server that then "crashes" leaves it RUNNING).
absl::StatusOr<std::optional<storage::TaskClaim>> ClaimAsLocalWorker(storage::Store* store);
// What a restarted server's coordinator does first: tasks of its own
// workers go back to the queue (no attempt cap). Returns how many.
absl::StatusOr<int64_t> CrashRecovery(storage::Store* store);

// Callers used throughout the tests.
Caller Alice();
Caller Bob();
Caller Admin();

class CoreEnv {
 public:
  // `store`: the store's options; an empty path is ":memory:". The
  // coordinator checks weights against models() (as fca-server's does).
  explicit CoreEnv(ServiceLimits limits = {}, RunOptions options = FastRunOptions(),
                   storage::StoreOptions store = {});
  ~CoreEnv();

  storage::Store* store() { return store_.get(); }
  runtime::ModelRepository* models() { return models_.get(); }
  jobs::EventHub* hub() { return &hub_; }
  jobs::Coordinator* coordinator() { return coordinator_.get(); }
  // The env's worker (named "local/0"), on models().
  runtime::Worker* worker() { return worker_.get(); }
  // Starts the coordinator (crash recovery first) and the worker's thread.
  absl::Status Start();
  // Stops the worker (its task goes back to the queue) and the coordinator.
  // Idempotent; Start() may follow (a restart).
  void Stop();
  AuditServiceCore* core() { return core_.get(); }

  // Uploads `bytes` through DatasetUpload in chunks of at most 1 MiB, into
  // `project` ("": the caller's personal project).
  absl::StatusOr<v1::UploadDatasetResponse> Upload(const Caller& caller, const std::string& name,
                                                   const std::string& bytes,
                                                   v1::DatasetKind kind = v1::DATASET_KIND_TEXT,
                                                   const std::string& project = "");
  // Uploads "eval" (6 windows) and "calib" (4 other windows) for `caller`.
  absl::Status UploadEvalAndCalib(const Caller& caller);

  absl::StatusOr<v1::Job> Submit(const Caller& caller, const v1::AuditSpec& spec);
  // Runs the tasks of the oldest job with a queued task on the calling
  // thread, one after the other, settles the job and returns it as stored
  // afterwards. NOT_FOUND when nothing is queued.
  absl::StatusOr<v1::Job> RunNext();
  // Every WatchJob response after `after_seq` (the job must end).
  absl::StatusOr<std::vector<v1::WatchJobResponse>> Watch(const Caller& caller, int64_t job_id,
                                                          int64_t after_seq);
  absl::StatusOr<v1::Job> Get(const Caller& caller, int64_t job_id);

 private:
  // A fresh coordinator, worker and service core over the store.
  void MakeRunners(const ServiceLimits& limits);

  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<runtime::ModelRepository> models_;
  jobs::EventHub hub_;
  RunOptions options_;
  std::unique_ptr<jobs::Coordinator> coordinator_;
  std::unique_ptr<runtime::Worker> worker_;
  std::unique_ptr<AuditServiceCore> core_;
};

}  // namespace fca::core::testing

#endif  // FCA_TESTS_CORE_CORE_ENV_H_
