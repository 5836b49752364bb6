// Counts the glog lines (of any thread) that contain a text, for tests that
// check what the server logs, and how often. Header-only: glog and absl.
#ifndef FCA_TESTS_TESTING_LOG_LINES_H_
#define FCA_TESTS_TESTING_LOG_LINES_H_

#include <glog/logging.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fca::testing {

class LogLines : public google::LogSink {
 public:
  // Counts the lines containing each of `needles` while it lives.
  explicit LogLines(std::vector<std::string> needles) : needles_(std::move(needles)) {
    google::AddLogSink(this);
  }
  ~LogLines() override { google::RemoveLogSink(this); }
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;

  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    const std::string_view line(message, length);
    absl::MutexLock lock(&mu_);
    for (const std::string& needle : needles_) {
      if (line.find(needle) != std::string_view::npos) ++counts_[needle];
    }
  }
  int count(const std::string& needle) {
    absl::MutexLock lock(&mu_);
    return counts_[needle];
  }
  // Waits (up to a minute: the machine may be loaded) for a line with
  // `needle`; false when none came.
  bool AwaitOne(const std::string& needle) {
    absl::MutexLock lock(&mu_);
    const auto seen = [this, &needle]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return counts_[needle] > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Minutes(1));
  }

 private:
  const std::vector<std::string> needles_;
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca::testing

#endif  // FCA_TESTS_TESTING_LOG_LINES_H_
