// Status assertions and temporary database files for the storage tests.
#ifndef FCA_TESTS_STORAGE_TEST_UTIL_H_
#define FCA_TESTS_STORAGE_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace fca::storage::testing_util {

inline const absl::Status& ToStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& ToStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

#define FCA_TEST_CONCAT_INNER_(a, b) a##b
#define FCA_TEST_CONCAT_(a, b) FCA_TEST_CONCAT_INNER_(a, b)

#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const auto& fca_s_ = (expr);                                     \
    ASSERT_TRUE(::fca::storage::testing_util::ToStatus(fca_s_).ok()) \
        << ::fca::storage::testing_util::ToStatus(fca_s_);           \
  } while (false)

#define EXPECT_OK(expr)                                              \
  do {                                                               \
    const auto& fca_s_ = (expr);                                     \
    EXPECT_TRUE(::fca::storage::testing_util::ToStatus(fca_s_).ok()) \
        << ::fca::storage::testing_util::ToStatus(fca_s_);           \
  } while (false)

// Predicate formatter for EXPECT_CODE: `expr` evaluated once, the status
// printed on failure, and further `<<` context allowed.
template <typename T>
::testing::AssertionResult HasCode(const char* expr_text, const char*, const T& value,
                                   absl::StatusCode expected) {
  const absl::Status& status = ToStatus(value);
  if (status.code() == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr_text << " returned " << status << ", expected code "
                                       << absl::StatusCodeToString(expected);
}

// Expects `expr` (a Status or StatusOr) to fail with `expected_code`.
#define EXPECT_CODE(expr, expected_code) \
  EXPECT_PRED_FORMAT2(::fca::storage::testing_util::HasCode, expr, expected_code)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(FCA_TEST_CONCAT_(fca_so_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(so, lhs, expr) \
  auto so = (expr);                               \
  ASSERT_TRUE(so.ok()) << so.status();            \
  lhs = std::move(so).value()

// A fresh path under the test temp dir; the database and its -wal and -shm
// companions are removed on destruction.
class TempDbPath {
 public:
  TempDbPath() {
    static std::atomic<int> counter{0};
    path_ = absl::StrFormat("%s/fca_storage_test_%d_%d.db", ::testing::TempDir(),
                            static_cast<int>(getpid()), counter.fetch_add(1));
    Remove();
  }
  ~TempDbPath() { Remove(); }
  TempDbPath(const TempDbPath&) = delete;
  TempDbPath& operator=(const TempDbPath&) = delete;
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    std::remove(path_.c_str());
    std::remove((path_ + "-wal").c_str());
    std::remove((path_ + "-shm").c_str());
  }
  std::string path_;
};

}  // namespace fca::storage::testing_util

#endif  // FCA_TESTS_STORAGE_TEST_UTIL_H_
