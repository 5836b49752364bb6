// Conformance suite: paged dataset listings, what retention finds expired
// (jobs, unused datasets, old cache entries) and purges, projects'
// retention rules, the fault injection of the purge's writes, and the file
// shrinking after a purge. Runs on ":memory:" and a file.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

constexpr int64_t kDayUs = int64_t{86400} * 1000 * 1000;

class StoreRetentionTest : public StoreFixture {
 protected:
  int64_t PutDataset(const std::string& name, const std::string& project,
                     const std::string& bytes = "") {
    EXPECT_TRUE(store_->EnsurePersonalProject(project).ok());
    absl::StatusOr<DatasetRecord> d =
        store_->PutDataset(name, "text", project, bytes.empty() ? name + project : bytes, project);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->id : 0;
  }

  // A job of `project` cancelled while queued: finished now.
  int64_t FinishedJob(const std::string& project) {
    EXPECT_TRUE(store_->EnsurePersonalProject(project).ok());
    absl::StatusOr<JobRecord> job = store_->CreateJob(project, "{}", {}, "", project);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return 0;
    EXPECT_TRUE(store_->RequestCancel(job->id).ok());
    return job->id;
  }

  std::vector<int64_t> AllDatasetIds(const std::optional<std::string>& project, int page_size) {
    std::vector<int64_t> ids;
    std::set<int64_t> seen;
    std::string token;
    for (int pages = 0; pages < 1000; ++pages) {
      absl::StatusOr<DatasetPage> page = store_->ListDatasets(project, page_size, token);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      EXPECT_LE(static_cast<int>(page->datasets.size()), page_size);
      for (const DatasetRecord& d : page->datasets) {
        EXPECT_TRUE(seen.insert(d.id).second) << "dataset shown twice";
        if (project.has_value()) {
          EXPECT_EQ(d.project, *project);
        }
        ids.push_back(d.id);
      }
      token = page->next_page_token;
      if (token.empty()) break;
    }
    return ids;
  }

  void Advance(int64_t us) { now_us_ += us; }

  std::vector<int64_t> ExpiredDatasetIds(const RetentionDays& defaults, int limit = 100,
                                         const DatasetUse& after = {0, -1}) {
    absl::StatusOr<std::vector<DatasetUse>> uses = store_->ExpiredDatasets(defaults, limit, after);
    EXPECT_TRUE(uses.ok()) << uses.status();
    std::vector<int64_t> ids;
    if (uses.ok()) {
      for (const DatasetUse& use : *uses) ids.push_back(use.id);
    }
    return ids;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreRetentionTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

TEST_P(StoreRetentionTest, ListDatasetsPagesNewestFirstWithoutGapsOrRepeats) {
  std::vector<int64_t> ann;
  std::vector<int64_t> all;
  for (int i = 0; i < 23; ++i) {
    const std::string project = i % 3 == 0 ? "bob" : "ann";
    const int64_t id = PutDataset(absl::StrCat("d", i), project);
    all.insert(all.begin(), id);
    if (project == "ann") ann.insert(ann.begin(), id);
  }
  for (int page_size : {1, 5, 15, 23, 1000}) {
    EXPECT_EQ(AllDatasetIds(std::nullopt, page_size), all) << page_size;
    EXPECT_EQ(AllDatasetIds(std::string("ann"), page_size), ann) << page_size;
  }
  // The token of a full last page yields nothing more.
  ASSERT_OK_AND_ASSIGN(const DatasetPage exact, store_->ListDatasets(std::nullopt, 23, ""));
  EXPECT_EQ(exact.datasets.size(), 23u);
  EXPECT_TRUE(exact.next_page_token.empty());
  ASSERT_OK_AND_ASSIGN(const DatasetPage first, store_->ListDatasets(std::nullopt, 10, ""));
  // Uploaded after the first page: not on later pages.
  const int64_t late = PutDataset("late", "ann");
  ASSERT_OK_AND_ASSIGN(const DatasetPage second,
                       store_->ListDatasets(std::nullopt, 10, first.next_page_token));
  for (const DatasetRecord& d : second.datasets) EXPECT_NE(d.id, late);
  EXPECT_EQ(second.datasets.front().id, all[10]);

  ASSERT_OK_AND_ASSIGN(const DatasetPage none, store_->ListDatasets(std::string("zed"), 10, ""));
  EXPECT_TRUE(none.datasets.empty());
  EXPECT_TRUE(none.next_page_token.empty());
  EXPECT_CODE(store_->ListDatasets(std::nullopt, -1, ""), StatusCode::kInvalidArgument);
  for (const std::string token : {"x", "d", "dx", "j5", "r5", "d-5", "d1234567890123456789"}) {
    EXPECT_CODE(store_->ListDatasets(std::nullopt, 10, token), StatusCode::kInvalidArgument)
        << token;
  }
}

TEST_P(StoreRetentionTest, ExpiredJobsFollowDefaultsAndProjectRules) {
  const int64_t ann_old = FinishedJob("ann");
  const int64_t bob_old = FinishedJob("bob");
  ASSERT_OK_AND_ASSIGN(const JobRecord queued, store_->CreateJob("ann", "{}", {"m"}, "", "ann"));
  Advance(10 * kDayUs);
  const int64_t ann_new = FinishedJob("ann");
  Advance(1);

  // 0 keeps forever.
  EXPECT_TRUE(store_->ExpiredJobs({0, 0}, 100)->empty());
  // 10 days: the two old ones (oldest end first), never the queued one.
  EXPECT_EQ(*store_->ExpiredJobs({10, 0}, 100), (std::vector<int64_t>{ann_old, bob_old}));
  EXPECT_EQ(*store_->ExpiredJobs({10, 0}, 1), (std::vector<int64_t>{ann_old}));
  EXPECT_TRUE(store_->ExpiredJobs({11, 0}, 100)->empty());

  // ann keeps hers 30 days, bob forever, while the default is 10.
  ASSERT_OK(store_->SetRetentionRule({"ann", 30, std::nullopt}, "ann"));
  ASSERT_OK(store_->SetRetentionRule({"bob", 0, std::nullopt}, "root"));
  EXPECT_TRUE(store_->ExpiredJobs({10, 0}, 100)->empty());
  // ann keeps hers 5 days while the default is forever.
  ASSERT_OK(store_->SetRetentionRule({"ann", 5, std::nullopt}, "ann"));
  EXPECT_EQ(*store_->ExpiredJobs({0, 0}, 100), (std::vector<int64_t>{ann_old}));
  Advance(5 * kDayUs);
  EXPECT_EQ(*store_->ExpiredJobs({0, 0}, 100), (std::vector<int64_t>{ann_old, ann_new}));
  EXPECT_NE(queued.id, 0);
}

TEST_P(StoreRetentionTest, PurgeDeletesExactlyTheExpiredJobs) {
  const int64_t old_job = FinishedJob("ann");
  ASSERT_OK_AND_ASSIGN(const JobRecord queued, store_->CreateJob("ann", "{}", {"m"}, "", "ann"));
  Advance(3 * kDayUs);
  const int64_t recent = FinishedJob("ann");
  ASSERT_OK_AND_ASSIGN(const bool purged, store_->PurgeExpiredJob(old_job, {2, 0}));
  EXPECT_TRUE(purged);
  EXPECT_CODE(store_->GetJob(old_job), StatusCode::kNotFound);
  // Not expired, not finished, or gone: nothing happens.
  for (int64_t id : {recent, queued.id, old_job}) {
    ASSERT_OK_AND_ASSIGN(const bool kept, store_->PurgeExpiredJob(id, {2, 0}));
    EXPECT_FALSE(kept) << id;
  }
  ASSERT_OK(store_->GetJob(recent).status());
  ASSERT_OK_AND_ASSIGN(const JobRecord still_queued, store_->GetJob(queued.id));
  EXPECT_EQ(still_queued.state, JobState::kQueued);
}

TEST_P(StoreRetentionTest, RetentionRulesAreStoredAndRemovedWithTheProject) {
  ASSERT_OK(store_->EnsurePersonalProject("ann").status());
  ASSERT_OK_AND_ASSIGN(RetentionRule none, store_->GetRetentionRule("ann"));
  EXPECT_EQ(none.project, "ann");
  EXPECT_FALSE(none.keep_jobs_days.has_value());
  EXPECT_FALSE(none.keep_unused_datasets_days.has_value());
  ASSERT_OK(store_->SetRetentionRule({"ann", 7, 0}, "ann"));
  ASSERT_OK_AND_ASSIGN(RetentionRule set, store_->GetRetentionRule("ann"));
  EXPECT_EQ(set.keep_jobs_days, 7);
  EXPECT_EQ(set.keep_unused_datasets_days, 0);
  ASSERT_OK(store_->SetRetentionRule({"ann", std::nullopt, 3}, "ann"));
  ASSERT_OK_AND_ASSIGN(set, store_->GetRetentionRule("ann"));
  EXPECT_FALSE(set.keep_jobs_days.has_value());
  EXPECT_EQ(set.keep_unused_datasets_days, 3);
  ASSERT_OK(store_->SetRetentionRule({"ann", std::nullopt, std::nullopt}, "ann"));
  ExpectRows("project_retention", 0);
  EXPECT_CODE(store_->SetRetentionRule({"", 1, 1}, "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->SetRetentionRule({"ann", -1, 1}, "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->SetRetentionRule({"nope", 1, 1}, "x"), StatusCode::kNotFound);
  // A deleted project's rule goes with it.
  ASSERT_OK(store_->CreateProject("lab", "root", "ann").status());
  ASSERT_OK(store_->SetRetentionRule({"lab", 1, 1}, "ann"));
  ASSERT_OK(store_->DeleteProject("lab").status());
  ExpectRows("project_retention", 0);
}

TEST_P(StoreRetentionTest, DatasetsExpireAfterTheirLastUse) {
  const int64_t used = PutDataset("used", "ann");
  const int64_t idle = PutDataset("idle", "ann");
  const int64_t bobs = PutDataset("bobs", "bob");
  Advance(4 * kDayUs);
  ASSERT_OK(store_->TouchDataset(used));
  Advance(2 * kDayUs);
  // 5 days unused: idle and bob's (least recently used first), not `used`.
  EXPECT_EQ(ExpiredDatasetIds({0, 5}), (std::vector<int64_t>{idle, bobs}));
  // Paged by (last use, id): idle and bob's were uploaded at the same time.
  ASSERT_OK_AND_ASSIGN(const std::vector<DatasetUse> first, store_->ExpiredDatasets({0, 5}, 1));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(ExpiredDatasetIds({0, 5}, 100, first[0]), (std::vector<int64_t>{bobs}));
  EXPECT_TRUE(ExpiredDatasetIds({0, 0}).empty());  // forever
  ASSERT_OK(store_->SetRetentionRule({"bob", std::nullopt, 0}, "bob"));
  EXPECT_EQ(ExpiredDatasetIds({0, 5}), (std::vector<int64_t>{idle}));
  ASSERT_OK(store_->SetRetentionRule({"ann", std::nullopt, 1}, "ann"));
  EXPECT_EQ(ExpiredDatasetIds({0, 5}), (std::vector<int64_t>{idle, used}));
  // The purge re-checks: a dataset used meanwhile is kept.
  ASSERT_OK(store_->TouchDataset(used));
  ASSERT_OK_AND_ASSIGN(const bool used_purged, store_->PurgeExpiredDataset(used, {0, 5}));
  EXPECT_FALSE(used_purged);
  ASSERT_OK_AND_ASSIGN(const bool idle_purged, store_->PurgeExpiredDataset(idle, {0, 5}));
  EXPECT_TRUE(idle_purged);
  EXPECT_CODE(store_->GetDataset(idle), StatusCode::kNotFound);
  ASSERT_OK(store_->GetDataset(used).status());
  ASSERT_OK(store_->GetDataset(bobs).status());
  ASSERT_OK_AND_ASSIGN(const bool gone, store_->PurgeExpiredDataset(idle, {0, 5}));
  EXPECT_FALSE(gone);
  EXPECT_CODE(store_->TouchDataset(idle), StatusCode::kNotFound);
}

TEST_P(StoreRetentionTest, CoefficientsUnusedSinceACutoffAreEvicted) {
  ASSERT_OK(store_->PutCoefficients({"u", "w", "old", "f32", "cpu"}, "m", "aaaa"));
  Advance(kDayUs);
  ASSERT_OK(store_->PutCoefficients({"u", "w", "used", "f32", "cpu"}, "m", "bbbb"));
  ASSERT_OK(store_->PutCoefficients({"u", "w", "new", "f32", "cpu"}, "m", "cccc"));
  Advance(kDayUs);
  // Reading an entry is a use.
  ASSERT_OK_AND_ASSIGN(auto hit, store_->GetCoefficients({"u", "w", "used", "f32", "cpu"}));
  ASSERT_TRUE(hit.has_value());
  ASSERT_OK_AND_ASSIGN(const int64_t none,
                       store_->EvictCoefficientsUnusedSince(now_us_ - 2 * kDayUs, 10));
  EXPECT_EQ(none, 0);
  ASSERT_OK_AND_ASSIGN(const int64_t one,
                       store_->EvictCoefficientsUnusedSince(now_us_ - kDayUs, 10));
  EXPECT_EQ(one, 1);
  ASSERT_OK_AND_ASSIGN(auto old, store_->GetCoefficients({"u", "w", "old", "f32", "cpu"}));
  EXPECT_FALSE(old.has_value());
  // At most `limit` a call.
  ASSERT_OK_AND_ASSIGN(const int64_t limited, store_->EvictCoefficientsUnusedSince(now_us_ + 1, 1));
  EXPECT_EQ(limited, 1);
  ASSERT_OK_AND_ASSIGN(const int64_t rest, store_->EvictCoefficientsUnusedSince(now_us_ + 1, 10));
  EXPECT_EQ(rest, 1);
  ASSERT_OK_AND_ASSIGN(const int64_t bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 0);
}

TEST_P(StoreRetentionTest, PurgeWritesAreFaultInjectedAndAFaultWritesNothing) {
  if (!is_file()) return;  // reopening ":memory:" would start empty
  const int64_t job = FinishedJob("ann");
  const int64_t dataset = PutDataset("idle", "ann");
  ASSERT_OK(store_->PutCoefficients({"ann", "w", "h", "f32", "cpu"}, "m", "aaaa"));
  Advance(3 * kDayUs);
  options_.fault_injector = [](std::string_view op) {
    for (const char* name :
         {"purge_job", "purge_dataset", "evict_coefficients", "set_retention", "touch_dataset"}) {
      if (op == name) return absl::UnavailableError(absl::StrCat("injected ", name));
    }
    return absl::OkStatus();
  };
  Open();
  EXPECT_CODE(store_->PurgeExpiredJob(job, {1, 1}), StatusCode::kUnavailable);
  EXPECT_CODE(store_->PurgeExpiredDataset(dataset, {1, 1}), StatusCode::kUnavailable);
  EXPECT_CODE(store_->EvictCoefficientsUnusedSince(now_us_, 10), StatusCode::kUnavailable);
  EXPECT_CODE(store_->SetRetentionRule({"ann", 1, 1}, "ann"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->TouchDataset(dataset), StatusCode::kUnavailable);
  ExpectRows("jobs", 1);
  ExpectRows("datasets", 1);
  ExpectRows("coeff_cache", 1);
  ExpectRows("project_retention", 0);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord kept, store_->GetDataset(dataset));
  EXPECT_EQ(kept.name, "idle");
}

TEST_P(StoreRetentionTest, TheFileShrinksAfterAPurge) {
  if (!is_file()) return;
  options_.chunk_bytes = 64 * 1024;
  Open();
  std::vector<int64_t> ids;
  for (int i = 0; i < 16; ++i) {
    // 256 KiB of distinct bytes each: 4 MiB in all.
    ids.push_back(PutDataset(absl::StrCat("big", i), "ann",
                             std::string(256 * 1024, static_cast<char>('a' + i))));
  }
  const int64_t kept = PutDataset("small", "bob");
  store_.reset();  // checkpoints: the file holds everything
  const int64_t full = static_cast<int64_t>(std::filesystem::file_size(tmp_.path()));
  Open();
  Advance(2 * kDayUs);
  ASSERT_OK(store_->TouchDataset(kept));
  for (int64_t id : ids) {
    ASSERT_OK_AND_ASSIGN(const bool purged, store_->PurgeExpiredDataset(id, {0, 1}));
    EXPECT_TRUE(purged);
  }
  store_.reset();
  const int64_t after = static_cast<int64_t>(std::filesystem::file_size(tmp_.path()));
  EXPECT_LT(after, full - 3 * 1024 * 1024) << "before " << full << ", after " << after;
  Open();
  ASSERT_OK_AND_ASSIGN(const DatasetRecord small, store_->GetDataset(kept));
  EXPECT_EQ(small.name, "small");
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

}  // namespace
}  // namespace fca::storage
