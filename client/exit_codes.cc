#include "client/exit_codes.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "client/format.h"
#include "client/text_safety.h"

namespace fca::client {
namespace {

// Payload type URL that marks a status as a local usage error.
constexpr char kUsagePayload[] = "type.fca.dev/fca.client.UsageError";

}  // namespace

absl::Status UsageError(std::string_view message) {
  absl::Status status(absl::StatusCode::kInvalidArgument,
                      absl::string_view(message.data(), message.size()));
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kUsagePayload).has_value();
}

int ExitCodeForStatus(const absl::Status& status) {
  if (IsUsageError(status)) return kExitUsage;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalidArgument;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitAuth;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kResourceExhausted:
      return kExitResourceExhausted;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return kExitPrecondition;
    default:
      // CANCELLED, UNKNOWN, UNIMPLEMENTED, INTERNAL, DATA_LOSS: nothing a
      // script can act on beyond "it broke".
      return kExitInternal;
  }
}

int ExitCodeForJobState(fca::v1::JobState state) {
  switch (state) {
    case fca::v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case fca::v1::JOB_STATE_FAILED:
      return kExitJobFailed;
    case fca::v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitInternal;
  }
}

std::string FormatError(const absl::Status& status) {
  // Messages carry server text and echoed user input: printed sanitized.
  const std::string message =
      SanitizeForTerminal(std::string_view(status.message().data(), status.message().size()));
  if (IsUsageError(status)) {
    return absl::StrFormat("USAGE: %s (see 'fca help')", message);
  }
  return absl::StrFormat("%s: %s", absl::StatusCodeToString(status.code()), message);
}

std::string ExitCodeHelp() {
  struct Row {
    int code;
    const char* meaning;
  };
  static constexpr Row kRows[] = {
      {kExitOk, "success (a watched job SUCCEEDED)"},
      {kExitInternal, "INTERNAL, UNKNOWN, UNIMPLEMENTED, DATA_LOSS, CANCELLED"},
      {kExitUsage, "usage error: bad flags, unreadable local file or manifest"},
      {kExitInvalidArgument, "INVALID_ARGUMENT, OUT_OF_RANGE"},
      {kExitNotFound, "NOT_FOUND"},
      {kExitAuth, "UNAUTHENTICATED, PERMISSION_DENIED"},
      {kExitUnavailable, "UNAVAILABLE, DEADLINE_EXCEEDED (server unreachable)"},
      {kExitResourceExhausted, "RESOURCE_EXHAUSTED"},
      {kExitPrecondition, "FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED"},
      {kExitJobFailed, "the watched job finished FAILED"},
      {kExitJobCancelled, "the watched job finished CANCELLED"},
  };
  std::string out;
  for (const Row& row : kRows) {
    absl::StrAppendFormat(&out, "  %2d  %s\n", row.code, row.meaning);
  }
  return out;
}

}  // namespace fca::client
