// ModelAudit's first phase: the windows of E and C, and the checks that
// refuse a request before any pass runs (model_audit_phases.h).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/routing.h"

namespace fca::engine {

absl::Status ModelAudit::MakeWindowSets() {
  Progress("windowing", 0, 0);
  const Tokenizer& tok = model_.tokenizer();
  // Only as many tokens as the windows take, plus one window to tell
  // whether max_*_windows left windows out (NoteCapped).
  FCA_ASSIGN_OR_RETURN(std::vector<int32_t> e,
                       TokenStream(req_.eval, tok, TokensFor(opt_.max_eval_windows)));
  FCA_ASSIGN_OR_RETURN(std::vector<int32_t> c,
                       TokenStream(req_.calib, tok, TokensFor(opt_.max_calib_windows)));
  FCA_ASSIGN_OR_RETURN(eval_,
                       MakeWindows(e, opt_.window_length, opt_.max_eval_windows, req_.eval.name));
  FCA_ASSIGN_OR_RETURN(calib_,
                       MakeWindows(c, opt_.window_length, opt_.max_calib_windows, req_.calib.name));
  FCA_RETURN_IF_ERROR(CheckNoOverlap(eval_, calib_, opt_.allow_overlap));
  FCA_RETURN_IF_ERROR(CheckFits(eval_, req_.eval.name));
  FCA_RETURN_IF_ERROR(CheckFits(calib_, req_.calib.name));
  NoteCapped("evaluation", req_.eval.name, e, opt_.max_eval_windows);
  NoteCapped("calibration", req_.calib.name, c, opt_.max_calib_windows);
  eval_ids_ = BatchIds(eval_, 0, eval_.count()).clone();
  calib_ids_ = BatchIds(calib_, 0, calib_.count()).clone();
  if (model_.sites().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s' (family %s) has no controller coefficients to audit; name it as the "
        "dense twin instead",
        model_.info().name, model_.info().family));
  }
  report_.eval_windows = eval_.count();
  report_.calib_windows = calib_.count();
  report_.window_length = opt_.window_length;
  report_.eval_window_hashes = eval_.hashes;
  report_.calib_window_hashes = calib_.hashes;
  return absl::OkStatus();
}

int64_t ModelAudit::TokensFor(int64_t max_windows) const {
  return max_windows > 0 ? (max_windows + 1) * opt_.window_length : 0;
}

void ModelAudit::NoteCapped(const char* set, const std::string& dataset,
                            const std::vector<int32_t>& stream, int64_t max_windows) const {
  const int64_t complete = static_cast<int64_t>(stream.size()) / opt_.window_length;
  if (max_windows <= 0 || complete <= max_windows || !req_.on_note) return;
  req_.on_note(absl::StrFormat(
      "model '%s': the %s dataset '%s' has more than %d windows of %d tokens; the audit uses "
      "the first %d (max_%s_windows)",
      model_.info().name, set, dataset, max_windows, opt_.window_length, max_windows,
      set[0] == 'e' ? "eval" : "calib"));
}

absl::Status ModelAudit::CheckFits(const WindowSet& w, const std::string& dataset) const {
  const ModelInfo& info = model_.info();
  if (w.window_length > info.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrFormat("window length %d exceeds model '%s' maximum %d", w.window_length,
                        info.name, info.max_seq_len));
  }
  for (size_t i = 0; i < w.ids.size(); ++i) {
    if (w.ids[i] >= info.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dataset '%s': token %d at position %d is outside model '%s' vocabulary of %d", dataset,
          w.ids[i], i, info.name, info.vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelAudit::CheckNeutralAvailable() const {
  const bool wanted = std::find(interventions_.begin(), interventions_.end(),
                                InterventionId::kNeutral) != interventions_.end();
  if (!wanted || model_.sites().empty() || !neutral_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "model '%s' has no neutral coefficients (its TorchScript module exports no neutral()); "
      "leave the neutral intervention out",
      model_.info().name));
}

void ModelAudit::NoteSkipped() const {
  if (skipped_.empty() || !req_.on_note) return;
  std::vector<std::string> parts;
  for (const SkippedIntervention& s : skipped_) {
    parts.push_back(absl::StrFormat("%s (%s)", InterventionName(s.id), s.reason));
  }
  req_.on_note(absl::StrFormat("model '%s': skipped %s; the other interventions ran",
                               model_.info().name, absl::StrJoin(parts, ", ")));
}

absl::Status ModelAudit::CheckRoutersAvailable() const {
  auto named = [](const std::vector<InterventionId>& ids) {
    return std::find(ids.begin(), ids.end(), InterventionId::kRandomRoute) != ids.end();
  };
  if (HasRouters(model_) || !(named(interventions_) || named(opt_.per_layer_interventions))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "model '%s' (family %s) has no mixture-of-experts router; random_route applies to "
      "routers only: leave it out",
      model_.info().name, model_.info().family));
}

}  // namespace fca::engine
