#include "server/engine/audit/interventions.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// Sorted distinct ids of C, and for every id of E its row among them (or
// the number of distinct ids, one past the end, when C never has it).
struct TokenRows {
  at::Tensor distinct;  // [U] int64, sorted
  at::Tensor inverse;   // [M * T]: row of each calibration position
  at::Tensor rows;      // eval_ids' shape: row of each evaluation position, U if unseen
};

TokenRows MapTokens(const at::Tensor& eval_ids, const at::Tensor& calib_ids) {
  TokenRows t;
  std::tie(t.distinct, t.inverse) =
      at::_unique(calib_ids.flatten().to(at::kLong), /*sorted=*/true, /*return_inverse=*/true);
  const int64_t u = t.distinct.size(0);
  const at::Tensor e = eval_ids.to(at::kLong);
  const at::Tensor pos = at::searchsorted(t.distinct, e.flatten()).clamp_max(u - 1);
  const at::Tensor found = t.distinct.index_select(0, pos) == e.flatten();
  t.rows = at::where(found, pos, at::full_like(pos, u)).view(e.sizes());
  return t;
}

// The key of each position's cell: its token id, or with `by_position`
// id * T + t (ids and T well below 2^31 keep it exact in int64).
at::Tensor CellKeys(const at::Tensor& ids, bool by_position) {
  const at::Tensor v = ids.to(at::kLong);
  if (!by_position) return v;
  const int64_t length = v.size(1);
  return v * length + at::arange(length, v.options()).unsqueeze(0);
}

absl::Status CheckIds(const char* name, const char* what, const at::Tensor* ids,
                      const at::Tensor& coeff) {
  if (ids == nullptr || !ids->defined()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s needs the %s token ids", name, what));
  }
  if (ids->dim() != 2 || ids->size(0) != coeff.size(0) || ids->size(1) != coeff.size(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s ids [%s] do not match its coefficients [%d, %d, ...]", name, what,
                        absl::StrJoin(ids->sizes(), ", "), coeff.size(0), coeff.size(1)));
  }
  return absl::OkStatus();
}

// Per site a table [R, d_s] of the values static_token(_position)
// substitutes; each evaluation position reads its row.
class StaticTokenIntervention : public Intervention {
 public:
  StaticTokenIntervention(SiteTensors tables, at::Tensor rows)
      : tables_(std::move(tables)), rows_(std::move(rows)) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    const at::Tensor rows = rows_.slice(0, begin, end);
    SiteTensors out;
    for (const at::Tensor& table : tables_) {
      out.push_back(
          table.index_select(0, rows.flatten()).view({rows.size(0), rows.size(1), table.size(1)}));
    }
    return out;
  }

 private:
  SiteTensors tables_;  // in the eval dtype and device
  at::Tensor rows_;     // [N, T] int64 on the eval device
};

// fca.md "Token-keyed profiles": a cell's calibration mean pulled toward
// its prior, w = 1 from m positions on, n / (n + m) below. sums [U, d],
// counts [U] (every cell of C has n >= 1), prior [U, d].
at::Tensor Shrink(const at::Tensor& sums, const at::Tensor& counts, const at::Tensor& prior,
                  double m) {
  const at::Tensor w =
      at::where(counts >= m, at::ones_like(counts), counts / (counts + m)).unsqueeze(1);
  return w * (sums / counts.unsqueeze(1)) + (1 - w) * prior;
}

// The cells of C keyed one way, with each cell's count and per site the
// sums of A(c) over its positions.
struct CellSums {
  TokenRows t;
  at::Tensor counts;  // [U] float64
  SiteTensors sums;   // per site [U, d_s] float64
};

CellSums SumCells(const at::Tensor& eval_keys, const at::Tensor& calib_keys,
                  const SiteTensors& calib) {
  CellSums c;
  c.t = MapTokens(eval_keys, calib_keys);
  const int64_t u = c.t.distinct.size(0);
  c.counts = at::zeros({u}, at::kDouble)
                 .index_add_(0, c.t.inverse, at::ones({c.t.inverse.size(0)}, at::kDouble));
  for (const at::Tensor& coeff : calib) {
    const int64_t d = coeff.size(2);
    const at::Tensor a = coeff.to(at::kDouble).cpu().reshape({-1, d});
    c.sums.push_back(at::zeros({u, d}, at::kDouble).index_add_(0, c.t.inverse, a));
  }
  return c;
}

// The shrinkage chain cell -> token -> site, in float64 on the CPU: per site
// the rows [mu~_{s,v} for C's ids..., mu_s], and with `by_position` the
// pairs' rows [mu~_{s,v,t} for C's pairs...] before them, each pair shrunk
// toward its token's mu~_{s,v}. `rows`: the row each evaluation position
// reads (an unseen pair its token's, an unseen id mu_s).
struct TokenTable {
  SiteTensors values;
  at::Tensor rows;  // [N, T] int64
};

TokenTable BuildTokenTable(const InterventionContext& ctx, bool by_position) {
  const double m = static_cast<double>(ctx.token_min_count);
  const at::Tensor eval_ids = ctx.eval_ids->cpu(), calib_ids = ctx.calib_ids->cpu();
  const CellSums tokens =
      SumCells(CellKeys(eval_ids, false), CellKeys(calib_ids, false), *ctx.calib_coeff);
  const int64_t ids = tokens.t.distinct.size(0);
  TokenTable table;
  for (size_t s = 0; s < tokens.sums.size(); ++s) {
    const int64_t d = tokens.sums[s].size(1);
    const at::Tensor mu = ctx.calib->site_mean[s].to(at::kDouble).cpu().view({1, d});
    table.values.push_back(
        at::cat({Shrink(tokens.sums[s], tokens.counts, mu.expand({ids, d}), m), mu}));
  }
  table.rows = tokens.t.rows;
  if (!by_position) return table;
  const int64_t length = eval_ids.size(1);
  const CellSums pairs =
      SumCells(CellKeys(eval_ids, true), CellKeys(calib_ids, true), *ctx.calib_coeff);
  const int64_t cells = pairs.t.distinct.size(0);
  // Each pair's id occurs in C: its row among the ids.
  const at::Tensor token_row =
      at::searchsorted(tokens.t.distinct, pairs.t.distinct.div(length, "floor"));
  for (size_t s = 0; s < table.values.size(); ++s) {
    const at::Tensor prior = table.values[s].index_select(0, token_row);
    table.values[s] = at::cat({Shrink(pairs.sums[s], pairs.counts, prior, m), table.values[s]});
  }
  table.rows = at::where(pairs.t.rows == cells, cells + tokens.t.rows, pairs.t.rows);
  return table;
}

class GroupIntervention : public Intervention {
 public:
  GroupIntervention(std::unique_ptr<Intervention> inner, const SiteTensors& eval,
                    std::vector<bool> in_group)
      : inner_(std::move(inner)), eval_(eval), in_group_(std::move(in_group)) {}
  SiteTensors Batch(int64_t begin, int64_t end) const override {
    SiteTensors out = inner_->Batch(begin, end);
    for (size_t s = 0; s < out.size(); ++s) {
      if (!in_group_[s]) out[s] = eval_[s].slice(0, begin, end);
    }
    return out;
  }

 private:
  std::unique_ptr<Intervention> inner_;
  const SiteTensors& eval_;
  std::vector<bool> in_group_;
};

}  // namespace

absl::Status ValidateDependenceOptions(const AuditOptions& o) {
  for (InterventionId id : o.per_layer_interventions) {
    if (id == InterventionId::kCorrect) {
      return absl::InvalidArgumentError(
          "per-layer intervention 'correct' is the reference, not an intervention to replay");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Intervention>> MakeStaticToken(const InterventionContext& ctx,
                                                              bool by_position) {
  const SiteTensors& eval = *ctx.eval;
  const char* name = by_position ? kStaticTokenPosition : kStaticToken;
  if (ctx.calib == nullptr || ctx.calib_coeff == nullptr ||
      ctx.calib_coeff->size() != eval.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " needs the calibration coefficients"));
  }
  FCA_RETURN_IF_ERROR(CheckIds(name, "evaluation", ctx.eval_ids, eval[0]));
  FCA_RETURN_IF_ERROR(CheckIds(name, "calibration", ctx.calib_ids, (*ctx.calib_coeff)[0]));
  const int64_t length = eval[0].size(1);
  if (by_position && ctx.calib_ids->size(1) != length) {
    return absl::InvalidArgumentError(
        absl::StrFormat("static_token_position: calibration windows of %d positions, evaluation "
                        "windows of %d",
                        ctx.calib_ids->size(1), length));
  }
  if (ctx.token_min_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: minimum count %d is below 1", name, ctx.token_min_count));
  }
  return GuardTorch(name, [&]() -> absl::StatusOr<std::unique_ptr<Intervention>> {
    c10::InferenceMode guard;
    TokenTable table = BuildTokenTable(ctx, by_position);
    for (size_t s = 0; s < eval.size(); ++s) {
      table.values[s] = table.values[s].to(eval[s].options());
    }
    return std::unique_ptr<Intervention>(std::make_unique<StaticTokenIntervention>(
        std::move(table.values), table.rows.to(eval[0].device())));
  });
}

absl::StatusOr<TokenCells> CountTokenCells(const at::Tensor& calib_ids, bool by_position,
                                           int64_t min_count) {
  return GuardTorch("token cells", [&]() -> absl::StatusOr<TokenCells> {
    c10::InferenceMode guard;
    const at::Tensor counts =
        std::get<2>(at::_unique2(CellKeys(calib_ids.cpu(), by_position).flatten(),
                                 /*sorted=*/true, /*return_inverse=*/false,
                                 /*return_counts=*/true));
    TokenCells c;
    c.cells = counts.numel();
    c.shrunk = (counts < min_count).sum().item<int64_t>();
    return c;
  });
}

absl::StatusOr<TokenCoverage> CountUnseenTokens(const at::Tensor& eval_ids,
                                                const at::Tensor& calib_ids) {
  return GuardTorch("token coverage", [&]() -> absl::StatusOr<TokenCoverage> {
    c10::InferenceMode guard;
    // Scored positions 0..T-2: the last position's coefficients reach no
    // scored prediction.
    const at::Tensor scored = eval_ids.cpu().slice(1, 0, eval_ids.size(1) - 1);
    const TokenRows t = MapTokens(scored, calib_ids.cpu());
    const at::Tensor unseen = t.rows == t.distinct.size(0);
    TokenCoverage c;
    c.unseen_positions = unseen.sum().item<int64_t>();
    const at::Tensor ids = scored.to(at::kLong).masked_select(unseen);
    c.unseen_ids = std::get<0>(at::_unique(ids)).numel();
    return c;
  });
}

std::vector<SiteGroup> DependenceGroups(const std::vector<CoefficientSite>& sites, ScopeId scope) {
  std::vector<SiteGroup> groups;
  if (scope == ScopeId::kSite) {
    for (size_t s = 0; s < sites.size(); ++s) groups.push_back({sites[s].name, {s}, std::nullopt});
    return groups;
  }
  std::map<std::string, size_t> index;
  std::map<int64_t, std::vector<size_t>> by_layer;
  for (size_t s = 0; s < sites.size(); ++s) {
    if (scope == ScopeId::kLayer) {
      by_layer[sites[s].layer].push_back(s);
      continue;
    }
    auto [it, added] = index.emplace(sites[s].family, groups.size());
    if (added) groups.push_back({sites[s].family, {}, std::nullopt});
    groups[it->second].sites.push_back(s);
  }
  for (auto& [layer, members] : by_layer) groups.push_back({absl::StrCat(layer), members, layer});
  return groups;
}

std::unique_ptr<Intervention> RestrictToGroup(std::unique_ptr<Intervention> inner,
                                              const SiteTensors& eval, const SiteGroup& group) {
  std::vector<bool> in_group(eval.size(), false);
  for (size_t s : group.sites) in_group[s] = true;
  return std::make_unique<GroupIntervention>(std::move(inner), eval, std::move(in_group));
}

}  // namespace fca::engine
