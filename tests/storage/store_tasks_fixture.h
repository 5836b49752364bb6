// The fixture of the task suites (store_task_*_test.cc): a job's tasks,
// their leases, and the end of a job once its tasks have ended.
#ifndef FCA_TESTS_STORAGE_STORE_TASKS_FIXTURE_H_
#define FCA_TESTS_STORAGE_STORE_TASKS_FIXTURE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {

inline constexpr int64_t kLongLease = 3'600'000'000;  // an hour: never runs out by itself

inline ClaimRequest Request(const std::string& worker, int64_t lease_us = kLongLease,
                            int64_t task_id = 0) {
  ClaimRequest request;
  request.worker = worker;
  request.lease_us = lease_us;
  request.task_id = task_id;
  return request;
}

inline std::vector<int64_t> Ids(const std::vector<TaskRecord>& tasks) {
  std::vector<int64_t> ids;
  for (const TaskRecord& t : tasks) ids.push_back(t.id);
  return ids;
}

class StoreTasksFixture : public StoreFixture {
 protected:
  // A new job of "ann" with one task per model.
  JobRecord NewJob(const std::vector<std::string>& models) {
    absl::StatusOr<JobRecord> job = store_->CreateJob("ann", "{}", models);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobRecord();
  }

  // The job's tasks, by index.
  std::vector<TaskRecord> Tasks(int64_t job_id) {
    absl::StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(job_id);
    EXPECT_TRUE(tasks.ok()) << tasks.status();
    return tasks.ok() ? *tasks : std::vector<TaskRecord>();
  }

  TaskRecord Task(int64_t id) {
    absl::StatusOr<TaskRecord> task = store_->GetTask(id);
    EXPECT_TRUE(task.ok()) << task.status();
    return task.ok() ? *task : TaskRecord();
  }

  JobRecord Job(int64_t id) {
    absl::StatusOr<JobRecord> job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobRecord();
  }

  // ClaimTask, expecting no error; nullopt when nothing was claimed.
  std::optional<TaskClaim> Claim(const std::string& worker, int64_t lease_us = kLongLease,
                                 int64_t task_id = 0) {
    absl::StatusOr<std::optional<TaskClaim>> claim =
        store_->ClaimTask(Request(worker, lease_us, task_id));
    EXPECT_TRUE(claim.ok()) << claim.status();
    return claim.ok() ? *claim : std::nullopt;
  }

  // The models of the tasks claimed one after another until none is left.
  std::vector<std::string> ClaimAll(const std::string& worker) {
    std::vector<std::string> models;
    for (int i = 0; i < 1000; ++i) {
      std::optional<TaskClaim> claim = Claim(worker);
      if (!claim) break;
      models.push_back(claim->task.model);
    }
    return models;
  }

  // Expects every lease call with (task_id, lease_seq) to be refused.
  void ExpectLeaseRefused(int64_t task_id, int64_t lease_seq) {
    EXPECT_CODE(store_->CheckLease(task_id, lease_seq), ::absl::StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->RenewLease(task_id, lease_seq, kLongLease),
                ::absl::StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->FinishTask(task_id, lease_seq, JobState::kSucceeded, ""),
                ::absl::StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->ReleaseTask(task_id, lease_seq, true, "drain", 3),
                ::absl::StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->ReleaseTask(task_id, lease_seq, false, "refused", 1),
                ::absl::StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
  }

  // SettleJob without an end event, expecting it to end the job: the job as
  // it ended (a default JobRecord, and a failure, when it did not).
  JobRecord Settle(int64_t job_id) {
    absl::StatusOr<std::optional<Store::Settled>> settled = store_->SettleJob(job_id, nullptr);
    EXPECT_TRUE(settled.ok()) << settled.status();
    if (!settled.ok() || !settled->has_value()) {
      ADD_FAILURE() << "job " << job_id << " did not end";
      return JobRecord();
    }
    return (*settled)->job;
  }

  // Claims every task of a new job and ends task i as outcomes[i], in the
  // order `finish_order` (indexes; all of them when empty). Returns the job.
  JobRecord RunJob(const std::vector<std::pair<JobState, std::string>>& outcomes,
                   std::vector<int> finish_order = {}) {
    std::vector<std::string> models;
    for (size_t i = 0; i < outcomes.size(); ++i) models.push_back(absl::StrCat("m", i));
    const JobRecord job = NewJob(models);
    std::vector<TaskClaim> claims;
    for (const TaskRecord& t : Tasks(job.id)) {
      std::optional<TaskClaim> claim = Claim("w", kLongLease, t.id);
      EXPECT_TRUE(claim.has_value());
      if (claim) claims.push_back(*claim);
    }
    if (finish_order.empty()) {
      for (size_t i = 0; i < claims.size(); ++i) finish_order.push_back(static_cast<int>(i));
    }
    for (int i : finish_order) {
      if (i >= static_cast<int>(claims.size())) break;
      EXPECT_OK(store_->FinishTask(claims[i].task.id, claims[i].task.lease_seq, outcomes[i].first,
                                   outcomes[i].second));
    }
    return job;
  }
};

}  // namespace fca::storage

#endif  // FCA_TESTS_STORAGE_STORE_TASKS_FIXTURE_H_
