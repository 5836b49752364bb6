// Conformance suite, part 4: a job's tasks, their leases, and the end of a
// job once its tasks have ended. Runs on ":memory:" and a file (the
// concurrency test on a file only).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

constexpr int64_t kLongLease = 3'600'000'000;  // an hour: never runs out by itself

ClaimRequest Request(const std::string& worker, int64_t lease_us = kLongLease,
                     int64_t task_id = 0) {
  ClaimRequest request;
  request.worker = worker;
  request.lease_us = lease_us;
  request.task_id = task_id;
  return request;
}

class StoreTasksTest : public StoreFixture {
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
    EXPECT_CODE(store_->CheckLease(task_id, lease_seq), StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->RenewLease(task_id, lease_seq, kLongLease), StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->FinishTask(task_id, lease_seq, JobState::kSucceeded, ""),
                StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->ReleaseTask(task_id, lease_seq, true, "drain", 3),
                StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
    EXPECT_CODE(store_->ReleaseTask(task_id, lease_seq, false, "refused", 1),
                StatusCode::kFailedPrecondition)
        << "seq " << lease_seq;
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

INSTANTIATE_TEST_SUITE_P(Backends, StoreTasksTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

std::vector<int64_t> Ids(const std::vector<TaskRecord>& tasks) {
  std::vector<int64_t> ids;
  for (const TaskRecord& t : tasks) ids.push_back(t.id);
  return ids;
}

// ------------------------------------------------------------ creation

TEST_P(StoreTasksTest, CreateJobMakesOneQueuedTaskPerModel) {
  const JobRecord job = NewJob({"x", "y", "x"});
  const std::vector<TaskRecord> tasks = Tasks(job.id);
  ASSERT_EQ(tasks.size(), 3u);
  const std::vector<std::string> models = {"x", "y", "x"};
  for (int i = 0; i < 3; ++i) {
    const TaskRecord& t = tasks[i];
    EXPECT_GT(t.id, 0);
    EXPECT_EQ(t.job_id, job.id);
    EXPECT_EQ(t.index, i);
    EXPECT_EQ(t.model, models[i]);
    EXPECT_EQ(t.state, JobState::kQueued);
    EXPECT_EQ(t.attempts, 0);
    EXPECT_EQ(t.lease_seq, 0);
    EXPECT_EQ(t.worker, "");
    EXPECT_EQ(t.lease_expires_us, 0);
    EXPECT_EQ(t.error, "");
    EXPECT_EQ(t.executor_ref, "");
    EXPECT_EQ(t.started_at_us, 0);
    EXPECT_EQ(t.finished_at_us, 0);
    if (i > 0) {
      EXPECT_GT(t.id, tasks[i - 1].id);
    }
  }
  EXPECT_EQ(Task(tasks[1].id).model, "y");
  EXPECT_TRUE(Tasks(NewJob({}).id).empty());
  EXPECT_CODE(store_->ListTasks(job.id + 100), StatusCode::kNotFound);
  EXPECT_CODE(store_->GetTask(tasks[2].id + 100), StatusCode::kNotFound);
  ExpectRows("tasks", 3);
}

TEST_P(StoreTasksTest, ARolledBackCreateJobLeavesNoTasks) {
  const absl::Status status = store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("ann", "{}", {"a", "b"}).status());
    return absl::AbortedError("undo");
  });
  EXPECT_CODE(status, StatusCode::kAborted);
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> queued,
                       store_->ListTasksInState(JobState::kQueued, 100));
  EXPECT_TRUE(queued.empty());
  EXPECT_FALSE(Claim("w").has_value());
}

// ------------------------------------------------------------- claims

TEST_P(StoreTasksTest, ClaimsTakeTheOldestJobFirstThenIndex) {
  const JobRecord a = NewJob({"a0", "a1", "a2"});
  const JobRecord b = NewJob({"b0", "b1"});
  const std::vector<std::string> expected = {"a0", "a1", "a2", "b0", "b1"};
  EXPECT_EQ(ClaimAll("w"), expected);

  // A task given back goes before the tasks of younger jobs.
  const JobRecord c = NewJob({"c0"});
  const TaskRecord a1 = Tasks(a.id)[1];
  ASSERT_OK(store_->ReleaseTask(a1.id, a1.lease_seq, true, "drain", 3));
  const std::vector<std::string> again = {"a1", "c0"};
  EXPECT_EQ(ClaimAll("w"), again);
  (void)b;
  (void)c;
}

TEST_P(StoreTasksTest, AClaimRecordsTheLeaseAndStartsTheJobOnce) {
  const JobRecord job = NewJob({"m0", "m1"});
  now_us_ = 5'000'000;
  const std::optional<TaskClaim> first = Claim("w1", 300);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->task.model, "m0");
  EXPECT_EQ(first->task.state, JobState::kRunning);
  EXPECT_EQ(first->task.worker, "w1");
  EXPECT_EQ(first->task.lease_expires_us, 5'000'300);
  EXPECT_EQ(first->task.attempts, 1);
  EXPECT_EQ(first->task.lease_seq, 1);
  EXPECT_EQ(first->task.started_at_us, 5'000'000);
  EXPECT_EQ(first->task.finished_at_us, 0);
  EXPECT_EQ(first->job.id, job.id);
  EXPECT_EQ(first->job.state, JobState::kRunning);
  EXPECT_EQ(first->job.started_at_us, 5'000'000);
  EXPECT_EQ(first->job.attempts, 1);
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);

  now_us_ = 6'000'000;
  const std::optional<TaskClaim> second = Claim("w2", 300);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->task.model, "m1");
  EXPECT_EQ(second->task.started_at_us, 6'000'000);
  EXPECT_EQ(second->job.state, JobState::kRunning);
  EXPECT_EQ(second->job.started_at_us, 5'000'000);  // the first claim's
  EXPECT_EQ(second->job.attempts, 1);
  const TaskRecord m0 = Task(first->task.id);
  EXPECT_EQ(m0.worker, "w1");
  EXPECT_EQ(m0.state, JobState::kRunning);
}

TEST_P(StoreTasksTest, AClaimNeedsAWorkerAndAPositiveLease) {
  const JobRecord job = NewJob({"m"});
  EXPECT_CODE(store_->ClaimTask(Request("", 100)), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->ClaimTask(Request("w", 0)), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->ClaimTask(Request("w", -5)), StatusCode::kInvalidArgument);
  const TaskRecord t = Tasks(job.id)[0];
  EXPECT_EQ(t.state, JobState::kQueued);
  EXPECT_EQ(t.lease_seq, 0);
  EXPECT_EQ(Job(job.id).state, JobState::kQueued);
}

TEST_P(StoreTasksTest, ClaimsSkipTasksOfJobsWhoseCancelWasRequested) {
  const JobRecord a = NewJob({"a0", "a1"});
  const JobRecord b = NewJob({"b0"});
  const std::optional<TaskClaim> a0 = Claim("w");
  ASSERT_TRUE(a0.has_value());
  ASSERT_EQ(a0->job.id, a.id);
  ASSERT_OK(store_->RequestCancel(a.id));
  // a0's worker gives it back: whatever becomes of it, it is not run again.
  ASSERT_OK(store_->ReleaseTask(a0->task.id, a0->task.lease_seq, true, "drain", 3));
  EXPECT_FALSE(Claim("w", kLongLease, a0->task.id).has_value());
  EXPECT_FALSE(Claim("w", kLongLease, Tasks(a.id)[1].id).has_value());
  const std::optional<TaskClaim> next = Claim("w");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->job.id, b.id);
  EXPECT_FALSE(Claim("w").has_value());

  if (is_file()) {
    // The instant between a cancel request and its tasks' cancellation:
    // a QUEUED job with cancel_requested and QUEUED tasks.
    const JobRecord c = NewJob({"c0"});
    {
      auto db = Database::Open(tmp_.path(), 1000);
      ASSERT_OK(db);
      ASSERT_OK(
          (*db)->Execute("UPDATE jobs SET cancel_requested = 1 WHERE state = 'QUEUED'", "test"));
    }
    EXPECT_EQ(Tasks(c.id)[0].state, JobState::kQueued);
    EXPECT_FALSE(Claim("w").has_value());
    EXPECT_FALSE(Claim("w", kLongLease, Tasks(c.id)[0].id).has_value());
  }
}

TEST_P(StoreTasksTest, ClaimsSkipTasksPlacedByAnExecutorUnlessNamed) {
  const JobRecord job = NewJob({"t0", "t1", "t2"});
  const std::vector<TaskRecord> tasks = Tasks(job.id);
  ASSERT_OK(store_->SetExecutorRef(tasks[0].id, "slurm:1"));
  ASSERT_OK(store_->SetExecutorRef(tasks[1].id, "slurm:2"));
  EXPECT_EQ(Task(tasks[0].id).executor_ref, "slurm:1");
  const std::optional<TaskClaim> t2 = Claim("w");
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(t2->task.id, tasks[2].id);
  EXPECT_FALSE(Claim("w").has_value());
  // Named, it is claimed whoever placed it.
  const std::optional<TaskClaim> t1 = Claim("slurm-worker", kLongLease, tasks[1].id);
  ASSERT_TRUE(t1.has_value());
  EXPECT_EQ(t1->task.id, tasks[1].id);
  EXPECT_EQ(t1->task.executor_ref, "slurm:2");
  // "" gives it back to any worker.
  ASSERT_OK(store_->SetExecutorRef(tasks[0].id, ""));
  const std::optional<TaskClaim> t0 = Claim("w");
  ASSERT_TRUE(t0.has_value());
  EXPECT_EQ(t0->task.id, tasks[0].id);
  EXPECT_CODE(store_->SetExecutorRef(tasks[2].id + 100, "x"), StatusCode::kNotFound);
}

TEST_P(StoreTasksTest, AClaimByIdTakesExactlyThatQueuedTask) {
  const JobRecord a = NewJob({"a0"});
  const JobRecord b = NewJob({"b0", "b1"});
  const TaskRecord b1 = Tasks(b.id)[1];
  const std::optional<TaskClaim> claimed = Claim("w", kLongLease, b1.id);
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->task.id, b1.id);  // not the older job's task
  EXPECT_EQ(claimed->job.id, b.id);
  EXPECT_EQ(claimed->job.state, JobState::kRunning);
  EXPECT_FALSE(Claim("w", kLongLease, b1.id).has_value());         // RUNNING now
  EXPECT_FALSE(Claim("w", kLongLease, b1.id + 1000).has_value());  // unknown
  ASSERT_OK(store_->FinishTask(b1.id, claimed->task.lease_seq, JobState::kSucceeded, ""));
  EXPECT_FALSE(Claim("w", kLongLease, b1.id).has_value());  // ended
  const std::optional<TaskClaim> oldest = Claim("w");
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->job.id, a.id);
}

// ------------------------------------------------------------- leases

TEST_P(StoreTasksTest, LeaseSeqGrowsWithEveryClaimAndNeverGoesBack) {
  const JobRecord job = NewJob({"m"});
  const int64_t id = Tasks(job.id)[0].id;

  std::optional<TaskClaim> c = Claim("w", 100);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.lease_seq, 1);
  ASSERT_OK_AND_ASSIGN(TaskRecord released, store_->ReleaseTask(id, 1, true, "drain", 3));
  EXPECT_EQ(released.lease_seq, 1);
  EXPECT_EQ(released.attempts, 0);

  c = Claim("w", 100);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.lease_seq, 2);
  now_us_ += 1000;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost, store_->ExpireLeases(0, "", "gone"));
  ASSERT_EQ(lost.requeued.size(), 1u);
  EXPECT_EQ(Task(id).lease_seq, 2);

  c = Claim("w", 100);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.lease_seq, 3);
  ASSERT_OK_AND_ASSIGN(released, store_->ReleaseTask(id, 3, false, "refused", 0));
  EXPECT_EQ(released.state, JobState::kQueued);
  EXPECT_EQ(released.lease_seq, 3);

  c = Claim("w4", kLongLease);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.lease_seq, 4);
  for (int64_t stale : {0, 1, 2, 3, 5}) ExpectLeaseRefused(id, stale);
  // The stale calls changed nothing.
  const TaskRecord still = Task(id);
  EXPECT_EQ(still.state, JobState::kRunning);
  EXPECT_EQ(still.lease_seq, 4);
  EXPECT_EQ(still.worker, "w4");
  EXPECT_EQ(still.lease_expires_us, c->task.lease_expires_us);
  ASSERT_OK(store_->CheckLease(id, 4));

  // An ended task's last lease is gone too.
  ASSERT_OK(store_->FinishTask(id, 4, JobState::kSucceeded, ""));
  ExpectLeaseRefused(id, 4);
  EXPECT_CODE(store_->CheckLease(id + 100, 1), StatusCode::kNotFound);
}

TEST_P(StoreTasksTest, AStaleLeaseCannotTouchTheNewHolder) {
  const JobRecord job = NewJob({"m"});
  now_us_ = 1'000'000;
  const std::optional<TaskClaim> a = Claim("worker-a", 100);
  ASSERT_TRUE(a.has_value());
  now_us_ = 1'000'500;
  ASSERT_OK(store_->ExpireLeases(0, "", "lease ran out"));
  const std::optional<TaskClaim> b = Claim("worker-b", 1000);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->task.id, a->task.id);
  EXPECT_GT(b->task.lease_seq, a->task.lease_seq);
  ExpectLeaseRefused(a->task.id, a->task.lease_seq);
  const TaskRecord t = Task(a->task.id);
  EXPECT_EQ(t.state, JobState::kRunning);
  EXPECT_EQ(t.worker, "worker-b");
  EXPECT_EQ(t.lease_expires_us, 1'001'500);
  EXPECT_EQ(t.attempts, 2);
  ASSERT_OK_AND_ASSIGN(const TaskRecord done,
                       store_->FinishTask(b->task.id, b->task.lease_seq, JobState::kSucceeded, ""));
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);  // until settled
}

TEST_P(StoreTasksTest, RenewLeaseExtendsTheLeaseAndReportsACancelRequest) {
  const JobRecord job = NewJob({"m0", "m1"});
  now_us_ = 1'000'000;
  const std::optional<TaskClaim> c = Claim("w", 500);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.lease_expires_us, 1'000'500);

  now_us_ = 1'000'400;
  ASSERT_OK_AND_ASSIGN(const TaskClaim renewed,
                       store_->RenewLease(c->task.id, c->task.lease_seq, 500));
  EXPECT_EQ(renewed.task.id, c->task.id);
  EXPECT_EQ(renewed.task.lease_expires_us, 1'000'900);
  EXPECT_EQ(renewed.task.lease_seq, c->task.lease_seq);  // a renewal is no new claim
  EXPECT_EQ(renewed.task.attempts, 1);
  EXPECT_EQ(renewed.job.id, job.id);
  EXPECT_FALSE(renewed.job.cancel_requested);
  EXPECT_EQ(Task(c->task.id).lease_expires_us, 1'000'900);

  // Without the renewal the lease would have run out at 1'000'500.
  now_us_ = 1'000'700;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks none, store_->ExpireLeases(0, "", "gone"));
  EXPECT_TRUE(none.requeued.empty());
  EXPECT_TRUE(none.failed.empty());

  ASSERT_OK_AND_ASSIGN(const TaskClaim checked, store_->CheckLease(c->task.id, c->task.lease_seq));
  EXPECT_EQ(checked.task.lease_expires_us, 1'000'900);
  EXPECT_FALSE(checked.job.cancel_requested);

  EXPECT_CODE(store_->RenewLease(c->task.id, c->task.lease_seq, 0), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->RenewLease(c->task.id, c->task.lease_seq, -1), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->RenewLease(c->task.id + 100, 1, 500), StatusCode::kNotFound);

  ASSERT_OK(store_->RequestCancel(job.id));
  ASSERT_OK_AND_ASSIGN(const TaskClaim told,
                       store_->RenewLease(c->task.id, c->task.lease_seq, 500));
  EXPECT_TRUE(told.job.cancel_requested);
  EXPECT_EQ(told.task.lease_expires_us, 1'001'200);
  ASSERT_OK_AND_ASSIGN(const TaskClaim told_again,
                       store_->CheckLease(c->task.id, c->task.lease_seq));
  EXPECT_TRUE(told_again.job.cancel_requested);
}

TEST_P(StoreTasksTest, ExpireLeasesRequeuesExpiredTasksAndKeepsTheirAttempts) {
  const JobRecord job = NewJob({"a", "b", "c"});
  now_us_ = 2'000'000;
  const std::optional<TaskClaim> a = Claim("w1", 100);
  const std::optional<TaskClaim> b = Claim("w2", 1000);
  ASSERT_TRUE(a.has_value() && b.has_value());
  now_us_ = 2'000'500;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost, store_->ExpireLeases(3, "", "lease lost"));
  EXPECT_TRUE(lost.failed.empty());
  ASSERT_EQ(lost.requeued.size(), 1u);
  EXPECT_EQ(lost.requeued[0].id, a->task.id);
  EXPECT_EQ(lost.requeued[0].state, JobState::kQueued);
  EXPECT_NE(lost.requeued[0].error.find("lease lost"), std::string::npos);
  EXPECT_NE(lost.requeued[0].error.find("w1"), std::string::npos) << lost.requeued[0].error;

  const TaskRecord ta = Task(a->task.id);
  EXPECT_EQ(ta.state, JobState::kQueued);
  EXPECT_EQ(ta.attempts, 1);
  EXPECT_EQ(ta.lease_seq, 1);
  EXPECT_EQ(ta.worker, "");
  EXPECT_EQ(ta.lease_expires_us, 0);
  EXPECT_EQ(ta.finished_at_us, 0);
  EXPECT_NE(ta.error.find("lease lost"), std::string::npos) << ta.error;
  const TaskRecord tb = Task(b->task.id);
  EXPECT_EQ(tb.state, JobState::kRunning);
  EXPECT_EQ(tb.worker, "w2");
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);

  // Nothing more has run out.
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks again, store_->ExpireLeases(3, "", "lease lost"));
  EXPECT_TRUE(again.requeued.empty());
  // a goes before c (index order), and its attempts count on.
  const std::optional<TaskClaim> reclaimed = Claim("w3");
  ASSERT_TRUE(reclaimed.has_value());
  EXPECT_EQ(reclaimed->task.id, a->task.id);
  EXPECT_EQ(reclaimed->task.attempts, 2);
  EXPECT_EQ(reclaimed->job.attempts, 2);

  // Later, b runs out too.
  now_us_ = 2'001'001;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks later, store_->ExpireLeases(3, "", "lease lost"));
  EXPECT_EQ(Ids(later.requeued), std::vector<int64_t>{b->task.id});
}

TEST_P(StoreTasksTest, ExpireLeasesFailsTasksThatReachedMaxAttempts) {
  const JobRecord job = NewJob({"m", "n"});
  const int64_t m = Tasks(job.id)[0].id;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const std::optional<TaskClaim> c = Claim("w", 10, m);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->task.attempts, attempt);
    now_us_ += 100;
    ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost,
                         store_->ExpireLeases(2, "", "the worker vanished"));
    if (attempt == 1) {
      EXPECT_EQ(Ids(lost.requeued), std::vector<int64_t>{m});
      EXPECT_TRUE(lost.failed.empty());
    } else {
      EXPECT_TRUE(lost.requeued.empty());
      ASSERT_EQ(Ids(lost.failed), std::vector<int64_t>{m});
      EXPECT_EQ(lost.failed[0].state, JobState::kFailed);
      EXPECT_NE(lost.failed[0].error.find("the worker vanished"), std::string::npos)
          << lost.failed[0].error;
      EXPECT_NE(lost.failed[0].error.find("2 times"), std::string::npos) << lost.failed[0].error;
    }
  }
  const TaskRecord failed = Task(m);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.attempts, 2);
  EXPECT_EQ(failed.finished_at_us, now_us_.load());
  EXPECT_EQ(failed.lease_expires_us, 0);
  EXPECT_NE(failed.error.find("the worker vanished"), std::string::npos) << failed.error;
  // m is not claimed again; n still is.
  const std::optional<TaskClaim> next = Claim("w");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->task.model, "n");
}

TEST_P(StoreTasksTest, ExpireLeasesWithoutACapRequeuesForever) {
  const JobRecord job = NewJob({"m"});
  for (int attempt = 1; attempt <= 5; ++attempt) {
    const std::optional<TaskClaim> c = Claim("w", 10);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->task.attempts, attempt);
    now_us_ += 100;
    ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost, store_->ExpireLeases(0, "", "gone"));
    EXPECT_EQ(lost.requeued.size(), 1u);
    EXPECT_TRUE(lost.failed.empty());
  }
  EXPECT_EQ(Tasks(job.id)[0].attempts, 5);
  EXPECT_EQ(Tasks(job.id)[0].state, JobState::kQueued);
}

TEST_P(StoreTasksTest, ExpireLeasesOfALostWorkerPrefixMatchesLiterally) {
  const std::vector<std::string> workers = {"local/0",        "local/12", "local%",
                                            "local_x",        "localx/0", "LOCAL/1",
                                            "remote/local/1", "local",    "loca"};
  const JobRecord job = NewJob(std::vector<std::string>(workers.size(), "m"));
  const std::vector<TaskRecord> tasks = Tasks(job.id);
  for (size_t i = 0; i < workers.size(); ++i) {
    // local/0's lease has run out as well; it must come back once.
    ASSERT_TRUE(Claim(workers[i], i == 0 ? 10 : kLongLease, tasks[i].id).has_value());
  }
  now_us_ += 100;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost, store_->ExpireLeases(0, "local/", "restart"));
  EXPECT_EQ(Ids(lost.requeued), (std::vector<int64_t>{tasks[0].id, tasks[1].id}));
  EXPECT_TRUE(lost.failed.empty());
  for (size_t i = 2; i < workers.size(); ++i) {
    EXPECT_EQ(Task(tasks[i].id).state, JobState::kRunning) << workers[i];
  }
  // Wildcards of LIKE are plain characters here.
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks percent, store_->ExpireLeases(0, "local%", "restart"));
  EXPECT_EQ(Ids(percent.requeued), std::vector<int64_t>{tasks[2].id});
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks underscore, store_->ExpireLeases(0, "local_", "restart"));
  EXPECT_EQ(Ids(underscore.requeued), std::vector<int64_t>{tasks[3].id});
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks none, store_->ExpireLeases(0, "", "restart"));
  EXPECT_TRUE(none.requeued.empty());
  for (size_t i = 4; i < workers.size(); ++i) {
    EXPECT_EQ(Task(tasks[i].id).state, JobState::kRunning) << workers[i];
  }
  // A longer prefix than the name matches nothing; the whole name matches.
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks longer, store_->ExpireLeases(0, "locals", "restart"));
  EXPECT_TRUE(longer.requeued.empty());
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks exact, store_->ExpireLeases(0, "localx/0", "restart"));
  EXPECT_EQ(Ids(exact.requeued), std::vector<int64_t>{tasks[4].id});
}

TEST_P(StoreTasksTest, ReleaseTaskRefundsOrCountsTheAttempt) {
  const JobRecord job = NewJob({"m"});
  const int64_t id = Tasks(job.id)[0].id;
  ASSERT_OK(store_->SetExecutorRef(id, "slurm:7"));
  std::optional<TaskClaim> c = Claim("w", kLongLease, id);
  ASSERT_TRUE(c.has_value());
  ASSERT_OK_AND_ASSIGN(TaskRecord r,
                       store_->ReleaseTask(id, c->task.lease_seq, true, "weights differ", 1));
  EXPECT_EQ(r.state, JobState::kQueued);  // a refund never fails the task
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(r.error, "weights differ");
  EXPECT_EQ(r.worker, "");
  EXPECT_EQ(r.lease_expires_us, 0);
  EXPECT_EQ(r.executor_ref, "");  // any worker may take it now
  EXPECT_EQ(r.finished_at_us, 0);
  EXPECT_EQ(Task(id).state, JobState::kQueued);

  c = Claim("w");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.attempts, 1);
  ASSERT_OK_AND_ASSIGN(r, store_->ReleaseTask(id, c->task.lease_seq, false, "draining", 2));
  EXPECT_EQ(r.state, JobState::kQueued);  // 1 claim < 2
  EXPECT_EQ(r.attempts, 1);

  c = Claim("w");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.attempts, 2);
  now_us_ = 7'777'777;
  ASSERT_OK_AND_ASSIGN(r, store_->ReleaseTask(id, c->task.lease_seq, false, "refused", 2));
  EXPECT_EQ(r.state, JobState::kFailed);
  EXPECT_EQ(r.error, "refused");
  EXPECT_EQ(r.finished_at_us, 7'777'777);
  EXPECT_EQ(r.lease_expires_us, 0);
  EXPECT_FALSE(Claim("w").has_value());
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kFailed);
  EXPECT_EQ(settled->job.error, "refused");
}

TEST_P(StoreTasksTest, ReleaseTaskWithoutACapNeverFails) {
  const JobRecord job = NewJob({"m"});
  for (int attempt = 1; attempt <= 4; ++attempt) {
    const std::optional<TaskClaim> c = Claim("w");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->task.attempts, attempt);
    ASSERT_OK_AND_ASSIGN(const TaskRecord r,
                         store_->ReleaseTask(c->task.id, c->task.lease_seq, false, "no", 0));
    EXPECT_EQ(r.state, JobState::kQueued);
    EXPECT_EQ(r.attempts, attempt);
  }
  // At the cap, a refunded release is still no failure.
  const std::optional<TaskClaim> c = Claim("w");
  ASSERT_TRUE(c.has_value());
  ASSERT_OK_AND_ASSIGN(const TaskRecord r,
                       store_->ReleaseTask(c->task.id, c->task.lease_seq, true, "drain", 5));
  EXPECT_EQ(r.state, JobState::kQueued);
  EXPECT_EQ(r.attempts, 4);
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);
}

TEST_P(StoreTasksTest, FinishTaskEndsTheTaskUnderItsLease) {
  const JobRecord job = NewJob({"a", "b"});
  const std::optional<TaskClaim> a = Claim("w");
  const std::optional<TaskClaim> b = Claim("w");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_CODE(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kQueued, ""),
              StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kRunning, ""),
              StatusCode::kInvalidArgument);
  EXPECT_EQ(Task(a->task.id).state, JobState::kRunning);
  now_us_ = 4'200'000;
  ASSERT_OK_AND_ASSIGN(const TaskRecord ok,
                       store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kSucceeded, ""));
  EXPECT_EQ(ok.state, JobState::kSucceeded);
  EXPECT_EQ(ok.finished_at_us, 4'200'000);
  EXPECT_EQ(ok.lease_expires_us, 0);
  EXPECT_EQ(ok.error, "");
  EXPECT_CODE(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kFailed, "late"),
              StatusCode::kFailedPrecondition);
  EXPECT_EQ(Task(a->task.id).state, JobState::kSucceeded);
  ASSERT_OK_AND_ASSIGN(
      const TaskRecord failed,
      store_->FinishTask(b->task.id, b->task.lease_seq, JobState::kFailed, "INTERNAL: oom"));
  EXPECT_EQ(failed.error, "INTERNAL: oom");
  EXPECT_EQ(Task(b->task.id).error, "INTERNAL: oom");
  // Ended tasks are never expired.
  now_us_ += kLongLease * 2;
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks none, store_->ExpireLeases(1, "w", "gone"));
  EXPECT_TRUE(none.requeued.empty());
  EXPECT_TRUE(none.failed.empty());
  (void)job;
}

// ----------------------------------------------------------- settling

TEST_P(StoreTasksTest, SettleJobAllSucceededIsSucceeded) {
  const JobRecord job = RunJob({{JobState::kSucceeded, ""}, {JobState::kSucceeded, ""}});
  now_us_ = 9'000'000;
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.id, job.id);
  EXPECT_EQ(settled->job.state, JobState::kSucceeded);
  EXPECT_EQ(settled->job.error, "");
  EXPECT_EQ(settled->job.finished_at_us, 9'000'000);
  EXPECT_EQ(settled->event_seq, 0);
  EXPECT_EQ(Job(job.id).state, JobState::kSucceeded);
}

TEST_P(StoreTasksTest, SettleJobTakesTheErrorOfTheFirstFailedTaskByIndex) {
  // Index 2 fails first in time; index 1's error is the job's.
  const JobRecord job = RunJob({{JobState::kSucceeded, ""},
                                {JobState::kFailed, "first by index"},
                                {JobState::kFailed, "first in time"},
                                {JobState::kCancelled, ""}},
                               {2, 3, 1, 0});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kFailed);
  EXPECT_EQ(settled->job.error, "first by index");
}

TEST_P(StoreTasksTest, SettleJobFailedBeatsCancelled) {
  const JobRecord job = RunJob({{JobState::kCancelled, ""}, {JobState::kFailed, "x"}});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kFailed);
  EXPECT_EQ(settled->job.error, "x");
}

TEST_P(StoreTasksTest, SettleJobCancelledBeatsSucceeded) {
  const JobRecord job = RunJob({{JobState::kSucceeded, ""}, {JobState::kCancelled, ""}});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kCancelled);
  EXPECT_EQ(settled->job.error, "");
  // A queued job whose tasks were all cancelled ends CANCELLED too.
  const JobRecord queued = NewJob({"a", "b"});
  ASSERT_OK_AND_ASSIGN(const int64_t cancelled, store_->CancelQueuedTasks(queued.id));
  EXPECT_EQ(cancelled, 2);
  ASSERT_OK_AND_ASSIGN(const auto settled_queued, store_->SettleJob(queued.id, nullptr));
  ASSERT_TRUE(settled_queued.has_value());
  EXPECT_EQ(settled_queued->job.state, JobState::kCancelled);
}

TEST_P(StoreTasksTest, SettleJobWithoutTasksIsFailed) {
  const JobRecord job = NewJob({});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kFailed);
  EXPECT_FALSE(settled->job.error.empty());
  EXPECT_GT(settled->job.finished_at_us, 0);
}

TEST_P(StoreTasksTest, SettleJobWaitsForQueuedAndRunningTasks) {
  const JobRecord job = NewJob({"a", "b"});
  int calls = 0;
  const Store::EndEvent count_calls = [&](JobState, const std::string&) {
    ++calls;
    return std::string("end");
  };
  ASSERT_OK_AND_ASSIGN(auto settled, store_->SettleJob(job.id, count_calls));
  EXPECT_FALSE(settled.has_value());  // both QUEUED
  const std::optional<TaskClaim> a = Claim("w");
  ASSERT_TRUE(a.has_value());
  ASSERT_OK_AND_ASSIGN(settled, store_->SettleJob(job.id, count_calls));
  EXPECT_FALSE(settled.has_value());  // a RUNNING, b QUEUED
  ASSERT_OK(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kSucceeded, ""));
  ASSERT_OK_AND_ASSIGN(settled, store_->SettleJob(job.id, count_calls));
  EXPECT_FALSE(settled.has_value());  // b QUEUED
  const std::optional<TaskClaim> b = Claim("w");
  ASSERT_TRUE(b.has_value());
  ASSERT_OK_AND_ASSIGN(settled, store_->SettleJob(job.id, count_calls));
  EXPECT_FALSE(settled.has_value());  // b RUNNING
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);
  ASSERT_OK_AND_ASSIGN(const auto events, store_->ListJobEvents(job.id, 0, 10));
  EXPECT_TRUE(events.empty());
  EXPECT_CODE(store_->SettleJob(job.id + 100, nullptr), StatusCode::kNotFound);
}

TEST_P(StoreTasksTest, SettleJobAppendsTheEndEventOnceWithTheJob) {
  const JobRecord job = RunJob({{JobState::kSucceeded, ""}, {JobState::kFailed, "boom"}});
  ASSERT_OK(store_->AppendJobEvent(job.id, "queued"));
  ASSERT_OK(store_->AppendJobEvent(job.id, "running"));
  std::vector<std::pair<JobState, std::string>> calls;
  const Store::EndEvent end_event = [&](JobState state, const std::string& error) {
    calls.emplace_back(state, error);
    return absl::StrCat("end:", JobStateName(state), ":", error);
  };
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, end_event));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->event_seq, 3);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, JobState::kFailed);
  EXPECT_EQ(calls[0].second, "boom");
  ASSERT_OK_AND_ASSIGN(const auto events, store_->ListJobEvents(job.id, 0, 10));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].seq, 3);
  EXPECT_EQ(events[2].payload, "end:FAILED:boom");

  // Already ended: nothing happens, no second event.
  ASSERT_OK_AND_ASSIGN(const auto again, store_->SettleJob(job.id, end_event));
  EXPECT_FALSE(again.has_value());
  EXPECT_EQ(calls.size(), 1u);
  ASSERT_OK_AND_ASSIGN(const auto after, store_->ListJobEvents(job.id, 0, 10));
  EXPECT_EQ(after.size(), 3u);
}

TEST_P(StoreTasksTest, SettleJobWithAnEmptyEndEventAppendsNothing) {
  const JobRecord job = RunJob({{JobState::kSucceeded, ""}});
  ASSERT_OK_AND_ASSIGN(
      const auto settled,
      store_->SettleJob(job.id, [](JobState, const std::string&) { return std::string(); }));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->event_seq, 0);
  ASSERT_OK_AND_ASSIGN(const auto events, store_->ListJobEvents(job.id, 0, 10));
  EXPECT_TRUE(events.empty());
}

TEST_P(StoreTasksTest, UnsettledJobsAreExactlyThoseSettleJobEnds) {
  const JobRecord queued = NewJob({"a"});   // waits
  const JobRecord running = NewJob({"a"});  // waits
  ASSERT_TRUE(Claim("w", kLongLease, Tasks(running.id)[0].id).has_value());
  const JobRecord done = RunJob({{JobState::kSucceeded, ""}});  // ends
  const JobRecord empty = NewJob({});                           // ends
  const JobRecord all_cancelled = NewJob({"a", "b"});           // ends
  ASSERT_OK(store_->CancelQueuedTasks(all_cancelled.id));
  const JobRecord half = NewJob({"a", "b"});  // waits
  ASSERT_TRUE(Claim("w", kLongLease, Tasks(half.id)[0].id).has_value());
  ASSERT_OK(store_->FinishTask(Tasks(half.id)[0].id, 1, JobState::kFailed, "x"));
  const JobRecord finished = NewJob({"a"});  // ended
  ASSERT_TRUE(Claim("w", kLongLease, Tasks(finished.id)[0].id).has_value());
  ASSERT_OK(store_->FinishJob(finished.id, JobState::kSucceeded, ""));
  const JobRecord cancelled = NewJob({"a"});  // ended
  ASSERT_OK(store_->RequestCancel(cancelled.id));
  const JobRecord last = RunJob({{JobState::kFailed, "y"}});  // ends

  const std::vector<int64_t> all = {queued.id,   running.id,       done.id,
                                    empty.id,    all_cancelled.id, half.id,
                                    finished.id, cancelled.id,     last.id};
  const std::vector<int64_t> expected = {done.id, empty.id, all_cancelled.id, last.id};
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_EQ(unsettled, expected);
  std::vector<int64_t> ended;
  for (int64_t id : all) {
    ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(id, nullptr));
    if (settled.has_value()) ended.push_back(id);
  }
  EXPECT_EQ(ended, expected);
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> after, store_->UnsettledJobs());
  EXPECT_TRUE(after.empty());
}

// -------------------------------------------------- cancel, finish, delete

TEST_P(StoreTasksTest, CancellingAQueuedJobCancelsAllItsTasks) {
  const JobRecord job = NewJob({"a", "b"});
  const JobRecord other = NewJob({"c"});
  now_us_ = 3'000'000;
  ASSERT_OK_AND_ASSIGN(const JobRecord cancelled, store_->RequestCancel(job.id));
  EXPECT_EQ(cancelled.state, JobState::kCancelled);
  for (const TaskRecord& t : Tasks(job.id)) {
    EXPECT_EQ(t.state, JobState::kCancelled) << t.model;
    EXPECT_EQ(t.finished_at_us, 3'000'000);
  }
  EXPECT_EQ(Tasks(other.id)[0].state, JobState::kQueued);
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  EXPECT_FALSE(settled.has_value());  // ended already
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_TRUE(unsettled.empty());
  const std::optional<TaskClaim> next = Claim("w");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->job.id, other.id);
}

TEST_P(StoreTasksTest, CancellingARunningJobCancelsOnlyItsQueuedTasks) {
  const JobRecord job = NewJob({"a", "b", "c"});
  const std::optional<TaskClaim> a = Claim("w");
  ASSERT_TRUE(a.has_value());
  ASSERT_OK_AND_ASSIGN(const JobRecord asked, store_->RequestCancel(job.id));
  EXPECT_EQ(asked.state, JobState::kRunning);
  EXPECT_TRUE(asked.cancel_requested);
  std::vector<TaskRecord> tasks = Tasks(job.id);
  EXPECT_EQ(tasks[0].state, JobState::kRunning);
  EXPECT_EQ(tasks[1].state, JobState::kCancelled);
  EXPECT_EQ(tasks[2].state, JobState::kCancelled);
  ASSERT_OK_AND_ASSIGN(const TaskClaim lease, store_->CheckLease(a->task.id, a->task.lease_seq));
  EXPECT_TRUE(lease.job.cancel_requested);
  ASSERT_OK(store_->RequestCancel(job.id));  // repeating is harmless
  EXPECT_EQ(Task(a->task.id).state, JobState::kRunning);
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_TRUE(unsettled.empty());
  ASSERT_OK_AND_ASSIGN(auto settled, store_->SettleJob(job.id, nullptr));
  EXPECT_FALSE(settled.has_value());
  // The worker stops; then the job ends.
  ASSERT_OK(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kCancelled, ""));
  ASSERT_OK_AND_ASSIGN(unsettled, store_->UnsettledJobs());
  EXPECT_EQ(unsettled, std::vector<int64_t>{job.id});
  ASSERT_OK_AND_ASSIGN(settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kCancelled);
  EXPECT_CODE(store_->RequestCancel(job.id), StatusCode::kFailedPrecondition);
}

// BUG: a task of a job whose cancel was requested, lost by its worker, is
// queued again; claims skip it (cancel requested) and UnsettledJobs skips
// its job (a task is QUEUED), so the job stays RUNNING forever.
TEST_P(StoreTasksTest, ALostTaskOfACancelledJobEndsTheJob) {
  const JobRecord job = NewJob({"a", "b"});
  const std::optional<TaskClaim> a = Claim("w", 100);
  ASSERT_TRUE(a.has_value());
  ASSERT_OK(store_->RequestCancel(job.id));
  now_us_ += 1000;  // the worker died; its lease runs out
  ASSERT_OK(store_->ExpireLeases(3, "", "lease lost"));
  EXPECT_FALSE(Claim("w").has_value());
  EXPECT_NE(Task(a->task.id).state, JobState::kQueued) << "a task nobody will ever claim is QUEUED";
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_EQ(unsettled, std::vector<int64_t>{job.id});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value()) << "the job can never end";
  EXPECT_EQ(settled->job.state, JobState::kCancelled);
}

// BUG: as above, when the worker gives the task back (drain, refusal).
TEST_P(StoreTasksTest, AReleasedTaskOfACancelledJobEndsTheJob) {
  const JobRecord job = NewJob({"a"});
  const std::optional<TaskClaim> a = Claim("w");
  ASSERT_TRUE(a.has_value());
  ASSERT_OK(store_->RequestCancel(job.id));
  ASSERT_OK(store_->ReleaseTask(a->task.id, a->task.lease_seq, true, "draining", 3));
  EXPECT_FALSE(Claim("w").has_value());
  EXPECT_NE(Task(a->task.id).state, JobState::kQueued) << "a task nobody will ever claim is QUEUED";
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_EQ(unsettled, std::vector<int64_t>{job.id});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value()) << "the job can never end";
  EXPECT_EQ(settled->job.state, JobState::kCancelled);
}

TEST_P(StoreTasksTest, FinishJobCancelsItsUnfinishedTasks) {
  const JobRecord job = NewJob({"a", "b", "c"});
  const std::optional<TaskClaim> a = Claim("local/0");
  ASSERT_TRUE(a.has_value());
  now_us_ = 500'000;
  ASSERT_OK(store_->FinishTask(a->task.id, a->task.lease_seq, JobState::kSucceeded, ""));
  const std::optional<TaskClaim> b = Claim("local/0");
  ASSERT_TRUE(b.has_value());
  now_us_ = 999'000;
  ASSERT_OK_AND_ASSIGN(const JobRecord ended, store_->FinishJob(job.id, JobState::kFailed, "stop"));
  EXPECT_EQ(ended.state, JobState::kFailed);
  EXPECT_EQ(ended.error, "stop");
  const std::vector<TaskRecord> tasks = Tasks(job.id);
  EXPECT_EQ(tasks[0].state, JobState::kSucceeded);
  EXPECT_EQ(tasks[0].finished_at_us, 500'000);  // untouched
  EXPECT_EQ(tasks[1].state, JobState::kCancelled);
  EXPECT_EQ(tasks[1].finished_at_us, 999'000);
  EXPECT_EQ(tasks[1].lease_expires_us, 0);
  EXPECT_EQ(tasks[2].state, JobState::kCancelled);
  EXPECT_EQ(tasks[2].finished_at_us, 999'000);
  ExpectLeaseRefused(b->task.id, b->task.lease_seq);
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks none, store_->ExpireLeases(1, "local/", "restart"));
  EXPECT_TRUE(none.requeued.empty());
  EXPECT_TRUE(none.failed.empty());
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_TRUE(unsettled.empty());
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  EXPECT_FALSE(settled.has_value());
  EXPECT_EQ(Job(job.id).error, "stop");
}

TEST_P(StoreTasksTest, DeleteJobDeletesItsTasks) {
  const JobRecord doomed = NewJob({"a", "b"});
  const JobRecord kept = NewJob({"c"});
  const std::vector<TaskRecord> tasks = Tasks(doomed.id);
  ASSERT_OK(store_->RequestCancel(doomed.id));
  ASSERT_OK(store_->DeleteJob(doomed.id));
  for (const TaskRecord& t : tasks) {
    EXPECT_CODE(store_->GetTask(t.id), StatusCode::kNotFound);
  }
  EXPECT_CODE(store_->ListTasks(doomed.id), StatusCode::kNotFound);
  EXPECT_EQ(Tasks(kept.id).size(), 1u);
  ExpectRows("tasks", 1);
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
  // Task ids are not reused either.
  const JobRecord later = NewJob({"d"});
  EXPECT_GT(Tasks(later.id)[0].id, Tasks(kept.id)[0].id);
  EXPECT_GT(Tasks(later.id)[0].id, tasks[1].id);
}

TEST_P(StoreTasksTest, CancelQueuedTasksCountsWhatItCancelled) {
  const JobRecord job = NewJob({"a", "b", "c"});
  const std::optional<TaskClaim> a = Claim("w");
  ASSERT_TRUE(a.has_value());
  ASSERT_OK_AND_ASSIGN(const int64_t first, store_->CancelQueuedTasks(job.id));
  EXPECT_EQ(first, 2);
  ASSERT_OK_AND_ASSIGN(const int64_t second, store_->CancelQueuedTasks(job.id));
  EXPECT_EQ(second, 0);
  ASSERT_OK_AND_ASSIGN(const int64_t unknown, store_->CancelQueuedTasks(job.id + 100));
  EXPECT_EQ(unknown, 0);
  EXPECT_EQ(Task(a->task.id).state, JobState::kRunning);
  EXPECT_FALSE(Job(job.id).cancel_requested);
  ASSERT_OK(store_->CheckLease(a->task.id, a->task.lease_seq));
}

TEST_P(StoreTasksTest, ListTasksInStateIsOldestFirstAndLimited) {
  const JobRecord x = NewJob({"x0", "x1"});
  const JobRecord y = NewJob({"y0", "y1"});
  ASSERT_TRUE(Claim("w", kLongLease, Tasks(y.id)[0].id).has_value());
  ASSERT_TRUE(Claim("w", kLongLease, Tasks(x.id)[0].id).has_value());
  auto models = [&](JobState state, int limit) {
    std::vector<std::string> out;
    absl::StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasksInState(state, limit);
    EXPECT_TRUE(tasks.ok()) << tasks.status();
    if (tasks.ok()) {
      for (const TaskRecord& t : *tasks) out.push_back(t.model);
    }
    return out;
  };
  EXPECT_EQ(models(JobState::kQueued, 10), (std::vector<std::string>{"x1", "y1"}));
  EXPECT_EQ(models(JobState::kRunning, 10), (std::vector<std::string>{"x0", "y0"}));
  EXPECT_EQ(models(JobState::kQueued, 1), (std::vector<std::string>{"x1"}));
  EXPECT_TRUE(models(JobState::kSucceeded, 10).empty());
}

// ------------------------------------------------------ fault injection

TEST_P(StoreTasksTest, InjectedFaultsInTaskCallsWriteNothing) {
  std::string failing;
  options_.fault_injector = [&](std::string_view op) {
    return op == failing ? absl::UnavailableError("injected") : absl::OkStatus();
  };
  Open();
  const JobRecord job = NewJob({"a", "b"});
  const int64_t a_id = Tasks(job.id)[0].id;

  failing = "claim_job";
  EXPECT_CODE(store_->ClaimTask(Request("w")), StatusCode::kUnavailable);
  EXPECT_CODE(store_->ClaimTask(Request("w", kLongLease, a_id)), StatusCode::kUnavailable);
  EXPECT_EQ(Task(a_id).state, JobState::kQueued);
  EXPECT_EQ(Task(a_id).lease_seq, 0);
  EXPECT_EQ(Task(a_id).attempts, 0);
  EXPECT_EQ(Job(job.id).state, JobState::kQueued);

  failing = "";
  now_us_ = 1'000'000;
  const std::optional<TaskClaim> a = Claim("w", 100);
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->task.id, a_id);

  failing = "renew_lease";
  now_us_ = 1'000'050;
  EXPECT_CODE(store_->RenewLease(a_id, a->task.lease_seq, 1000), StatusCode::kUnavailable);
  EXPECT_EQ(Task(a_id).lease_expires_us, 1'000'100);

  failing = "finish_job";
  EXPECT_CODE(store_->FinishTask(a_id, a->task.lease_seq, JobState::kSucceeded, ""),
              StatusCode::kUnavailable);
  EXPECT_EQ(Task(a_id).state, JobState::kRunning);

  failing = "requeue_jobs";
  EXPECT_CODE(store_->ReleaseTask(a_id, a->task.lease_seq, true, "drain", 3),
              StatusCode::kUnavailable);
  EXPECT_EQ(Task(a_id).state, JobState::kRunning);
  now_us_ = 2'000'000;  // the lease has run out
  EXPECT_CODE(store_->ExpireLeases(3, "w", "gone"), StatusCode::kUnavailable);
  const TaskRecord still = Task(a_id);
  EXPECT_EQ(still.state, JobState::kRunning);
  EXPECT_EQ(still.worker, "w");
  EXPECT_EQ(still.attempts, 1);
  EXPECT_EQ(still.lease_seq, 1);
  EXPECT_EQ(still.error, "");

  failing = "";
  ASSERT_OK(store_->RenewLease(a_id, a->task.lease_seq, 10'000'000));
  ASSERT_OK(store_->FinishTask(a_id, a->task.lease_seq, JobState::kSucceeded, ""));
  ASSERT_OK(store_->CancelQueuedTasks(job.id));
  failing = "finish_job";
  EXPECT_CODE(
      store_->SettleJob(job.id, [](JobState, const std::string&) { return std::string("end"); }),
      StatusCode::kUnavailable);
  EXPECT_EQ(Job(job.id).state, JobState::kRunning);
  ASSERT_OK_AND_ASSIGN(const auto events, store_->ListJobEvents(job.id, 0, 10));
  EXPECT_TRUE(events.empty());
  failing = "";
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(job.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->job.state, JobState::kCancelled);
}

// ---------------------------------------------------------- concurrency

TEST_P(StoreTasksTest, TwoStoresClaimingConcurrentlyNeverClaimATaskTwice) {
  if (!is_file()) GTEST_SKIP() << "needs two connections to one file";
  constexpr int kJobs = 20;
  constexpr int kTasksPerJob = 10;
  std::set<int64_t> all;
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    for (int j = 0; j < kJobs; ++j) {
      std::vector<std::string> models;
      for (int i = 0; i < kTasksPerJob; ++i) models.push_back(absl::StrCat("m", j, "_", i));
      FCA_ASSIGN_OR_RETURN(const JobRecord job, store_->CreateJob("ann", "{}", models));
      FCA_ASSIGN_OR_RETURN(const std::vector<TaskRecord> tasks, store_->ListTasks(job.id));
      for (const TaskRecord& t : tasks) all.insert(t.id);
    }
    return absl::OkStatus();
  }));
  ASSERT_EQ(all.size(), static_cast<size_t>(kJobs * kTasksPerJob));
  StoreOptions second_options = options_;
  second_options.busy_timeout_ms = 30'000;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> second, Store::Open(second_options));
  Store* stores[2] = {store_.get(), second.get()};

  std::vector<int64_t> claimed[2];
  std::atomic<int> errors{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kJobs * kTasksPerJob + 10; ++i) {
        absl::StatusOr<std::optional<TaskClaim>> claim =
            stores[k]->ClaimTask(Request(absl::StrCat("thread", k)));
        if (!claim.ok()) {
          ++errors;
          continue;
        }
        if (!claim->has_value()) break;
        claimed[k].push_back((*claim)->task.id);
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::multiset<int64_t> both(claimed[0].begin(), claimed[0].end());
  both.insert(claimed[1].begin(), claimed[1].end());
  EXPECT_EQ(both.size(), all.size()) << claimed[0].size() << " + " << claimed[1].size();
  EXPECT_EQ(std::set<int64_t>(both.begin(), both.end()), all);
  for (int k = 0; k < 2; ++k) {
    for (int64_t id : claimed[k]) {
      const TaskRecord t = Task(id);
      EXPECT_EQ(t.state, JobState::kRunning);
      EXPECT_EQ(t.lease_seq, 1);
      EXPECT_EQ(t.worker, absl::StrCat("thread", k));
    }
  }
}

}  // namespace
}  // namespace fca::storage
