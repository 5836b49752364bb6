// Long file: the store's job, event and result conformance suite.
// Conformance suite, part 2: jobs, job events and results, with paging.
// Runs on ":memory:" and a file.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreJobsTest : public StoreFixture {
 protected:
  // Every job matching `filter`, page by page; fails the test on a repeat.
  static JobFilter Filter(std::optional<std::string> owner, std::optional<JobState> state) {
    JobFilter filter;
    filter.owner = std::move(owner);
    filter.state = state;
    return filter;
  }

  std::vector<int64_t> AllJobIds(const JobFilter& filter, int page_size) {
    std::vector<int64_t> ids;
    std::set<int64_t> seen;
    std::string token;
    for (int pages = 0; pages < 10000; ++pages) {
      absl::StatusOr<JobPage> page = store_->ListJobs(filter, page_size, token);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      EXPECT_LE(static_cast<int>(page->jobs.size()), page_size);
      for (const JobRecord& job : page->jobs) {
        EXPECT_TRUE(seen.insert(job.id).second) << "job shown twice";
        ids.push_back(job.id);
      }
      token = page->next_page_token;
      if (token.empty()) break;
    }
    return ids;
  }

  std::vector<ResultRow> AllResults(const ResultFilter& filter, int page_size) {
    std::vector<ResultRow> rows;
    std::string token;
    for (int pages = 0; pages < 100000; ++pages) {
      absl::StatusOr<ResultPage> page = store_->QueryResults(filter, page_size, token);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      EXPECT_LE(static_cast<int>(page->rows.size()), page_size);
      for (ResultRow& row : page->rows) rows.push_back(std::move(row));
      token = page->next_page_token;
      if (token.empty()) break;
    }
    return rows;
  }
};

// A claim of the oldest claimable task by `worker`.
INSTANTIATE_TEST_SUITE_P(Backends, StoreJobsTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

ResultRow Row(const std::string& model, const std::string& intervention, const std::string& metric,
              double value) {
  ResultRow row;
  row.model = model;
  row.weights_sha256 = "w-" + model;
  row.dataset_sha256 = "ds-eval";
  row.intervention = intervention;
  row.metric = metric;
  row.value = value;
  row.n = 64;
  return row;
}

// ------------------------------------------------------------------- jobs

TEST_P(StoreJobsTest, CreateAndGet) {
  now_us_ = 42;
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", R"({"models":["m"]})", {"m"}));
  EXPECT_GT(job.id, 0);
  EXPECT_EQ(job.owner, "ann");
  EXPECT_EQ(job.spec_json, R"({"models":["m"]})");
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.created_at_us, 42);
  EXPECT_EQ(job.started_at_us, 0);
  EXPECT_EQ(job.finished_at_us, 0);
  EXPECT_EQ(job.attempts, 0);
  EXPECT_FALSE(job.cancel_requested);
  ASSERT_OK_AND_ASSIGN(const JobRecord got, store_->GetJob(job.id));
  EXPECT_EQ(got.spec_json, job.spec_json);
  EXPECT_CODE(store_->GetJob(job.id + 100), StatusCode::kNotFound);
  EXPECT_CODE(store_->CreateJob("", "{}"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->CreateJob("", "{}", {"m"}), StatusCode::kInvalidArgument);
  // The job comes with its one task, and a job created without models has
  // none.
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> tasks, store_->ListTasks(job.id));
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].model, "m");
  EXPECT_EQ(tasks[0].state, JobState::kQueued);
  ASSERT_OK_AND_ASSIGN(const JobRecord bare, store_->CreateJob("ann", "{}"));
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> none, store_->ListTasks(bare.id));
  EXPECT_TRUE(none.empty());
}

TEST_P(StoreJobsTest, StateNames) {
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                         JobState::kFailed, JobState::kCancelled}) {
    ASSERT_OK_AND_ASSIGN(const JobState parsed, ParseJobState(JobStateName(state)));
    EXPECT_EQ(parsed, state);
  }
  EXPECT_CODE(ParseJobState("queued"), StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
}

TEST_P(StoreJobsTest, ClaimRunsOldestFirst) {
  ASSERT_OK_AND_ASSIGN(const JobRecord a, store_->CreateJob("ann", "a", {"ma"}));
  ASSERT_OK_AND_ASSIGN(const JobRecord b, store_->CreateJob("bob", "b", {"mb"}));
  now_us_ = 9000;
  ASSERT_OK_AND_ASSIGN(const auto first, store_->ClaimTask(Claim("w")));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->job.id, a.id);
  EXPECT_EQ(first->task.model, "ma");
  EXPECT_EQ(first->job.state, JobState::kRunning);
  EXPECT_EQ(first->job.attempts, 1);
  EXPECT_EQ(first->job.started_at_us, 9000);
  ASSERT_OK_AND_ASSIGN(const auto second, store_->ClaimTask(Claim("w")));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->job.id, b.id);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ClaimTask(Claim("w")));
  EXPECT_FALSE(none.has_value());
}

TEST_P(StoreJobsTest, FinishOnlyFromRunning) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}", {"m"}));
  EXPECT_CODE(store_->FinishJob(job.id, JobState::kSucceeded, ""), StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(const auto claim, store_->ClaimTask(Claim("w")));
  ASSERT_TRUE(claim.has_value());
  EXPECT_CODE(store_->FinishJob(job.id, JobState::kQueued, ""), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->FinishJob(job.id, JobState::kRunning, ""), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->FinishJob(job.id + 1, JobState::kFailed, "x"), StatusCode::kNotFound);
  now_us_ = 12345;
  ASSERT_OK_AND_ASSIGN(const JobRecord failed, store_->FinishJob(job.id, JobState::kFailed, "oom"));
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error, "oom");
  EXPECT_EQ(failed.finished_at_us, 12345);
  EXPECT_CODE(store_->FinishJob(job.id, JobState::kSucceeded, ""), StatusCode::kFailedPrecondition);
  // Its running task was cancelled with it; the worker's lease is gone.
  ASSERT_OK_AND_ASSIGN(const TaskRecord task, store_->GetTask(claim->task.id));
  EXPECT_EQ(task.state, JobState::kCancelled);
  EXPECT_CODE(store_->CheckLease(claim->task.id, claim->task.lease_seq),
              StatusCode::kFailedPrecondition);
}

TEST_P(StoreJobsTest, CancelQueuedRunningAndTerminal) {
  ASSERT_OK_AND_ASSIGN(const JobRecord running, store_->CreateJob("ann", "r", {"r"}));
  ASSERT_OK_AND_ASSIGN(const auto claim, store_->ClaimTask(Claim("w")));
  ASSERT_TRUE(claim.has_value());
  ASSERT_OK_AND_ASSIGN(const JobRecord queued, store_->CreateJob("ann", "q", {"q"}));

  ASSERT_OK_AND_ASSIGN(const JobRecord cancelled, store_->RequestCancel(queued.id));
  EXPECT_EQ(cancelled.state, JobState::kCancelled);
  EXPECT_GT(cancelled.finished_at_us, 0);
  EXPECT_CODE(store_->RequestCancel(queued.id), StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ClaimTask(Claim("w")));
  EXPECT_FALSE(none.has_value());  // a cancelled job is never claimed

  ASSERT_OK_AND_ASSIGN(const JobRecord asked, store_->RequestCancel(running.id));
  EXPECT_EQ(asked.state, JobState::kRunning);
  EXPECT_TRUE(asked.cancel_requested);
  ASSERT_OK(store_->RequestCancel(running.id));  // repeating is harmless
  ASSERT_OK_AND_ASSIGN(const JobRecord done,
                       store_->FinishJob(running.id, JobState::kCancelled, ""));
  EXPECT_EQ(done.state, JobState::kCancelled);
  EXPECT_CODE(store_->RequestCancel(running.id), StatusCode::kFailedPrecondition);
  EXPECT_CODE(store_->RequestCancel(999), StatusCode::kNotFound);
}

// Crash recovery: a restarted server expires the leases of its own
// (in-process) workers, "local/..."; their tasks go back to the queue, and
// the tasks of a job whose cancel was requested end instead, so the job ends
// CANCELLED when it is settled.
TEST_P(StoreJobsTest, ExpireLeasesRecoversAfterCrash) {
  ASSERT_OK_AND_ASSIGN(const JobRecord a, store_->CreateJob("ann", "a", {"a"}));
  ASSERT_OK_AND_ASSIGN(const JobRecord b, store_->CreateJob("ann", "b", {"b"}));
  ASSERT_OK_AND_ASSIGN(const JobRecord c, store_->CreateJob("ann", "c", {"c"}));
  ASSERT_OK_AND_ASSIGN(const auto first, store_->ClaimTask(Claim("local/0")));  // a
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->job.id, a.id);
  ASSERT_OK_AND_ASSIGN(const auto second, store_->ClaimTask(Claim("local/1")));  // b
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->job.id, b.id);
  ASSERT_OK(store_->RequestCancel(b.id));
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks lost, store_->ExpireLeases(0, "local/", "restart"));
  EXPECT_TRUE(lost.failed.empty());
  ASSERT_OK_AND_ASSIGN(const TaskRecord a_task, store_->GetTask(first->task.id));
  EXPECT_EQ(a_task.state, JobState::kQueued);
  EXPECT_EQ(a_task.attempts, 1);
  // The coordinator settles what has nothing left to run: b (cancelled).
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  for (int64_t id : unsettled) ASSERT_OK(store_->SettleJob(id, nullptr));
  ASSERT_OK_AND_ASSIGN(const JobRecord a2, store_->GetJob(a.id));
  EXPECT_EQ(a2.state, JobState::kRunning);  // a job stays RUNNING; its task is queued
  ASSERT_OK_AND_ASSIGN(const JobRecord b2, store_->GetJob(b.id));
  EXPECT_EQ(b2.state, JobState::kCancelled)
      << "the lost task of a job whose cancel was requested was queued again: "
      << JobStateName(store_->GetTask(second->task.id)->state);
  // a is claimed again before c, and its attempts count the restart.
  ASSERT_OK_AND_ASSIGN(const auto again, store_->ClaimTask(Claim("local/2")));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->job.id, a.id);
  EXPECT_EQ(again->task.attempts, 2);
  EXPECT_EQ(again->job.attempts, 2);
  ASSERT_OK_AND_ASSIGN(const auto next, store_->ClaimTask(Claim("local/2")));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->job.id, c.id);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ClaimTask(Claim("local/2")));
  EXPECT_FALSE(none.has_value());  // b's task is never claimed
  ASSERT_OK_AND_ASSIGN(const ExpiredTasks both, store_->ExpireLeases(0, "local/", "restart"));
  EXPECT_EQ(both.requeued.size(), 2u);
}

TEST_P(StoreJobsTest, CountJobsByOwnerAndState) {
  ASSERT_OK(store_->CreateJob("ann", "1", {"m"}));
  ASSERT_OK(store_->CreateJob("ann", "2", {"m"}));
  ASSERT_OK(store_->CreateJob("bob", "3", {"m"}));
  ASSERT_OK(store_->ClaimTask(Claim("w")));  // ann's first
  auto count = [&](std::optional<std::string> owner, std::vector<JobState> states) -> int64_t {
    absl::StatusOr<int64_t> n = store_->CountJobs(owner, states);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : -1;
  };
  EXPECT_EQ(count(std::nullopt, {}), 3);
  EXPECT_EQ(count(std::string("ann"), {}), 2);
  EXPECT_EQ(count(std::string("ann"), {JobState::kQueued}), 1);
  EXPECT_EQ(count(std::string("ann"), {JobState::kQueued, JobState::kRunning}), 2);
  EXPECT_EQ(count(std::nullopt, {JobState::kQueued}), 2);
  EXPECT_EQ(count(std::string("zed"), {}), 0);
}

TEST_P(StoreJobsTest, ListJobsPagesNewestFirstWithoutGapsOrRepeats) {
  std::vector<int64_t> ann_ids;
  std::vector<int64_t> all_ids;
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    for (int i = 0; i < 25; ++i) {
      FCA_ASSIGN_OR_RETURN(const JobRecord job,
                           store_->CreateJob(i % 3 == 0 ? "bob" : "ann", "{}", {"m"}));
      all_ids.insert(all_ids.begin(), job.id);
      if (i % 3 != 0) ann_ids.insert(ann_ids.begin(), job.id);
    }
    return absl::OkStatus();
  }));
  for (int page_size : {1, 3, 7, 25, 100}) {
    EXPECT_EQ(AllJobIds({}, page_size), all_ids) << page_size;
    EXPECT_EQ(AllJobIds(Filter("ann", std::nullopt), page_size), ann_ids) << page_size;
  }
  ASSERT_OK(store_->ClaimTask(Claim("w")));  // the oldest job (bob's)
  const std::vector<int64_t> running = AllJobIds(Filter(std::nullopt, JobState::kRunning), 2);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0], all_ids.back());
  EXPECT_TRUE(AllJobIds(Filter("ann", JobState::kRunning), 2).empty());

  // A job created between pages does not disturb the pages still to come.
  ASSERT_OK_AND_ASSIGN(const JobPage first, store_->ListJobs({}, 10, ""));
  ASSERT_OK(store_->CreateJob("ann", "late"));
  ASSERT_OK_AND_ASSIGN(const JobPage second, store_->ListJobs({}, 10, first.next_page_token));
  ASSERT_FALSE(second.jobs.empty());
  EXPECT_EQ(second.jobs.front().id, all_ids[10]);
}

// The spec filters read the stored spec JSON; a count matches the pages.
TEST_P(StoreJobsTest, ListJobsFiltersBySpecAndTimeAndCountsTheSame) {
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"ann", R"({"models":["a","b"],"dense_twin":"d","eval_dataset":"e1",)"
              R"("calib_dataset":"c1","label":"seeds"})"},
      {"ann", R"({"models":["b"],"eval_dataset":"e2","calib_dataset":"c1","label":"Seeds"})"},
      {"bob", R"({"models":["a"],"eval_dataset":"sha256:ab","calib_dataset":"c2"})"},
      {"ann", "not json"},                     // matches no spec filter
      {"ann", R"({"models":"a","label":7})"},  // models not an array, label a number
  };
  std::vector<int64_t> ids;
  for (size_t i = 0; i < jobs.size(); ++i) {
    now_us_ = 1000 * static_cast<int64_t>(i + 1);
    ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob(jobs[i].first, jobs[i].second));
    ids.push_back(job.id);
  }
  auto expect = [&](const JobFilter& filter, std::vector<int64_t> expected) {
    std::sort(expected.rbegin(), expected.rend());  // newest first
    for (int page_size : {1, 100}) EXPECT_EQ(AllJobIds(filter, page_size), expected);
    ASSERT_OK_AND_ASSIGN(const int64_t count, store_->CountJobs(filter));
    EXPECT_EQ(count, static_cast<int64_t>(expected.size()));
  };
  JobFilter f;
  expect(f, ids);
  f.model = "a";  // audited by 0 and 2; job 4's "models" is no array
  expect(f, {ids[0], ids[2]});
  f.model = "d";  // the dense twin counts
  expect(f, {ids[0]});
  f.model = "c1";  // a dataset, not a model
  expect(f, {});
  f = {};
  f.dataset = "c1";  // eval or calib
  expect(f, {ids[0], ids[1]});
  f.dataset = "sha256:ab";
  expect(f, {ids[2]});
  f = {};
  f.label = "seeds";  // exact, case included
  expect(f, {ids[0]});
  f.label = "7";  // a stored number is no label
  expect(f, {});
  f = {};
  f.created_after_us = 2000;   // inclusive
  f.created_before_us = 4000;  // exclusive
  expect(f, {ids[1], ids[2]});
  f.owner = "ann";
  expect(f, {ids[1]});
  f = {};
  f.owner = "ann";
  f.model = "b";
  f.dataset = "c1";
  expect(f, {ids[0], ids[1]});
  f.state = JobState::kQueued;
  expect(f, {ids[0], ids[1]});
  f.state = JobState::kRunning;
  expect(f, {});
}

TEST_P(StoreJobsTest, QueryResultsTakesSeveralValuesPerFilter) {
  std::vector<int64_t> job_ids;
  for (int j = 0; j < 3; ++j) {
    ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
    job_ids.push_back(job.id);
    std::vector<ResultRow> rows;
    for (int m = 0; m < 3; ++m) {
      for (int k = 0; k < 3; ++k) {
        rows.push_back(Row(absl::StrCat("model", m), absl::StrCat("iv", k),
                           absl::StrCat("metric", k), m * 10 + k));
      }
    }
    ASSERT_OK(store_->InsertResults(job.id, rows));
  }
  ResultFilter f;
  f.job_ids = {job_ids[0], job_ids[2]};
  EXPECT_EQ(AllResults(f, 4).size(), 18u);
  f.job_id = job_ids[1];  // one more accepted value
  EXPECT_EQ(AllResults(f, 4).size(), 27u);
  f = {};
  f.models = {"model0", "model2", "absent"};
  f.metrics = {"metric1"};
  const std::vector<ResultRow> rows = AllResults(f, 2);
  ASSERT_EQ(rows.size(), 6u);
  for (const ResultRow& r : rows) {
    EXPECT_TRUE(r.model == "model0" || r.model == "model2") << r.model;
    EXPECT_EQ(r.metric, "metric1");
  }
  // Paged in id order, several values or not.
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_TRUE(rows[i - 1].job_id < rows[i].job_id ||
                (rows[i - 1].job_id == rows[i].job_id && rows[i - 1].model < rows[i].model));
  }
  f = {};
  f.interventions = {"iv0", "iv2"};
  f.intervention = "iv1";
  f.job_id = job_ids[0];
  EXPECT_EQ(AllResults(f, 100).size(), 9u);
  f.interventions = {};
  f.intervention = "absent";
  EXPECT_TRUE(AllResults(f, 100).empty());
}

TEST_P(StoreJobsTest, PageSizesAndTokensAreChecked) {
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    for (int i = 0; i < Store::kMaxPageSize + 5; ++i) {
      FCA_RETURN_IF_ERROR(store_->CreateJob("ann", "{}").status());
    }
    return absl::OkStatus();
  }));
  ASSERT_OK_AND_ASSIGN(const JobPage defaulted, store_->ListJobs({}, 0, ""));
  EXPECT_EQ(defaulted.jobs.size(), static_cast<size_t>(Store::kDefaultPageSize));
  ASSERT_OK_AND_ASSIGN(const JobPage clamped, store_->ListJobs({}, 1 << 30, ""));
  EXPECT_EQ(clamped.jobs.size(), static_cast<size_t>(Store::kMaxPageSize));
  EXPECT_FALSE(clamped.next_page_token.empty());
  EXPECT_CODE(store_->ListJobs({}, -1, ""), StatusCode::kInvalidArgument);
  for (const char* token :
       {"x", "j", "j-5", "j5x", "r5", "j007", "j99999999999999999999999", " j5"}) {
    EXPECT_CODE(store_->ListJobs({}, 10, token), StatusCode::kInvalidArgument) << token;
  }
}

// ------------------------------------------------------------ job events

TEST_P(StoreJobsTest, EventsAreNumberedPerJobAndResumable) {
  ASSERT_OK_AND_ASSIGN(const JobRecord a, store_->CreateJob("ann", "{}"));
  ASSERT_OK_AND_ASSIGN(const JobRecord b, store_->CreateJob("ann", "{}"));
  for (int i = 1; i <= 5; ++i) {
    now_us_ = 100 * i;
    ASSERT_OK_AND_ASSIGN(const int64_t seq, store_->AppendJobEvent(a.id, absl::StrCat("a", i)));
    EXPECT_EQ(seq, i);
  }
  ASSERT_OK_AND_ASSIGN(const int64_t b1, store_->AppendJobEvent(b.id, std::string("\0b", 2)));
  EXPECT_EQ(b1, 1);

  ASSERT_OK_AND_ASSIGN(const auto all, store_->ListJobEvents(a.id, 0, 100));
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].seq, 1);
  EXPECT_EQ(all[0].payload, "a1");
  EXPECT_EQ(all[4].created_at_us, 500);
  ASSERT_OK_AND_ASSIGN(const auto tail, store_->ListJobEvents(a.id, 3, 100));
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].seq, 4);
  ASSERT_OK_AND_ASSIGN(const auto limited, store_->ListJobEvents(a.id, 1, 2));
  ASSERT_EQ(limited.size(), 2u);
  EXPECT_EQ(limited[1].seq, 3);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ListJobEvents(a.id, 5, 100));
  EXPECT_TRUE(none.empty());
  ASSERT_OK_AND_ASSIGN(const auto binary, store_->ListJobEvents(b.id, 0, 10));
  ASSERT_EQ(binary.size(), 1u);
  EXPECT_EQ(binary[0].payload, std::string("\0b", 2));

  EXPECT_CODE(store_->AppendJobEvent(999, "x"), StatusCode::kNotFound);
  EXPECT_CODE(store_->ListJobEvents(999, 0, 10), StatusCode::kNotFound);
  EXPECT_CODE(store_->ListJobEvents(a.id, -1, 10), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->ListJobEvents(a.id, 0, 0), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- results

TEST_P(StoreJobsTest, InsertResultsIsIdempotent) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
  ResultRow undefined = Row("m", "zero", "retention", 0);
  undefined.defined = false;
  undefined.value = std::numeric_limits<double>::quiet_NaN();
  ResultRow with_ci = Row("m", "zero", "nll", 3.25);
  with_ci.ci_low = 3.0;
  with_ci.ci_high = 3.5;
  now_us_ = 4242;
  ASSERT_OK_AND_ASSIGN(const int64_t first, store_->InsertResults(job.id, {with_ci, undefined}));
  EXPECT_EQ(first, 2);
  // A restarted job writes the same rows again, plus a new one.
  ResultRow changed = with_ci;
  changed.value = 99;  // first write wins
  ASSERT_OK_AND_ASSIGN(
      const int64_t second,
      store_->InsertResults(job.id, {changed, undefined, Row("m", "mean", "nll", 3.1)}));
  EXPECT_EQ(second, 1);

  ASSERT_OK_AND_ASSIGN(const ResultPage page, store_->QueryResults({}, 0, ""));
  ASSERT_EQ(page.rows.size(), 3u);
  EXPECT_TRUE(page.next_page_token.empty());
  const ResultRow& r0 = page.rows[0];
  EXPECT_EQ(r0.job_id, job.id);
  EXPECT_EQ(r0.model, "m");
  EXPECT_EQ(r0.weights_sha256, "w-m");
  EXPECT_EQ(r0.dataset_sha256, "ds-eval");
  EXPECT_EQ(r0.metric, "nll");
  EXPECT_EQ(r0.value, 3.25);
  EXPECT_TRUE(r0.defined);
  EXPECT_EQ(r0.ci_low, std::optional<double>(3.0));
  EXPECT_EQ(r0.ci_high, std::optional<double>(3.5));
  EXPECT_EQ(r0.n, 64);
  EXPECT_EQ(r0.created_at_us, 4242);
  const ResultRow& r1 = page.rows[1];
  EXPECT_FALSE(r1.defined);
  EXPECT_TRUE(std::isnan(r1.value));
  EXPECT_FALSE(r1.ci_low.has_value());

  EXPECT_CODE(store_->InsertResults(job.id + 1, {Row("m", "a", "b", 1)}), StatusCode::kNotFound);
  ResultRow wrong_job = Row("m", "a", "b", 1);
  wrong_job.job_id = job.id + 1;
  EXPECT_CODE(store_->InsertResults(job.id, {wrong_job}), StatusCode::kInvalidArgument);
  ResultRow negative = Row("m", "a", "b", 1);
  negative.n = -1;
  EXPECT_CODE(store_->InsertResults(job.id, {negative}), StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(const int64_t nothing, store_->InsertResults(job.id, {}));
  EXPECT_EQ(nothing, 0);
}

TEST_P(StoreJobsTest, QueryResultsFiltersAndPages) {
  // 3 jobs x 4 models x 5 interventions x 3 metrics = 180 rows; each job at
  // its own time and on its own dataset.
  std::vector<int64_t> job_ids;
  for (int j = 0; j < 3; ++j) {
    ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
    job_ids.push_back(job.id);
    std::vector<ResultRow> rows;
    for (int m = 0; m < 4; ++m) {
      for (int i = 0; i < 5; ++i) {
        for (int k = 0; k < 3; ++k) {
          ResultRow row = Row(absl::StrCat("model", m), absl::StrCat("iv", i),
                              absl::StrCat("metric", k), m * 100 + i * 10 + k);
          row.dataset_sha256 = absl::StrCat("ds", j);
          rows.push_back(row);
        }
      }
    }
    now_us_ = 1000 * (j + 1);
    ASSERT_OK(store_->InsertResults(job.id, rows));
  }

  struct Case {
    ResultFilter filter;
    size_t expected;
  };
  std::vector<Case> cases;
  cases.push_back({{}, 180});
  ResultFilter by_job;
  by_job.job_id = job_ids[1];
  cases.push_back({by_job, 60});
  ResultFilter by_model;
  by_model.model = "model2";
  cases.push_back({by_model, 45});
  ResultFilter by_all = by_model;
  by_all.intervention = "iv3";
  by_all.metric = "metric1";
  cases.push_back({by_all, 3});
  ResultFilter by_dataset;
  by_dataset.dataset_sha256 = "ds2";
  cases.push_back({by_dataset, 60});
  ResultFilter by_metric;
  by_metric.metric = "metric0";
  by_metric.job_id = job_ids[0];
  cases.push_back({by_metric, 20});
  ResultFilter by_time;
  by_time.created_after_us = 2000;   // inclusive
  by_time.created_before_us = 3000;  // exclusive
  cases.push_back({by_time, 60});
  ResultFilter open_end;
  open_end.created_after_us = 2000;
  cases.push_back({open_end, 120});
  ResultFilter nothing;
  nothing.model = "absent";
  cases.push_back({nothing, 0});

  for (const Case& c : cases) {
    for (int page_size : {1, 7, 100, 1000}) {
      const std::vector<ResultRow> rows = AllResults(c.filter, page_size);
      ASSERT_EQ(rows.size(), c.expected) << "page_size " << page_size;
      std::set<std::string> keys;
      for (const ResultRow& row : rows) {
        EXPECT_TRUE(keys.insert(absl::StrCat(row.job_id, "/", row.model, "/", row.intervention, "/",
                                             row.metric))
                        .second);
        if (c.filter.job_id) {
          EXPECT_EQ(row.job_id, *c.filter.job_id);
        }
        if (c.filter.model) {
          EXPECT_EQ(row.model, *c.filter.model);
        }
        if (c.filter.metric) {
          EXPECT_EQ(row.metric, *c.filter.metric);
        }
        if (c.filter.intervention) {
          EXPECT_EQ(row.intervention, *c.filter.intervention);
        }
        if (c.filter.dataset_sha256) {
          EXPECT_EQ(row.dataset_sha256, *c.filter.dataset_sha256);
        }
        if (c.filter.created_after_us) {
          EXPECT_GE(row.created_at_us, *c.filter.created_after_us);
        }
        if (c.filter.created_before_us) {
          EXPECT_LT(row.created_at_us, *c.filter.created_before_us);
        }
      }
    }
  }
}

TEST_P(StoreJobsTest, ResultPagingIsStableWhileRowsArrive) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
  std::vector<ResultRow> rows;
  for (int i = 0; i < 10; ++i) rows.push_back(Row("m", "iv", absl::StrCat(i), i));
  ASSERT_OK(store_->InsertResults(job.id, rows));
  ASSERT_OK_AND_ASSIGN(const ResultPage first, store_->QueryResults({}, 4, ""));
  ASSERT_EQ(first.rows.size(), 4u);
  ASSERT_OK(store_->InsertResults(job.id, {Row("m", "iv", "late", 10)}));
  std::vector<std::string> metrics;
  for (const ResultRow& row : first.rows) metrics.push_back(row.metric);
  std::string token = first.next_page_token;
  while (!token.empty()) {
    ASSERT_OK_AND_ASSIGN(const ResultPage page, store_->QueryResults({}, 4, token));
    for (const ResultRow& row : page.rows) metrics.push_back(row.metric);
    token = page.next_page_token;
  }
  const std::vector<std::string> expected = {"0", "1", "2", "3", "4",   "5",
                                             "6", "7", "8", "9", "late"};
  EXPECT_EQ(metrics, expected);

  EXPECT_CODE(store_->QueryResults({}, -5, ""), StatusCode::kInvalidArgument);
  for (const char* token : {"j4", "r", "rr", "r-1", "r1.5", "4"}) {
    EXPECT_CODE(store_->QueryResults({}, 4, token), StatusCode::kInvalidArgument) << token;
  }
}

}  // namespace
}  // namespace fca::storage
