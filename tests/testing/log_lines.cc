#include "tests/testing/log_lines.h"

#include <string_view>
#include <utility>

#include "absl/time/time.h"

namespace fca::testing {

LogLines::LogLines(std::vector<std::string> needles) : needles_(std::move(needles)) {
  google::AddLogSink(this);
}

LogLines::~LogLines() { google::RemoveLogSink(this); }

void LogLines::send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
                    const char* message, size_t length) {
  const std::string_view line(message, length);
  absl::MutexLock lock(&mu_);
  for (const std::string& needle : needles_) {
    if (line.find(needle) != std::string_view::npos) ++counts_[needle];
  }
}

int LogLines::count(const std::string& needle) {
  absl::MutexLock lock(&mu_);
  return counts_[needle];
}

bool LogLines::AwaitOne(const std::string& needle) {
  absl::MutexLock lock(&mu_);
  const auto seen = [this, &needle]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return counts_[needle] > 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Minutes(1));
}

}  // namespace fca::testing
