// The conformance fixture: every test runs against ":memory:" and a file.
#ifndef FCA_TESTS_STORAGE_STORE_FIXTURE_H_
#define FCA_TESTS_STORAGE_STORE_FIXTURE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace fca::storage {

// Failure messages show a state by name.
inline void PrintTo(JobState state, std::ostream* os) { *os << JobStateName(state); }

enum class Backend { kMemory, kFile };

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kMemory ? "Memory" : "File";
}

// A claim of any task by `worker`, with a lease of a minute.
inline ClaimRequest Claim(const std::string& worker) {
  ClaimRequest request;
  request.worker = worker;
  request.lease_us = 60'000'000;
  return request;
}

class StoreFixture : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    options_.path = is_file() ? tmp_.path() : std::string(":memory:");
    options_.now_us = [this] { return now_us_.load(); };
    options_.chunk_bytes = 7;  // small, so every blob spans several chunks
    Open();
  }

  bool is_file() const { return GetParam() == Backend::kFile; }

  // (Re)opens store_ with options_. A ":memory:" store starts empty again.
  void Open() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Rows in `table`, read through a second connection (file backend only;
  // -1 for ":memory:", which no other connection can see).
  int64_t CountRows(const std::string& table) {
    if (!is_file()) return -1;
    auto db = Database::Open(tmp_.path(), 1000);
    if (!db.ok()) return -2;
    auto stmt = (*db)->Prepare("SELECT COUNT(*) FROM " + table, "count rows");
    if (!stmt.ok() || !stmt->Step().ok()) return -3;
    return stmt->ColumnInt(0);
  }

  // Expects `table` to hold `rows` rows (file backend; no-op for memory).
  void ExpectRows(const std::string& table, int64_t rows) {
    if (is_file()) {
      EXPECT_EQ(CountRows(table), rows) << table;
    }
  }

  testing_util::TempDbPath tmp_;
  StoreOptions options_;
  std::atomic<int64_t> now_us_{1'000'000};
  std::unique_ptr<Store> store_;
};

}  // namespace fca::storage

#endif  // FCA_TESTS_STORAGE_STORE_FIXTURE_H_
