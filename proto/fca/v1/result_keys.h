// The one mapping between fca's typed result key (common/result_key.h) and
// fca.v1.ResultKey, for the server that serves rows and the C++ clients
// that read them.
#ifndef FCA_PROTO_FCA_V1_RESULT_KEYS_H_
#define FCA_PROTO_FCA_V1_RESULT_KEYS_H_

#include "common/result_key.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::v1 {

MetricScope ToProto(fca::MetricScope scope);
ResultKey ToProto(const fca::ResultKey& key);
fca::ResultKey FromProto(const ResultKey& key);

}  // namespace fca::v1

#endif  // FCA_PROTO_FCA_V1_RESULT_KEYS_H_
