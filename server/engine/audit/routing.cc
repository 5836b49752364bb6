// Mixture-of-experts routing in the audit (fca.md "Routing agreement",
// docs/moe.md): the random_route intervention, the top-k agreement and
// overlap of an intervention's chosen experts with LIVE's, and LIVE's
// routing statistics (load, co-activation, experts per token id).
#include "server/engine/audit/routing.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
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
  // Per site: the experts of LIVE's set that the intervention's set holds,
  // summed over tokens, and k.
  std::vector<int64_t> shared(sites.size(), 0), k(sites.size(), 1);
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
        // Each set holds k distinct experts, so the matches count |S ∩ S_live|.
        const at::Tensor in_live = (chosen[s].unsqueeze(-1) == chosen_live[s].unsqueeze(-2));
        shared[s] += in_live.any(-1).sum().item<int64_t>();
        k[s] = std::max<int64_t>(1, chosen[s].size(-1));
      }
      return absl::OkStatus();
    }));
  }
  TopkAgreement out;
  int64_t same_total = 0;
  double overlap_total = 0;  // sum over (token, layer) of |S ∩ S_live| / k
  for (size_t s = 0; s < sites.size(); ++s) {
    if (positions[s] == 0) continue;
    const double overlap = static_cast<double>(shared[s]) / static_cast<double>(k[s]);
    out.layers.push_back({sites[s].layer,
                          static_cast<double>(same[s]) / static_cast<double>(positions[s]),
                          positions[s], overlap / static_cast<double>(positions[s])});
    same_total += same[s];
    overlap_total += overlap;
    out.positions += positions[s];
  }
  std::sort(
      out.layers.begin(), out.layers.end(),
      [](const LayerTopkAgreement& x, const LayerTopkAgreement& y) { return x.layer < y.layer; });
  if (out.positions > 0) {
    out.fraction = static_cast<double>(same_total) / static_cast<double>(out.positions);
    out.overlap = overlap_total / static_cast<double>(out.positions);
  }
  return std::optional<TopkAgreement>(std::move(out));
}

namespace {

// One router site's routing counted over the tokens seen so far.
struct SiteCounts {
  int64_t k = 0;
  int64_t tokens = 0;
  std::vector<int64_t> assigned;       // per expert
  std::vector<int64_t> pairs;          // [i * E + j], i < j: tokens choosing both
  std::vector<int64_t> token_experts;  // [slot * E + e] for the top token ids
};

// The `n` most frequent ids of `ids` (ties: the lower id), most frequent
// first, with their counts.
std::vector<std::pair<int64_t, int64_t>> TopTokenIds(const at::Tensor& ids, int64_t n) {
  std::map<int64_t, int64_t> counts;
  const at::Tensor flat = ids.to(at::kCPU).to(at::kLong).contiguous().reshape({-1});
  const int64_t* p = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) ++counts[p[i]];
  std::vector<std::pair<int64_t, int64_t>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int64_t>(out.size()) > n) out.resize(static_cast<size_t>(n));
  return out;
}

// Adds one batch's chosen experts ([B, T, k], int64 on the host) of one site,
// with the batch's token ids ([B, T]; undefined: no per-token counts).
void Count(const at::Tensor& chosen, const at::Tensor& ids,
           const std::map<int64_t, int64_t>& slot_of, int64_t experts, SiteCounts* c) {
  const int64_t k = chosen.size(-1), positions = chosen.numel() / std::max<int64_t>(k, 1);
  c->k = k;
  c->assigned.resize(static_cast<size_t>(experts), 0);
  c->pairs.resize(static_cast<size_t>(experts * experts), 0);
  c->token_experts.resize(slot_of.size() * static_cast<size_t>(experts), 0);
  const int64_t* e = chosen.data_ptr<int64_t>();
  const int64_t* id = ids.defined() ? ids.data_ptr<int64_t>() : nullptr;
  for (int64_t p = 0; p < positions; ++p, e += k) {
    auto slot = id != nullptr ? slot_of.find(id[p]) : slot_of.end();
    for (int64_t a = 0; a < k; ++a) {
      ++c->assigned[e[a]];
      if (slot != slot_of.end()) ++c->token_experts[slot->second * experts + e[a]];
      for (int64_t b = a + 1; b < k; ++b) {
        ++c->pairs[std::min(e[a], e[b]) * experts + std::max(e[a], e[b])];
      }
    }
  }
  c->tokens += positions;
}

// The k experts a top token id chose most at one site (ties: the lower
// index), with their shares of its k * positions assignments.
void AddTokenExperts(int64_t layer, const SiteCounts& c, int64_t experts,
                     const std::vector<std::pair<int64_t, int64_t>>& top,
                     std::vector<ExecutionResult::TokenExpertShare>* out) {
  for (size_t slot = 0; slot < top.size(); ++slot) {
    const auto count = c.token_experts.begin() + static_cast<int64_t>(slot) * experts;
    std::vector<int64_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return count[a] > count[b]; });
    const auto [token, positions] = top[slot];
    for (int64_t r = 0; r < c.k && r < experts && count[order[r]] > 0; ++r) {
      out->push_back({layer, token, order[r],
                      static_cast<double>(count[order[r]]) / static_cast<double>(c.k * positions),
                      positions});
    }
  }
}

// Every pair (e, f), e < f, of one site with the fraction of tokens that
// chose both; past `max_pairs` pairs, the `max_pairs` largest (ties: the
// lower pair), in pair order.
void AddPairs(int64_t layer, const SiteCounts& c, int64_t experts, int64_t max_pairs,
              std::vector<ExecutionResult::ExpertPair>* out) {
  std::vector<ExecutionResult::ExpertPair> pairs;
  for (int64_t i = 0; i < experts; ++i) {
    for (int64_t j = i + 1; j < experts; ++j) {
      const int64_t both = c.pairs[i * experts + j];
      pairs.push_back(
          {layer, i, j, static_cast<double>(both) / static_cast<double>(c.tokens), c.tokens});
    }
  }
  if (static_cast<int64_t>(pairs.size()) > max_pairs) {
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const auto& x, const auto& y) { return x.fraction > y.fraction; });
    pairs.resize(static_cast<size_t>(std::max<int64_t>(max_pairs, 0)));
    std::sort(pairs.begin(), pairs.end(), [](const auto& x, const auto& y) {
      return std::make_pair(x.expert, x.partner) < std::make_pair(y.expert, y.partner);
    });
  }
  out->insert(out->end(), pairs.begin(), pairs.end());
}

}  // namespace

absl::StatusOr<RoutingStatistics> MeasureRouting(const ControlledModel& model,
                                                 const SiteTensors& live, const at::Tensor& ids,
                                                 int64_t batch_size, int64_t top_token_ids,
                                                 int64_t max_pairs) {
  RoutingStatistics out;
  if (!HasRouters(model) || live.empty()) return out;
  const std::vector<CoefficientSite>& sites = model.sites();
  const int64_t n = live[0].size(0);
  if (ids.defined() && (ids.dim() != 2 || ids.size(0) != n || ids.size(1) != live[0].size(1))) {
    return absl::InvalidArgumentError(
        "routing statistics: the token ids do not match the coefficients' windows");
  }
  std::vector<std::pair<int64_t, int64_t>> top;
  std::map<int64_t, int64_t> slot_of;
  at::Tensor all_ids;
  if (ids.defined()) {
    all_ids = ids.to(at::kCPU).to(at::kLong).contiguous();
    top = TopTokenIds(all_ids, top_token_ids);
    for (size_t i = 0; i < top.size(); ++i) slot_of[top[i].first] = static_cast<int64_t>(i);
  }
  std::vector<SiteCounts> counts(sites.size());
  for (int64_t b = 0; b < n; b += batch_size) {
    const int64_t end = std::min(n, b + batch_size);
    SiteTensors batch;
    for (const at::Tensor& a : live) batch.push_back(a.slice(0, b, end));
    FCA_ASSIGN_OR_RETURN(std::vector<at::Tensor> chosen, model.ChosenExperts(batch));
    FCA_RETURN_IF_ERROR(GuardTorch("routing statistics", [&]() -> absl::Status {
      c10::InferenceMode guard;
      const at::Tensor batch_ids =
          all_ids.defined() ? all_ids.slice(0, b, end).contiguous() : at::Tensor();
      for (size_t s = 0; s < chosen.size() && s < sites.size(); ++s) {
        if (!chosen[s].defined()) continue;
        const at::Tensor c = chosen[s].to(at::kCPU).to(at::kLong).contiguous();
        Count(c, batch_ids, slot_of, sites[s].channels, &counts[s]);
      }
      return absl::OkStatus();
    }));
  }
  for (size_t s = 0; s < sites.size(); ++s) {
    const SiteCounts& c = counts[s];
    if (c.tokens == 0) continue;
    const int64_t layer = sites[s].layer, E = sites[s].channels;
    out.load.push_back(MakeExpertLoad(layer, c.assigned, c.tokens));
    AddPairs(layer, c, E, max_pairs, &out.coactivation);
    AddTokenExperts(layer, c, E, top, &out.token_experts);
  }
  std::stable_sort(out.load.begin(), out.load.end(),
                   [](const auto& x, const auto& y) { return x.layer < y.layer; });
  std::stable_sort(out.coactivation.begin(), out.coactivation.end(),
                   [](const auto& x, const auto& y) { return x.layer < y.layer; });
  std::stable_sort(out.token_experts.begin(), out.token_experts.end(),
                   [](const auto& x, const auto& y) { return x.layer < y.layer; });
  return out;
}

}  // namespace fca::engine
