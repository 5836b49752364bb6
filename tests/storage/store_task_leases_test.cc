// Conformance suite, tasks (2/3): leases (their sequence, renewal, expiry,
// release and the task's end under its lease), and injected faults in every
// task call. Runs on ":memory:" and a file.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_tasks_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreTaskLeaseTest : public StoreTasksFixture {};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTaskLeaseTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

// ------------------------------------------------------------- leases

TEST_P(StoreTaskLeaseTest, LeaseSeqGrowsWithEveryClaimAndNeverGoesBack) {
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

TEST_P(StoreTaskLeaseTest, AStaleLeaseCannotTouchTheNewHolder) {
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

TEST_P(StoreTaskLeaseTest, RenewLeaseExtendsTheLeaseAndReportsACancelRequest) {
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

TEST_P(StoreTaskLeaseTest, ExpireLeasesRequeuesExpiredTasksAndKeepsTheirAttempts) {
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

TEST_P(StoreTaskLeaseTest, ExpireLeasesFailsTasksThatReachedMaxAttempts) {
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

TEST_P(StoreTaskLeaseTest, ExpireLeasesWithoutACapRequeuesForever) {
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

TEST_P(StoreTaskLeaseTest, ExpireLeasesOfALostWorkerPrefixMatchesLiterally) {
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

TEST_P(StoreTaskLeaseTest, ReleaseTaskRefundsOrCountsTheAttempt) {
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
  const JobRecord settled = Settle(job.id);
  EXPECT_EQ(settled.state, JobState::kFailed);
  EXPECT_EQ(settled.error, "refused");
}

TEST_P(StoreTaskLeaseTest, ReleaseTaskWithoutACapNeverFails) {
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

TEST_P(StoreTaskLeaseTest, FinishTaskEndsTheTaskUnderItsLease) {
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

// ------------------------------------------------------ fault injection

TEST_P(StoreTaskLeaseTest, InjectedFaultsInTaskCallsWriteNothing) {
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
  const JobRecord settled = Settle(job.id);
  EXPECT_EQ(settled.state, JobState::kCancelled);
}

}  // namespace
}  // namespace fca::storage
