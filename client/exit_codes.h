// The exit status of every `fca` invocation, defined in one place.
//
// Scripts branch on these numbers, so they are part of the CLI's contract:
// never renumber one, only add new ones at the end.
#ifndef FCA_CLIENT_EXIT_CODES_H_
#define FCA_CLIENT_EXIT_CODES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,           // INTERNAL, UNKNOWN and everything unlisted
  kExitUsage = 2,              // bad flags, unreadable local file/manifest
  kExitInvalidArgument = 3,    // INVALID_ARGUMENT, OUT_OF_RANGE
  kExitNotFound = 4,           // NOT_FOUND
  kExitAuth = 5,               // UNAUTHENTICATED, PERMISSION_DENIED
  kExitUnavailable = 6,        // UNAVAILABLE, DEADLINE_EXCEEDED
  kExitResourceExhausted = 7,  // RESOURCE_EXHAUSTED
  kExitPrecondition = 8,       // FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED
  kExitJobFailed = 9,          // the watched job finished FAILED
  kExitJobCancelled = 10,      // the watched job finished CANCELLED
};

// A usage error: the command line or a local input file is wrong, so the
// server was never asked. Carried as INVALID_ARGUMENT with a payload so it
// travels through ordinary absl::Status plumbing yet maps to kExitUsage.
[[nodiscard]] absl::Status UsageError(std::string_view message);
bool IsUsageError(const absl::Status& status);

// The exit code for a failed (or OK) call. Usage errors map to kExitUsage
// whatever their code.
int ExitCodeForStatus(const absl::Status& status);

// The exit code once a watched job has ended: SUCCEEDED 0, FAILED 9,
// CANCELLED 10; a non-terminal state (the stream ended early) is internal.
int ExitCodeForJobState(fca::v1::JobState state);

// "NOT_FOUND: model 'x' is not in the repository", or for a usage error
// "USAGE: <message> (see 'fca help')". This is what the CLI prints on stderr.
std::string FormatError(const absl::Status& status);

// The table printed by `fca help`, generated from the enum above so the
// documentation cannot drift from the code.
std::string ExitCodeHelp();

}  // namespace fca::client

#endif  // FCA_CLIENT_EXIT_CODES_H_
