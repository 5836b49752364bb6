// Counts the glog lines (of any thread) that contain a text, for tests that
// check what the server logs, and how often (target fca_log_lines: glog
// and absl only, so torch-free suites can use it).
#ifndef FCA_TESTS_TESTING_LOG_LINES_H_
#define FCA_TESTS_TESTING_LOG_LINES_H_

#include <glog/logging.h>

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace fca::testing {

class LogLines : public google::LogSink {
 public:
  // Counts the lines containing each of `needles` while it lives.
  explicit LogLines(std::vector<std::string> needles);
  ~LogLines() override;
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;

  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override;
  int count(const std::string& needle);
  // Waits (up to a minute: the machine may be loaded) for a line with
  // `needle`; false when none came.
  bool AwaitOne(const std::string& needle);

 private:
  const std::vector<std::string> needles_;
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fca::testing

#endif  // FCA_TESTS_TESTING_LOG_LINES_H_
