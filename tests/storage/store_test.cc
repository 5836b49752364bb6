// Conformance suite, part 1: opening, transactions, models, datasets,
// coefficient cache, API keys, concurrency. Runs on ":memory:" and a file.
#include "storage/store.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreTest : public StoreFixture {};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values(Backend::kMemory, Backend::kFile),
                         BackendName);

// ------------------------------------------------------------------ open

TEST_P(StoreTest, FreshStoreIsConsistent) {
  ASSERT_OK_AND_ASSIGN(const std::string report, store_->IntegrityCheck());
  EXPECT_EQ(report, "ok");
}

TEST_P(StoreTest, RejectsBadOptions) {
  StoreOptions bad = options_;
  bad.path = "";
  EXPECT_CODE(Store::Open(bad), StatusCode::kInvalidArgument);
  bad = options_;
  bad.chunk_bytes = 0;
  EXPECT_CODE(Store::Open(bad), StatusCode::kInvalidArgument);
  bad = options_;
  bad.busy_timeout_ms = -1;
  EXPECT_CODE(Store::Open(bad), StatusCode::kInvalidArgument);
  bad = options_;
  bad.coeff_cache_budget_bytes = -1;
  EXPECT_CODE(Store::Open(bad), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ReopeningKeepsDataAndSchema) {
  if (!is_file()) GTEST_SKIP() << "a :memory: database does not persist";
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
  Open();  // migrations run again and find nothing to do
  Open();
  ASSERT_OK_AND_ASSIGN(const JobRecord again, store_->GetJob(job.id));
  EXPECT_EQ(again.owner, "ann");
  auto db = Database::Open(tmp_.path(), 1000);
  ASSERT_OK(db);
  ASSERT_OK_AND_ASSIGN(const std::string version, (*db)->QueryText("PRAGMA user_version", "test"));
  EXPECT_EQ(version, std::to_string(kSchemaVersion));
  ASSERT_OK_AND_ASSIGN(const std::string mode, (*db)->QueryText("PRAGMA journal_mode", "test"));
  EXPECT_EQ(mode, "wal");
  ASSERT_OK_AND_ASSIGN(const std::string page_size, (*db)->QueryText("PRAGMA page_size", "test"));
  EXPECT_EQ(page_size, "16384");
}

TEST_P(StoreTest, OptimizeRefreshesStatistics) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
  ResultRow row;
  row.model = "m";
  row.intervention = "zero";
  row.metric = "nll";
  ASSERT_OK(store_->InsertResults(job.id, {row}));
  ResultFilter filter;
  filter.model = "m";
  ASSERT_OK(store_->QueryResults(filter, 10, ""));
  EXPECT_OK(store_->Optimize());
  ASSERT_OK_AND_ASSIGN(const std::string report, store_->IntegrityCheck());
  EXPECT_EQ(report, "ok");
}

TEST_P(StoreTest, MissingChunksAreDataLoss) {
  if (!is_file()) GTEST_SKIP() << "needs a second connection";
  ASSERT_OK_AND_ASSIGN(const DatasetRecord dataset,
                       store_->PutDataset("d", "text", "ann", std::string(30, 'd')));
  ASSERT_OK(store_->PutCoefficients({"u", "w", "h", "f32", "cpu"}, "", std::string(30, 'c')));
  {
    auto db = Database::Open(tmp_.path(), 1000);
    ASSERT_OK(db);
    ASSERT_OK((*db)->Execute("DELETE FROM dataset_chunks WHERE idx = 2", "test"));
    ASSERT_OK((*db)->Execute("DELETE FROM coeff_chunks WHERE idx = 0", "test"));
  }
  EXPECT_CODE(store_->ReadDatasetBytes(dataset.id), StatusCode::kDataLoss);
  EXPECT_CODE(store_->GetCoefficients({"u", "w", "h", "f32", "cpu"}), StatusCode::kDataLoss);
}

TEST_P(StoreTest, NewerSchemaIsFailedPrecondition) {
  if (!is_file()) GTEST_SKIP() << "needs a second connection";
  store_.reset();
  {
    auto db = Database::Open(tmp_.path(), 1000);
    ASSERT_OK(db);
    ASSERT_OK((*db)->Execute("PRAGMA user_version = 99", "test"));
  }
  auto reopened = Store::Open(options_);
  EXPECT_CODE(reopened, StatusCode::kFailedPrecondition);
  EXPECT_NE(reopened.status().message().find("newer"), absl::string_view::npos);
}

TEST_P(StoreTest, NotADatabaseIsDataLoss) {
  if (!is_file()) GTEST_SKIP() << "needs a file";
  store_.reset();
  testing_util::TempDbPath junk;
  FILE* f = std::fopen(junk.path().c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string garbage(8192, 'x');
  std::fwrite(garbage.data(), 1, garbage.size(), f);
  std::fclose(f);
  StoreOptions options = options_;
  options.path = junk.path();
  EXPECT_CODE(Store::Open(options), StatusCode::kDataLoss);
}

TEST_P(StoreTest, BusyWriteLockIsUnavailable) {
  if (!is_file()) GTEST_SKIP() << "needs two connections";
  StoreOptions impatient = options_;
  impatient.busy_timeout_ms = 0;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> other, Store::Open(impatient));
  absl::Status inner;
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("ann", "{}").status());
    inner = other->CreateJob("bob", "{}").status();  // store_ holds the lock
    return absl::OkStatus();
  }));
  EXPECT_CODE(inner, StatusCode::kUnavailable);
  EXPECT_EQ(inner.message().find("INSERT"), absl::string_view::npos);
  // Once the lock is free the other connection writes normally.
  EXPECT_OK(other->CreateJob("bob", "{}"));
  ASSERT_OK_AND_ASSIGN(const int64_t count, store_->CountJobs(std::nullopt, {}));
  EXPECT_EQ(count, 2);
}

// The key store busy: a key written while another connection holds the
// write lock past the busy timeout (fca-server --create_api_key beside a
// busy server) is UNAVAILABLE, retried, never INTERNAL.
TEST_P(StoreTest, BusyKeyStoreWriteIsUnavailable) {
  if (!is_file()) GTEST_SKIP() << "needs two connections";
  StoreOptions impatient = options_;
  impatient.busy_timeout_ms = 0;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> other, Store::Open(impatient));
  ASSERT_OK_AND_ASSIGN(const std::string key, Store::GenerateApiKey());
  absl::Status inner;
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("ann", "{}").status());
    inner = other->AddApiKey("bob", "user", key);  // store_ holds the lock
    return absl::OkStatus();
  }));
  EXPECT_CODE(inner, StatusCode::kUnavailable);
  EXPECT_EQ(inner.message().find("INSERT"), absl::string_view::npos) << inner;
  ASSERT_OK(other->AddApiKey("bob", "user", key));
  ASSERT_OK_AND_ASSIGN(const std::optional<ApiKeyInfo> bob, store_->LookupApiKey(key));
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(bob->user, "bob");
}

// A database another process holds exclusively (sqlite3 with
// locking_mode=EXCLUSIVE, say) is busy for every read: a store opened on it
// is UNAVAILABLE, not INTERNAL, and opens once the lock is gone.
TEST_P(StoreTest, ADatabaseLockedElsewhereIsUnavailableAtOpen) {
  if (!is_file()) GTEST_SKIP() << "needs two connections";
  ASSERT_OK_AND_ASSIGN(const std::string key, Store::GenerateApiKey());
  ASSERT_OK(store_->AddApiKey("ann", "user", key));
  store_.reset();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Database> holder, Database::Open(options_.path, 0));
  ASSERT_OK(holder->Execute("PRAGMA locking_mode = EXCLUSIVE", "exclusive mode"));
  ASSERT_OK(holder->QueryText("SELECT COUNT(*) FROM api_keys", "take the lock").status());
  StoreOptions impatient = options_;
  impatient.busy_timeout_ms = 0;
  const absl::StatusOr<std::unique_ptr<Store>> refused = Store::Open(impatient);
  EXPECT_CODE(refused, StatusCode::kUnavailable);
  holder.reset();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> reopened, Store::Open(impatient));
  ASSERT_OK_AND_ASSIGN(const std::optional<ApiKeyInfo> ann, reopened->LookupApiKey(key));
  EXPECT_TRUE(ann.has_value());
}

// ---------------------------------------------------------- transactions

TEST_P(StoreTest, TransactionCommitsOnOk) {
  int64_t job_id = 0;
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const JobRecord job, store_->CreateJob("ann", "{}"));
    job_id = job.id;
    return store_->AppendJobEvent(job.id, "started").status();
  }));
  ASSERT_OK_AND_ASSIGN(const auto events, store_->ListJobEvents(job_id, 0, 10));
  EXPECT_EQ(events.size(), 1u);
}

TEST_P(StoreTest, TransactionRollsBackEverythingOnError) {
  int64_t job_id = 0;
  const absl::Status status = store_->Transaction([&]() -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const JobRecord job, store_->CreateJob("ann", "{}"));
    job_id = job.id;
    FCA_RETURN_IF_ERROR(store_->AppendJobEvent(job.id, "e1").status());
    ResultRow row;
    row.model = "m";
    row.intervention = "zero";
    row.metric = "nll";
    FCA_RETURN_IF_ERROR(store_->InsertResults(job.id, {row}).status());
    FCA_RETURN_IF_ERROR(store_->PutDataset("d", "text", "ann", "bytes").status());
    FCA_RETURN_IF_ERROR(store_->PutCoefficients({"u", "w", "h", "f32", "cpu"}, "m", "b"));
    return absl::CancelledError("caller gave up");
  });
  // The fn's own status comes back unchanged.
  EXPECT_CODE(status, StatusCode::kCancelled);
  EXPECT_EQ(status.message(), "caller gave up");
  EXPECT_CODE(store_->GetJob(job_id), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const ResultPage page, store_->QueryResults({}, 0, ""));
  EXPECT_TRUE(page.rows.empty());
  EXPECT_CODE(store_->FindDataset("d", "ann"), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const auto cached, store_->GetCoefficients({"u", "w", "h", "f32", "cpu"}));
  EXPECT_FALSE(cached.has_value());
  ASSERT_OK_AND_ASSIGN(const int64_t bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 0);
  ASSERT_OK_AND_ASSIGN(const std::string report, store_->IntegrityCheck());
  EXPECT_EQ(report, "ok");
}

TEST_P(StoreTest, FailedNestedTransactionUndoesOnlyItself) {
  ASSERT_OK(store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("kept", "{}").status());
    const absl::Status inner = store_->Transaction([&]() -> absl::Status {
      FCA_RETURN_IF_ERROR(store_->CreateJob("undone", "{}").status());
      return absl::InternalError("inner failure");
    });
    EXPECT_CODE(inner, StatusCode::kInternal);
    // The enclosing transaction chooses to carry on.
    return store_->CreateJob("kept", "{}").status();
  }));
  ASSERT_OK_AND_ASSIGN(const int64_t kept, store_->CountJobs(std::string("kept"), {}));
  ASSERT_OK_AND_ASSIGN(const int64_t undone, store_->CountJobs(std::string("undone"), {}));
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(undone, 0);
}

TEST_P(StoreTest, NestedFailurePropagatedUndoesAll) {
  const absl::Status status = store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("outer", "{}").status());
    return store_->Transaction([&]() -> absl::Status {
      FCA_RETURN_IF_ERROR(store_->CreateJob("inner", "{}").status());
      return absl::AbortedError("stop");
    });
  });
  EXPECT_CODE(status, StatusCode::kAborted);
  ASSERT_OK_AND_ASSIGN(const int64_t all, store_->CountJobs(std::nullopt, {}));
  EXPECT_EQ(all, 0);
}

TEST_P(StoreTest, FailingMethodInsideTransactionLeavesNoPartialRows) {
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}"));
  ResultRow good;
  good.model = "m";
  good.intervention = "zero";
  good.metric = "nll";
  ResultRow bad = good;
  bad.metric = "";  // rejected before anything is written
  EXPECT_CODE(store_->InsertResults(job.id, {good, bad}), StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(const ResultPage page, store_->QueryResults({}, 0, ""));
  EXPECT_TRUE(page.rows.empty());
}

TEST_P(StoreTest, ExceptionInTransactionRollsBack) {
  // (void): Transaction throws here, so it returns nothing to look at.
  EXPECT_THROW((void)store_->Transaction([&]() -> absl::Status {
    EXPECT_OK(store_->CreateJob("ann", "{}"));  // written, then rolled back
    throw std::runtime_error("boom");
  }),
               std::runtime_error);
  ASSERT_OK_AND_ASSIGN(const int64_t all, store_->CountJobs(std::nullopt, {}));
  EXPECT_EQ(all, 0);
  // The store is usable afterwards.
  EXPECT_OK(store_->CreateJob("ann", "{}"));
}

// ---------------------------------------------------------------- models

TEST_P(StoreTest, ModelsUpsertGetList) {
  ModelRecord model{"zeta", "featuregate", "aaa", R"({"d_model":64})", 1234, 0};
  now_us_ = 5000;
  ASSERT_OK_AND_ASSIGN(const ModelRecord stored, store_->UpsertModel(model));
  EXPECT_EQ(stored.registered_at_us, 5000);
  EXPECT_EQ(stored.config_json, model.config_json);
  ASSERT_OK(store_->UpsertModel({"alpha", "dense", "bbb", "{}", 10, 0}));

  // Same weights: registration time kept, other fields replaced.
  now_us_ = 6000;
  model.config_json = "{}";
  ASSERT_OK_AND_ASSIGN(const ModelRecord same, store_->UpsertModel(model));
  EXPECT_EQ(same.registered_at_us, 5000);
  EXPECT_EQ(same.config_json, "{}");
  // New weights: a new registration.
  model.weights_sha256 = "ccc";
  ASSERT_OK_AND_ASSIGN(const ModelRecord changed, store_->UpsertModel(model));
  EXPECT_EQ(changed.registered_at_us, 6000);

  ASSERT_OK_AND_ASSIGN(const auto models, store_->ListModels());
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "alpha");
  EXPECT_EQ(models[1].name, "zeta");
  EXPECT_EQ(models[1].weights_sha256, "ccc");
  EXPECT_EQ(models[1].num_parameters, 1234);
  ASSERT_OK_AND_ASSIGN(const ModelRecord got, store_->GetModel("alpha"));
  EXPECT_EQ(got.family, "dense");
  EXPECT_CODE(store_->GetModel("nope"), StatusCode::kNotFound);
  EXPECT_CODE(store_->UpsertModel({"", "dense", "x", "{}", 1, 0}), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->UpsertModel({"m", "dense", "x", "{}", -1, 0}), StatusCode::kInvalidArgument);
}

// -------------------------------------------------------------- datasets

TEST_P(StoreTest, DatasetRoundTripInChunks) {
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(static_cast<char>(i * 37));
  bytes[3] = '\0';
  now_us_ = 777;
  ASSERT_OK_AND_ASSIGN(const DatasetRecord d, store_->PutDataset("eval", "tokens", "ann", bytes));
  EXPECT_GT(d.id, 0);
  EXPECT_EQ(d.name, "eval");
  EXPECT_EQ(d.kind, "tokens");
  EXPECT_EQ(d.owner, "ann");
  EXPECT_EQ(d.size_bytes, 100);
  EXPECT_EQ(d.created_at_us, 777);
  EXPECT_EQ(d.sha256, Sha256Hex(bytes));
  ASSERT_OK_AND_ASSIGN(const std::string back, store_->ReadDatasetBytes(d.id));
  EXPECT_EQ(back, bytes);
  ExpectRows("dataset_chunks", 15);  // ceil(100 / 7)
  ASSERT_OK_AND_ASSIGN(const DatasetRecord got, store_->GetDataset(d.id));
  EXPECT_EQ(got.sha256, d.sha256);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord found, store_->FindDataset("eval", "ann"));
  EXPECT_EQ(found.id, d.id);
}

TEST_P(StoreTest, DatasetContentIsSharedAndNamesAreGuarded) {
  const std::string bytes(50, 'a');
  ASSERT_OK_AND_ASSIGN(const DatasetRecord first, store_->PutDataset("one", "text", "ann", bytes));
  ASSERT_OK_AND_ASSIGN(const DatasetRecord second, store_->PutDataset("two", "text", "ann", bytes));
  ASSERT_OK_AND_ASSIGN(const DatasetRecord other_owner,
                       store_->PutDataset("one", "text", "bob", bytes));
  EXPECT_NE(first.id, second.id);
  EXPECT_EQ(first.sha256, second.sha256);
  EXPECT_EQ(first.sha256, other_owner.sha256);
  ExpectRows("dataset_blobs", 1);
  ExpectRows("dataset_chunks", 8);  // stored once
  ASSERT_OK_AND_ASSIGN(const std::string back, store_->ReadDatasetBytes(second.id));
  EXPECT_EQ(back, bytes);

  // Same name and owner: identical upload returns the existing record...
  ASSERT_OK_AND_ASSIGN(const DatasetRecord again, store_->PutDataset("one", "text", "ann", bytes));
  EXPECT_EQ(again.id, first.id);
  // ...different content or kind is refused.
  EXPECT_CODE(store_->PutDataset("one", "text", "ann", "other"), StatusCode::kAlreadyExists);
  EXPECT_CODE(store_->PutDataset("one", "tokens", "ann", bytes), StatusCode::kAlreadyExists);

  ASSERT_OK_AND_ASSIGN(const auto ann, store_->ListDatasets(std::string("ann")));
  ASSERT_EQ(ann.size(), 2u);
  EXPECT_EQ(ann[0].name, "one");
  EXPECT_EQ(ann[1].name, "two");
  ASSERT_OK_AND_ASSIGN(const auto all, store_->ListDatasets(std::nullopt));
  EXPECT_EQ(all.size(), 3u);
  ASSERT_OK_AND_ASSIGN(const auto none, store_->ListDatasets(std::string("zed")));
  EXPECT_TRUE(none.empty());
}

TEST_P(StoreTest, DatasetEdgeCasesAndErrors) {
  ASSERT_OK_AND_ASSIGN(const DatasetRecord empty, store_->PutDataset("empty", "text", "ann", ""));
  EXPECT_EQ(empty.size_bytes, 0);
  ASSERT_OK_AND_ASSIGN(const std::string back, store_->ReadDatasetBytes(empty.id));
  EXPECT_EQ(back, "");
  EXPECT_CODE(store_->PutDataset("d", "images", "ann", "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->PutDataset("", "text", "ann", "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->PutDataset("d", "text", "", "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->GetDataset(999), StatusCode::kNotFound);
  EXPECT_CODE(store_->ReadDatasetBytes(999), StatusCode::kNotFound);
  EXPECT_CODE(store_->FindDataset("nope", "ann"), StatusCode::kNotFound);
}

// ----------------------------------------------------- coefficient cache

CoefficientKey Key(int i) {
  return {"u", absl::StrCat("w", i), absl::StrCat("h", i), "float32", "cpu"};
}

TEST_P(StoreTest, CoefficientsRoundTripAndReplace) {
  std::string blob;
  for (int i = 0; i < 60; ++i) blob.push_back(static_cast<char>(255 - i));
  const std::string meta("meta\0x", 6);
  ASSERT_OK(store_->PutCoefficients(Key(1), meta, blob));
  ASSERT_OK_AND_ASSIGN(const auto entry, store_->GetCoefficients(Key(1)));
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->meta, meta);
  EXPECT_EQ(entry->blob, blob);
  ExpectRows("coeff_chunks", 9);  // ceil(60 / 7)

  // Same key, other dtype: a different entry.
  CoefficientKey bf16 = Key(1);
  bf16.dtype = "bfloat16";
  ASSERT_OK_AND_ASSIGN(const auto miss, store_->GetCoefficients(bf16));
  EXPECT_FALSE(miss.has_value());
  // Another owner or device: no hit either (issue 9: no cross-user signal).
  CoefficientKey other_owner = Key(1), other_device = Key(1);
  other_owner.project = "mallory";
  other_device.device = "cuda:0";
  ASSERT_OK_AND_ASSIGN(const auto foreign, store_->GetCoefficients(other_owner));
  EXPECT_FALSE(foreign.has_value());
  ASSERT_OK_AND_ASSIGN(const auto gpu, store_->GetCoefficients(other_device));
  EXPECT_FALSE(gpu.has_value());

  ASSERT_OK(store_->PutCoefficients(Key(1), "m2", "short"));
  ASSERT_OK_AND_ASSIGN(const auto replaced, store_->GetCoefficients(Key(1)));
  ASSERT_TRUE(replaced.has_value());
  EXPECT_EQ(replaced->meta, "m2");
  EXPECT_EQ(replaced->blob, "short");
  ASSERT_OK_AND_ASSIGN(const int64_t bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 7);
  ExpectRows("coeff_chunks", 1);  // old chunks gone

  ASSERT_OK(store_->PutCoefficients(Key(2), "", ""));
  ASSERT_OK_AND_ASSIGN(const auto empty, store_->GetCoefficients(Key(2)));
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->blob, "");

  EXPECT_CODE(store_->PutCoefficients({"u", "", "h", "f32", "cpu"}, "", "x"),
              StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->GetCoefficients({"u", "w", "", "f32", "cpu"}), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, CoefficientCacheEvictsLeastRecentlyUsed) {
  options_.coeff_cache_budget_bytes = 300;
  Open();
  const std::string blob(90, 'c');  // + 10 bytes of meta = 100 per entry
  const std::string meta(10, 'm');
  ASSERT_OK(store_->PutCoefficients(Key(1), meta, blob));
  ASSERT_OK(store_->PutCoefficients(Key(2), meta, blob));
  ASSERT_OK(store_->PutCoefficients(Key(3), meta, blob));
  ASSERT_OK_AND_ASSIGN(int64_t bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 300);

  // Reading 1 makes 2 the least recently used.
  ASSERT_OK(store_->GetCoefficients(Key(1)));
  ASSERT_OK(store_->PutCoefficients(Key(4), meta, blob));
  auto present = [&](int i) {
    auto entry = store_->GetCoefficients(Key(i));
    EXPECT_TRUE(entry.ok()) << entry.status();
    return entry.ok() && entry->has_value();
  };
  // Order of use now: 3, 1, 4. Checking presence touches entries, so check
  // the evicted one first and then in LRU order.
  EXPECT_FALSE(present(2));
  ASSERT_OK_AND_ASSIGN(bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 300);

  // A 200-byte entry evicts the two least recently used (3, then 1).
  ASSERT_OK(store_->PutCoefficients(Key(5), meta, std::string(190, 'd')));
  EXPECT_FALSE(present(3));
  EXPECT_FALSE(present(1));
  EXPECT_TRUE(present(4));
  EXPECT_TRUE(present(5));
  ASSERT_OK_AND_ASSIGN(bytes, store_->CoefficientCacheBytes());
  EXPECT_EQ(bytes, 300);
  ExpectRows("coeff_cache", 2);
  ExpectRows("coeff_chunks", 13 + 28);  // ceil(90 / 7) + ceil(190 / 7)

  // Larger than the whole budget: refused, and nothing is evicted.
  EXPECT_CODE(store_->PutCoefficients(Key(6), "", std::string(301, 'e')),
              StatusCode::kResourceExhausted);
  EXPECT_TRUE(present(4));
  EXPECT_TRUE(present(5));
}

TEST_P(StoreTest, CoefficientLruIgnoresClockTies) {
  options_.coeff_cache_budget_bytes = 20;
  Open();
  // The clock stands still: eviction must still follow use order.
  ASSERT_OK(store_->PutCoefficients(Key(1), "", std::string(10, 'a')));
  ASSERT_OK(store_->PutCoefficients(Key(2), "", std::string(10, 'b')));
  ASSERT_OK(store_->GetCoefficients(Key(1)));
  ASSERT_OK(store_->PutCoefficients(Key(3), "", std::string(10, 'c')));
  ASSERT_OK_AND_ASSIGN(const auto two, store_->GetCoefficients(Key(2)));
  EXPECT_FALSE(two.has_value());
  ASSERT_OK_AND_ASSIGN(const auto one, store_->GetCoefficients(Key(1)));
  EXPECT_TRUE(one.has_value());
}

// -------------------------------------------------------------- API keys

TEST_P(StoreTest, ApiKeysAreStoredHashed) {
  ASSERT_OK_AND_ASSIGN(const std::string key, Store::GenerateApiKey());
  ASSERT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(const std::string other, Store::GenerateApiKey());
  EXPECT_NE(key, other);

  ASSERT_OK(store_->AddApiKey("ann", "admin", key));
  ASSERT_OK(store_->AddApiKey("bob", "user", other));
  ASSERT_OK_AND_ASSIGN(const auto ann, store_->LookupApiKey(key));
  ASSERT_TRUE(ann.has_value());
  EXPECT_EQ(ann->user, "ann");
  EXPECT_EQ(ann->role, "admin");
  ASSERT_OK_AND_ASSIGN(const auto bob, store_->LookupApiKey(other));
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(bob->role, "user");
  ASSERT_OK_AND_ASSIGN(const auto nobody, store_->LookupApiKey("not-a-registered-key-at-all"));
  EXPECT_FALSE(nobody.has_value());

  EXPECT_CODE(store_->AddApiKey("ann", "admin", key), StatusCode::kAlreadyExists);
  EXPECT_CODE(store_->AddApiKey("ann", "root", other + "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->AddApiKey("", "user", other + "x"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->AddApiKey("ann", "user", "short"), StatusCode::kInvalidArgument);

  if (is_file()) {
    auto db = Database::Open(tmp_.path(), 1000);
    ASSERT_OK(db);
    ASSERT_OK_AND_ASSIGN(Statement stmt, (*db)->Prepare("SELECT key_sha256 FROM api_keys "
                                                        "WHERE user = 'ann'",
                                                        "test"));
    ASSERT_OK_AND_ASSIGN(const bool row, stmt.Step());
    ASSERT_TRUE(row);
    EXPECT_EQ(stmt.ColumnText(0), Sha256Hex(key));
    EXPECT_NE(stmt.ColumnText(0), key);
  }
}

// ----------------------------------------------------------- concurrency

TEST_P(StoreTest, ConcurrentCallsFromManyThreads) {
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 20;
  std::vector<std::thread> threads;
  std::vector<absl::Status> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string owner = absl::StrCat("user", t);
      for (int i = 0; i < kJobsPerThread; ++i) {
        absl::StatusOr<JobRecord> job = store_->CreateJob(owner, "{}");
        if (!job.ok()) {
          failures[t] = job.status();
          return;
        }
        for (int e = 0; e < 3; ++e) {
          absl::StatusOr<int64_t> seq = store_->AppendJobEvent(job->id, "e");
          if (!seq.ok() || *seq != e + 1) {
            failures[t] = absl::InternalError("bad event sequence");
            return;
          }
        }
        absl::StatusOr<ResultPage> page = store_->QueryResults({}, 10, "");
        if (!page.ok()) {
          failures[t] = page.status();
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& failure : failures) EXPECT_OK(failure);
  ASSERT_OK_AND_ASSIGN(const int64_t jobs, store_->CountJobs(std::nullopt, {}));
  EXPECT_EQ(jobs, kThreads * kJobsPerThread);
}

TEST_P(StoreTest, TransactionExcludesOtherThreads) {
  // While one thread's transaction is open, another thread's write waits for
  // it instead of joining it, so the rollback does not take it along.
  std::atomic<bool> inside{false};
  std::thread other;
  const absl::Status status = store_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store_->CreateJob("rolled-back", "{}").status());
    other = std::thread([&] {
      inside = true;
      EXPECT_OK(store_->CreateJob("other-thread", "{}"));
    });
    while (!inside) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return absl::AbortedError("roll back");
  });
  other.join();
  EXPECT_CODE(status, StatusCode::kAborted);
  ASSERT_OK_AND_ASSIGN(const int64_t rolled, store_->CountJobs(std::string("rolled-back"), {}));
  ASSERT_OK_AND_ASSIGN(const int64_t kept, store_->CountJobs(std::string("other-thread"), {}));
  EXPECT_EQ(rolled, 0);
  EXPECT_EQ(kept, 1);
}

}  // namespace
}  // namespace fca::storage
