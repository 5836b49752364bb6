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
// A served row's key: its `key`, or, from a server older than typed keys
// (which sends none), the key of its stored name (the one decoder,
// common/result_key.h). `row` is a Result or a ReportMetric.
template <typename Row>
fca::ResultKey KeyOfRow(const Row& row) {
  return row.has_key() ? FromProto(row.key()) : fca::ResultKeyOf(row.metric());
}

}  // namespace fca::v1

#endif  // FCA_PROTO_FCA_V1_RESULT_KEYS_H_
