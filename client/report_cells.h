// The cells of the report's text tables, shared by the report
// (report_format.cc) and the comparison of several jobs
// (comparison_format.cc), and the reports' JSON.
#ifndef FCA_CLIENT_REPORT_CELLS_H_
#define FCA_CLIENT_REPORT_CELLS_H_

#include <string>

#include "client/report_format.h"
#include "google/protobuf/message.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

// Names the across-model cells: the server's mean, sample sd and range.
inline constexpr char kAcrossLabel[] = "mean ± sd (min..max)";

std::string Fixed(double v, int digits);
std::string Signed(double v, int digits);
std::string General(double v);
std::string GeneralDigits(double v, int digits);  // General, digits ignored

// "value" or "value [lo, hi]" or "undefined" or "" (no row).
std::string Cell(const fca::v1::Result* r, std::string (*fmt)(double, int), int digits);

// "mean ± sd (min..max)" (the range when several models have a value),
// with the number of undefined models when there are any.
std::string AcrossCell(const AcrossModels& a, std::string (*fmt)(double, int), int digits);

// fca's JSON of a message (common/proto_json.h), pretty, with a final
// newline; the printer fails only on invalid UTF-8, which the server's
// replies do not carry.
std::string ReportJson(const google::protobuf::Message& m);

}  // namespace fca::client

#endif  // FCA_CLIENT_REPORT_CELLS_H_
