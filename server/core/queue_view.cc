#include "server/core/queue_view.h"

#include <optional>
#include <set>
#include <utility>

#include "common/status_macros.h"
#include "server/jobs/mapping.h"

namespace fca::core {
namespace {

// One queued or running job, from its active tasks.
struct ActiveJob {
  int64_t id = 0;
  std::string project;
  std::string owner;
  storage::JobState state = storage::JobState::kQueued;
  bool cancel_requested = false;
  int64_t queued_tasks = 0;
  int64_t running_tasks = 0;
};

// Tasks come by job: consecutive tasks of one job make one entry.
std::vector<ActiveJob> Jobs(const std::vector<storage::ActiveTask>& tasks) {
  std::vector<ActiveJob> jobs;
  for (const storage::ActiveTask& task : tasks) {
    if (jobs.empty() || jobs.back().id != task.job_id) {
      jobs.push_back(
          {task.job_id, task.job_project, task.job_owner, task.job_state, task.cancel_requested});
    }
    const bool queued = task.state == storage::JobState::kQueued;
    (queued ? jobs.back().queued_tasks : jobs.back().running_tasks) += 1;
  }
  return jobs;
}

void AddTo(const ActiveJob& job, v1::ProjectQueue* row) {
  const bool queued = job.state == storage::JobState::kQueued;
  row->set_queued_jobs(row->queued_jobs() + (queued ? 1 : 0));
  row->set_running_jobs(row->running_jobs() + (queued ? 0 : 1));
  row->set_queued_tasks(row->queued_tasks() + job.queued_tasks);
  row->set_running_tasks(row->running_tasks() + job.running_tasks);
}

// The projects whose rows the caller sees by name; nullopt: every one.
absl::StatusOr<std::optional<std::set<std::string>>> SeenProjects(const Caller& caller,
                                                                  storage::Store* store) {
  if (caller.admin) return std::optional<std::set<std::string>>();
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::ProjectRecord> projects,
                       store->ListProjects(caller.user));
  std::set<std::string> names;
  for (const storage::ProjectRecord& p : projects) names.insert(p.name);
  return std::optional<std::set<std::string>>(std::move(names));
}

// Per model: the tasks of seen projects, the workers running them, and the
// workers holding the model loaded (shown to every caller: a loaded model
// names no project, owner or job).
void AddModels(const std::vector<storage::ActiveTask>& tasks,
               const std::function<bool(const std::string&)>& seen, const LoadedModels& loaded,
               v1::GetQueueResponse* response) {
  std::map<std::string, v1::ModelQueue> models;
  std::map<std::string, std::set<std::string>> running_on;
  std::map<std::string, std::set<std::string>> loaded_on;
  for (const storage::ActiveTask& task : tasks) {
    if (!seen(task.job_project)) continue;
    v1::ModelQueue& m = models[task.model];
    if (task.state == storage::JobState::kQueued) {
      m.set_queued_tasks(m.queued_tasks() + 1);
    } else {
      m.set_running_tasks(m.running_tasks() + 1);
      if (!task.worker.empty()) running_on[task.model].insert(task.worker);
    }
  }
  if (loaded) {
    for (const auto& [worker, names] : loaded()) {
      for (const std::string& name : names) {
        models[name];  // a row even without tasks
        loaded_on[name].insert(worker);
      }
    }
  }
  for (auto& [name, m] : models) {
    m.set_model(name);
    for (const std::string& worker : loaded_on[name]) m.add_loaded_on(worker);
    for (const std::string& worker : running_on[name]) m.add_running_on(worker);
    *response->add_models() = std::move(m);
  }
}

}  // namespace

absl::StatusOr<v1::GetQueueResponse> QueueView(const Caller& caller, storage::Store* store,
                                               const LoadedModels& loaded) {
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::ActiveTask> tasks, store->ListActiveTasks());
  FCA_ASSIGN_OR_RETURN(const std::optional<std::set<std::string>> seen_projects,
                       SeenProjects(caller, store));
  const auto seen = [&](const std::string& project) {
    return !seen_projects.has_value() || seen_projects->count(project) > 0;
  };
  v1::GetQueueResponse response;
  AddModels(tasks, seen, loaded, &response);

  std::map<std::string, v1::ProjectQueue> named;
  v1::ProjectQueue others;
  v1::ProjectQueue totals;
  // Workers claim the oldest job's waiting tasks first (Store::ClaimTask),
  // never those of a job whose cancel was requested: a job's place is one
  // more than the older jobs with claimable tasks.
  int64_t jobs_ahead = 0;
  int64_t tasks_ahead = 0;
  for (const ActiveJob& job : Jobs(tasks)) {
    AddTo(job, seen(job.project) ? &named[job.project] : &others);
    AddTo(job, &totals);
    const int64_t claimable = job.cancel_requested ? 0 : job.queued_tasks;
    if (caller.admin || job.owner == caller.user) {
      v1::QueuedJob* mine = response.add_jobs();
      mine->set_job_id(job.id);
      mine->set_project(job.project);
      mine->set_owner(job.owner);
      mine->set_state(jobs::ToProto(job.state));
      mine->set_position(claimable > 0 ? jobs_ahead + 1 : 0);
      mine->set_tasks_ahead(tasks_ahead);
      mine->set_queued_tasks(job.queued_tasks);
      mine->set_running_tasks(job.running_tasks);
    }
    if (claimable > 0) {
      ++jobs_ahead;
      tasks_ahead += claimable;
    }
  }
  for (auto& [name, row] : named) {
    row.set_project(name);
    *response.add_projects() = std::move(row);
  }
  if (others.queued_jobs() + others.running_jobs() > 0) *response.add_projects() = others;
  response.set_queued_jobs(totals.queued_jobs());
  response.set_running_jobs(totals.running_jobs());
  response.set_queued_tasks(totals.queued_tasks());
  response.set_running_tasks(totals.running_tasks());
  return response;
}

}  // namespace fca::core
