// The worker protocol: what a worker asks of the coordinator while it runs
// the tasks of jobs. The coordinator implements it over the store
// (Coordinator, for its own threads); fca-worker implements it over gRPC
// (grpc_server::RemoteBroker, for processes on other machines). Workers see
// only this interface, so a task runs the same wherever it runs.
//
// Every call after Claim names the lease. Once a lease is lost (it ran out
// and the task was claimed again, or the task ended) every call with it is
// FAILED_PRECONDITION, and the worker drops the task: what it would report
// belongs to the task's new holder.
#ifndef FCA_SERVER_RUNTIME_TASK_BROKER_H_
#define FCA_SERVER_RUNTIME_TASK_BROKER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/audit/auditor.h"
#include "server/runtime/task_spec.h"

namespace fca::runtime {

// The most model names a worker reports holding loaded in one ClaimTask or
// RenewLease (worker_service.proto loaded_models): fca-worker sends at most
// this many, the coordinator refuses a longer list (INVALID_ARGUMENT).
inline constexpr int kMaxLoadedModels = 64;

struct Lease {
  int64_t task_id = 0;
  int64_t lease_seq = 0;
};

// A claimed task: the audit of one model of a job.
struct TaskAssignment {
  Lease lease;
  int64_t job_id = 0;
  int index = 0;       // the model's position in the job
  int task_count = 0;  // models in the job
  int attempt = 0;     // 1 for the first claim
  std::string model;
  v1::AuditSpec spec;  // the job's normalized spec, parsed once
  // The coordinator's SHA-256 of the model's (and the dense twin's) weight
  // files; empty when it did not check (in-process workers share its
  // folder). A worker whose loaded weights differ refuses the task.
  std::string weights_sha256;
  std::string dense_twin_weights_sha256;
  // Renew the lease well before this runs out.
  std::chrono::milliseconds lease_duration{0};
};

class TaskBroker {
 public:
  virtual ~TaskBroker() = default;

  // Claims a task for `worker`: the oldest claimable one (task_id 0) or
  // exactly `task_id`. nullopt when there is none.
  [[nodiscard]] virtual absl::StatusOr<std::optional<TaskAssignment>> Claim(
      const std::string& worker, int64_t task_id) = 0;
  // Extends the lease. Returns true when the task should stop (its job was
  // cancelled, or another of its tasks failed).
  [[nodiscard]] virtual absl::StatusOr<bool> Renew(const Lease& lease) = 0;
  // Progress of the task's audit (model_index/model_count are the task's:
  // 0 of 1); the coordinator turns it into the job's progress.
  [[nodiscard]] virtual absl::Status ReportProgress(const Lease& lease,
                                                    const engine::AuditProgress& p) = 0;
  [[nodiscard]] virtual absl::Status ReportNote(const Lease& lease, const std::string& text) = 0;
  // Result rows of one model (the task's, or the dense twin's), stored once:
  // rows already stored for the job are skipped.
  [[nodiscard]] virtual absl::Status ReportRows(const Lease& lease, const std::string& model,
                                                const std::string& weights_sha256,
                                                const std::vector<engine::ResultRow>& rows) = 0;
  // Ends the task: OK -> SUCCEEDED, CANCELLED -> CANCELLED, else FAILED
  // with the status as its reason. `provenance` is what the task ran on
  // (docs/fca.md "Reproducibility"), stored with its end; its `worker` is
  // replaced by the lease holder. An empty one stores nothing.
  [[nodiscard]] virtual absl::Status Finish(const Lease& lease, const absl::Status& outcome,
                                            const v1::TaskProvenance& provenance) = 0;
  // Gives the task back to the queue with `reason`: the worker is shutting
  // down (`refund`: the claim does not count against the task's attempts)
  // or lost it (it does).
  [[nodiscard]] virtual absl::Status Release(const Lease& lease, const absl::Status& reason,
                                             bool refund) = 0;
  // The worker cannot run the task because of its own state (`reason`: its
  // weights differ, it lacks the model, out of memory), not because of the
  // task: no attempt is counted, the refusal is recorded in the job's
  // events, and the task goes to other workers; this worker is not offered
  // it again for a back-off. Once every live worker has refused it, the
  // task fails naming them.
  [[nodiscard]] virtual absl::Status Refuse(const Lease& lease, const absl::Status& reason) = 0;
  // The job's evaluation (or calibration) dataset.
  [[nodiscard]] virtual absl::StatusOr<DatasetBytes> ReadDataset(const Lease& lease,
                                                                 bool calibration) = 0;
  // The job's project's coefficient cache (the worker never names it).
  // A failed read is a miss, a failed write a later miss; both are logged by
  // the broker.
  virtual std::optional<std::string> GetCoefficients(const Lease& lease,
                                                     const engine::CoefficientCacheKey& key) = 0;
  virtual void PutCoefficients(const Lease& lease, const engine::CoefficientCacheKey& key,
                               const std::string& bytes) = 0;
};

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_TASK_BROKER_H_
