// Conformance suite, part 3 (issue 9): attempt cap, drain requeue,
// deletion with space freed, staged uploads, per-user bytes, the exclusive
// database lock and fault injection. Runs on ":memory:" and a file.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreLifecycleTest : public StoreFixture {};

// A claim of the oldest claimable task by `worker`.
INSTANTIATE_TEST_SUITE_P(Backends, StoreLifecycleTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

ResultRow Row(const std::string& metric) {
  ResultRow row;
  row.model = "m";
  row.weights_sha256 = "w";
  row.dataset_sha256 = "d";
  row.intervention = "correct";
  row.metric = metric;
  row.value = 1;
  row.n = 1;
  return row;
}

TEST_P(StoreLifecycleTest, ExpireLeasesFailsTasksThatUsedTheirAttempts) {
  ASSERT_OK_AND_ASSIGN(const JobRecord crashy, store_->CreateJob("ann", "a", {"m"}));
  // Three claims that each "crash" the server: claim, recover, claim, ...
  for (int attempt = 1; attempt <= 3; ++attempt) {
    ASSERT_OK_AND_ASSIGN(const auto claimed, store_->ClaimTask(Claim("local/0")));
    ASSERT_TRUE(claimed.has_value());
    EXPECT_EQ(claimed->task.attempts, attempt);
    EXPECT_EQ(claimed->job.attempts, attempt);
    ASSERT_OK_AND_ASSIGN(const ExpiredTasks recovered,
                         store_->ExpireLeases(3, "local/", "the server stopped"));
    if (attempt < 3) {
      EXPECT_EQ(recovered.requeued.size(), 1u);
      EXPECT_TRUE(recovered.failed.empty());
    } else {
      EXPECT_TRUE(recovered.requeued.empty());
      ASSERT_EQ(recovered.failed.size(), 1u);
      EXPECT_EQ(recovered.failed[0].id, claimed->task.id);
    }
  }
  // The job ends FAILED with its task's error once it is settled.
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> unsettled, store_->UnsettledJobs());
  EXPECT_EQ(unsettled, std::vector<int64_t>{crashy.id});
  ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(crashy.id, nullptr));
  ASSERT_TRUE(settled.has_value());
  ASSERT_OK_AND_ASSIGN(const JobRecord failed, store_->GetJob(crashy.id));
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.error.find("3 times"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("the server stopped"), std::string::npos) << failed.error;
  EXPECT_GT(failed.finished_at_us, 0);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ClaimTask(Claim("local/0")));
  EXPECT_FALSE(none.has_value());
}

TEST_P(StoreLifecycleTest, DrainReleaseRefundsTheAttempt) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "a", {"m"}));
  TaskClaim last;
  for (int drains = 0; drains < 5; ++drains) {
    ASSERT_OK_AND_ASSIGN(const auto claimed, store_->ClaimTask(Claim("w")));
    ASSERT_TRUE(claimed.has_value());
    EXPECT_EQ(claimed->task.attempts, 1);
    EXPECT_EQ(claimed->job.attempts, 1);
    ASSERT_OK(store_->ReleaseTask(claimed->task.id, claimed->task.lease_seq,
                                  /*refund_attempt=*/true, "draining", /*max_attempts=*/1));
    last = *claimed;
  }
  ASSERT_OK_AND_ASSIGN(const std::vector<TaskRecord> tasks, store_->ListTasks(job.id));
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].state, JobState::kQueued);
  EXPECT_EQ(tasks[0].attempts, 0);
  EXPECT_CODE(store_->ReleaseTask(last.task.id, last.task.lease_seq, true, "again", 1),
              StatusCode::kFailedPrecondition);
}

TEST_P(StoreLifecycleTest, DeleteJobOnlyWhenFinishedAndTakesRowsAlong) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "a", {"m", "n"}));
  ASSERT_OK(store_->AppendJobEvent(job.id, "e"));
  EXPECT_CODE(store_->DeleteJob(job.id), StatusCode::kFailedPrecondition);  // queued
  ASSERT_OK(store_->ClaimTask(Claim("w")));
  ASSERT_OK(store_->InsertResults(job.id, {Row("nll"), Row("penalty")}));
  EXPECT_CODE(store_->DeleteJob(job.id), StatusCode::kFailedPrecondition);  // running
  ASSERT_OK(store_->FinishJob(job.id, JobState::kSucceeded, ""));
  ASSERT_OK(store_->DeleteJob(job.id));
  EXPECT_CODE(store_->GetJob(job.id), StatusCode::kNotFound);
  EXPECT_CODE(store_->DeleteJob(job.id), StatusCode::kNotFound);
  ExpectRows("job_events", 0);
  ExpectRows("results", 0);
  ExpectRows("tasks", 0);
  // Ids are never reused.
  ASSERT_OK_AND_ASSIGN(const JobRecord next, store_->CreateJob("ann", "b"));
  EXPECT_GT(next.id, job.id);
  ASSERT_OK_AND_ASSIGN(std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

TEST_P(StoreLifecycleTest, StagedUploadBecomesADatasetInChunks) {
  ASSERT_OK_AND_ASSIGN(const int64_t upload, store_->BeginUpload("ann"));
  std::string all;
  for (int i = 0; i < 5; ++i) {
    const std::string chunk(3 + i, static_cast<char>('a' + i));
    all += chunk;
    ASSERT_OK(store_->AppendUpload(upload, chunk));
  }
  ASSERT_OK_AND_ASSIGN(const int64_t staged, store_->UserBytes("ann"));
  EXPECT_EQ(staged, static_cast<int64_t>(all.size()));
  ASSERT_OK_AND_ASSIGN(const DatasetRecord d,
                       store_->FinishUpload(upload, "corpus", "text", Sha256Hex(all)));
  EXPECT_EQ(d.size_bytes, static_cast<int64_t>(all.size()));
  ASSERT_OK_AND_ASSIGN(const std::string back, store_->ReadDatasetBytes(d.id));
  EXPECT_EQ(back, all);
  ASSERT_OK_AND_ASSIGN(const std::string prefix, store_->ReadDatasetPrefix(d.id, 10));
  EXPECT_EQ(prefix, all.substr(0, 10));
  ASSERT_OK_AND_ASSIGN(const std::string whole, store_->ReadDatasetPrefix(d.id, 1000));
  EXPECT_EQ(whole, all);
  ExpectRows("upload_chunks", 0);
  ExpectRows("uploads", 0);
  ASSERT_OK_AND_ASSIGN(const int64_t used, store_->UserBytes("ann"));
  EXPECT_EQ(used, static_cast<int64_t>(all.size()));
  EXPECT_CODE(store_->AppendUpload(upload, "x"), StatusCode::kNotFound);
}

TEST_P(StoreLifecycleTest, SameContentUploadedTwiceIsStoredOnce) {
  const std::string bytes(40, 'z');
  ASSERT_OK(store_->PutDataset("a", "text", "ann", bytes));
  ASSERT_OK_AND_ASSIGN(const int64_t upload, store_->BeginUpload("bob"));
  ASSERT_OK(store_->AppendUpload(upload, bytes));
  ASSERT_OK(store_->FinishUpload(upload, "b", "text", Sha256Hex(bytes)));
  ExpectRows("dataset_blobs", 1);
  ExpectRows("upload_chunks", 0);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord by_content,
                       store_->FindDatasetByContent(Sha256Hex(bytes), "bob"));
  EXPECT_EQ(by_content.name, "b");
  EXPECT_CODE(store_->FindDatasetByContent(Sha256Hex(bytes), "carol"), StatusCode::kNotFound);
  // Each user is charged for what they keep.
  ASSERT_OK_AND_ASSIGN(const int64_t ann, store_->UserBytes("ann"));
  ASSERT_OK_AND_ASSIGN(const int64_t bob, store_->UserBytes("bob"));
  EXPECT_EQ(ann, 40);
  EXPECT_EQ(bob, 40);
}

TEST_P(StoreLifecycleTest, AbortedAndUnfinishedUploadsLeaveNothing) {
  ASSERT_OK_AND_ASSIGN(const int64_t a, store_->BeginUpload("ann"));
  ASSERT_OK(store_->AppendUpload(a, std::string(20, 'a')));
  ASSERT_OK(store_->AbortUpload(a));
  ASSERT_OK_AND_ASSIGN(const int64_t b, store_->BeginUpload("ann"));
  ASSERT_OK(store_->AppendUpload(b, std::string(20, 'b')));
  ASSERT_OK_AND_ASSIGN(const int64_t dropped, store_->DropUnfinishedUploads());
  EXPECT_EQ(dropped, 1);
  ExpectRows("uploads", 0);
  ExpectRows("upload_chunks", 0);
  ASSERT_OK_AND_ASSIGN(const int64_t used, store_->UserBytes("ann"));
  EXPECT_EQ(used, 0);
}

TEST_P(StoreLifecycleTest, DeleteDatasetFreesContentWithItsLastName) {
  const std::string bytes(4000, 'q');
  ASSERT_OK_AND_ASSIGN(const DatasetRecord a, store_->PutDataset("a", "text", "ann", bytes));
  ASSERT_OK_AND_ASSIGN(const DatasetRecord b, store_->PutDataset("b", "text", "bob", bytes));
  ASSERT_OK_AND_ASSIGN(const int64_t kept, store_->DeleteDataset(a.id));
  EXPECT_EQ(kept, 0);  // bob still has the content
  ExpectRows("dataset_blobs", 1);
  ASSERT_OK_AND_ASSIGN(const std::string still, store_->ReadDatasetBytes(b.id));
  EXPECT_EQ(still, bytes);
  ASSERT_OK_AND_ASSIGN(const int64_t freed, store_->DeleteDataset(b.id));
  EXPECT_EQ(freed, 4000);
  ExpectRows("dataset_blobs", 0);
  ExpectRows("dataset_chunks", 0);
  EXPECT_CODE(store_->DeleteDataset(b.id), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

TEST_P(StoreLifecycleTest, DeletingGivesPagesBackToTheFileSystem) {
  if (!is_file()) GTEST_SKIP() << "file backend only";
  options_.chunk_bytes = 1 << 20;
  Open();
  const std::string big(8 << 20, 'b');
  ASSERT_OK_AND_ASSIGN(const DatasetRecord d, store_->PutDataset("big", "text", "ann", big));
  store_.reset();  // checkpoint the WAL into the file
  Open();
  struct stat before {};
  ASSERT_EQ(stat(tmp_.path().c_str(), &before), 0);
  ASSERT_OK(store_->DeleteDataset(d.id));
  store_.reset();
  Open();
  struct stat after {};
  ASSERT_EQ(stat(tmp_.path().c_str(), &after), 0);
  EXPECT_GE(before.st_size, 8 << 20);
  // What is left is the empty schema (about 70 pages of 16 KiB), far below
  // the 8 MiB deleted.
  EXPECT_LT(after.st_size, 2 << 20) << "before " << before.st_size;
}

TEST_P(StoreLifecycleTest, ASecondExclusiveStoreOnTheFileIsRefused) {
  if (!is_file()) GTEST_SKIP() << "file backend only";
  options_.exclusive = true;
  Open();
  absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(options_);
  ASSERT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another fca-server"), std::string::npos);
  store_.reset();  // the lock goes with the store
  ASSERT_OK_AND_ASSIGN(auto third, Store::Open(options_));
  EXPECT_NE(third, nullptr);
}

TEST_P(StoreLifecycleTest, InjectedFaultsWriteNothing) {
  std::string failing;
  options_.fault_injector = [&](std::string_view op) {
    return op == failing ? absl::UnavailableError("injected") : absl::OkStatus();
  };
  Open();
  failing = "create_job";
  EXPECT_CODE(store_->CreateJob("ann", "a", {"m"}), StatusCode::kUnavailable);
  ExpectRows("jobs", 0);
  ExpectRows("tasks", 0);
  failing = "";
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "a", {"m"}));
  ExpectRows("tasks", 1);
  ASSERT_OK(store_->ClaimTask(Claim("w")));
  failing = "insert_results";
  EXPECT_CODE(store_->InsertResults(job.id, {Row("nll")}), StatusCode::kUnavailable);
  failing = "finish_job";
  EXPECT_CODE(store_->FinishJob(job.id, JobState::kSucceeded, ""), StatusCode::kUnavailable);
  ASSERT_OK_AND_ASSIGN(const JobRecord still, store_->GetJob(job.id));
  EXPECT_EQ(still.state, JobState::kRunning);
  ExpectRows("results", 0);
}

}  // namespace
}  // namespace fca::storage
