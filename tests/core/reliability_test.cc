// Issue 9, the core half of the fault-injection suite: the store busy
// (UNAVAILABLE) or full (RESOURCE_EXHAUSTED) at each write of a job's life
// (claim, progress and state events, results, the end, the coefficient
// cache), briefly or until it heals; the attempt cap; the job time limit;
// rows streamed as stored; the cache across batch layouts; ownership of
// cached coefficients; deletion; the watch-stream bound; (issue 22) an end
// the store refuses reported until it is recorded, and refused progress
// events coalesced and stored later. Every job must end
// SUCCEEDED or FAILED with a reason, never stay RUNNING, and leave no row
// twice and an intact database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/engine/audit/windows.h"
#include "tests/core/core_env.h"
#include "tests/testing/log_lines.h"

namespace fca::core {
namespace {

using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;

using Clock = std::chrono::steady_clock;

// Fails calls [from, from + count) of one store operation while armed.
class Faults {
 public:
  Faults(std::string op, absl::StatusCode code, int from, int count)
      : op_(std::move(op)), code_(code), from_(from), count_(count) {}

  absl::Status Check(std::string_view op) {
    if (!armed_ || op != op_) return absl::OkStatus();
    const int call = calls_++;
    if (call < from_ || call >= from_ + count_) return absl::OkStatus();
    ++injected_;
    return absl::Status(code_, "injected fault");
  }

  void Arm(bool on) { armed_ = on; }
  int injected() const { return injected_; }

 private:
  const std::string op_;
  const absl::StatusCode code_;
  const int from_, count_;
  std::atomic<bool> armed_{false};
  std::atomic<int> calls_{0};
  std::atomic<int> injected_{0};
};

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// Polls the job until it is terminal (or `limit` passes) and returns it.
v1::Job WaitForEnd(CoreEnv* env, int64_t job_id, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  v1::Job job;
  while (Clock::now() < deadline) {
    auto got = env->Get(testing::Admin(), job_id);
    if (got.ok()) {
      job = *got;
      if (Terminal(job.state())) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return job;
}

// Every stored row of the job, with (model, intervention, metric) unique.
std::vector<v1::Result> StoredRows(CoreEnv* env, int64_t job_id) {
  v1::QueryResultsRequest request;
  request.mutable_filter()->set_job_id(job_id);
  request.set_page_size(1000);
  std::vector<v1::Result> rows;
  std::set<std::tuple<std::string, std::string, std::string>> keys;
  while (true) {
    auto page = env->core()->QueryResults(testing::Admin(), request);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (const v1::Result& r : page->results()) {
      EXPECT_TRUE(keys.emplace(r.model(), r.intervention(), r.metric()).second)
          << "row twice: " << r.model() << " " << r.intervention() << " " << r.metric();
      rows.push_back(r);
    }
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  return rows;
}

struct FaultCase {
  const char* op;
  absl::StatusCode code;
  int from, count;  // count 1000: "until healed"
};

std::string CaseName(const ::testing::TestParamInfo<FaultCase>& info) {
  const FaultCase& c = info.param;
  return absl::StrFormat("%s_%s_from%d_%s", c.op,
                         c.code == absl::StatusCode::kUnavailable ? "busy" : "full", c.from,
                         c.count >= 1000 ? "untilhealed" : absl::StrCat("x", c.count));
}

class StoreFaultTest : public ::testing::TestWithParam<FaultCase> {};

// The rows one clean run of the job stores; computed once.
size_t CleanRowCount() {
  static const size_t count = [] {
    CoreEnv env;
    if (!env.UploadEvalAndCalib(Alice()).ok()) return size_t{0};
    auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
    if (!job.ok()) return size_t{0};
    if (!env.RunNext().ok()) return size_t{0};
    return StoredRows(&env, job->id()).size();
  }();
  return count;
}

TEST_P(StoreFaultTest, EveryJobEndsWithAReasonAndNoRowTwice) {
  const FaultCase& c = GetParam();
  Faults faults(c.op, c.code, c.from, c.count);
  storage::StoreOptions store;
  store.fault_injector = [&](std::string_view op) { return faults.Check(op); };
  CoreEnv env({}, testing::FastRunOptions(), store);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  faults.Arm(true);
  ASSERT_TRUE(env.Start().ok());
  if (c.count >= 1000) {
    // Let the store stay broken for a while, then heal it.
    const auto until = Clock::now() + std::chrono::seconds(10);
    auto running = [&] {
      auto now = env.Get(testing::Admin(), job->id());
      return now.ok() && !Terminal(now->state());
    };
    while (faults.injected() < 8 && Clock::now() < until && running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    faults.Arm(false);
  }
  const v1::Job end = WaitForEnd(&env, job->id(), std::chrono::seconds(60));
  EXPECT_GT(faults.injected(), 0) << "the fault never happened";
  std::printf("fault %s: %d injected, job %s\n", CaseName({c, 0}).c_str(), faults.injected(),
              v1::JobState_Name(end.state()).c_str());
  ASSERT_TRUE(end.state() == v1::JOB_STATE_SUCCEEDED || end.state() == v1::JOB_STATE_FAILED)
      << v1::JobState_Name(end.state());
  if (end.state() == v1::JOB_STATE_FAILED) {
    EXPECT_THAT(end.error(), HasSubstr("injected fault"));
  }
  const std::vector<v1::Result> rows = StoredRows(&env, job->id());
  if (end.state() == v1::JOB_STATE_SUCCEEDED) {
    EXPECT_EQ(rows.size(), CleanRowCount());
  }
  // A watcher from the start is released with the terminal state last.
  auto events = env.Watch(Alice(), job->id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_FALSE(events->empty());
  EXPECT_EQ(events->back().event().state(), end.state());
  EXPECT_EQ(env.coordinator()->PendingEnds(), 0);
  auto integrity = env.store()->IntegrityCheck();
  ASSERT_TRUE(integrity.ok());
  EXPECT_EQ(*integrity, "ok");
}

std::vector<FaultCase> AllFaultCases() {
  std::vector<FaultCase> cases;
  // claim: the job's start; append_event: QUEUED->RUNNING (call 0), progress
  // (call 2), and with finish_job the end; insert_results: the rows.
  const std::vector<std::pair<const char*, int>> points = {
      {"claim_job", 0},  {"append_event", 0},     {"append_event", 2},    {"insert_results", 0},
      {"finish_job", 0}, {"put_coefficients", 0}, {"get_coefficients", 0}};
  for (const auto& [op, from] : points) {
    for (absl::StatusCode code :
         {absl::StatusCode::kUnavailable, absl::StatusCode::kResourceExhausted}) {
      for (int count : {1, 3, 1000}) cases.push_back({op, code, from, count});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EachWrite, StoreFaultTest, ::testing::ValuesIn(AllFaultCases()), CaseName);

// A job that crashed the server max_attempts times is failed at the next
// start, with the reason, instead of crashing it again.
TEST(ReliabilityTest, AJobThatKeepsCrashingTheServerFailsAfterItsAttempts) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  for (int crash = 0; crash < 3; ++crash) {
    auto claimed = testing::ClaimAsLocalWorker(env.store());  // the "server" runs it ...
    ASSERT_TRUE(claimed.ok() && claimed->has_value());
    if (crash < 2) {
      ASSERT_TRUE(testing::CrashRecovery(env.store()).ok());  // ... and dies
    }
  }
  ASSERT_TRUE(env.Start().ok());  // the third restart
  const v1::Job end = WaitForEnd(&env, job->id(), std::chrono::seconds(10));
  EXPECT_EQ(end.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end.error(), HasSubstr("3 times"));
  auto events = env.Watch(Alice(), job->id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->back().event().state(), v1::JOB_STATE_FAILED);
}

// Found by the soak bench: a watcher could see a finished job before its
// terminal event and end without it. Every way a job ends now writes both in
// one transaction; here the two that did not: a queued job cancelled, and a
// running job with a cancel request that the server's crash left behind.
TEST(ReliabilityTest, EveryEndHasItsTerminalEvent) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto queued = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  auto running = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(queued.ok() && running.ok());
  auto claimed = testing::ClaimAsLocalWorker(env.store());  // `queued`: claimed first ...
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(env.store()->RequestCancel(queued->id()).ok());  // ... cancel requested, crash
  v1::CancelJobRequest cancel;
  cancel.set_job_id(running->id());
  ASSERT_TRUE(env.core()->CancelJob(Alice(), cancel).ok());
  ASSERT_TRUE(env.Start().ok());  // recovery
  for (int64_t id : {queued->id(), running->id()}) {
    auto events = env.Watch(Alice(), id, 0);
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_FALSE(events->empty());
    EXPECT_EQ(events->back().event().state(), v1::JOB_STATE_CANCELLED) << "job " << id;
  }
}

TEST(ReliabilityTest, AJobPastTheTimeLimitFailsWithDeadlineExceeded) {
  testing::RunOptions options = testing::FastRunOptions();
  options.worker.max_task_duration = std::chrono::milliseconds(1);
  CoreEnv env({}, options);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib")).ok());
  auto end = env.RunNext();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(end->error(), HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(end->error(), HasSubstr("limit"));
}

// After a requeue the stored rows are the first attempt's: the stream must
// show those, not this attempt's numbers.
TEST(ReliabilityTest, StreamedRowsAreTheStoredRows) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  storage::ResultRow earlier;
  earlier.model = testing::kGateA;
  earlier.weights_sha256 = "w";
  earlier.dataset_sha256 = "d";
  earlier.intervention = "correct";
  earlier.metric = "nll";
  earlier.value = 42.5;
  earlier.n = 1;
  ASSERT_TRUE(env.store()->InsertResults(job->id(), {earlier}).ok());
  ASSERT_TRUE(env.RunNext().ok());
  auto events = env.Watch(Alice(), job->id(), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  int seen = 0;
  for (const auto& r : *events) {
    for (const v1::Result& row : r.event().results().results()) {
      if (row.intervention() == "correct" && row.metric() == "nll") {
        EXPECT_EQ(row.value(), 42.5);
        ++seen;
      }
    }
  }
  EXPECT_EQ(seen, 1);
}

// Cache entries recorded with batch 8 serve jobs with batches 1, 4 and 16
// and fewer windows.
TEST(ReliabilityTest, TheCacheServesAnyBatchLayout) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  v1::AuditSpec spec = SmallSpec({testing::kGateA}, "eval", "calib");
  spec.set_batch_size(8);
  ASSERT_TRUE(env.Submit(Alice(), spec).ok());
  ASSERT_EQ(env.RunNext()->state(), v1::JOB_STATE_SUCCEEDED);
  for (int64_t batch : {1, 4, 16}) {
    for (int64_t windows : {6, 3}) {
      spec.set_batch_size(batch);
      spec.set_max_eval_windows(windows);
      ASSERT_TRUE(env.Submit(Alice(), spec).ok());
      auto end = env.RunNext();
      ASSERT_TRUE(end.ok()) << end.status();
      EXPECT_EQ(end->state(), v1::JOB_STATE_SUCCEEDED)
          << "batch " << batch << " windows " << windows << ": " << end->error();
    }
  }
}

// Cached coefficients belong to the user whose audit recorded them.
TEST(ReliabilityTest, AnotherUserCannotExportYourCachedCoefficients) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  ASSERT_TRUE(env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib")).ok());
  ASSERT_EQ(env.RunNext()->state(), v1::JOB_STATE_SUCCEEDED);
  // The first evaluation window: byte tokenizer, so ids are the bytes.
  const std::string text = testing::RandomText(16 * 6, 1);
  std::vector<int32_t> ids(text.begin(), text.begin() + 16);
  v1::ExportCoefficientsRequest request;
  request.set_model(testing::kGateA);
  request.set_window_hash(engine::WindowHash(ids.data(), 16));
  int64_t bytes = 0;
  auto write = [&](const v1::ExportCoefficientsResponse& r) {
    bytes += static_cast<int64_t>(r.chunk().size());
    return true;
  };
  ASSERT_TRUE(env.core()->ExportCoefficients(Alice(), request, write).ok());
  EXPECT_GT(bytes, 0);
  const absl::Status bob = env.core()->ExportCoefficients(Bob(), request, write);
  EXPECT_EQ(bob.code(), absl::StatusCode::kNotFound) << bob;
}

TEST(ReliabilityTest, DeletingJobsAndDatasets) {
  ServiceLimits limits;
  limits.max_jobs_per_user = 2;
  CoreEnv env(limits);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto first = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(first.ok());
  // A queued job's dataset cannot go, nor can the job itself.
  v1::DeleteDatasetRequest dataset;
  dataset.set_name("eval");
  EXPECT_EQ(env.core()->DeleteDataset(Alice(), dataset).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::DeleteJobRequest del;
  del.set_job_id(first->id());
  EXPECT_EQ(env.core()->DeleteJob(Alice(), del).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(env.RunNext().ok());
  ASSERT_TRUE(env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib")).ok());
  auto third = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  // Bob cannot see, so cannot delete, Alice's job.
  EXPECT_EQ(env.core()->DeleteJob(Bob(), del).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(env.core()->DeleteJob(Alice(), del).ok());
  EXPECT_EQ(env.Get(Alice(), first->id()).status().code(), absl::StatusCode::kNotFound);
  storage::ResultFilter rows;
  rows.job_id = first->id();
  auto left = env.store()->QueryResults(rows, 10, "");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->rows.empty());
  EXPECT_TRUE(env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib")).ok());
  // Alice's personal project, of which Bob is no member: as if absent.
  dataset.set_owner("alice");
  EXPECT_EQ(env.core()->DeleteDataset(Bob(), dataset).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReliabilityTest, WatchStreamsAreBounded) {
  ServiceLimits limits;
  limits.max_watch_streams = 1;
  CoreEnv env(limits);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok());
  std::atomic<bool> stop{false};
  std::atomic<bool> watching{false};
  absl::Status first_status;
  std::thread first([&] {
    v1::WatchJobRequest request;
    request.set_job_id(job->id());
    first_status = env.core()->WatchJob(
        Alice(), request,
        [&](const v1::WatchJobResponse&) {
          watching = true;
          return true;
        },
        [&] { return stop.load(); });
  });
  while (!watching) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto second = env.Watch(Alice(), job->id(), 0);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  stop = true;
  first.join();
  // Stopped from outside, as a draining server stops its streams.
  EXPECT_EQ(first_status.code(), absl::StatusCode::kUnavailable) << first_status;
  // The slot is free again: a watch that stops at once is let in.
  v1::WatchJobRequest request;
  request.set_job_id(job->id());
  const absl::Status third = env.core()->WatchJob(
      Alice(), request, [](const v1::WatchJobResponse&) { return true; }, [] { return true; });
  EXPECT_EQ(third.code(), absl::StatusCode::kUnavailable) << third;
}

// Issue 40: one key took every stream. A user holds at most a quarter of
// them (common/stream_shares.h); another user still gets one.
TEST(ReliabilityTest, EachUserHoldsOnlyItsShareOfWatchStreams) {
  ServiceLimits limits;
  limits.max_watch_streams = 8;  // a share of 2
  CoreEnv env(limits);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> watching{0};
  std::vector<std::thread> alices;
  for (int i = 0; i < 2; ++i) {
    alices.emplace_back([&] {
      v1::WatchJobRequest request;
      request.set_job_id(job->id());
      bool counted = false;
      (void)env.core()->WatchJob(
          Alice(), request,
          [&](const v1::WatchJobResponse&) {
            if (!counted) ++watching;
            counted = true;
            return true;
          },
          [&] { return stop.load(); });
    });
  }
  while (watching < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto third = env.Watch(Alice(), job->id(), 0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("a user's share"));
  // Another user (an admin, who may read alice's job) still follows it: a
  // watch that stops at once is let in (UNAVAILABLE: stopped, not refused).
  v1::WatchJobRequest request;
  request.set_job_id(job->id());
  const absl::Status admins = env.core()->WatchJob(
      testing::Admin(), request, [](const v1::WatchJobResponse&) { return true; },
      [] { return true; });
  EXPECT_EQ(admins.code(), absl::StatusCode::kUnavailable) << admins;
  stop = true;
  for (std::thread& t : alices) t.join();
}

// Issue 22: a task's end that the store refuses (a full disk) leaves the
// job RUNNING; its state says why (Job.notice, in GetJob and ListJobs), its
// watchers get a note, the log names the job, and it ends once the store
// takes writes again.
TEST(ReliabilityTest, AnEndTheStoreRefusesIsReportedUntilItIsRecorded) {
  std::atomic<bool> full{false};
  storage::StoreOptions store;
  store.fault_injector = [&](std::string_view op) {
    return full && op == "finish_job" ? absl::ResourceExhaustedError("disk or database is full")
                                      : absl::OkStatus();
  };
  CoreEnv env({}, testing::FastRunOptions(), store);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string named = absl::StrFormat("job %d: task ", job->id());
  fca::testing::LogLines log({named, "job 0"});
  full = true;
  auto ran = env.RunNext();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(env.coordinator()->PendingEnds(), 1);
  auto got = env.Get(Alice(), job->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(got->notice(), HasSubstr("model fg_a ended SUCCEEDED, but the store cannot record"));
  EXPECT_THAT(got->notice(), HasSubstr("disk or database is full"));
  EXPECT_THAT(got->notice(), HasSubstr("free disk space"));
  auto listed = env.core()->ListJobs(Alice(), {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1);
  EXPECT_EQ(listed->jobs(0).notice(), got->notice());
  EXPECT_GE(log.count(named), 1);
  EXPECT_EQ(log.count("job 0"), 0);
  // A watcher gets the notice as a note (seq 0), then the end.
  std::vector<v1::WatchJobResponse> seen;
  std::mutex seen_mu;
  std::atomic<bool> noted{false};
  std::thread watcher([&] {
    const absl::Status watched = env.core()->WatchJob(
        Alice(),
        [&] {
          v1::WatchJobRequest r;
          r.set_job_id(job->id());
          return r;
        }(),
        [&](const v1::WatchJobResponse& r) {
          std::lock_guard<std::mutex> lock(seen_mu);
          seen.push_back(r);
          if (r.event().seq() == 0) noted = true;
          return true;
        },
        [] { return false; });
    EXPECT_TRUE(watched.ok()) << watched;
  });
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!noted && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Room again: the next sweep records the end.
  full = false;
  env.coordinator()->SweepOnce();
  watcher.join();
  ASSERT_TRUE(noted);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().event().state(), v1::JOB_STATE_SUCCEEDED);
  int notes = 0;
  for (const v1::WatchJobResponse& r : seen) {
    if (r.event().seq() != 0) continue;
    ++notes;
    EXPECT_THAT(r.event().message(), HasSubstr("cannot record it yet"));
  }
  EXPECT_EQ(notes, 1);
  EXPECT_EQ(env.coordinator()->PendingEnds(), 0);
  auto ended = env.Get(Alice(), job->id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(ended->notice(), "");
}

// Issue 22: progress events the store refuses (busy or full) are not lost:
// the latest of each job is stored once the store takes writes again.
TEST(ReliabilityTest, RefusedProgressIsCoalescedAndStoredLater) {
  std::atomic<bool> busy{false};
  storage::StoreOptions store;
  store.fault_injector = [&](std::string_view op) {
    return busy && op == "append_event" ? absl::UnavailableError("database is busy")
                                        : absl::OkStatus();
  };
  CoreEnv env({}, testing::FastRunOptions(), store);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto job = env.Submit(Alice(), SmallSpec({testing::kGateA}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto claimed = env.coordinator()->Claim("node7", 0);
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
  const runtime::Lease lease = (*claimed)->lease;
  auto events_before = env.store()->ListJobEvents(job->id(), 0, 100);
  ASSERT_TRUE(events_before.ok());
  busy = true;
  for (int done = 1; done <= 3; ++done) {
    engine::AuditProgress p;
    p.phase = absl::StrCat("live", done);  // a new phase: never throttled
    p.model = testing::kGateA;
    p.windows_done = done;
    p.windows_total = 6;
    p.fraction = done / 10.0;
    ASSERT_TRUE(env.coordinator()->ReportProgress(lease, p).ok());
  }
  auto while_busy = env.store()->ListJobEvents(job->id(), 0, 100);
  ASSERT_TRUE(while_busy.ok());
  EXPECT_EQ(while_busy->size(), events_before->size());
  busy = false;
  env.coordinator()->SweepOnce();
  auto after = env.store()->ListJobEvents(job->id(), 0, 100);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), events_before->size() + 1);
  v1::JobEvent stored;
  ASSERT_TRUE(stored.ParseFromString(after->back().payload));
  ASSERT_TRUE(stored.has_progress());
  EXPECT_EQ(stored.progress().phase(), "live3");
  EXPECT_EQ(stored.progress().windows_done(), 3);
  // Stored once: the next sweep has nothing left to store.
  env.coordinator()->SweepOnce();
  auto again = env.store()->ListJobEvents(job->id(), 0, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), after->size());
}

}  // namespace
}  // namespace fca::core
