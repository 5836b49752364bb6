// A GET on a read-only method of the JSON API (GET /api/v1/<RpcName>) may
// give its request as query parameters: ?job_id=7, ?state=QUEUED (or
// JOB_STATE_QUEUED), a repeated field by repeating it (?job_ids=1&job_ids=2),
// and the fields of a request's one nested message flat (QueryResults:
// ?job_id=7&metric=penalty for filter.job_id and filter.metric). Free of the
// HTTP library, like api_handlers.h.
#ifndef FCA_SERVER_HTTP_QUERY_PARAMS_H_
#define FCA_SERVER_HTTP_QUERY_PARAMS_H_

#include <google/protobuf/descriptor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::http {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// The proto3 JSON of `request` that `params` give, each naming a field by
// its proto name (a field of `request`, else of the one single message field
// of `request` that has a field of that name). Values go in as JSON strings (which proto3 JSON
// takes for numbers, enums, Timestamps and Durations too), "true"/"false" for a bool.
// INVALID_ARGUMENT naming the parameter when it names no field of `request`,
// a field a query cannot give (a message, other than a Timestamp or a
// Duration), a bool that is neither true nor false, or a single field twice:
// a parameter is never silently ignored.
[[nodiscard]] absl::StatusOr<std::string> QueryToJson(const google::protobuf::Descriptor& request,
                                                      const QueryParams& params);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_QUERY_PARAMS_H_
