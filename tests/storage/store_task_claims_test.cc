// Conformance suite, tasks (1/3): a job's tasks as created and claimed, also
// by two stores at once (on a file only). Runs on ":memory:" and a file.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_tasks_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreTaskClaimTest : public StoreTasksFixture {};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTaskClaimTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

// ------------------------------------------------------------ creation

TEST_P(StoreTaskClaimTest, CreateJobMakesOneQueuedTaskPerModel) {
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

TEST_P(StoreTaskClaimTest, ARolledBackCreateJobLeavesNoTasks) {
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

TEST_P(StoreTaskClaimTest, ClaimsTakeTheOldestJobFirstThenIndex) {
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

// A worker backed off some tasks (it refused them) is offered the others,
// and not those, by id either; other workers still get them.
TEST_P(StoreTaskClaimTest, AClaimSkipsTheTasksItIsToldTo) {
  const JobRecord job = NewJob({"m0", "m1", "m2"});
  const std::vector<TaskRecord> tasks = Tasks(job.id);
  ClaimRequest request;
  request.worker = "w1";
  request.lease_us = 1000;
  request.skip_task_ids = {tasks[0].id, tasks[2].id};
  ASSERT_OK_AND_ASSIGN(std::optional<TaskClaim> claim, store_->ClaimTask(request));
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(claim->task.model, "m1");
  ASSERT_OK_AND_ASSIGN(claim, store_->ClaimTask(request));
  EXPECT_FALSE(claim.has_value());
  request.task_id = tasks[2].id;
  ASSERT_OK_AND_ASSIGN(claim, store_->ClaimTask(request));
  EXPECT_FALSE(claim.has_value());
  const std::vector<std::string> rest = {"m0", "m2"};
  EXPECT_EQ(ClaimAll("w2"), rest);
}

TEST_P(StoreTaskClaimTest, AClaimRecordsTheLeaseAndStartsTheJobOnce) {
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

TEST_P(StoreTaskClaimTest, AClaimNeedsAWorkerAndAPositiveLease) {
  const JobRecord job = NewJob({"m"});
  EXPECT_CODE(store_->ClaimTask(Request("", 100)), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->ClaimTask(Request("w", 0)), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->ClaimTask(Request("w", -5)), StatusCode::kInvalidArgument);
  const TaskRecord t = Tasks(job.id)[0];
  EXPECT_EQ(t.state, JobState::kQueued);
  EXPECT_EQ(t.lease_seq, 0);
  EXPECT_EQ(Job(job.id).state, JobState::kQueued);
}

TEST_P(StoreTaskClaimTest, ClaimsSkipTasksOfJobsWhoseCancelWasRequested) {
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

TEST_P(StoreTaskClaimTest, ClaimsSkipTasksPlacedByAnExecutorUnlessNamed) {
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

TEST_P(StoreTaskClaimTest, AClaimByIdTakesExactlyThatQueuedTask) {
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

// ---------------------------------------------------------- concurrency

TEST_P(StoreTaskClaimTest, TwoStoresClaimingConcurrentlyNeverClaimATaskTwice) {
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
