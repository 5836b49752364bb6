// Issue 10: jobs split into tasks that workers run under leases. Several
// in-process workers (WorkerPool) on one coordinator: two users' jobs at
// once, one job's models in parallel with the same numbers as one worker
// gives, a slow model load that blocks nobody else, a lost lease, a task
// lost too often. The worker protocol's calls one by one (claims, stale
// leases, rows stored once, how a task ends) are tests/grpc/
// task_broker_test.cc's, for in-process and remote workers alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <tuple>

#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/jobs/worker_pool.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;
using Clock = std::chrono::steady_clock;

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

v1::Job WaitForEnd(CoreEnv* env, int64_t job_id) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  v1::Job job;
  while (Clock::now() < deadline) {
    auto got = env->Get(Admin(), job_id);
    if (got.ok()) {
      job = *got;
      if (Terminal(job.state())) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return job;
}

// (model, intervention, metric) -> value of every stored row; a row stored
// twice fails the test.
using Rows = std::map<std::tuple<std::string, std::string, std::string>, double>;
Rows StoredRows(CoreEnv* env, int64_t job_id) {
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(job_id);
  request.set_page_size(1000);
  Rows rows;
  while (true) {
    auto page = env->core()->QueryResults(Admin(), request);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (const v1::Result& r : page->results()) {
      EXPECT_TRUE(
          rows.emplace(std::make_tuple(r.model(), r.intervention(), r.metric()), r.value()).second)
          << "row twice: " << r.model() << " " << r.intervention() << " " << r.metric();
    }
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  return rows;
}

// The NLL rows only: timings differ from run to run, NLLs must not.
Rows NllRows(const Rows& rows) {
  Rows out;
  for (const auto& [key, value] : rows) {
    if (std::get<2>(key) == "nll" || std::get<2>(key) == "penalty") out[key] = value;
  }
  return out;
}

std::vector<std::string> Notes(CoreEnv* env, int64_t job_id) {
  std::vector<std::string> notes;
  auto events = env->Watch(Admin(), job_id, 0);
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok()) return notes;
  for (const v1::WatchJobResponse& r : *events) {
    if (!r.event().message().empty()) notes.push_back(r.event().message());
  }
  return notes;
}

// A pool of in-process workers on the env's coordinator (the env's own
// worker is not started).
std::unique_ptr<jobs::WorkerPool> StartPool(CoreEnv* env, int workers,
                                            runtime::ModelRepository::Loader loader = nullptr) {
  jobs::WorkerPool::Options options;
  options.devices.assign(static_cast<size_t>(workers), "cpu");
  options.repository.root = testing::ModelRoot();
  options.repository.loader = std::move(loader);
  options.worker = testing::FastRunOptions().worker;
  options.worker.threads = 1;
  auto pool = jobs::WorkerPool::Create(env->coordinator(), options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  if (!pool.ok()) return nullptr;
  EXPECT_TRUE(env->coordinator()->Start().ok());
  (*pool)->Start();
  return *std::move(pool);
}

// How many tasks were RUNNING at the same time, at most, while `done` is
// false (sampled from the store).
class Concurrency {
 public:
  explicit Concurrency(storage::Store* store)
      : thread_([this, store] {
          while (!done_) {
            auto running = store->ListTasksInState(storage::JobState::kRunning, 100);
            if (running.ok()) {
              int n = static_cast<int>(running->size());
              if (n > max_) max_ = n;
              std::set<int64_t> jobs;
              for (const auto& t : *running) jobs.insert(t.job_id);
              if (static_cast<int>(jobs.size()) > max_jobs_) max_jobs_ = jobs.size();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        }) {}
  ~Concurrency() { Stop(); }
  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int max_tasks() const { return max_; }
  int max_jobs() const { return max_jobs_; }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int> max_{0};
  std::atomic<int> max_jobs_{0};
  std::thread thread_;
};

// Long enough (400 windows) that two audits overlap for a while.
v1::AuditSpec LongSpec(const std::vector<std::string>& models) {
  v1::AuditSpec spec = SmallSpec(models, "long", "calib");
  spec.set_max_eval_windows(200);
  return spec;
}

absl::Status UploadLong(CoreEnv* env, const Caller& caller) {
  FCA_RETURN_IF_ERROR(env->UploadEvalAndCalib(caller));
  return env->Upload(caller, "long", testing::RandomText(16 * 200, 5)).status();
}

TEST(WorkersTest, TwoWorkersRunTwoUsersJobsAtOnce) {
  CoreEnv env;
  ASSERT_TRUE(UploadLong(&env, Alice()).ok());
  ASSERT_TRUE(UploadLong(&env, Bob()).ok());
  auto a = env.Submit(Alice(), LongSpec({testing::kGateA}));
  auto b = env.Submit(Bob(), LongSpec({testing::kGateB}));
  ASSERT_TRUE(a.ok() && b.ok());
  Concurrency seen(env.store());
  auto pool = StartPool(&env, 2);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(WaitForEnd(&env, a->id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(WaitForEnd(&env, b->id()).state(), v1::JOB_STATE_SUCCEEDED);
  seen.Stop();
  EXPECT_EQ(seen.max_jobs(), 2) << "the two jobs never ran at the same time";
}

// One job's models run in parallel on two workers and give, bitwise, the
// NLLs one worker gives running them one after the other.
TEST(WorkersTest, OneJobsModelsRunInParallelWithTheSameNumbers) {
  Rows serial;
  {
    CoreEnv env;
    ASSERT_TRUE(UploadLong(&env, Alice()).ok());
    auto job = env.Submit(Alice(), LongSpec({testing::kGateA, testing::kGateB}));
    ASSERT_TRUE(job.ok()) << job.status();
    auto end = env.RunNext();
    ASSERT_TRUE(end.ok()) << end.status();
    ASSERT_EQ(end->state(), v1::JOB_STATE_SUCCEEDED) << end->error();
    serial = NllRows(StoredRows(&env, job->id()));
  }
  CoreEnv env;
  ASSERT_TRUE(UploadLong(&env, Alice()).ok());
  auto job = env.Submit(Alice(), LongSpec({testing::kGateA, testing::kGateB}));
  ASSERT_TRUE(job.ok()) << job.status();
  Concurrency seen(env.store());
  auto pool = StartPool(&env, 2);
  ASSERT_NE(pool, nullptr);
  ASSERT_EQ(WaitForEnd(&env, job->id()).state(), v1::JOB_STATE_SUCCEEDED);
  seen.Stop();
  EXPECT_EQ(seen.max_tasks(), 2) << "the job's two models never ran at the same time";
  const Rows parallel = NllRows(StoredRows(&env, job->id()));
  EXPECT_GT(parallel.size(), 10u);
  EXPECT_EQ(parallel, serial);  // exact doubles
}

// While one worker's load of fg_a hangs, the other worker audits fg_b and
// the listing answers.
TEST(WorkersTest, ASlowLoadBlocksNeitherTheListingNorAnotherModelsAudit) {
  absl::Notification entered, release;
  auto loader = [&](const std::string& dir, const std::string& name,
                    const engine::ComputeOptions& compute) {
    if (name == testing::kGateA) {
      entered.Notify();
      release.WaitForNotification();
    }
    return engine::LoadModel(dir, name, compute);
  };
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto slow = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(slow.ok());
  auto pool = StartPool(&env, 2, loader);
  ASSERT_NE(pool, nullptr);
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  auto fast = env.Submit(Alice(), SmallSpec({testing::kGateB}, "eval", "calib"));
  ASSERT_TRUE(fast.ok());
  const v1::Job fast_end = WaitForEnd(&env, fast->id());
  auto listed = env.core()->ListModels(Alice());
  const bool slow_still_running = !Terminal(env.Get(Admin(), slow->id())->state());
  release.Notify();
  EXPECT_EQ(fast_end.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_GE(listed->models_size(), 3);
  EXPECT_TRUE(slow_still_running);
  EXPECT_EQ(WaitForEnd(&env, slow->id()).state(), v1::JOB_STATE_SUCCEEDED);
}

// A worker that claims a task and goes silent loses it when its lease runs
// out; another worker runs it; no row is stored twice.
TEST(WorkersTest, ALostLeaseRunsTheTaskAgainElsewhere) {
  testing::RunOptions options = testing::FastRunOptions();
  options.coordinator.lease = std::chrono::milliseconds(300);
  CoreEnv env({}, options);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA, testing::kGateB}, "eval", "calib"));
  ASSERT_TRUE(job.ok());
  auto silent = env.coordinator()->Claim("node7:4242", 0);  // then never renews
  ASSERT_TRUE(silent.ok() && silent->has_value());
  ASSERT_TRUE(env.Start().ok());
  const v1::Job end = WaitForEnd(&env, job->id());
  EXPECT_EQ(end.state(), v1::JOB_STATE_SUCCEEDED) << end.error();
  EXPECT_EQ(StoredRows(&env, job->id()).size() > 0, true);
  bool noted = false;
  for (const std::string& n : Notes(&env, job->id())) {
    noted = noted || (n.find("node7:4242 lost its lease") != std::string::npos);
  }
  EXPECT_TRUE(noted) << "no event says the lease was lost";
  // What the silent worker says when it comes back is refused: the worker
  // protocol's suite (tests/grpc/task_broker_test.cc) checks every call.
  EXPECT_EQ(env.coordinator()->Renew((*silent)->lease).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A worker that keeps dying with the task: after max_attempts claims the
// task fails with the reason, and so does the job.
TEST(WorkersTest, ATaskLostMaxAttemptsTimesFailsTheJob) {
  testing::RunOptions options = testing::FastRunOptions();
  options.coordinator.lease = std::chrono::milliseconds(50);
  options.coordinator.max_attempts = 2;
  CoreEnv env({}, options);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::optional<runtime::TaskAssignment>> claim;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    do {
      env.coordinator()->SweepOnce();
      claim = env.coordinator()->Claim("doomed", 0);
    } while (claim.ok() && !claim->has_value() && Clock::now() < deadline);
    ASSERT_TRUE(claim.ok() && claim->has_value()) << "attempt " << attempt;
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
  }
  env.coordinator()->SweepOnce();
  const v1::Job end = WaitForEnd(&env, job->id());
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.error(), HasSubstr("lost 2 times"));
}

// Issue 22: a worker that cannot run a task because of its own state
// refuses it (TaskBroker::Refuse) instead of failing it: weights that differ
// from the coordinator's, a model that does not fit its memory budget. The
// task is queued again without spending an attempt while another worker is
// live, and runs on that one.
TEST(WorkersTest, AWorkerRefusesATaskForItsOwnStateAndAnotherRunsIt) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok());
  jobs::Coordinator* coordinator = env.coordinator();
  coordinator->WorkerSeen("node9");  // live, and it has refused nothing
  // The env's worker gets the coordinator's weights hash changed: its own
  // weights differ.
  auto claim = coordinator->ClaimChecked(env.worker()->options().name, 0, true);
  ASSERT_TRUE(claim.ok() && claim->has_value()) << claim.status();
  runtime::TaskAssignment stale = **claim;
  ASSERT_EQ(stale.weights_sha256.size(), 64u);
  stale.weights_sha256 = std::string(64, '0');
  env.worker()->RunTask(stale);
  auto task = env.store()->GetTask(stale.lease.task_id);
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(task->state, storage::JobState::kQueued);
  EXPECT_EQ(task->attempts, 0);
  // A worker whose memory budget is too small for the model.
  runtime::ModelRepository::Options small;
  small.root = testing::ModelRoot();
  small.memory_budget_bytes = 1;
  auto small_models = runtime::ModelRepository::Open(small);
  ASSERT_TRUE(small_models.ok());
  runtime::Worker::Options options = testing::FastRunOptions().worker;
  options.name = "small";
  runtime::Worker tight(coordinator, small_models->get(), options);
  auto ran = tight.RunOne(0);
  ASSERT_TRUE(ran.ok() && *ran) << ran.status();
  task = env.store()->GetTask(stale.lease.task_id);
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(task->state, storage::JobState::kQueued);
  EXPECT_EQ(task->attempts, 0);
  // Both are backed off; node9 runs it.
  auto none = coordinator->Claim(env.worker()->options().name, 0);
  ASSERT_TRUE(none.ok() && !none->has_value());
  runtime::Worker node9(coordinator, env.models(), [] {
    runtime::Worker::Options o = testing::FastRunOptions().worker;
    o.name = "node9";
    return o;
  }());
  ran = node9.RunOne(0);
  ASSERT_TRUE(ran.ok() && *ran) << ran.status();
  const v1::Job end = WaitForEnd(&env, job->id());
  EXPECT_EQ(end.state(), v1::JOB_STATE_SUCCEEDED) << end.error();
  std::string notes;
  for (const std::string& n : Notes(&env, job->id())) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("worker local/0 refused it: the weights of model"));
  EXPECT_THAT(notes, HasSubstr("worker small refused it: model '" + std::string(testing::kGateA) +
                               "' needs about"));
  ASSERT_EQ(end.tasks_size(), 1);
  EXPECT_EQ(end.tasks(0).provenance().worker(), "node9");
  EXPECT_EQ(end.tasks(0).provenance().attempt(), 1);
}

}  // namespace
}  // namespace fca::core
