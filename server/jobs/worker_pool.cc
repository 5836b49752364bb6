#include "server/jobs/worker_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fca::jobs {

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Create(Coordinator* coordinator,
                                                               const Options& options) {
  if (options.devices.empty()) return absl::InvalidArgumentError("a worker pool needs a device");
  std::unique_ptr<WorkerPool> pool(new WorkerPool());
  for (size_t i = 0; i < options.devices.size(); ++i) {
    runtime::ModelRepository::Options repository = options.repository;
    repository.compute.device = options.devices[i];
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ModelRepository> models,
                         runtime::ModelRepository::Open(repository));
    runtime::Worker::Options worker = options.worker;
    worker.name = absl::StrCat(Coordinator::kLocalWorkerPrefix, i);
    pool->workers_.push_back(std::make_unique<runtime::Worker>(coordinator, models.get(), worker));
    pool->names_.push_back(worker.name);
    pool->repositories_.push_back(std::move(models));
  }
  for (const std::unique_ptr<runtime::Worker>& w : pool->workers_) {
    runtime::Worker* worker = w.get();
    coordinator->AddStopListener([worker](int64_t job_id) { worker->StopJob(job_id); });
    coordinator->AddWakeListener([worker] { worker->Wake(); });
  }
  return pool;
}

WorkerPool::~WorkerPool() { Stop(); }

size_t WorkerPool::Busy() const {
  size_t busy = 0;
  for (const std::unique_ptr<runtime::Worker>& w : workers_) busy += w->Busy() ? 1 : 0;
  return busy;
}

std::map<std::string, std::vector<std::string>> WorkerPool::LoadedModels() const {
  std::map<std::string, std::vector<std::string>> loaded;
  for (size_t i = 0; i < repositories_.size(); ++i) {
    for (const std::string& name : repositories_[i]->Names()) {
      if (repositories_[i]->IsLoaded(name)) loaded[names_[i]].push_back(name);
    }
  }
  return loaded;
}

void WorkerPool::Start() {
  for (const std::unique_ptr<runtime::Worker>& w : workers_) w->Start();
}

void WorkerPool::Stop() {
  // Interrupt every worker first, then join: the tasks stop in parallel.
  for (const std::unique_ptr<runtime::Worker>& w : workers_) w->RequestStop();
  for (const std::unique_ptr<runtime::Worker>& w : workers_) w->Stop();
}

}  // namespace fca::jobs
