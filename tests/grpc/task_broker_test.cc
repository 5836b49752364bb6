// Long file: one contract run against both implementations of the worker protocol.
// The worker protocol (server/core/task_broker.h) as one contract, run
// against both of its implementations: the Coordinator itself (the server's
// own worker threads) and a RemoteBroker over the WorkerService of a real
// gRPC server on 127.0.0.1 (fca-worker), each over a coordinator on a
// SQLite file in a temporary folder. Where the two differ by design
// (worker_service_impl.h, coordinator.h), the test says so with Remote().
//
// The store's clock is the test's (FakeClock): leases run out when the test
// moves it, never by waiting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "server/grpc/remote_broker.h"
#include "server/jobs/mapping.h"
#include "tests/grpc/grpc_env.h"
#include "tests/testing/test_models.h"

namespace fca::grpc_server::testing {
namespace {

using core::testing::Alice;
using core::testing::Bob;
using core::testing::kDense;
using core::testing::kGateA;
using core::testing::kGateB;
using core::testing::RandomText;
using runtime::Lease;
using runtime::TaskAssignment;
using runtime::TaskBroker;
using ::testing::HasSubstr;

constexpr char kWorker[] = "node1:100";
constexpr char kOther[] = "node2:200";
constexpr char kThird[] = "node3:300";

enum class Kind { kCoordinator, kRemote };

std::string Name(Kind kind) { return kind == Kind::kRemote ? "RemoteBroker" : "Coordinator"; }
std::string KindName(const ::testing::TestParamInfo<Kind>& info) { return Name(info.param); }
void PrintTo(Kind kind, std::ostream* os) { *os << Name(kind); }

// Ticks on every read (stored times stay ordered); Advance jumps.
class FakeClock {
 public:
  int64_t Now() { return now_.fetch_add(1); }
  void Advance(std::chrono::microseconds by) { now_ += by.count(); }

 private:
  std::atomic<int64_t> now_{int64_t{1700000000} * 1000000};
};

engine::ResultRow Row(const std::string& model, const std::string& intervention,
                      const std::string& metric, double value) {
  engine::ResultRow row;
  row.model = model;
  row.intervention = intervention;
  row.metric = metric;
  row.value = value;
  row.n = 6;
  return row;
}

class TaskBrokerTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    ServerConfig config;
    config.store.path = engine::testing::TempDir("task_broker") + "/fca.db";
    config.store.now_us = [this] { return clock_.Now(); };
    config.run.coordinator.now_us = [this] { return clock_.Now(); };
    config.run.coordinator.max_attempts = 2;
    env_ = std::make_unique<GrpcEnv>(config);
    ASSERT_TRUE(env_->started());
    ASSERT_TRUE(core_env()->UploadEvalAndCalib(Alice()).ok());
  }

  bool Remote() const { return GetParam() == Kind::kRemote; }
  core::testing::CoreEnv* core_env() { return env_->core_env(); }
  jobs::Coordinator* coordinator() { return core_env()->coordinator(); }
  storage::Store* store() { return core_env()->store(); }

  // The broker `worker` talks through: the coordinator, or a RemoteBroker of
  // its own (one serves one worker), registered as fca-worker does.
  TaskBroker* Broker(const std::string& worker = kWorker) {
    if (!Remote()) return coordinator();
    std::unique_ptr<RemoteBroker>& broker = remotes_[worker];
    if (broker == nullptr) {
      RemoteBroker::Options options;
      options.address = "127.0.0.1:" + std::to_string(env_->port());
      options.worker = worker;
      auto created = RemoteBroker::Create(options);
      EXPECT_TRUE(created.ok()) << created.status();
      broker = *std::move(created);
      EXPECT_TRUE(broker->Register("cpu", "test-host", "test").ok());
    }
    return broker.get();
  }
  // Who the store says holds a worker's lease: a remote worker holds it as
  // "<name>@<its key's user>" (auth is off: every caller is "local").
  std::string Holder(const std::string& worker = kWorker) const {
    return Remote() ? worker + "@local" : worker;
  }

  absl::StatusOr<std::optional<TaskAssignment>> Claim(const std::string& worker = kWorker,
                                                      int64_t task_id = 0) {
    return Broker(worker)->Claim(worker, task_id);
  }
  // A claim that must return a task (nullopt, with a failure, otherwise).
  std::optional<TaskAssignment> MustClaim(const std::string& worker = kWorker,
                                          int64_t task_id = 0) {
    absl::StatusOr<std::optional<TaskAssignment>> claim = Claim(worker, task_id);
    EXPECT_TRUE(claim.ok()) << claim.status();
    EXPECT_TRUE(claim.ok() && claim->has_value()) << worker << " got no task";
    return claim.ok() ? *claim : std::nullopt;
  }

  int64_t Submit(const std::vector<std::string>& models, const std::string& dense_twin = "",
                 const core::Caller& caller = Alice()) {
    v1::AuditSpec spec = core::testing::SmallSpec(models, "eval", "calib");
    spec.set_dense_twin(dense_twin);
    absl::StatusOr<v1::Job> job = core_env()->Submit(caller, spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : 0;
  }
  storage::TaskRecord Task(int64_t id) {
    absl::StatusOr<storage::TaskRecord> task = store()->GetTask(id);
    EXPECT_TRUE(task.ok()) << task.status();
    return task.ok() ? *task : storage::TaskRecord();
  }
  v1::Job Job(int64_t id) {
    absl::StatusOr<v1::Job> job = core_env()->Get(core::testing::Admin(), id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }
  std::string WeightsHash(const std::string& model) {
    absl::StatusOr<std::string> hash = core_env()->models()->WeightsHash(model);
    EXPECT_TRUE(hash.ok()) << hash.status();
    return hash.ok() ? *hash : "";
  }
  // Moves the clock past `fraction` of a lease and lets the coordinator
  // sweep (leases that ran out go back to the queue).
  void Pass(double fraction) {
    clock_.Advance(std::chrono::duration_cast<std::chrono::microseconds>(
        coordinator()->options().lease * fraction));
    coordinator()->SweepOnce();
  }
  std::vector<v1::JobEvent> Events(int64_t job_id) {
    std::vector<v1::JobEvent> out;
    absl::StatusOr<std::vector<storage::JobEvent>> events = store()->ListJobEvents(job_id, 0, 1000);
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return out;
    for (const storage::JobEvent& e : *events) {
      EXPECT_TRUE(out.emplace_back().ParseFromString(e.payload));
    }
    return out;
  }
  // (model, intervention, metric) -> the stored row.
  std::map<std::tuple<std::string, std::string, std::string>, storage::ResultRow> StoredRows(
      int64_t job_id) {
    storage::ResultFilter filter;
    filter.job_id = job_id;
    absl::StatusOr<storage::ResultPage> page = store()->QueryResults(filter, 1000, "");
    EXPECT_TRUE(page.ok()) << page.status();
    std::map<std::tuple<std::string, std::string, std::string>, storage::ResultRow> rows;
    if (!page.ok()) return rows;
    for (const storage::ResultRow& r : page->rows) {
      EXPECT_TRUE(rows.emplace(std::make_tuple(r.model, r.intervention, r.metric), r).second);
    }
    return rows;
  }

  // Every call on `lease` through `worker`'s broker is refused as a lost
  // lease, and changes nothing.
  void ExpectLost(const Lease& lease, const std::string& worker) {
    TaskBroker* broker = Broker(worker);
    const auto lost = absl::StatusCode::kFailedPrecondition;
    EXPECT_EQ(broker->Renew(lease).status().code(), lost);
    engine::AuditProgress progress;
    progress.phase = "live";
    progress.fraction = 0.5;
    EXPECT_EQ(broker->ReportProgress(lease, progress).code(), lost);
    EXPECT_EQ(broker->ReportNote(lease, "a stale note").code(), lost);
    EXPECT_EQ(
        broker->ReportRows(lease, kGateA, WeightsHash(kGateA), {Row(kGateA, "correct", "nll", 1.0)})
            .code(),
        lost);
    EXPECT_EQ(broker->Finish(lease, absl::OkStatus(), {}).code(), lost);
    EXPECT_EQ(broker->Release(lease, absl::UnavailableError("draining"), true).code(), lost);
    EXPECT_EQ(broker->Refuse(lease, absl::FailedPreconditionError("stale")).code(), lost);
    EXPECT_EQ(broker->ReadDataset(lease, false).status().code(), lost);
    EXPECT_EQ(broker->ReadDataset(lease, true).status().code(), lost);
    // The cache calls report no error: a lost lease reads a miss, writes
    // nothing.
    const engine::CoefficientCacheKey key{WeightsHash(kGateA), "w1", "float32", "cpu"};
    broker->PutCoefficients(lease, key, "stale bytes");
    EXPECT_FALSE(broker->GetCoefficients(lease, key).has_value());
  }

  FakeClock clock_;  // outlives the store
  std::unique_ptr<GrpcEnv> env_;
  std::map<std::string, std::unique_ptr<RemoteBroker>> remotes_;
};

INSTANTIATE_TEST_SUITE_P(Both, TaskBrokerTest, ::testing::Values(Kind::kCoordinator, Kind::kRemote),
                         KindName);

// ------------------------------------------------------------------ Claim

TEST_P(TaskBrokerTest, ClaimTakesTheOldestClaimableTaskThenNone) {
  const int64_t first = Submit({kGateA, kGateB});
  const int64_t second = Submit({kGateB});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job_id, first);
  EXPECT_EQ(a->index, 0);
  EXPECT_EQ(a->task_count, 2);
  EXPECT_EQ(a->attempt, 1);
  EXPECT_EQ(a->model, kGateA);
  EXPECT_EQ(a->lease_duration, coordinator()->options().lease);
  EXPECT_EQ(a->spec.models_size(), 2);
  EXPECT_EQ(a->spec.eval_dataset(), "eval");
  const storage::TaskRecord held = Task(a->lease.task_id);
  EXPECT_EQ(held.state, storage::JobState::kRunning);
  EXPECT_EQ(held.worker, Holder(kWorker));
  EXPECT_EQ(held.lease_seq, a->lease.lease_seq);

  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(std::make_tuple(b->job_id, b->index, b->model), std::make_tuple(first, 1, kGateB));
  std::optional<TaskAssignment> c = MustClaim(kThird);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(std::make_tuple(c->job_id, c->index, c->model), std::make_tuple(second, 0, kGateB));
  absl::StatusOr<std::optional<TaskAssignment>> none = Claim("node4:400");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

TEST_P(TaskBrokerTest, ClaimOfATaskIdTakesExactlyThatTask) {
  const int64_t job = Submit({kGateA, kGateB});
  absl::StatusOr<std::vector<storage::TaskRecord>> tasks = store()->ListTasks(job);
  ASSERT_TRUE(tasks.ok() && tasks->size() == 2u);
  const int64_t second = (*tasks)[1].id;
  std::optional<TaskAssignment> b = MustClaim(kWorker, second);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->lease.task_id, second);
  EXPECT_EQ(b->model, kGateB);
  // Held now: nobody else gets it; an id that names no task gives nothing.
  for (int64_t id : {second, int64_t{999999}}) {
    absl::StatusOr<std::optional<TaskAssignment>> none = Claim(kOther, id);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value()) << id;
  }
  // The oldest claimable one is still the first.
  std::optional<TaskAssignment> a = MustClaim(kOther);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->lease.task_id, (*tasks)[0].id);
}

// Documented difference: the coordinator hands its weights hashes to remote
// workers only (in-process workers share its model folder).
TEST_P(TaskBrokerTest, ClaimCarriesTheWeightsHashesForRemoteWorkersOnly) {
  Submit({kGateA}, kDense);
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  if (Remote()) {
    EXPECT_EQ(a->weights_sha256, WeightsHash(kGateA));
    EXPECT_EQ(a->dense_twin_weights_sha256, WeightsHash(kDense));
    EXPECT_EQ(a->weights_sha256.size(), 64u);
  } else {
    EXPECT_EQ(a->weights_sha256, "");
    EXPECT_EQ(a->dense_twin_weights_sha256, "");
  }
}

// Documented difference (Coordinator::ReleaseLost): a remote worker asks for
// a task only when it runs none, so a claim first gives back what it still
// holds (a claim whose reply it never got), counting the attempt. The
// coordinator's own threads are trusted to hold what they hold.
TEST_P(TaskBrokerTest, ARemoteClaimGivesBackWhatTheWorkerStillHolds) {
  Submit({kGateA, kGateB});
  std::optional<TaskAssignment> first = MustClaim(kWorker);
  std::optional<TaskAssignment> second = MustClaim(kWorker);
  ASSERT_TRUE(first.has_value() && second.has_value());
  if (Remote()) {
    // The first task went back to the queue and, the oldest, came back.
    EXPECT_EQ(second->lease.task_id, first->lease.task_id);
    EXPECT_EQ(second->attempt, 2);
    EXPECT_EQ(Broker(kWorker)->Renew(first->lease).status().code(),
              absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_EQ(second->model, kGateB);
    EXPECT_EQ(Task(first->lease.task_id).state, storage::JobState::kRunning);
    EXPECT_TRUE(Broker(kWorker)->Renew(first->lease).ok());
  }
}

// ------------------------------------------------------------------ Renew

TEST_P(TaskBrokerTest, RenewExtendsTheLeaseAndSaysStopOnceTheJobIsCancelled) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  Pass(0.75);
  absl::StatusOr<bool> stop = Broker()->Renew(a->lease);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_FALSE(*stop);
  // Past the claim's lease, within the renewed one: still held.
  Pass(0.75);
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kRunning);
  ASSERT_TRUE(Broker()->Renew(a->lease).ok());

  v1::CancelJobRequest cancel;
  cancel.set_job_id(job);
  ASSERT_TRUE(core_env()->core()->CancelJob(Alice(), cancel).ok());
  stop = Broker()->Renew(a->lease);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(*stop);
}

// ------------------------------------------------------- lost leases

TEST_P(TaskBrokerTest, EveryCallWithALeaseThatRanOutIsFailedPrecondition) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> stale = MustClaim(kWorker);
  ASSERT_TRUE(stale.has_value());
  Pass(1.5);  // never renewed: back in the queue
  EXPECT_EQ(Task(stale->lease.task_id).state, storage::JobState::kQueued);
  std::optional<TaskAssignment> fresh = MustClaim(kOther);
  ASSERT_TRUE(fresh.has_value());
  ASSERT_EQ(fresh->lease.task_id, stale->lease.task_id);
  EXPECT_GT(fresh->lease.lease_seq, stale->lease.lease_seq);
  EXPECT_EQ(fresh->attempt, 2);

  ExpectLost(stale->lease, kWorker);
  // The new holder is untouched: nothing the stale worker sent landed.
  EXPECT_TRUE(Broker(kOther)->Renew(fresh->lease).ok());
  EXPECT_EQ(Task(fresh->lease.task_id).state, storage::JobState::kRunning);
  EXPECT_TRUE(StoredRows(job).empty());
  const engine::CoefficientCacheKey key{WeightsHash(kGateA), "w1", "float32", "cpu"};
  EXPECT_FALSE(Broker(kOther)->GetCoefficients(fresh->lease, key).has_value());
  for (const v1::JobEvent& e : Events(job)) EXPECT_NE(e.message(), "a stale note");
}

TEST_P(TaskBrokerTest, EveryCallAfterTheTaskEndedIsFailedPrecondition) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(Broker()->Finish(a->lease, absl::OkStatus(), {}).ok());
  ExpectLost(a->lease, kWorker);
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kSucceeded);
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_SUCCEEDED);
}

// Documented difference: the coordinator knows a lease by its task and
// sequence number alone (its threads do not share leases); the
// WorkerService also checks that the calling worker holds it, and says
// FAILED_PRECONDITION for a task that does not exist (the caller holds no
// lease on it) where the coordinator says NOT_FOUND.
TEST_P(TaskBrokerTest, OnlyTheWorkerServiceChecksWhoCalls) {
  Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  const absl::StatusOr<bool> borrowed = Broker(kOther)->Renew(a->lease);
  const absl::StatusOr<bool> unknown = Broker(kOther)->Renew(Lease{999999, 1});
  if (Remote()) {
    EXPECT_EQ(borrowed.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_TRUE(borrowed.ok()) << borrowed.status();
    EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  }
}

// --------------------------------------------------- progress, notes, rows

TEST_P(TaskBrokerTest, ProgressAndNotesBecomeTheJobsEvents) {
  const int64_t job = Submit({kGateA, kGateB});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  engine::AuditProgress progress;
  progress.phase = "live";
  progress.model = kGateA;
  progress.model_count = 1;
  progress.windows_done = 3;
  progress.windows_total = 6;
  progress.fraction = 0.5;
  ASSERT_TRUE(Broker()->ReportProgress(a->lease, progress).ok());
  ASSERT_TRUE(Broker()->ReportNote(a->lease, "model fg_a: loaded").ok());
  const std::vector<v1::JobEvent> events = Events(job);
  ASSERT_GE(events.size(), 2u);
  const v1::JobEvent& p = events[events.size() - 2];
  ASSERT_TRUE(p.has_progress());
  EXPECT_EQ(p.progress().phase(), "live");
  EXPECT_EQ(p.progress().windows_done(), 3);
  EXPECT_EQ(p.progress().model_count(), 2) << "the job's, not the task's";
  EXPECT_DOUBLE_EQ(p.progress().fraction(), 0.25) << "half of one task of two";
  EXPECT_EQ(events.back().message(), "model fg_a: loaded");
}

// The timing's own estimate of its time left (its budget) reaches the
// job's ETA, which the fraction alone would put near 0.
TEST_P(TaskBrokerTest, TheTimingsTimeLeftBecomesTheJobsEta) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  engine::AuditProgress progress;
  progress.phase = "timing";
  progress.model = kGateA;
  progress.model_count = 1;
  progress.windows_done = 12;
  progress.windows_total = 200;
  progress.fraction = 0.95;
  progress.phase_seconds_left = 42;
  ASSERT_TRUE(Broker()->ReportProgress(a->lease, progress).ok());
  const std::vector<v1::JobEvent> events = Events(job);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_progress());
  EXPECT_EQ(events.back().progress().phase(), "timing");
  EXPECT_EQ(events.back().progress().windows_total(), 200);
  EXPECT_GE(events.back().progress().eta_seconds(), 42);
}

TEST_P(TaskBrokerTest, RowsAreStoredOnceAndOnlyForTheTasksModels) {
  const int64_t job = Submit({kGateA, kGateB}, kDense);
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(a.has_value() && b.has_value());
  engine::ResultRow nll = Row(kGateA, "correct", "nll", 1.5);
  nll.ci_low = 1.25;
  nll.ci_high = 1.75;
  engine::ResultRow undefined = Row(kGateA, "cross_input", "retention", 0);
  undefined.defined = false;
  ASSERT_TRUE(
      Broker(kWorker)->ReportRows(a->lease, kGateA, WeightsHash(kGateA), {nll, undefined}).ok());
  // Again, with other numbers (a retry after a lost reply): skipped.
  ASSERT_TRUE(
      Broker(kWorker)
          ->ReportRows(a->lease, kGateA, WeightsHash(kGateA), {Row(kGateA, "correct", "nll", 9.0)})
          .ok());
  // Both tasks time the dense twin: the first rows stored stand.
  ASSERT_TRUE(Broker(kWorker)
                  ->ReportRows(a->lease, kDense, WeightsHash(kDense),
                               {Row(kDense, "execution", "slowdown", 3.0)})
                  .ok());
  ASSERT_TRUE(Broker(kOther)
                  ->ReportRows(b->lease, kDense, WeightsHash(kDense),
                               {Row(kDense, "execution", "slowdown", 4.0)})
                  .ok());
  // Task a audits fg_a: rows of fg_b are not its to report.
  EXPECT_EQ(
      Broker(kWorker)
          ->ReportRows(a->lease, kGateB, WeightsHash(kGateB), {Row(kGateB, "correct", "nll", 2.0)})
          .code(),
      absl::StatusCode::kPermissionDenied);

  const auto rows = StoredRows(job);
  ASSERT_EQ(rows.size(), 3u);
  const storage::ResultRow& stored = rows.at({kGateA, "correct", "nll"});
  EXPECT_EQ(stored.value, 1.5);
  EXPECT_EQ(stored.ci_low, 1.25);
  EXPECT_EQ(stored.ci_high, 1.75);
  EXPECT_EQ(stored.n, 6);
  EXPECT_TRUE(stored.defined);
  EXPECT_EQ(stored.weights_sha256, WeightsHash(kGateA));
  EXPECT_EQ(stored.dataset_sha256.size(), 64u);
  EXPECT_EQ(stored.calib_sha256.size(), 64u);
  EXPECT_FALSE(rows.at({kGateA, "cross_input", "retention"}).defined);
  EXPECT_EQ(rows.at({kDense, "execution", "slowdown"}).value, 3.0);
}

// ---------------------------------------------------------------- Finish

TEST_P(TaskBrokerTest, FinishOkSucceedsAndStoresTheProvenanceUnderTheHolder) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  v1::TaskProvenance provenance;
  provenance.set_worker("somebody else");
  provenance.set_host("test-host");
  ASSERT_TRUE(Broker()->Finish(a->lease, absl::OkStatus(), provenance).ok());
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kSucceeded);
  const v1::Job end = Job(job);
  EXPECT_EQ(end.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(end.tasks_size(), 1);
  EXPECT_EQ(end.tasks(0).provenance().worker(), Holder());
  EXPECT_EQ(end.tasks(0).provenance().host(), "test-host");
}

TEST_P(TaskBrokerTest, FinishCancelledCancelsTheTask) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(Broker()->Finish(a->lease, absl::CancelledError("stopped"), {}).ok());
  const storage::TaskRecord task = Task(a->lease.task_id);
  EXPECT_EQ(task.state, storage::JobState::kCancelled);
  EXPECT_EQ(task.error, "");
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_CANCELLED);
}

// A task that fails fails its job with its reason and cancels the job's
// other tasks.
TEST_P(TaskBrokerTest, FinishWithAnErrorFailsTheTaskAndStopsItsJob) {
  const int64_t job = Submit({kGateA, kGateB});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(Broker()->Finish(a->lease, absl::InternalError("the GPU caught fire"), {}).ok());
  const v1::Job end = Job(job);
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.error(), HasSubstr("the GPU caught fire"));
  // GetJob shows the tasks, in spec order, with the failure's reason.
  ASSERT_EQ(end.tasks_size(), 2);
  EXPECT_EQ(end.tasks(0).model(), kGateA);
  EXPECT_EQ(end.tasks(0).state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.tasks(0).error(), HasSubstr("INTERNAL: the GPU caught fire"));
  EXPECT_EQ(end.tasks(1).model(), kGateB);
  EXPECT_EQ(end.tasks(1).state(), v1::JOB_STATE_CANCELLED);
}

// --------------------------------------------------------------- Release

TEST_P(TaskBrokerTest, ReleaseWithRefundQueuesTheTaskWithoutCountingTheClaim) {
  Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(Broker(kWorker)->Release(a->lease, absl::UnavailableError("draining"), true).ok());
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kQueued);
  EXPECT_EQ(Task(a->lease.task_id).attempts, 0);
  std::optional<TaskAssignment> again = MustClaim(kOther);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->lease.task_id, a->lease.task_id);
  EXPECT_EQ(again->attempt, 1);
  EXPECT_EQ(Broker(kWorker)->Renew(a->lease).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A release without refund (a claim the worker lost) counts: with
// max_attempts 2, the second fails the task and its job with the reason.
TEST_P(TaskBrokerTest, ReleaseWithoutRefundCountsTheClaimUpToTheCap) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  const absl::Status refusal = absl::FailedPreconditionError("the weights differ");
  ASSERT_TRUE(Broker(kWorker)->Release(a->lease, refusal, false).ok());
  storage::TaskRecord task = Task(a->lease.task_id);
  EXPECT_EQ(task.state, storage::JobState::kQueued);
  EXPECT_EQ(task.attempts, 1);
  EXPECT_THAT(task.error, HasSubstr("the weights differ"));
  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->attempt, 2);
  ASSERT_TRUE(Broker(kOther)->Release(b->lease, refusal, false).ok());
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kFailed);
  const v1::Job end = Job(job);
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.error(), HasSubstr("the weights differ"));
}

// ---------------------------------------------------------------- Refuse

// A worker's refusal (its own state) is no attempt of the task: the task is
// queued again with its attempts as before the claim, the refusal is a job
// event naming the worker and why, the refusing worker is not offered the
// task during its back-off, and another worker is.
TEST_P(TaskBrokerTest, RefusalCostsNoAttemptAndTheTaskGoesToAnotherWorker) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  absl::StatusOr<std::optional<TaskAssignment>> none = Claim(kOther);  // kOther is live
  ASSERT_TRUE(none.ok() && !none->has_value());
  const absl::Status stale = absl::FailedPreconditionError("the weights differ on this worker");
  ASSERT_TRUE(Broker(kWorker)->Refuse(a->lease, stale).ok());
  storage::TaskRecord task = Task(a->lease.task_id);
  EXPECT_EQ(task.state, storage::JobState::kQueued);
  EXPECT_EQ(task.attempts, 0);
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_RUNNING);
  std::string notes;
  for (const v1::JobEvent& e : Events(job)) notes += e.message() + "\n";
  EXPECT_THAT(notes, HasSubstr("worker " + Holder(kWorker) +
                               " refused it: the weights differ on this worker; not offered to "
                               "it again for 1 s"));
  // The refuser's lease is gone; it is not offered the task again.
  EXPECT_EQ(Broker(kWorker)->Renew(a->lease).status().code(),
            absl::StatusCode::kFailedPrecondition);
  none = Claim(kWorker);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  none = Claim(kWorker, a->lease.task_id);  // not by its id either
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->lease.task_id, a->lease.task_id);
  EXPECT_EQ(b->attempt, 1);
  ASSERT_TRUE(Broker(kOther)->Finish(b->lease, absl::OkStatus(), {}).ok());
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_SUCCEEDED);
}

// The back-off starts at RefusalBackoff::kDefaultInitial (1 s) and doubles
// with each refusal of the same task by the same worker; the task is offered
// to that worker again once it has passed. Other tasks are offered to it
// meanwhile.
TEST_P(TaskBrokerTest, TheRefusersBackOffDoublesAndEnds) {
  const int64_t refused_job = Submit({kGateA});
  const int64_t busy_job = Submit({kGateB});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->job_id, refused_job);
  // kOther is busy with the other job all along, so it is live and has not
  // refused: the refused task waits.
  std::optional<TaskAssignment> busy = MustClaim(kOther);
  ASSERT_TRUE(busy.has_value());
  ASSERT_EQ(busy->job_id, busy_job);
  const absl::Status oom = absl::ResourceExhaustedError("out of memory");
  const auto advance = [&](std::chrono::milliseconds by) {
    clock_.Advance(by);
    ASSERT_TRUE(Broker(kOther)->Renew(busy->lease).ok());
  };
  int64_t seq = a->lease.lease_seq;
  for (const auto backoff : {std::chrono::milliseconds(1000), std::chrono::milliseconds(2000),
                             std::chrono::milliseconds(4000)}) {
    ASSERT_TRUE(Broker(kWorker)->Refuse(Lease{a->lease.task_id, seq}, oom).ok());
    EXPECT_EQ(Task(a->lease.task_id).attempts, 0);
    advance(backoff - std::chrono::milliseconds(100));
    absl::StatusOr<std::optional<TaskAssignment>> none = Claim(kWorker);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value()) << backoff.count();
    advance(std::chrono::milliseconds(200));
    std::optional<TaskAssignment> again = MustClaim(kWorker);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->lease.task_id, a->lease.task_id);
    EXPECT_EQ(again->attempt, 1);
    seq = again->lease.lease_seq;
  }
  EXPECT_EQ(Job(refused_job).state(), v1::JOB_STATE_RUNNING);
}

// Once every live worker has refused the task, it waits out the refusal
// grace for a worker that can run it; a refusal after that fails it, and its
// job, naming the workers and their reasons. A worker not seen for a lease is
// not live and is not waited for.
TEST_P(TaskBrokerTest, TaskEveryLiveWorkerRefusedFailsNamingThem) {
  absl::StatusOr<std::optional<TaskAssignment>> none = Claim(kThird);
  ASSERT_TRUE(none.ok() && !none->has_value());
  Pass(1.5);  // kThird is gone
  const int64_t job = Submit({kGateA, kGateB});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->model, kGateA);
  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->model, kGateB);
  ASSERT_TRUE(Broker(kOther)->Finish(b->lease, absl::OkStatus(), {}).ok());
  ASSERT_TRUE(
      Broker(kWorker)->Refuse(a->lease, absl::FailedPreconditionError("stale weights")).ok());
  std::optional<TaskAssignment> c = MustClaim(kOther);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->lease.task_id, a->lease.task_id);
  ASSERT_TRUE(Broker(kOther)->Refuse(c->lease, absl::NotFoundError("no such model here")).ok());
  // Every live worker refused: the task waits (a good worker may be
  // restarting), and says so.
  EXPECT_EQ(Job(job).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Task(a->lease.task_id).state, storage::JobState::kQueued);
  bool says_it_waits = false;
  for (const v1::JobEvent& e : Events(job)) {
    says_it_waits = says_it_waits ||
                    e.message().find("every live worker has refused it; it waits up to 120 s") !=
                        std::string::npos;
  }
  EXPECT_TRUE(says_it_waits);
  // Past the grace (kWorker is no longer live by then), the next refusal ends it.
  clock_.Advance(
      std::chrono::duration_cast<std::chrono::microseconds>(jobs::RefusalBackoff::kDefaultGrace));
  std::optional<TaskAssignment> d = MustClaim(kOther);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->lease.task_id, a->lease.task_id);
  ASSERT_TRUE(Broker(kOther)->Refuse(d->lease, absl::NotFoundError("no such model here")).ok());
  const v1::Job end = Job(job);
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  const std::string expected = "no worker can run model " + std::string(kGateA) +
                               ": every live worker refused it: " + Holder(kWorker) +
                               " (stale weights); " + Holder(kOther) + " (no such model here)";
  EXPECT_THAT(end.error(), HasSubstr(expected));
  EXPECT_EQ(end.error().find(kThird), std::string::npos) << end.error();
  ASSERT_EQ(end.tasks_size(), 2);
  EXPECT_EQ(end.tasks(0).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(end.tasks(1).state(), v1::JOB_STATE_SUCCEEDED);
}

// A genuine failure of the task still spends its attempts and fails it; a
// refusal next to it changes nothing of that.
TEST_P(TaskBrokerTest, ATaskFailureAfterARefusalStillFailsTheJob) {
  const int64_t job = Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(Claim(kOther).ok());
  ASSERT_TRUE(Broker(kWorker)->Refuse(a->lease, absl::ResourceExhaustedError("no memory")).ok());
  std::optional<TaskAssignment> b = MustClaim(kOther);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(Broker(kOther)->Finish(b->lease, absl::InvalidArgumentError("bad data"), {}).ok());
  const v1::Job end = Job(job);
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.error(), HasSubstr("bad data"));
  EXPECT_EQ(Task(a->lease.task_id).attempts, 1);
}

// ------------------------------------------------- datasets and the cache

TEST_P(TaskBrokerTest, ReadDatasetGivesTheJobsEvaluationAndCalibrationData) {
  Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim();
  ASSERT_TRUE(a.has_value());
  absl::StatusOr<v1::ListDatasetsResponse> listed = core_env()->core()->ListDatasets(Alice(), {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::map<std::string, std::string> sha;
  for (const v1::Dataset& d : listed->datasets()) sha[d.name()] = d.sha256();
  for (const auto& [calibration, name, text] :
       {std::make_tuple(false, "eval", core::testing::EvalText()),
        std::make_tuple(true, "calib", core::testing::CalibText())}) {
    absl::StatusOr<runtime::DatasetBytes> data = Broker()->ReadDataset(a->lease, calibration);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->name, name);
    EXPECT_EQ(data->kind, "text");
    EXPECT_EQ(data->sha256, sha[name]);
    EXPECT_EQ(data->bytes, text);
  }
}

TEST_P(TaskBrokerTest, TheCoefficientCacheRoundTripsWithinTheJobsOwner) {
  Submit({kGateA});
  std::optional<TaskAssignment> a = MustClaim(kWorker);
  ASSERT_TRUE(a.has_value());
  const engine::CoefficientCacheKey key{WeightsHash(kGateA), "w1", "float32", "cpu"};
  EXPECT_FALSE(Broker(kWorker)->GetCoefficients(a->lease, key).has_value());
  // More than one chunk of the WorkerService's streams.
  const std::string bytes = RandomText((size_t{3} << 20) / 2, 9);
  Broker(kWorker)->PutCoefficients(a->lease, key, bytes);
  EXPECT_TRUE(Broker(kWorker)->GetCoefficients(a->lease, key) == bytes);
  engine::CoefficientCacheKey other = key;
  other.window_hash = "w2";
  EXPECT_FALSE(Broker(kWorker)->GetCoefficients(a->lease, other).has_value());
  // Another user's job does not see Alice's entries.
  ASSERT_TRUE(core_env()->UploadEvalAndCalib(Bob()).ok());
  Submit({kGateA}, "", Bob());
  std::optional<TaskAssignment> bobs = MustClaim(kOther);
  ASSERT_TRUE(bobs.has_value());
  EXPECT_FALSE(Broker(kOther)->GetCoefficients(bobs->lease, key).has_value());
}

}  // namespace
}  // namespace fca::grpc_server::testing
