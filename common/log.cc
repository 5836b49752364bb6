#include "common/log.h"

#include <glog/logging.h>

namespace fca {

void LogIfError(std::string_view what, const absl::Status& status, const char* file, int line) {
  if (status.ok()) return;
  google::LogMessage(file, line, google::GLOG_WARNING).stream() << what << ": " << status;
}

void LogError(std::string_view text, const char* file, int line) {
  google::LogMessage(file, line, google::GLOG_ERROR).stream() << text;
}

void InitServerLogging(const char* argv0) {
  FLAGS_logtostderr = true;
  // glog aborts on a second InitGoogleLogging (torch's c10::InitCaffeLogging
  // calls it too, when something has called that first).
  if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging(argv0);
}

}  // namespace fca
