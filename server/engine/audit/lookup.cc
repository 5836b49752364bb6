#include "server/engine/audit/lookup.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <memory>

#include "common/status_macros.h"
#include "server/engine/audit/interventions.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// Sums of squares of a [P, d] float64 against the per-channel means and
// against the per-channel means of each key, over the rows whose key occurs
// at least twice (both means taken on those rows, so 0 <= eta2 <= 1).
KeyedShare ShareExplained(const at::Tensor& a, const at::Tensor& keys) {
  auto [unique, inverse, counts] = at::_unique2(keys, /*sorted=*/true, /*return_inverse=*/true,
                                                /*return_counts=*/true);
  const at::Tensor used = (counts.index_select(0, inverse) >= 2).nonzero().squeeze(1);
  const at::Tensor rows = a.index_select(0, used);
  KeyedShare out;
  out.positions = rows.size(0);
  if (out.positions == 0) return out;
  const at::Tensor key = inverse.index_select(0, used);
  const int64_t groups = unique.size(0);
  at::Tensor sums = at::zeros({groups, a.size(1)}, a.options()).index_add_(0, key, rows);
  const at::Tensor n = counts.to(at::kDouble).clamp_min(1).unsqueeze(1);
  const at::Tensor means = sums / n;
  out.ss_within_key = (rows - means.index_select(0, key)).pow(2).sum().item<double>();
  out.ss_within_site = (rows - rows.mean(0, true)).pow(2).sum().item<double>();
  return out;
}

// A share of no variance (below 1e-12 coef^2 per position, as for eta2) is
// undefined rather than 0/0.
void Finish(KeyedShare* k) {
  if (k->positions > 0 && k->ss_within_site > 1e-12 * static_cast<double>(k->positions)) {
    k->eta2 = 1.0 - k->ss_within_key / k->ss_within_site;
  }
}

void Pool(KeyedShare* into, const KeyedShare& site) {
  into->positions += site.positions;
  into->ss_within_site += site.ss_within_site;
  into->ss_within_key += site.ss_within_key;
}

// The scored positions t = 0..T-2 of [N, T, d] coefficients (the last
// position's reach no scored prediction), in float64 on the CPU.
at::Tensor Scored(const at::Tensor& a) {
  return a.slice(1, 0, a.size(1) - 1).to(at::kDouble).cpu();
}

// Windows per step: the substituted values of a few windows at a time, not
// a second copy of E's coefficients.
constexpr int64_t kWindowsPerStep = 64;

// Per site the sums of the out-of-sample share over E's scored positions:
// around the value `by_position`'s intervention substitutes (C's table) and
// around E's per-channel means.
absl::StatusOr<std::vector<KeyedShare>> TableResiduals(const InterventionContext& ctx,
                                                       bool by_position) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Intervention> plan, MakeStaticToken(ctx, by_position));
  return GuardTorch("lookup out of sample", [&]() -> absl::StatusOr<std::vector<KeyedShare>> {
    c10::InferenceMode guard;
    const SiteTensors& eval = *ctx.eval;
    const int64_t n = eval[0].size(0), scored = eval[0].size(1) - 1;
    std::vector<KeyedShare> out(eval.size());
    if (scored <= 0) return out;
    SiteTensors means;
    for (const at::Tensor& a : eval) means.push_back(Scored(a).mean(at::IntArrayRef{0, 1}));
    for (int64_t b = 0; b < n; b += kWindowsPerStep) {
      const int64_t e = std::min(n, b + kWindowsPerStep);
      const SiteTensors table = plan->Batch(b, e);
      for (size_t s = 0; s < eval.size(); ++s) {
        const at::Tensor a = Scored(eval[s].slice(0, b, e));
        out[s].ss_within_key += (a - Scored(table[s])).pow(2).sum().item<double>();
        out[s].ss_within_site += (a - means[s]).pow(2).sum().item<double>();
      }
    }
    for (KeyedShare& k : out) k.positions = n * scored;
    return out;
  });
}

}  // namespace

absl::Status AddOutOfSampleLookup(const InterventionContext& ctx, Variation* v) {
  FCA_ASSIGN_OR_RETURN(const std::vector<KeyedShare> token, TableResiduals(ctx, false));
  FCA_ASSIGN_OR_RETURN(const std::vector<KeyedShare> pair, TableResiduals(ctx, true));
  std::map<std::string, FamilyVariation*> families;
  for (FamilyVariation& f : v->families) families[f.family] = &f;
  for (size_t s = 0; s < v->sites.size(); ++s) {
    SiteVariation& site = v->sites[s];
    site.token_oos = token[s];
    site.token_position_oos = pair[s];
    FamilyVariation& f = *families.at(site.family);
    Pool(&f.token_oos, site.token_oos);
    Pool(&f.token_position_oos, site.token_position_oos);
    Finish(&site.token_oos);
    Finish(&site.token_position_oos);
  }
  for (FamilyVariation& f : v->families) {
    Finish(&f.token_oos);
    Finish(&f.token_position_oos);
  }
  return absl::OkStatus();
}

void AddLookupDiagnostics(const SiteTensors& eval, const at::Tensor& ids, Variation* v) {
  c10::InferenceMode guard;
  const int64_t T = ids.size(1);
  const at::Tensor token = ids.cpu().to(at::kLong).reshape({-1});
  const at::Tensor position = at::arange(T, at::kLong).repeat({ids.size(0)});
  const at::Tensor token_position = token * T + position;
  std::map<std::string, FamilyVariation*> families;
  for (FamilyVariation& f : v->families) families[f.family] = &f;
  for (size_t s = 0; s < eval.size(); ++s) {
    const int64_t d = eval[s].size(2);
    const at::Tensor a = eval[s].to(at::kDouble).cpu().reshape({-1, d});
    SiteVariation& site = v->sites[s];
    site.token = ShareExplained(a, token);
    site.token_position = ShareExplained(a, token_position);
    FamilyVariation& f = *families.at(site.family);
    Pool(&f.token, site.token);
    Pool(&f.token_position, site.token_position);
    Finish(&site.token);
    Finish(&site.token_position);
    if (site.token_position.eta2) {
      site.lookup_table = *site.token_position.eta2 >= 1.0 - kLookupTableTolerance;
    }
  }
  for (FamilyVariation& f : v->families) {
    Finish(&f.token);
    Finish(&f.token_position);
  }
}

}  // namespace fca::engine
