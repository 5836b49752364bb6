#include "client/report_cells.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/proto_json.h"

namespace fca::client {

std::string Fixed(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }
std::string Signed(double v, int digits) { return absl::StrFormat("%+.*f", digits, v); }
std::string General(double v) { return absl::StrFormat("%.4g", v); }
std::string GeneralDigits(double v, int) { return General(v); }

std::string Cell(const fca::v1::Result* r, std::string (*fmt)(double, int), int digits) {
  if (r == nullptr) return "";
  if (!r->defined()) return "undefined";
  std::string s = fmt(r->value(), digits);
  if (r->has_ci_low() && r->has_ci_high()) {
    s += absl::StrFormat(" [%s, %s]", fmt(r->ci_low(), digits), fmt(r->ci_high(), digits));
  }
  return s;
}

std::string AcrossCell(const AcrossModels& a, std::string (*fmt)(double, int), int digits) {
  if (a.n() == 0) return a.undefined() > 0 ? "undefined" : "";
  // A spread has no sign: signed values get an unsigned sd.
  const std::string sd = fmt == Signed ? Fixed(a.sd(), digits) : fmt(a.sd(), digits);
  // One model has no spread: its value alone, without a "± 0".
  std::string s = fmt(a.mean(), digits);
  if (a.n() > 1) {
    s += absl::StrFormat(" ± %s (%s..%s)", sd, fmt(a.min(), digits), fmt(a.max(), digits));
  }
  if (a.undefined() > 0) s += absl::StrFormat(" (%d undefined)", a.undefined());
  return s;
}

std::string ReportJson(const google::protobuf::Message& m) {
  // Enum values by their short names, as every JSON the CLI prints.
  absl::StatusOr<std::string> text = PrintProtoJsonShortEnums(m, /*pretty=*/true);
  if (!text.ok()) return "{}\n";
  if (text->empty() || text->back() != '\n') *text += '\n';
  return *std::move(text);
}

}  // namespace fca::client
