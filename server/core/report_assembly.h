// The report of a job, computed on the server from its stored rows: what
// GetReport and CompareJobs answer and `fca report` prints.
//
// Pure (no store, no clock), so the arithmetic is tested on rows whose
// summary is known. It reads what a row is about from its typed key
// (Result.key), never from the metric's name. The numbers per model are the stored rows as they
// are; the only arithmetic is the summary across the audited models (fca.md, "Multi-model
// aggregation": mean, sample sd, min and max, the engine's Summarize), and the per-site rows become
// typed SiteRow messages.
#ifndef FCA_SERVER_CORE_REPORT_ASSEMBLY_H_
#define FCA_SERVER_CORE_REPORT_ASSEMBLY_H_

#include <string>
#include <vector>

#include "proto/fca/v1/audit_service.pb.h"

namespace fca::core {

// The report of `job` from `rows`, the job's stored rows in any order. Rows
// of models the spec names neither as audited nor as the dense twin are
// ignored (a report shows what the job was asked for).
v1::GetReportResponse BuildReport(const v1::Job& job, const std::vector<v1::Result>& rows);

// One job's stored rows, as a report over several jobs takes them.
struct JobInput {
  const v1::Job* job;
  const std::vector<v1::Result>* rows;
};
// The report over the audited models of `jobs` taken together (PoolJobs;
// BuildReport is the one-job case): models job by job in spec order, a
// model named by an earlier job kept from that job; the across-model rows
// over all of them at `as_job`'s ci_level. `as_job` is the report's job.
// The dense twin's rows only for one job (each job times its own twin).
v1::GetReportResponse BuildReportOver(const std::vector<JobInput>& jobs, const v1::Job& as_job);

// n, undefined, mean, sample sd (0 for one value), min and max of the
// defined values among `rows`; the rest of the fields 0 when none is
// defined. With two or more: the t-interval of the mean at `ci_level`.
v1::AcrossModels SummarizeAcross(const std::vector<const v1::Result*>& rows,
                                 double ci_level = 0.95);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_REPORT_ASSEMBLY_H_
