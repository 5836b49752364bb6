// What the C++ clients and the server know of fca.v1.JobState beyond its
// values (the Python client and the dashboard read GetServerInfo's
// vocabulary instead).
#ifndef FCA_PROTO_FCA_V1_JOB_STATES_H_
#define FCA_PROTO_FCA_V1_JOB_STATES_H_

#include "proto/fca/v1/audit_service.pb.h"

namespace fca::v1 {

// Whether a job in `state` has ended: SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(JobState state);

}  // namespace fca::v1

#endif  // FCA_PROTO_FCA_V1_JOB_STATES_H_
