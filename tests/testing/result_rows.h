// A stored result row for the report tests of the service (tests/core) and
// the CLI (tests/client): both build reports from rows alike.
#ifndef FCA_TESTS_TESTING_RESULT_ROWS_H_
#define FCA_TESTS_TESTING_RESULT_ROWS_H_

#include <string>

#include "common/result_key.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::report_testing {

// A defined row of job 3: weights "w-<model>", evaluation dataset "e5e5",
// n = 10; its typed key decoded from `metric` as the service serves it.
inline v1::Result Row(const std::string& model, const std::string& intervention,
                      const std::string& metric, double value) {
  v1::Result r;
  r.set_job_id(3);
  r.set_model(model);
  r.set_weights_sha256("w-" + model);
  r.set_dataset_sha256("e5e5");
  r.set_intervention(intervention);
  r.set_metric(metric);
  *r.mutable_key() = v1::ToProto(ResultKeyOf(metric));
  r.set_value(value);
  r.set_defined(true);
  r.set_n(10);
  return r;
}

}  // namespace fca::report_testing

#endif  // FCA_TESTS_TESTING_RESULT_ROWS_H_
