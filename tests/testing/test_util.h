// Small helpers that suites in several test binaries share (torch-free,
// header-only). A test binary compiles its sources in batches
// (FCA_UNITY_TESTS), so a helper two of its files need lives here, not in
// each file's anonymous namespace.
#ifndef FCA_TESTS_TESTING_TEST_UTIL_H_
#define FCA_TESTS_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace fca::test_util {

// A second in microseconds, the unit of the store's and the core's clocks.
inline constexpr int64_t kSecond = 1'000'000;

// EXPECT_TRUE(Contains(message, "part")) prints the message when it fails.
inline ::testing::AssertionResult Contains(absl::string_view haystack, absl::string_view needle) {
  if (haystack.find(needle) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << haystack << "' lacks '" << needle << "'";
}

// Replaces the file at `path` with `text`, byte for byte.
inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace fca::test_util

#endif  // FCA_TESTS_TESTING_TEST_UTIL_H_
