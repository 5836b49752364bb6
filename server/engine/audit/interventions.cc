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

absl::Status CheckIds(const char* what, const at::Tensor* ids, const at::Tensor& coeff) {
  if (ids == nullptr || !ids->defined()) {
    return absl::InvalidArgumentError(absl::StrFormat("static_token needs the %s token ids", what));
  }
  if (ids->dim() != 2 || ids->size(0) != coeff.size(0) || ids->size(1) != coeff.size(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("static_token: %s ids [%s] do not match its coefficients [%d, %d, ...]",
                        what, absl::StrJoin(ids->sizes(), ", "), coeff.size(0), coeff.size(1)));
  }
  return absl::OkStatus();
}

// Per site a table [U + 1, d_s]: the calibration mean by token, then mu_s;
// each evaluation position reads its token's row.
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

absl::StatusOr<std::unique_ptr<Intervention>> MakeStaticToken(const InterventionContext& ctx) {
  const SiteTensors& eval = *ctx.eval;
  if (ctx.calib == nullptr || ctx.calib_coeff == nullptr ||
      ctx.calib_coeff->size() != eval.size()) {
    return absl::InvalidArgumentError("static_token needs the calibration coefficients");
  }
  FCA_RETURN_IF_ERROR(CheckIds("evaluation", ctx.eval_ids, eval[0]));
  FCA_RETURN_IF_ERROR(CheckIds("calibration", ctx.calib_ids, (*ctx.calib_coeff)[0]));
  return GuardTorch("static_token", [&]() -> absl::StatusOr<std::unique_ptr<Intervention>> {
    c10::InferenceMode guard;
    const TokenRows t = MapTokens(ctx.eval_ids->cpu(), ctx.calib_ids->cpu());
    const int64_t u = t.distinct.size(0);
    const at::Tensor counts =
        at::zeros({u}, at::kDouble)
            .index_add_(0, t.inverse, at::ones({t.inverse.size(0)}, at::kDouble));
    SiteTensors tables;
    for (size_t s = 0; s < eval.size(); ++s) {
      const int64_t d = eval[s].size(2);
      const at::Tensor a = (*ctx.calib_coeff)[s].to(at::kDouble).cpu().reshape({-1, d});
      const at::Tensor sums = at::zeros({u, d}, at::kDouble).index_add_(0, t.inverse, a);
      const at::Tensor mu_s = ctx.calib->site_mean[s].to(at::kDouble).cpu().view({1, d});
      tables.push_back(at::cat({sums / counts.unsqueeze(1), mu_s}).to(eval[s].options()));
    }
    return std::unique_ptr<Intervention>(
        std::make_unique<StaticTokenIntervention>(std::move(tables), t.rows.to(eval[0].device())));
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
    for (size_t s = 0; s < sites.size(); ++s) groups.push_back({sites[s].name, {s}});
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
    if (added) groups.push_back({sites[s].family, {}});
    groups[it->second].sites.push_back(s);
  }
  for (auto& [layer, members] : by_layer) groups.push_back({absl::StrCat(layer), members});
  return groups;
}

std::unique_ptr<Intervention> RestrictToGroup(std::unique_ptr<Intervention> inner,
                                              const SiteTensors& eval, const SiteGroup& group) {
  std::vector<bool> in_group(eval.size(), false);
  for (size_t s : group.sites) in_group[s] = true;
  return std::make_unique<GroupIntervention>(std::move(inner), eval, std::move(in_group));
}

}  // namespace fca::engine
