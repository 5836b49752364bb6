// Retention in the core (server/core/retention.h): GetRetention and
// SetRetention (the server's defaults, a project's own days, resets, bad
// days, the audit row), the purge (exactly the expired jobs with their
// results and the unused datasets; never a dataset a queued job names;
// cache entries by age; what a pass purged is recorded), and paged
// listings returning every row once while rows are inserted meanwhile.
#include "server/core/retention.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/audit_log.h"
#include "tests/core/core_env.h"
#include "tests/storage/test_util.h"

namespace fca::core {
namespace {

using testing::Alice;
using testing::CoreEnv;
using Code = absl::StatusCode;

constexpr int64_t kDayUs = int64_t{86400} * 1000 * 1000;

class RetentionTest : public ::testing::Test {
 protected:
  static storage::StoreOptions StoreWithClock(std::atomic<int64_t>* now) {
    storage::StoreOptions options;
    options.now_us = [now] { return now->load(); };
    return options;
  }

  absl::StatusOr<v1::SetRetentionResponse> Set(std::optional<int> jobs, std::optional<int> datasets,
                                               const std::string& project = "") {
    v1::SetRetentionRequest r;
    r.set_project(project);
    if (jobs) r.set_keep_jobs_days(*jobs);
    if (datasets) r.set_keep_unused_datasets_days(*datasets);
    return env_.core()->SetRetention(Alice(), r);
  }

  absl::StatusOr<v1::Job> Submit() {
    return env_.Submit(Alice(), testing::SmallSpec({testing::kGateA}, "eval", "calib"));
  }

  RetentionOptions Options(int jobs_days, int datasets_days) {
    RetentionOptions options;
    options.defaults = {jobs_days, datasets_days};
    options.now_us = [this] { return now_.load(); };
    options.batch = 2;  // several batches with a few rows
    return options;
  }

  std::atomic<int64_t> now_{1'000'000};
  CoreEnv env_{ServiceLimits{}, testing::FastRunOptions(), StoreWithClock(&now_)};
};

TEST_F(RetentionTest, GetAndSetRetentionWithTheServersDefaults) {
  env_.core()->set_retention_defaults({10, 20});
  AuditLog log(env_.store(), {});
  env_.core()->set_audit_log(&log);
  ASSERT_OK_AND_ASSIGN(const v1::GetRetentionResponse got, env_.core()->GetRetention(Alice(), {}));
  EXPECT_EQ(got.retention().project(), "alice");
  EXPECT_EQ(got.retention().keep_jobs_days(), 10);
  EXPECT_EQ(got.retention().keep_unused_datasets_days(), 20);
  EXPECT_TRUE(got.retention().jobs_days_default());
  EXPECT_TRUE(got.retention().datasets_days_default());

  ASSERT_OK_AND_ASSIGN(v1::SetRetentionResponse set, Set(3, std::nullopt));
  EXPECT_EQ(set.retention().keep_jobs_days(), 3);
  EXPECT_FALSE(set.retention().jobs_days_default());
  EXPECT_EQ(set.retention().keep_unused_datasets_days(), 20);  // unchanged: the default
  ASSERT_OK_AND_ASSIGN(set, Set(std::nullopt, 0));
  EXPECT_EQ(set.retention().keep_jobs_days(), 3);
  EXPECT_EQ(set.retention().keep_unused_datasets_days(), 0);  // forever, its own
  EXPECT_FALSE(set.retention().datasets_days_default());
  ASSERT_OK_AND_ASSIGN(set, Set(-1, -1));  // both back to the defaults
  EXPECT_EQ(set.retention().keep_jobs_days(), 10);
  EXPECT_TRUE(set.retention().jobs_days_default());
  EXPECT_TRUE(set.retention().datasets_days_default());

  for (int bad : {-2, kMaxRetentionDays + 1}) {
    const absl::Status status = Set(bad, std::nullopt).status();
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("keep_jobs_days"), std::string::npos) << status;
  }
  EXPECT_EQ(Set(1, 1, std::string(300, 'p')).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Set(1, 1, "nobody-has-this").status().code(), Code::kNotFound);

  storage::AuditLogFilter filter;
  filter.action = audit_action::kRetentionSet;
  ASSERT_OK_AND_ASSIGN(const storage::AuditLogPage rows,
                       env_.store()->QueryAuditLog(filter, 0, ""));
  ASSERT_EQ(rows.rows.size(), 7u);  // three changes, four refusals
  EXPECT_EQ(rows.rows.back().outcome, "OK");
  EXPECT_EQ(rows.rows.back().object_id, "alice");
  EXPECT_EQ(rows.rows.back().detail, "keep_jobs_days=3 keep_unused_datasets_days=20");
  EXPECT_EQ(rows.rows.front().outcome, "NOT_FOUND");
  env_.core()->set_audit_log(nullptr);
}

TEST_F(RetentionTest, PurgeDeletesTheExpiredAndSparesWhatAQueuedJobNeeds) {
  ASSERT_OK(env_.UploadEvalAndCalib(Alice()));
  ASSERT_OK_AND_ASSIGN(const v1::Job first, Submit());
  ASSERT_OK_AND_ASSIGN(const v1::Job done, env_.RunNext());
  ASSERT_EQ(done.id(), first.id());
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  storage::ResultFilter rows_of_first;
  rows_of_first.job_id = first.id();
  ASSERT_OK_AND_ASSIGN(const storage::ResultPage results,
                       env_.store()->QueryResults(rows_of_first, 10, ""));
  ASSERT_FALSE(results.rows.empty());
  ASSERT_OK(env_.Upload(Alice(), "idle", "idle bytes").status());
  ASSERT_OK_AND_ASSIGN(const v1::Job queued, Submit());  // names eval and calib
  now_ += 10 * kDayUs;

  AuditLog log(env_.store(), {});
  RetentionOptions options = Options(5, 5);
  options.audit_log = &log;
  Retention retention(env_.store(), options);
  ASSERT_OK_AND_ASSIGN(const PurgeCounts counts, retention.PurgeOnce());
  EXPECT_EQ(counts.jobs, 1);
  EXPECT_EQ(counts.datasets, 1);         // idle
  EXPECT_EQ(counts.datasets_in_use, 2);  // eval and calib: the queued job names them
  EXPECT_EQ(env_.Get(Alice(), first.id()).status().code(), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(const storage::ResultPage gone,
                       env_.store()->QueryResults(rows_of_first, 10, ""));
  EXPECT_TRUE(gone.rows.empty());
  ASSERT_OK_AND_ASSIGN(const v1::Job still, env_.Get(Alice(), queued.id()));
  EXPECT_EQ(still.state(), v1::JOB_STATE_QUEUED);
  ASSERT_OK_AND_ASSIGN(const v1::ListDatasetsResponse listed,
                       env_.core()->ListDatasets(Alice(), {}));
  std::set<std::string> names;
  for (const v1::Dataset& d : listed.datasets()) names.insert(d.name());
  EXPECT_EQ(names, (std::set<std::string>{"eval", "calib"}));

  // Once the job has run, its datasets are unused (it ended just now: kept).
  ASSERT_OK_AND_ASSIGN(const v1::Job second, env_.RunNext());
  ASSERT_EQ(second.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(const PurgeCounts after, retention.PurgeOnce());
  EXPECT_EQ(after.jobs, 0);
  EXPECT_EQ(after.datasets, 2);
  EXPECT_EQ(after.datasets_in_use, 0);
  ASSERT_OK(env_.Get(Alice(), queued.id()).status());

  storage::AuditLogFilter filter;
  filter.action = audit_action::kRetentionPurge;
  ASSERT_OK_AND_ASSIGN(const storage::AuditLogPage rows,
                       env_.store()->QueryAuditLog(filter, 0, ""));
  ASSERT_EQ(rows.rows.size(), 2u);
  EXPECT_EQ(rows.rows.back().detail,
            "purged 1 jobs, 1 datasets, 0 cache entries; kept 2 expired datasets that queued or "
            "running jobs name");
}

TEST_F(RetentionTest, AProjectsOwnDaysOverrideTheDefaultForever) {
  ASSERT_OK(env_.UploadEvalAndCalib(Alice()));
  ASSERT_OK_AND_ASSIGN(const v1::Job job, Submit());
  ASSERT_OK(env_.RunNext().status());
  now_ += 3 * kDayUs;
  Retention retention(env_.store(), Options(0, 0));  // the server keeps everything
  ASSERT_OK_AND_ASSIGN(const PurgeCounts none, retention.PurgeOnce());
  EXPECT_EQ(none.jobs + none.datasets, 0);
  ASSERT_OK(Set(2, std::nullopt).status());  // alice keeps jobs 2 days
  ASSERT_OK_AND_ASSIGN(const PurgeCounts counts, retention.PurgeOnce());
  EXPECT_EQ(counts.jobs, 1);
  EXPECT_EQ(counts.datasets, 0);
  EXPECT_EQ(env_.Get(Alice(), job.id()).status().code(), Code::kNotFound);
}

TEST_F(RetentionTest, CacheEntriesEvictedByAge) {
  ASSERT_OK(env_.store()->PutCoefficients({"alice", "w", "old", "float32", "cpu"}, "m", "aa"));
  now_ += 2 * kDayUs;
  ASSERT_OK(env_.store()->PutCoefficients({"alice", "w", "new", "float32", "cpu"}, "m", "bb"));
  RetentionOptions options = Options(0, 0);
  options.coeff_cache_max_age_days = 1;
  Retention retention(env_.store(), options);
  ASSERT_OK_AND_ASSIGN(const PurgeCounts counts, retention.PurgeOnce());
  EXPECT_EQ(counts.cache_entries, 1);
  ASSERT_OK_AND_ASSIGN(auto old,
                       env_.store()->GetCoefficients({"alice", "w", "old", "float32", "cpu"}));
  EXPECT_FALSE(old.has_value());
  ASSERT_OK_AND_ASSIGN(auto kept,
                       env_.store()->GetCoefficients({"alice", "w", "new", "float32", "cpu"}));
  EXPECT_TRUE(kept.has_value());
}

// Every row present when the first page was read is returned exactly once,
// while another thread inserts rows (which may or may not show).
TEST_F(RetentionTest, PagesReturnEveryRowOnceUnderConcurrentInserts) {
  storage::Store* store = env_.store();
  ASSERT_OK(store->EnsurePersonalProject("alice").status());
  std::set<int64_t> datasets_before;
  std::set<int64_t> jobs_before;
  for (int i = 0; i < 40; ++i) {
    ASSERT_OK_AND_ASSIGN(const storage::DatasetRecord d,
                         store->PutDataset(absl::StrCat("d", i), "text", "alice",
                                           absl::StrCat("bytes ", i), "alice"));
    datasets_before.insert(d.id);
    ASSERT_OK_AND_ASSIGN(const storage::JobRecord j,
                         store->CreateJob("alice", "{}", {}, "", "alice"));
    jobs_before.insert(j.id);
  }
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (!store
               ->PutDataset(absl::StrCat("late", i), "text", "alice", absl::StrCat("late ", i),
                            "alice")
               .ok() ||
          !store->CreateJob("alice", "{}", {}, "", "alice").ok()) {
        return;
      }
    }
  });
  std::multiset<int64_t> datasets_seen;
  v1::ListDatasetsRequest datasets;
  datasets.set_page_size(7);
  do {
    ASSERT_OK_AND_ASSIGN(const v1::ListDatasetsResponse page,
                         env_.core()->ListDatasets(Alice(), datasets));
    for (const v1::Dataset& d : page.datasets()) datasets_seen.insert(d.id());
    datasets.set_page_token(page.next_page_token());
  } while (!datasets.page_token().empty());
  std::multiset<int64_t> jobs_seen;
  v1::ListJobsRequest jobs;
  jobs.set_page_size(7);
  do {
    ASSERT_OK_AND_ASSIGN(const v1::ListJobsResponse page, env_.core()->ListJobs(Alice(), jobs));
    for (const v1::Job& j : page.jobs()) jobs_seen.insert(j.id());
    jobs.set_page_token(page.next_page_token());
  } while (!jobs.page_token().empty());
  stop = true;
  writer.join();
  for (int64_t id : datasets_before) EXPECT_EQ(datasets_seen.count(id), 1u) << "dataset " << id;
  for (int64_t id : jobs_before) EXPECT_EQ(jobs_seen.count(id), 1u) << "job " << id;
  for (int64_t id : datasets_seen) EXPECT_EQ(datasets_seen.count(id), 1u) << "dataset " << id;
  for (int64_t id : jobs_seen) EXPECT_EQ(jobs_seen.count(id), 1u) << "job " << id;

  v1::ListDatasetsRequest bad;
  bad.set_page_size(-1);
  EXPECT_EQ(env_.core()->ListDatasets(Alice(), bad).status().code(), Code::kInvalidArgument);
  bad.set_page_size(1001);
  EXPECT_EQ(env_.core()->ListDatasets(Alice(), bad).status().code(), Code::kInvalidArgument);
  bad.set_page_size(0);
  bad.set_page_token("j12");  // another listing's token
  EXPECT_EQ(env_.core()->ListDatasets(Alice(), bad).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace fca::core
