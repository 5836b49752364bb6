// The server's own workers (server/runtime/worker.h) as threads of its
// coordinator.
#ifndef FCA_SERVER_JOBS_WORKER_POOL_H_
#define FCA_SERVER_JOBS_WORKER_POOL_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jobs/coordinator.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/worker.h"

namespace fca::jobs {

// The server's own workers: one per device, each a thread with its own
// model repository (so its own copy of the models it runs and its own
// memory budget), claiming from the coordinator. Cancels and submissions
// reach them at once through the coordinator's listeners.
class WorkerPool {
 public:
  struct Options {
    // One worker per entry ("cpu", "cuda:0", ...).
    std::vector<std::string> devices;
    // Repository options of every worker; compute.device is each worker's.
    runtime::ModelRepository::Options repository;
    runtime::Worker::Options worker;  // name: "<kLocalWorkerPrefix><i>"
  };
  // FAILED_PRECONDITION when a repository cannot open its folder;
  // INVALID_ARGUMENT for no devices.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<WorkerPool>> Create(Coordinator* coordinator,
                                                                          const Options& options);
  ~WorkerPool();  // Stop()

  void Start();
  // Interrupts running tasks (they go back to the queue) and joins.
  void Stop();
  size_t size() const { return workers_.size(); }
  // How many of them run a task now.
  size_t Busy() const;
  // The models each worker holds in memory now, by worker name ("local/0");
  // a worker holding none is left out.
  std::map<std::string, std::vector<std::string>> LoadedModels() const;

 private:
  WorkerPool() = default;
  std::vector<std::unique_ptr<runtime::ModelRepository>> repositories_;
  std::vector<std::unique_ptr<runtime::Worker>> workers_;
  std::vector<std::string> names_;  // of workers_
};

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_WORKER_POOL_H_
