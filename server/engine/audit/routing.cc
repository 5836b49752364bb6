// Mixture-of-experts routing in the audit (fca.md "Routing agreement",
// docs/moe.md): the random_route intervention and the top-k agreement of an
// intervention's chosen experts with LIVE's.
#include "server/engine/audit/routing.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/execution.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

bool Routes(const std::vector<int64_t>& routed) {
  return std::any_of(routed.begin(), routed.end(), [](int64_t k) { return k > 0; });
}

// k of 0..experts-1, uniformly without replacement: the first k of a
// partial Fisher-Yates shuffle.
std::vector<int64_t> DrawExperts(Rng* rng, int64_t experts, int64_t k) {
  std::vector<int64_t> all(experts);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t r = j + static_cast<int64_t>(rng->Uniform(static_cast<uint64_t>(experts - j)));
    std::swap(all[j], all[r]);
  }
  all.resize(k);
  return all;
}

class RandomRouteIntervention : public Intervention {
 public:
  RandomRouteIntervention(const SiteTensors& eval, std::vector<int64_t> routed, uint64_t seed)
      : eval_(eval), routed_(std::move(routed)), seed_(seed) {}

  SiteTensors Batch(int64_t begin, int64_t end) const override {
    SiteTensors out;
    for (size_t s = 0; s < eval_.size(); ++s) {
      out.push_back(routed_[s] > 0 ? Draw(s, begin, end) : eval_[s].slice(0, begin, end));
    }
    return out;
  }

 private:
  // Windows [begin, end) of site s: 1/k at the drawn experts, 0 elsewhere.
  // Each window's draws depend on the seed, the window and the site only,
  // not on the batching.
  at::Tensor Draw(size_t s, int64_t begin, int64_t end) const {
    const at::Tensor& a = eval_[s];
    const int64_t T = a.size(1), E = a.size(2), k = routed_[s];
    std::vector<float> values(static_cast<size_t>((end - begin) * T * E), 0.0f);
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t per_window = DeriveSeed(seed_, "random_route", static_cast<uint64_t>(i));
      Rng rng(DeriveSeed(per_window, "site", s + 1));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e : DrawExperts(&rng, E, k)) {
          values[static_cast<size_t>(((i - begin) * T + t) * E + e)] = 1.0f / static_cast<float>(k);
        }
      }
    }
    return at::tensor(values, at::kFloat).view({end - begin, T, E}).to(a.options());
  }

  const SiteTensors& eval_;
  std::vector<int64_t> routed_;
  uint64_t seed_;
};

}  // namespace

bool HasRouters(const ControlledModel& model) { return Routes(model.RoutedExperts()); }

bool NeedsFloat32Reference(const ControlledModel& model) {
  return HasRouters(model) && model.info().compute.dtype != ComputeDType::kFloat32;
}

absl::StatusOr<std::unique_ptr<Intervention>> MakeRandomRoute(const InterventionContext& ctx) {
  const SiteTensors& eval = *ctx.eval;
  if (!Routes(ctx.routed)) {
    return absl::InvalidArgumentError(
        "random_route applies to mixture-of-experts routers only; the model has none");
  }
  if (ctx.routed.size() != eval.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("random_route: %d routed sites for %d coefficient tensors",
                        ctx.routed.size(), eval.size()));
  }
  for (size_t s = 0; s < eval.size(); ++s) {
    if (ctx.routed[s] > eval[s].size(2)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "random_route: site %d routes %d of %d experts", s, ctx.routed[s], eval[s].size(2)));
    }
  }
  return std::make_unique<RandomRouteIntervention>(eval, ctx.routed, ctx.seed);
}

absl::StatusOr<std::optional<TopkAgreement>> MeasureTopkAgreement(const ControlledModel& model,
                                                                  const SiteTensors& live,
                                                                  const Intervention& plan,
                                                                  int64_t batch_size) {
  if (!HasRouters(model) || live.empty()) return std::optional<TopkAgreement>();
  const std::vector<CoefficientSite>& sites = model.sites();
  const int64_t n = live[0].size(0);
  std::vector<int64_t> same(sites.size(), 0), positions(sites.size(), 0);
  for (int64_t b = 0; b < n; b += batch_size) {
    const int64_t e = std::min(n, b + batch_size);
    SiteTensors live_batch;
    for (const at::Tensor& a : live) live_batch.push_back(a.slice(0, b, e));
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> chosen_live, model.ChosenExperts(live_batch));
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> chosen, model.ChosenExperts(plan.Batch(b, e)));
    FCA_RETURN_IF_ERROR(GuardTorch("top-k agreement", [&]() -> absl::Status {
      c10::InferenceMode guard;
      for (size_t s = 0; s < chosen_live.size() && s < sites.size(); ++s) {
        if (!chosen_live[s].defined()) continue;
        if (s >= chosen.size() || !chosen[s].defined()) {
          return absl::InvalidArgumentError("top-k agreement: the intervention left a router out");
        }
        const at::Tensor equal = (chosen[s] == chosen_live[s]).all(-1);  // [B, T]
        same[s] += equal.sum().item<int64_t>();
        positions[s] += equal.numel();
      }
      return absl::OkStatus();
    }));
  }
  TopkAgreement out;
  int64_t same_total = 0;
  for (size_t s = 0; s < sites.size(); ++s) {
    if (positions[s] == 0) continue;
    out.layers.push_back({sites[s].layer,
                          static_cast<double>(same[s]) / static_cast<double>(positions[s]),
                          positions[s]});
    same_total += same[s];
    out.positions += positions[s];
  }
  std::sort(
      out.layers.begin(), out.layers.end(),
      [](const LayerTopkAgreement& x, const LayerTopkAgreement& y) { return x.layer < y.layer; });
  if (out.positions > 0) {
    out.fraction = static_cast<double>(same_total) / static_cast<double>(out.positions);
  }
  return std::optional<TopkAgreement>(std::move(out));
}

absl::StatusOr<std::vector<ExecutionResult::ExpertLoad>> MeasureExpertLoad(
    const ControlledModel& model, const SiteTensors& live, int64_t batch_size) {
  std::vector<ExecutionResult::ExpertLoad> out;
  if (!HasRouters(model) || live.empty()) return out;
  const std::vector<CoefficientSite>& sites = model.sites();
  const int64_t n = live[0].size(0);
  std::vector<std::vector<int64_t>> assigned(sites.size());
  std::vector<int64_t> tokens(sites.size(), 0);
  for (int64_t b = 0; b < n; b += batch_size) {
    SiteTensors batch;
    for (const at::Tensor& a : live) batch.push_back(a.slice(0, b, std::min(n, b + batch_size)));
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> chosen, model.ChosenExperts(batch));
    FCA_RETURN_IF_ERROR(GuardTorch("expert load", [&]() -> absl::Status {
      c10::InferenceMode guard;
      for (size_t s = 0; s < chosen.size() && s < sites.size(); ++s) {
        if (!chosen[s].defined()) continue;
        const at::Tensor counts =
            at::bincount(chosen[s].reshape({-1}).to(at::kCPU), {}, sites[s].channels);
        assigned[s].resize(static_cast<size_t>(counts.size(0)), 0);
        for (int64_t e = 0; e < counts.size(0); ++e) assigned[s][e] += counts[e].item<int64_t>();
        tokens[s] += chosen[s].size(0) * chosen[s].size(1);
      }
      return absl::OkStatus();
    }));
  }
  for (size_t s = 0; s < sites.size(); ++s) {
    if (tokens[s] > 0) out.push_back(MakeExpertLoad(sites[s].layer, assigned[s], tokens[s]));
  }
  std::sort(out.begin(), out.end(),
            [](const ExecutionResult::ExpertLoad& x, const ExecutionResult::ExpertLoad& y) {
              return x.layer < y.layer;
            });
  return out;
}

}  // namespace fca::engine
