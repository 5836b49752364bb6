#include "server/engine/audit/coefficients.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/audit/routing.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// Statistics accumulate in float64 whatever the compute dtype.
at::Tensor F64(const at::Tensor& t) { return t.to(at::kDouble); }

class CorrectIntervention : public Intervention {
 public:
  explicit CorrectIntervention(const SiteTensors& eval) : eval_(eval) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    SiteTensors out;
    for (const at::Tensor& a : eval_) out.push_back(a.slice(0, begin, end));
    return out;
  }

 private:
  const SiteTensors& eval_;
};

// A(x_pi(i)) with pi a seeded derangement.
class CrossInputIntervention : public Intervention {
 public:
  CrossInputIntervention(const SiteTensors& eval, std::vector<int64_t> pi)
      : eval_(eval), pi_(at::tensor(pi, at::kLong)) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    at::Tensor idx = pi_.slice(0, begin, end).to(eval_[0].device());
    SiteTensors out;
    for (const at::Tensor& a : eval_) out.push_back(a.index_select(0, idx));
    return out;
  }

 private:
  const SiteTensors& eval_;
  at::Tensor pi_;
};

// a_s(x_i)[sigma_i(t)]: gathers positions along T.
class TokenShuffleIntervention : public Intervention {
 public:
  TokenShuffleIntervention(const SiteTensors& eval, uint64_t seed, bool per_site)
      : eval_(eval), seed_(seed), per_site_(per_site) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    const int64_t T = eval_[0].size(1);
    SiteTensors out;
    for (size_t s = 0; s < eval_.size(); ++s) {
      std::vector<int64_t> flat;
      for (int64_t i = begin; i < end; ++i) {
        std::vector<int64_t> p = TokenPermutation(T, seed_, i, per_site_ ? int64_t(s) : -1);
        flat.insert(flat.end(), p.begin(), p.end());
      }
      const at::Tensor& a = eval_[s];
      at::Tensor idx = at::tensor(flat, at::kLong).view({end - begin, T, 1}).to(a.device());
      out.push_back(at::gather(a.slice(0, begin, end), 1, idx.expand({end - begin, T, a.size(2)})));
    }
    return out;
  }

 private:
  const SiteTensors& eval_;
  uint64_t seed_;
  bool per_site_;
};

// A fixed per-site profile broadcast to every window: mu_s ([d] -> all
// tokens), mu_{s,t} ([T, d]) or m_f (a scalar).
class StaticIntervention : public Intervention {
 public:
  StaticIntervention(const SiteTensors& eval, SiteTensors profiles)
      : eval_(eval), profiles_(std::move(profiles)) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    SiteTensors out;
    for (size_t s = 0; s < eval_.size(); ++s) {
      out.push_back(profiles_[s].expand(eval_[s].slice(0, begin, end).sizes()).contiguous());
    }
    return out;
  }

 private:
  const SiteTensors& eval_;
  SiteTensors profiles_;  // broadcastable to [B, T, d_s], in the eval dtype
};

SiteTensors CastLike(const SiteTensors& profiles, const SiteTensors& eval) {
  SiteTensors out;
  for (size_t s = 0; s < profiles.size(); ++s) out.push_back(profiles[s].to(eval[s].options()));
  return out;
}

}  // namespace

std::vector<int64_t> CrossInputAssignment(int64_t n, uint64_t seed) {
  return Rng(DeriveSeed(seed, "cross_input")).Derangement(n);
}

std::vector<int64_t> TokenPermutation(int64_t length, uint64_t seed, int64_t sequence,
                                      int64_t site) {
  const uint64_t per_sequence = DeriveSeed(seed, "token_shuffle", sequence);
  return Rng(DeriveSeed(per_sequence, "site", site + 1)).Permutation(length);
}

absl::StatusOr<CalibrationStats> ComputeCalibrationStats(
    const SiteTensors& calib, const std::vector<CoefficientSite>& sites) {
  return GuardTorch("calibration statistics", [&]() -> absl::StatusOr<CalibrationStats> {
    CalibrationStats stats;
    std::map<std::string, double> sum;
    std::map<std::string, double> count;
    std::map<std::string, at::Tensor> channel_sum;  // of simplex-valued families
    std::map<std::string, bool> simplex;
    for (size_t s = 0; s < calib.size(); ++s) {
      at::Tensor a = F64(calib[s]);
      const std::string& family = sites[s].family;
      stats.site_mean.push_back(a.mean(at::IntArrayRef{0, 1}));
      stats.site_position_mean.push_back(a.mean(0));
      sum[family] += a.sum().item<double>();
      count[family] += static_cast<double>(a.numel());
      const at::Tensor channels = a.sum(at::IntArrayRef{0, 1});
      const bool first = !simplex.count(family);
      bool& on = simplex[family];
      on = (first || (on && channel_sum[family].size(0) == channels.size(0))) &&
           SimplexValued(calib[s]);
      if (on) channel_sum[family] = first ? channels : channel_sum[family] + channels;
    }
    for (const auto& [family, total] : sum) {
      stats.family_mean[family] = total / count[family];
      if (!simplex[family]) continue;
      const double positions = count[family] / static_cast<double>(channel_sum[family].size(0));
      stats.family_channel_mean[family] = channel_sum[family] / positions;
    }
    return stats;
  });
}

namespace {

// static_layer, static_layer_position and global_mean: a calibration profile
// for every window.
absl::StatusOr<std::unique_ptr<Intervention>> MakeProfileIntervention(
    InterventionId id, const InterventionContext& ctx) {
  const SiteTensors& eval = *ctx.eval;
  const std::string name = InterventionName(id);
  if (ctx.calib == nullptr) return absl::InvalidArgumentError(name + " needs calibration data");
  SiteTensors profiles;
  if (id == InterventionId::kStaticLayer) profiles = ctx.calib->site_mean;
  if (id == InterventionId::kStaticLayerPosition) {
    const int64_t T = eval[0].size(1);
    if (ctx.calib->site_position_mean[0].size(0) != T) {
      return absl::InvalidArgumentError(
          "static_layer_position: calibration and evaluation window lengths differ");
    }
    profiles = ctx.calib->site_position_mean;
  }
  if (id == InterventionId::kGlobalMean) {
    for (const CoefficientSite& site : *ctx.sites) {
      const auto channels = ctx.calib->family_channel_mean.find(site.family);
      profiles.push_back(channels != ctx.calib->family_channel_mean.end()
                             ? channels->second
                             : at::full({1}, ctx.calib->family_mean.at(site.family), at::kDouble));
    }
  }
  return std::make_unique<StaticIntervention>(eval, CastLike(profiles, eval));
}

absl::StatusOr<std::unique_ptr<Intervention>> MakeNeutral(const InterventionContext& ctx) {
  const SiteTensors& eval = *ctx.eval;
  if (ctx.neutral == nullptr || ctx.neutral->size() != eval.size()) {
    return absl::InvalidArgumentError("neutral needs the model's neutral coefficients");
  }
  for (size_t s = 0; s < eval.size(); ++s) {
    if ((*ctx.neutral)[s].numel() != eval[s].size(2)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "neutral: the model's neutral coefficients of site %d have %d values, not %d", s,
          (*ctx.neutral)[s].numel(), eval[s].size(2)));
    }
  }
  return std::make_unique<StaticIntervention>(eval, CastLike(*ctx.neutral, eval));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Intervention>> MakeIntervention(InterventionId id,
                                                               const InterventionContext& ctx) {
  const SiteTensors& eval = *ctx.eval;
  if (eval.empty()) return absl::InvalidArgumentError("the model has no coefficient sites");
  const int64_t n = eval[0].size(0);
  // No default: every intervention of the vocabulary (FCA_INTERVENTIONS)
  // has its case.
  switch (id) {
    case InterventionId::kCorrect:
      return std::make_unique<CorrectIntervention>(eval);
    case InterventionId::kCrossInput:
      if (n < 2) {
        return absl::InvalidArgumentError("cross_input needs at least 2 evaluation windows");
      }
      return std::make_unique<CrossInputIntervention>(eval, CrossInputAssignment(n, ctx.seed));
    case InterventionId::kTokenShuffle:
      return std::make_unique<TokenShuffleIntervention>(eval, ctx.seed, ctx.per_site_shuffle);
    case InterventionId::kStaticLayer:
    case InterventionId::kStaticLayerPosition:
    case InterventionId::kGlobalMean:
      return MakeProfileIntervention(id, ctx);
    case InterventionId::kStaticToken:
      return MakeStaticToken(ctx, /*by_position=*/false);
    case InterventionId::kStaticTokenPosition:
      return MakeStaticToken(ctx, /*by_position=*/true);
    case InterventionId::kNeutral:
      return MakeNeutral(ctx);
    case InterventionId::kRandomRoute:
      return MakeRandomRoute(ctx);
  }
  return absl::InternalError(
      absl::StrCat("intervention '", InterventionName(id), "' has no implementation"));
}

bool SimplexValued(const at::Tensor& a) {
  if (a.size(2) < 2) return false;
  // Within the rounding of a softmax in the compute dtype.
  const double tolerance = a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble
                               ? kSimplexToleranceFloat32
                               : kSimplexToleranceReduced;
  const at::Tensor x = F64(a);
  return (x >= -tolerance).all().item<bool>() &&
         ((x.sum(-1) - 1).abs() <= tolerance).all().item<bool>();
}

Variation ComputeVariation(const SiteTensors& eval, const std::vector<CoefficientSite>& sites) {
  c10::InferenceMode guard;
  Variation v;
  std::map<std::string, FamilyVariation> fam;
  std::map<std::string, double> sum;
  std::vector<std::string> order;
  for (size_t s = 0; s < eval.size(); ++s) {
    if (!fam.count(sites[s].family)) order.push_back(sites[s].family);
    sum[sites[s].family] += F64(eval[s]).sum().item<double>();
    FamilyVariation& f = fam[sites[s].family];
    f.simplex = (f.sites == 0 || f.simplex) && SimplexValued(eval[s]);
    f.family = sites[s].family;
    f.sites += 1;
    f.count += eval[s].numel();
  }
  std::map<std::string, double> ss_total, ss_layer;
  for (size_t s = 0; s < eval.size(); ++s) {
    at::Tensor a = F64(eval[s]);  // [N, T, d]
    FamilyVariation& f = fam[sites[s].family];
    const double m_f = sum[f.family] / f.count;
    at::Tensor mu = a.mean(at::IntArrayRef{0, 1});  // mu_{s,c}
    at::Tensor seq = a.mean(1, true);               // per-sequence means [N, 1, d]
    const double within = (a - mu).pow(2).sum().item<double>();
    const double between = (seq - mu).pow(2).sum().item<double>() * a.size(1);
    const double tokens = (a - seq).pow(2).sum().item<double>();
    const double mu_s = a.mean().item<double>();  // one mean per site
    ss_total[f.family] += (a - m_f).pow(2).sum().item<double>();
    ss_layer[f.family] += (a - mu_s).pow(2).sum().item<double>();
    f.within_site_variance += within;
    f.between_input_variance += between;
    f.within_input_variance += tokens;
    SiteVariation site;
    site.site = sites[s].name;
    site.family = sites[s].family;
    site.layer = sites[s].layer;
    site.mean = mu_s;
    site.variance = within / a.numel();
    v.sites.push_back(std::move(site));
  }
  for (const std::string& name : order) {
    FamilyVariation f = fam[name];
    const double n = static_cast<double>(f.count);
    const double total = ss_total[name];
    // A family whose every scalar is the same value has no variance to
    // explain: eta2 is undefined rather than 0/0.
    if (total > 1e-12 * n) {
      f.eta2 = 1.0 - f.within_site_variance / total;
      // One mean per site is 1/d for simplex-valued coefficients: 0 by
      // construction, so not applicable.
      if (!f.simplex) f.eta2_layer = 1.0 - ss_layer[name] / total;
    }
    f.total_variance = total / n;
    f.within_site_variance /= n;
    f.between_input_variance /= n;
    f.within_input_variance /= n;
    v.families.push_back(f);
  }
  return v;
}

}  // namespace fca::engine
