// The store under another process's write lock (an operator's sqlite3
// shell, a copy tool): reads on the read connection never wait behind a
// write that waits for the lock, a read inside a transaction still sees that
// transaction's writes, a key's use is written off the caller's path, and
// the store says for how long writes have been refused (/readyz turns 503
// past Store::kWriteStallLimitUs).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;
using testing_util::TempDbPath;

constexpr char kKey[] = "0123456789abcdef0123";

// A second connection to the file holding its write lock, as another
// process would.
class OutsideWriter {
 public:
  explicit OutsideWriter(const std::string& path) {
    auto db = Database::Open(path, 0);
    EXPECT_TRUE(db.ok()) << db.status();
    db_ = std::move(db).value();
    EXPECT_TRUE(db_->Execute("BEGIN IMMEDIATE", "hold the write lock").ok());
  }
  void Release() {
    if (db_ != nullptr) {
      EXPECT_TRUE(db_->Execute("ROLLBACK", "release the write lock").ok());
    }
    db_.reset();
  }
  ~OutsideWriter() { Release(); }

 private:
  std::unique_ptr<Database> db_;
};

class StoreReadersTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(StoreOptions options) {
    options.path = tmp_.path();
    auto store = Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  TempDbPath tmp_;
};

TEST_F(StoreReadersTest, ReadsDoNotWaitForAWriteWaitingForTheLock) {
  absl::Notification writer_holds_store;
  StoreOptions options;
  options.busy_timeout_ms = 30000;  // the write waits until the lock is released
  options.fault_injector = [&](std::string_view op) {
    // NoteApiKeyUse asks from inside the store's write mutex.
    if (op == "note_api_key_use" && !writer_holds_store.HasBeenNotified()) {
      writer_holds_store.Notify();
    }
    return absl::OkStatus();
  };
  std::unique_ptr<Store> store = Open(options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store->CreateJob("ann", "{}"));
  ASSERT_OK(store->AddApiKey("ann", "user", kKey));
  ASSERT_OK_AND_ASSIGN(const std::optional<ApiKeyInfo> key, store->LookupApiKey(kKey));
  ASSERT_TRUE(key.has_value());

  OutsideWriter outside(tmp_.path());
  std::atomic<bool> write_returned{false};
  absl::Status write;
  std::thread writer([&] {
    write = store->NoteApiKeyUse(key->id, "127.0.0.1");
    write_returned = true;
  });
  writer_holds_store.WaitForNotification();
  // Every read of the request path answers while the write still waits.
  EXPECT_OK(store->LookupApiKey(kKey));
  ASSERT_OK_AND_ASSIGN(const JobRecord read, store->GetJob(job.id));
  EXPECT_EQ(read.owner, "ann");
  EXPECT_OK(store->ListJobs({}, 10, ""));
  EXPECT_OK(store->CountJobs(std::nullopt, {}));
  EXPECT_OK(store->ListJobEvents(job.id, 0, 10));
  EXPECT_OK(store->QueryResults({}, 10, ""));
  EXPECT_OK(store->ListProjects(std::nullopt));
  EXPECT_OK(store->MemberRole("ann", "ann"));
  EXPECT_OK(store->ListModels());
  EXPECT_FALSE(write_returned) << "a read waited for the write: " << write;
  outside.Release();
  writer.join();
  EXPECT_OK(write);
}

TEST_F(StoreReadersTest, AReadInsideATransactionSeesItsWrites) {
  std::unique_ptr<Store> store = Open({});
  ASSERT_NE(store, nullptr);
  int64_t seen_jobs = -1;
  ASSERT_OK(store->Transaction([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const JobRecord job, store->CreateJob("ann", "{}"));
    FCA_ASSIGN_OR_RETURN(const JobRecord read, store->GetJob(job.id));
    FCA_ASSIGN_OR_RETURN(seen_jobs, store->CountJobs(std::nullopt, {}));
    return read.owner == "ann" ? absl::OkStatus() : absl::InternalError("wrong job");
  }));
  EXPECT_EQ(seen_jobs, 1);
}

TEST_F(StoreReadersTest, WritesRefusedForTheLockAreReportedUntilOneGoesThrough) {
  std::atomic<int64_t> now_us{1'000'000'000};
  StoreOptions options;
  options.busy_timeout_ms = 0;
  options.now_us = [&] { return now_us.load(); };
  std::unique_ptr<Store> store = Open(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->WritesBlockedForUs(), 0);
  {
    OutsideWriter outside(tmp_.path());
    EXPECT_CODE(store->CreateJob("ann", "{}"), StatusCode::kUnavailable);
    now_us += Store::kWriteStallLimitUs + 1;
    // A second refusal does not restart the count.
    EXPECT_CODE(store->AddApiKey("ann", "user", kKey), StatusCode::kUnavailable);
    EXPECT_EQ(store->WritesBlockedForUs(), Store::kWriteStallLimitUs + 1);
  }
  EXPECT_OK(store->CreateJob("ann", "{}"));
  EXPECT_EQ(store->WritesBlockedForUs(), 0);
}

TEST_F(StoreReadersTest, TheWatchThreadNoticesTheLockWithoutAnyWrite) {
  std::atomic<int64_t> now_us{1'000'000'000};
  StoreOptions options;
  options.file_check_interval_ms = 10;
  options.now_us = [&] { return now_us.load(); };
  std::unique_ptr<Store> store = Open(options);
  ASSERT_NE(store, nullptr);
  OutsideWriter outside(tmp_.path());
  // The probe notes the refusal at some tick; the clock then moves on.
  for (int tick = 0; tick < 3000 && store->WritesBlockedForUs() == 0; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now_us += 1000;
  }
  EXPECT_GT(store->WritesBlockedForUs(), 0);
  outside.Release();
  for (int tick = 0; tick < 3000 && store->WritesBlockedForUs() != 0; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(store->WritesBlockedForUs(), 0);
}

TEST_F(StoreReadersTest, AKeyUseIsWrittenOffThePathAndByTheDestructorAtTheLatest) {
  int64_t key_id = 0;
  {
    StoreOptions options;
    options.busy_timeout_ms = 30000;
    std::unique_ptr<Store> store = Open(options);
    ASSERT_NE(store, nullptr);
    ASSERT_OK(store->AddApiKey("ann", "user", kKey));
    ASSERT_OK_AND_ASSIGN(const std::optional<ApiKeyInfo> key, store->LookupApiKey(kKey));
    ASSERT_TRUE(key.has_value());
    key_id = key->id;
    OutsideWriter outside(tmp_.path());
    // Returns at once although the write lock is taken for as long as the
    // test likes (the old inline write waited for it here).
    store->RecordApiKeyUse(key_id, "10.0.0.7");
    store->RecordApiKeyUse(key_id, "10.0.0.8");  // the latest use wins
    outside.Release();
  }  // the destructor waits for the key-use thread
  std::unique_ptr<Store> reopened = Open({});
  ASSERT_NE(reopened, nullptr);
  ASSERT_OK_AND_ASSIGN(const ApiKeyRecord record, reopened->GetApiKey(key_id));
  EXPECT_NE(record.last_used_at_us, 0);
  EXPECT_EQ(record.last_peer, "10.0.0.8");
}

}  // namespace
}  // namespace fca::storage
