// ModelAudit's replays: one per intervention, per calibration resample and
// per group, and the top-k agreements and routing flips of models with
// routers (model_audit_phases.h).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/model_audit_phases.h"
#include "server/engine/audit/routing.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {

InterventionContext ModelAudit::Context() const {
  InterventionContext ctx;
  ctx.eval = &eval_coeff_;
  ctx.calib = &calib_stats_;
  ctx.sites = &model_.sites();
  ctx.seed = opt_.seed;
  ctx.per_site_shuffle = opt_.per_site_shuffle;
  ctx.eval_ids = &eval_ids_;
  ctx.calib_ids = &calib_ids_;
  ctx.calib_coeff = &calib_coeff_;
  ctx.token_min_count = opt_.static_token_min_count;
  ctx.neutral = &neutral_;
  ctx.routed = model_.RoutedExperts();
  return ctx;
}

absl::Status ModelAudit::ReplayPass(InterventionId id) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, Context()));
  FCA_ASSIGN_OR_RETURN(nll_[id], Replay(*plan, absl::StrCat("replay:", InterventionName(id))));
  if (id == InterventionId::kStaticToken) {
    FCA_ASSIGN_OR_RETURN(report_.static_token_coverage, CountUnseenTokens(eval_ids_, calib_ids_));
    FCA_ASSIGN_OR_RETURN(report_.static_token_cells,
                         CountTokenCells(calib_ids_, false, opt_.static_token_min_count));
  }
  if (id == InterventionId::kStaticTokenPosition) {
    FCA_ASSIGN_OR_RETURN(report_.static_token_position_cells,
                         CountTokenCells(calib_ids_, true, opt_.static_token_min_count));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ModelAudit::Replay(const Intervention& plan,
                                                       const std::string& phase) {
  const int64_t n = eval_.count();
  std::vector<double> nll(n, 0.0);
  FCA_RETURN_IF_ERROR(Pass(
      phase, n, weights_.replay, /*serial_first=*/false, [&](int64_t b, int64_t e) -> absl::Status {
        const at::Tensor ids = BatchIds(eval_, b, e);
        SiteTensors a = plan.Batch(b, e);
        FCA_ASSIGN_OR_RETURN(at::Tensor logits, Forward(ids, CoefficientMode::kReplay, &a));
        WriteAt(&nll, SequenceNll(logits, ids), b);
        return absl::OkStatus();
      }));
  return nll;
}

std::vector<InterventionId> ModelAudit::Recalibrated() const {
  std::vector<InterventionId> out;
  if (opt_.calib_resamples <= 0) return out;
  for (InterventionId id : interventions_) {
    if (InterventionDefOf(id).calibrated) out.push_back(id);
  }
  return out;
}

absl::Status ModelAudit::CalibrationResamples() {
  const std::vector<InterventionId> ids = Recalibrated();
  if (ids.empty()) return absl::OkStatus();
  const int64_t m = calib_.count();
  const int64_t block =
      opt_.bootstrap_block_length > 0 ? opt_.bootstrap_block_length : AutoBlockLength(m);
  for (int r = 0; r < opt_.calib_resamples; ++r) {
    const std::vector<int64_t> picked =
        BlockResampleIndices(m, block, DeriveSeed(opt_.seed, "calib_resample", r));
    const at::Tensor index = at::tensor(picked, at::kLong);
    SiteTensors coeff;
    for (const at::Tensor& t : calib_coeff_) {
      coeff.push_back(t.index_select(0, index.to(t.device())));
    }
    const at::Tensor ids_r = calib_ids_.index_select(0, index);
    FCA_ASSIGN_OR_RETURN(CalibrationStats stats, ComputeCalibrationStats(coeff, model_.sites()));
    InterventionContext ctx = Context();
    ctx.calib = &stats;
    ctx.calib_coeff = &coeff;
    ctx.calib_ids = &ids_r;
    for (InterventionId id : ids) {
      FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, ctx));
      FCA_ASSIGN_OR_RETURN(
          std::vector<double> nll,
          Replay(*plan, absl::StrFormat("calib %d/%d:%s", r + 1, opt_.calib_resamples,
                                        InterventionName(id))));
      calib_nll_[id].push_back(std::move(nll));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelAudit::DependencePasses() {
  const std::vector<SiteGroup> groups = DependenceGroups(model_.sites(), opt_.per_layer_scope);
  for (InterventionId id : opt_.per_layer_interventions) {
    const char* name = InterventionName(id);
    for (const SiteGroup& g : groups) {
      FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> inner, MakeIntervention(id, Context()));
      const auto plan = RestrictToGroup(std::move(inner), eval_coeff_, g);
      GroupDependence d;
      d.intervention = name;
      d.scope = ScopeName(opt_.per_layer_scope);
      d.group = g.name;
      d.layer = g.layer;
      FCA_ASSIGN_OR_RETURN(std::vector<double> nll,
                           Replay(*plan, absl::StrFormat("replay:%s@%s", name, g.name)));
      d.nll = Mean(nll);
      d.penalty = d.nll - Mean(nll_[InterventionId::kCorrect]);
      d.penalty_ci =
          PairedBootstrapCI(nll, nll_[InterventionId::kCorrect], opt_.bootstrap_resamples,
                            opt_.ci_level, DeriveSeed(opt_.seed, "bootstrap"));
      d.nll_per_sequence = std::move(nll);
      report_.dependence.push_back(std::move(d));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelAudit::TopkAgreements() {
  if (!HasRouters(model_)) return absl::OkStatus();
  Progress("top-k agreement", 0, 0);
  for (InterventionId id : interventions_) {
    FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeIntervention(id, Context()));
    FCA_ASSIGN_OR_RETURN(agreement_[id],
                         MeasureTopkAgreement(model_, eval_coeff_, *plan, opt_.batch_size));
    FCA_RETURN_IF_ERROR(CheckCancelled());
  }
  return absl::OkStatus();
}

ControlledModel* ModelAudit::Float32Reference() const {
  const auto& refs = req_.float32_references;
  return index_ < static_cast<int64_t>(refs.size()) ? refs[index_] : nullptr;
}

absl::Status ModelAudit::RoutingFlips() {
  ControlledModel* reference = Float32Reference();
  if (reference == nullptr || !NeedsFloat32Reference(model_)) return absl::OkStatus();
  if (reference->info().compute.dtype != ComputeDType::kFloat32 ||
      reference->sites().size() != model_.sites().size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model '%s': the routing flip rate's reference must be the same model in float32",
        model_.info().name));
  }
  SiteTensors recorded;
  FCA_RETURN_IF_ERROR(Pass(
      "float32 routing", eval_.count(), weights_.replay, /*serial_first=*/true,
      [&](int64_t b, int64_t e) -> absl::Status {
        SiteTensors rec;
        FCA_RETURN_IF_ERROR(
            reference->Forward(BatchIds(eval_, b, e), CoefficientMode::kRecordOnly, &rec).status());
        Store(&recorded, ToHost(rec), b, eval_.count());
        return absl::OkStatus();
      }));
  InterventionContext ctx = Context();
  ctx.eval = &recorded;
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> float32,
                       MakeIntervention(InterventionId::kCorrect, ctx));
  FCA_ASSIGN_OR_RETURN(report_.float32_agreement,
                       MeasureTopkAgreement(model_, eval_coeff_, *float32, opt_.batch_size));
  return absl::OkStatus();
}

}  // namespace fca::engine
