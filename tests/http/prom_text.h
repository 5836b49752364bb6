// A strict parser of the Prometheus text exposition format (0.0.4), for
// tests: it refuses anything the format does not allow, and what the
// format allows but a correct exposer never writes (a family split in two,
// a sample before its TYPE, a series twice, a histogram whose buckets do
// not add up).
#ifndef FCA_TESTS_HTTP_PROM_TEXT_H_
#define FCA_TESTS_HTTP_PROM_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::prom {

struct Sample {
  std::string name;                           // e.g. "x_bucket"
  std::map<std::string, std::string> labels;  // unescaped
  double value = 0;
};

struct Family {
  std::string name;
  std::string type;  // counter | gauge | histogram | summary | untyped
  std::string help;  // unescaped
  std::vector<Sample> samples;
};

// Every family by name. INVALID_ARGUMENT naming the line and the rule
// broken otherwise.
absl::StatusOr<std::map<std::string, Family>> Parse(const std::string& text);

// The value of the sample `name` with exactly these labels in `families`,
// or `missing` when there is none.
double Value(const std::map<std::string, Family>& families, const std::string& name,
             const std::map<std::string, std::string>& labels = {}, double missing = -1);

}  // namespace fca::prom

#endif  // FCA_TESTS_HTTP_PROM_TEXT_H_
