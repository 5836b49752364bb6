// PoolJobs: several finished jobs read as one report (docs/fca.md "Pooling
// jobs"). Pure (no store, no clock): the service looks the jobs up and
// checks the caller may read them; this checks they may be pooled and
// builds the report with report_assembly's one assembly.
#ifndef FCA_SERVER_CORE_POOLING_H_
#define FCA_SERVER_CORE_POOLING_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::core {

// How many jobs one PoolJobs request names.
inline constexpr int kMinPoolJobs = 2;
inline constexpr int kMaxPoolJobs = 64;

// The AuditSpec fields on which pooled jobs must agree: what selects the
// data and the windows and what changes the numbers. Every other field is
// in PoolFreeSpecFields; a test checks the two cover the AuditSpec once.
const std::vector<std::string>& PoolAgreeSpecFields();
// The AuditSpec fields pooled jobs may differ in: the models themselves
// and what only schedules, labels or times a job.
const std::vector<std::string>& PoolFreeSpecFields();

// The job ids of a request: INVALID_ARGUMENT for fewer than kMinPoolJobs,
// more than kMaxPoolJobs or an id named twice.
absl::Status CheckPoolRequest(const v1::PoolJobsRequest& request);

// "<what> (job A: x; job B: y)" for everything the jobs must agree on and
// do not: the agree fields of their specs, the evaluation and calibration
// datasets' SHA-256 and the dense twin's weights. Empty when they agree.
std::vector<std::string> PoolDisagreements(const std::vector<v1::Job>& jobs);

// The pooled report of `jobs` (each with its stored rows), in their order.
// FAILED_PRECONDITION for a job that has not SUCCEEDED, for specs that
// disagree (PoolDisagreements, all named) and for a model (by name or
// weights) audited in two of them.
absl::StatusOr<v1::PoolJobsResponse> PoolReports(
    const std::vector<std::pair<v1::Job, std::vector<v1::Result>>>& jobs);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_POOLING_H_
