// ModelAudit's statistics: penalties with their CIs and dependence, Holm,
// additivity, retention and variation (model_audit_phases.h).
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/lookup.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/statistics.h"

namespace fca::engine {

int64_t ModelAudit::BlockLength() const {
  return opt_.bootstrap_block_length > 0 ? opt_.bootstrap_block_length
                                         : AutoBlockLength(eval_.count());
}

CalibratedPenalty ModelAudit::CalibratedPenaltyOf(InterventionId id) const {
  const std::vector<double>& ref = nll_.at(InterventionId::kCorrect);
  const std::vector<std::vector<double>>& reps = calib_nll_.at(id);
  CalibratedPenalty c;
  c.resamples = static_cast<int64_t>(reps.size());
  c.ci = CalibratedBootstrapCI(reps, ref, opt_.bootstrap_resamples, opt_.ci_level,
                               DeriveSeed(opt_.seed, "block_bootstrap"), BlockLength());
  std::vector<double> penalties;
  for (const std::vector<double>& nll : reps) penalties.push_back(Mean(nll) - Mean(ref));
  c.sd = engine::Summarize(penalties).sd;
  return c;
}

PenaltyDependence ModelAudit::WindowDependence(const std::vector<double>& nll) const {
  const std::vector<double>& ref = nll_.at(InterventionId::kCorrect);
  PenaltyDependence d;
  // Holm's p on the block CI's own resamples: the test and the interval
  // cannot disagree about which windows were drawn.
  const BootstrapTest t =
      PairedBootstrapTest(nll, ref, opt_.bootstrap_resamples, opt_.ci_level,
                          DeriveSeed(opt_.seed, "block_bootstrap"), BlockLength());
  d.block_ci = t.ci;
  d.p_value = t.p_value;
  std::vector<double> diff(nll.size());
  for (size_t i = 0; i < nll.size(); ++i) diff[i] = nll[i] - ref[i];
  d.lag1 = Lag1Autocorrelation(diff);
  return d;
}

void ModelAudit::AdjustHolm() {
  std::vector<PenaltyDependence*> family;
  for (InterventionResult& r : report_.interventions) {
    if (r.name != kCorrect) family.push_back(&r.windows);
  }
  std::vector<double> p;
  for (const PenaltyDependence* d : family) p.push_back(d->p_value);
  const std::vector<double> adjusted = HolmAdjust(p);
  for (size_t i = 0; i < family.size(); ++i) family[i]->p_holm = adjusted[i];
}

absl::Status ModelAudit::Summarize() {
  const std::vector<double>& ref = nll_[InterventionId::kCorrect];
  report_.bootstrap_block_length = BlockLength();
  report_.retention_baseline = InterventionName(opt_.retention_baseline);
  for (InterventionId id : interventions_) {
    InterventionResult r;
    r.name = InterventionName(id);
    r.nll_per_sequence = nll_[id];
    r.nll = Mean(r.nll_per_sequence);
    r.penalty = r.nll - Mean(ref);
    if (id != InterventionId::kCorrect) {
      r.penalty_ci = PairedBootstrapCI(r.nll_per_sequence, ref, opt_.bootstrap_resamples,
                                       opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
      r.windows = WindowDependence(r.nll_per_sequence);
    }
    if (calib_nll_.count(id)) r.calib = CalibratedPenaltyOf(id);
    if (agreement_.count(id)) r.topk_agreement = agreement_[id];
    report_.interventions.push_back(std::move(r));
  }
  AdjustHolm();
  Additivity();
  for (InterventionId profile : StaticProfiles()) {
    for (InterventionId baseline : RetentionBaselines()) Retention(profile, baseline);
  }
  Variation v = ComputeVariation(eval_coeff_, model_.sites());
  AddLookupDiagnostics(eval_coeff_, eval_ids_, &v);
  FCA_RETURN_IF_ERROR(AddOutOfSampleLookup(Context(), &v));
  report_.variation = std::move(v.families);
  report_.site_variation = std::move(v.sites);
  return absl::OkStatus();
}

void ModelAudit::Additivity() {
  const std::vector<double>& ref = nll_.at(InterventionId::kCorrect);
  for (InterventionId id : opt_.per_layer_interventions) {
    const std::string name = InterventionName(id);
    GroupAdditivity a;
    a.intervention = name;
    std::vector<std::vector<double>> groups;
    for (const GroupDependence& d : report_.dependence) {
      if (d.intervention != name) continue;
      ++a.groups;
      a.penalty_sum += d.penalty;
      groups.push_back(d.nll_per_sequence);
    }
    // Without I's whole-model replay there is no joint penalty to divide
    // by. With it, I's block CI (its penalty_block) decides, on the
    // resamples of the ratio's own CI.
    if (nll_.count(id)) {
      const AdditivityEstimate e =
          EstimateAdditivity(groups, nll_.at(id), ref, opt_.bootstrap_resamples, opt_.ci_level,
                             DeriveSeed(opt_.seed, "block_bootstrap"), BlockLength());
      a.ratio = e.ratio;
      a.ci = e.ci;
      a.dropped_resamples = e.dropped_resamples;
    }
    report_.additivity.push_back(std::move(a));
  }
}

void ModelAudit::Retention(InterventionId profile, InterventionId baseline) {
  if (!nll_.count(profile) || !nll_.count(baseline)) return;
  RetentionPlan plan;
  plan.resamples = opt_.bootstrap_resamples;
  plan.level = opt_.ci_level;
  plan.gap_seed = DeriveSeed(opt_.seed, "block_bootstrap");  // B's penalty_block CI
  plan.retention_seed = DeriveSeed(opt_.seed, "retention");
  plan.block_length = BlockLength();
  plan.min_gap = opt_.retention_min_gap;
  RetentionResult r;
  r.profile = InterventionName(profile);
  r.baseline = InterventionName(baseline);
  r.estimate =
      EstimateRetention(nll_[baseline], nll_[profile], nll_[InterventionId::kCorrect], plan);
  report_.retention.push_back(std::move(r));
}

}  // namespace fca::engine
