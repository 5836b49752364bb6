#include "server/engine/audit/dense_twin.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fca::engine {
namespace {

// The mismatch reason's spec field, named in every refusal so that the
// user knows how to say a mismatch is intended.
constexpr char kHowToAllow[] =
    "; name a matched twin, or set dense_twin_mismatch to say why the mismatch is intended";

}  // namespace

std::vector<std::string> ArchitectureDifferences(const ModelInfo& model, const ModelInfo& twin) {
  struct Size {
    const char* name;
    int64_t ModelInfo::*member;
  };
  static constexpr Size kShared[] = {{"layers", &ModelInfo::num_layers},
                                     {"width", &ModelInfo::hidden_size},
                                     {"heads", &ModelInfo::num_heads},
                                     {"vocabulary", &ModelInfo::vocab_size},
                                     {"window", &ModelInfo::max_seq_len}};
  std::vector<std::string> out;
  for (const Size& s : kShared) {
    const int64_t m = model.*s.member, t = twin.*s.member;
    if (m != 0 && t != 0 && m != t) out.push_back(absl::StrFormat("%s %d vs %d", s.name, m, t));
  }
  return out;
}

absl::Status CheckTwinArchitecture(const ModelInfo& model, const ModelInfo& twin,
                                   const std::string& mismatch_reason) {
  const std::vector<std::string> diffs = ArchitectureDifferences(model, twin);
  if (diffs.empty() || !mismatch_reason.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("dense twin '%s' does not match model '%s' (model vs twin: %s)%s", twin.name,
                      model.name, absl::StrJoin(diffs, ", "), kHowToAllow));
}

absl::Status CheckTwinFlops(const ModelInfo& model, const ModelInfo& twin, double model_flops,
                            double twin_flops, const std::string& mismatch_reason) {
  const double ratio = model_flops / twin_flops;
  if (!mismatch_reason.empty() || std::fabs(ratio - 1) <= kDenseTwinFlopsTolerance) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "dense twin '%s' does not match model '%s': the model does %.4g FLOPs per token with every "
      "block run and its controller removed, the twin %.4g (%+.1f%%; a matched twin is within "
      "%.0f%%)%s",
      twin.name, model.name, model_flops, twin_flops, 100 * (ratio - 1),
      100 * kDenseTwinFlopsTolerance, kHowToAllow));
}

}  // namespace fca::engine
