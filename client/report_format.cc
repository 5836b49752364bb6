// Long file: each section of the text report is a table over one ReportView.
// ReportView, and the text and JSON forms of a report, section by section.
#include "client/report_format.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/format.h"
#include "client/report_cells.h"
#include "client/report_routing.h"
#include "client/text_safety.h"
#include "common/proto_json.h"
#include "common/vocabulary.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::client {
namespace {

namespace v1 = fca::v1;

}  // namespace

ReportView::ReportView(v1::GetReportResponse report) : report_(std::move(report)) {
  models_.assign(report_.models().begin(), report_.models().end());
  interventions_.assign(report_.interventions().begin(), report_.interventions().end());
  families_.assign(report_.families().begin(), report_.families().end());
  for (const v1::ReportMetric& m : report_.metrics()) {
    metrics_[{m.intervention(), v1::KeyOfRow(m)}] = &m;
    for (const v1::Result& r : m.per_model()) {
      rows_[Key(r.model(), r.intervention(), v1::KeyOfRow(r))] = &r;
    }
  }
  for (const v1::Result& r : report_.dense_twin_rows()) {
    rows_[Key(r.model(), r.intervention(), v1::KeyOfRow(r))] = &r;
  }
}

const v1::Result* ReportView::Find(const std::string& model, const std::string& intervention,
                                   const MetricRef& metric) const {
  auto it = rows_.find(Key(model, intervention, metric.key));
  return it == rows_.end() ? nullptr : it->second;
}

AcrossModels ReportView::Across(const std::string& intervention, const MetricRef& metric) const {
  auto it = metrics_.find({intervention, metric.key});
  return it == metrics_.end() ? AcrossModels() : it->second->across_models();
}

std::string ReportView::Unit(const std::string& intervention, const MetricRef& metric) const {
  auto it = metrics_.find({intervention, metric.key});
  return it == metrics_.end() ? "" : it->second->unit();
}

std::vector<SitePoint> ReportView::Sites(const std::string& model) const {
  std::vector<SitePoint> out;
  for (const v1::SiteRow& s : report_.sites()) {
    if (s.model() == model) out.push_back(s);
  }
  return out;
}

namespace {

// How a group is named in a table: a layer's number, a site's or a family's
// name.
std::string GroupName(const ResultKey& key) {
  if (key.scope == MetricScope::kLayer && key.layer) return absl::StrCat(*key.layer);
  return key.scope == MetricScope::kSite ? key.site : key.family;
}

}  // namespace

std::vector<GroupPenalty> GroupPenalties(const ReportView& r) {
  std::vector<GroupPenalty> out;
  for (const v1::ReportMetric& m : r.report().metrics()) {
    const ResultKey key = v1::KeyOfRow(m);
    for (const ScopeDef& scope : ScopeDefs()) {
      if (key.metric == scope.penalty_metric) {
        out.push_back({m.intervention(), scope.name, GroupName(key), key});
      }
    }
  }
  return out;
}

std::vector<ModelRouting> Routing(const ReportView& r) {
  std::map<std::string, std::map<int64_t, RoutingLayer>> layers;  // by model, layer
  std::map<std::string, std::map<int64_t, std::map<int64_t, const v1::Result*>>> shares;
  for (const v1::ReportMetric& m : r.report().metrics()) {
    const ResultKey key = v1::KeyOfRow(m);
    const MetricDef* d = FindMetricByName(key.metric);
    if (d == nullptr || !key.layer) continue;
    const MetricId id = d->id;
    if (id != MetricId::kLayerTopkAgreement && id != MetricId::kExpertsPerToken &&
        id != MetricId::kExpertLoadEntropy && id != MetricId::kExpertShare &&
        id != MetricId::kLayerRoutingFlipRate) {
      continue;
    }
    const int64_t layer = *key.layer, expert = key.expert.value_or(0);
    for (const v1::Result& row : m.per_model()) {
      RoutingLayer& l = layers[row.model()][layer];
      l.layer = layer;
      if (id == MetricId::kExpertsPerToken) l.experts_per_token = &row;
      if (id == MetricId::kExpertLoadEntropy) l.load_entropy = &row;
      if (id == MetricId::kLayerRoutingFlipRate) l.flip_rate = &row;
      if (id == MetricId::kExpertShare) shares[row.model()][layer][expert] = &row;
    }
  }
  std::vector<ModelRouting> out;
  for (const std::string& model : r.models()) {
    auto it = layers.find(model);
    if (it == layers.end()) continue;
    ModelRouting routing{model, {}};
    for (auto& [layer, l] : it->second) {
      for (const auto& [expert, row] : shares[model][layer]) l.expert_shares.push_back(row);
      routing.layers.push_back(l);
    }
    out.push_back(std::move(routing));
  }
  return out;
}

// ---------------------------------------------------------------- text

namespace {

using Align = TextTable::Align;

TextTable ModelsTable(const ReportView& r) {
  TextTable t({{"MODEL"},
               {"LIVE NLL", Align::kRight},
               {"REPLAY MAX |dLOGIT|", Align::kRight},
               {"EVAL WINDOWS", Align::kRight}});
  for (const std::string& m : r.models()) {
    const v1::Result* live = r.Find(m, kReplay, kLiveNll);
    const v1::Result* fid = r.Find(m, kReplay, kMaxAbsLogitDiff);
    t.AddRow({m, Cell(live, Fixed, 4), fid ? General(fid->value()) : "",
              live ? absl::StrCat(live->n()) : ""});
  }
  return t;
}

TextTable VariationTable(const ReportView& r) {
  TextTable t({{"FAMILY"},
               {"MODEL"},
               {"ETA2 LAYER", Align::kRight},
               {"ETA2 (SITE, CHANNEL)", Align::kRight},
               {"TOTAL VAR", Align::kRight},
               {"BETWEEN-INPUT VAR", Align::kRight},
               {"WITHIN-INPUT VAR", Align::kRight}});
  t.set_key_columns(2);  // family, model
  for (const std::string& f : r.families()) {
    const ResultKey eta = FamilyKey(kEta2, f), total = FamilyKey(kTotalVariance, f),
                    between = FamilyKey(kBetweenInputVariance, f),
                    within = FamilyKey(kWithinInputVariance, f), layer = FamilyKey(kEta2Layer, f);
    for (const std::string& m : r.models()) {
      t.AddRow({f, m, Cell(r.Find(m, kVariation, layer), Fixed, 4),
                Cell(r.Find(m, kVariation, eta), Fixed, 4),
                Cell(r.Find(m, kVariation, total), GeneralDigits, 0),
                Cell(r.Find(m, kVariation, between), GeneralDigits, 0),
                Cell(r.Find(m, kVariation, within), GeneralDigits, 0)});
    }
    if (r.models().size() > 1) {
      t.AddRow({f, kAcrossLabel, AcrossCell(r.Across(kVariation, layer), Fixed, 4),
                AcrossCell(r.Across(kVariation, eta), Fixed, 4),
                AcrossCell(r.Across(kVariation, total), GeneralDigits, 0),
                AcrossCell(r.Across(kVariation, between), GeneralDigits, 0),
                AcrossCell(r.Across(kVariation, within), GeneralDigits, 0)});
    }
  }
  return t;
}

// fca.md "Lookup tables": the in-sample shares (E's own key means: high by
// chance with few repeats per key) beside the out-of-sample ones (C's
// tables on E), and the sites that are an exact table of (token, position)
// on E. No rows for a job stored before these rows were written.
TextTable LookupTable(const ReportView& r) {
  const std::vector<std::pair<const char*, const char*>> shares = {
      {"TOKEN IN-SAMPLE", kEta2Token},
      {"TOKEN OOS", kEta2TokenOos},
      {"(TOKEN, POS) IN-SAMPLE", kEta2TokenPosition},
      {"(TOKEN, POS) OOS", kEta2TokenPositionOos}};
  std::vector<TextTable::Column> cols = {{"FAMILY"}, {"MODEL"}};
  for (const auto& [head, metric] : shares) cols.push_back({head, Align::kRight});
  cols.push_back({"EXACT TABLE ON E (ARCHITECTURE)"});
  TextTable t(cols);
  t.set_key_columns(2);  // family, model
  for (const std::string& f : r.families()) {
    bool any = false;
    for (const std::string& m : r.models()) {
      std::vector<std::string> row = {f, m};
      for (const auto& [head, metric] : shares) {
        const v1::Result* share = r.Find(m, kVariation, FamilyKey(metric, f));
        any = any || share != nullptr;
        row.push_back(Cell(share, Fixed, 4));
      }
      std::vector<std::string> exact;
      for (const SitePoint& s : r.Sites(m)) {
        if (s.family() == f && s.lookup_table()) exact.push_back(s.site());
      }
      row.push_back(absl::StrJoin(exact, ", "));
      if (any) t.AddRow(std::move(row));
    }
    if (any && r.models().size() > 1) {
      std::vector<std::string> row = {f, kAcrossLabel};
      for (const auto& [head, metric] : shares) {
        row.push_back(AcrossCell(r.Across(kVariation, FamilyKey(metric, f)), Fixed, 4));
      }
      row.push_back("");
      t.AddRow(std::move(row));
    }
  }
  return t;
}

// The GROUP cell of a table in InGroupOrder (fca.md "Reading the
// interventions in groups"): the group's name, with `reading` its
// retention_reading, on the first row of each group; "" below it.
class GroupCells {
 public:
  explicit GroupCells(bool reading) : reading_(reading) {}
  std::string Next(const std::string& intervention) {
    const InterventionGroupDef* g = FindInterventionGroup(intervention);
    if (g == last_) return "";
    last_ = g;
    if (g == nullptr) return "";
    return std::string(g->name) + (reading_ ? g->retention_reading : "");
  }

 private:
  bool reading_;
  const InterventionGroupDef* last_ = nullptr;
};

TextTable DependenceTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {
      {"GROUP"}, {"INTERVENTION"}, {std::string("NLL ") + kAcrossLabel, Align::kRight}};
  for (const std::string& m : r.models()) cols.push_back({"PENALTY " + m, Align::kRight});
  if (r.models().size() > 1)
    cols.push_back({std::string("PENALTY ") + kAcrossLabel, Align::kRight});
  TextTable t(cols);
  t.set_key_columns(2);  // group, intervention
  GroupCells group(/*reading=*/false);
  for (const std::string& i : InGroupOrder(r.interventions())) {
    std::vector<std::string> row = {group.Next(i), i, AcrossCell(r.Across(i, kNll), Fixed, 4)};
    for (const std::string& m : r.models()) row.push_back(Cell(r.Find(m, i, kPenalty), Signed, 4));
    if (r.models().size() > 1) row.push_back(AcrossCell(r.Across(i, kPenalty), Signed, 4));
    if (i == kCorrect) std::fill(row.begin() + 3, row.end(), "-");
    t.AddRow(std::move(row));
  }
  return t;
}

TextTable RetentionTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {{"GROUP"}, {"PROFILE"}};
  for (const std::string& m : r.models()) cols.push_back({"RETENTION % " + m, Align::kRight});
  if (r.models().size() > 1) cols.push_back({kAcrossLabel, Align::kRight});
  TextTable t(cols);
  t.set_key_columns(2);  // group, profile
  GroupCells group(/*reading=*/true);
  for (const std::string& i : InGroupOrder(StaticProfileNames())) {
    bool has = false;
    for (const std::string& m : r.models()) has = has || r.Find(m, i, kRetentionPct) != nullptr;
    if (!has) continue;
    std::vector<std::string> row = {group.Next(i), i};
    for (const std::string& m : r.models()) {
      row.push_back(Cell(r.Find(m, i, kRetentionPct), Fixed, 1));
    }
    if (r.models().size() > 1) row.push_back(AcrossCell(r.Across(i, kRetentionPct), Fixed, 1));
    t.AddRow(std::move(row));
  }
  return t;
}

// The interventions estimated on C with their penalty's block CI beside
// the CI that also covers calibration (fca.md "Calibration uncertainty");
// empty unless the audit resampled C.
TextTable CalibrationTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {{"INTERVENTION"}};
  for (const std::string& m : r.models()) {
    cols.push_back({"BLOCK CI " + m, Align::kRight});
    cols.push_back({"WITH CALIBRATION " + m, Align::kRight});
    cols.push_back({"CALIB SD " + m, Align::kRight});
  }
  TextTable t(cols);
  for (const std::string& i : InGroupOrder(r.interventions())) {
    bool has = false;
    for (const std::string& m : r.models()) has = has || r.Find(m, i, kPenaltyCalib) != nullptr;
    if (!has) continue;
    std::vector<std::string> row = {i};
    for (const std::string& m : r.models()) {
      const v1::Result* sd = r.Find(m, i, kPenaltyCalibSd);
      row.push_back(Cell(r.Find(m, i, kPenaltyBlock), Signed, 4));
      row.push_back(Cell(r.Find(m, i, kPenaltyCalib), Signed, 4));
      row.push_back(sd ? absl::StrFormat("%s (R=%d)", Fixed(sd->value(), 4), sd->n()) : "");
    }
    t.AddRow(std::move(row));
  }
  return t;
}

// A fraction in percent: "+5.2%".
std::string Percent(double v, int digits) { return absl::StrFormat("%+.*f%%", digits, 100 * v); }

// One row per (intervention, group): which layers need their own
// coefficients.
TextTable GroupTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {{"INTERVENTION"}, {"GROUP"}};
  for (const std::string& m : r.models()) cols.push_back({"PENALTY " + m, Align::kRight});
  if (r.models().size() > 1)
    cols.push_back({std::string("PENALTY ") + kAcrossLabel, Align::kRight});
  TextTable t(cols);
  t.set_key_columns(2);  // intervention, group
  for (const GroupPenalty& g : GroupPenalties(r)) {
    std::vector<std::string> row = {g.intervention, g.scope + " " + g.group};
    for (const std::string& m : r.models()) {
      row.push_back(Cell(r.Find(m, g.intervention, g.key), Signed, 4));
    }
    if (r.models().size() > 1)
      row.push_back(AcrossCell(r.Across(g.intervention, g.key), Signed, 4));
    t.AddRow(std::move(row));
  }
  return t;
}

// The routing rows of model `m`; nullptr for a model without routers.
const ModelRouting* RoutingOf(const std::vector<ModelRouting>& routing, const std::string& m) {
  for (const ModelRouting& x : routing) {
    if (x.model == m) return &x;
  }
  return nullptr;
}

// A mixture of experts' blocks are its experts: "2 of 8" routed experts
// per token at each router layer ("1..2 of 8" when the layers differ),
// not the sum over layers beside a dense model's count of layers.
std::string ExpertsCell(const ModelRouting& m) {
  double lo = 0, hi = 0;
  size_t experts = 0;
  bool any = false;
  for (const RoutingLayer& l : m.layers) {
    if (l.experts_per_token == nullptr || !l.experts_per_token->defined()) continue;
    const double k = l.experts_per_token->value();
    lo = any ? std::min(lo, k) : k;
    hi = any ? std::max(hi, k) : k;
    experts = std::max(experts, l.expert_shares.size());
    any = true;
  }
  if (!any) return "";
  const std::string k = lo == hi ? General(lo) : General(lo) + ".." + General(hi);
  return absl::StrFormat("%s of %d", k, experts);
}

// One model's row: its own latency and its dense twin's, both from the
// model's own pairs. The twin's row (`twin`) has no latency of its own: it
// was timed in every model's pairs, and each model's row shows its share.
std::vector<std::string> ExecutionCells(const ReportView& r, const std::string& m,
                                        const std::vector<ModelRouting>& routing, bool twin) {
  auto get = [&](const std::string& metric) { return r.Find(m, kExecution, metric); };
  const v1::Result* slowdown = get(kSlowdown);
  const v1::Result* verdict = get(kSlowdownVerdict);
  const ModelRouting* routed = RoutingOf(routing, m);
  return {routed != nullptr ? ExpertsCell(*routed) : Cell(get(kBlocksPerToken), GeneralDigits, 0),
          Cell(get(kBlocksExecutedFraction), Fixed, 4),
          Cell(get(kFlopsPerToken), GeneralDigits, 0),
          Cell(get(kFlopsOverhead), Percent, 1),
          twin ? "" : Cell(get(kLatencyUsPerToken), Fixed, 2),
          twin ? "" : Cell(get(kDenseLatencyUsPerToken), Fixed, 2),
          slowdown ? Cell(slowdown, Percent, 1) : "-",
          verdict ? SlowdownVerdictName(verdict->value()) : "",
          slowdown ? absl::StrCat(slowdown->n()) : ""};
}

// "2 slower, 1 no detectable difference" over the audited models.
std::string VerdictsAcross(const ReportView& r) {
  std::map<std::string, int> counts;
  for (const std::string& m : r.models()) {
    const v1::Result* v = r.Find(m, kExecution, kSlowdownVerdict);
    if (v != nullptr) ++counts[SlowdownVerdictName(v->value())];
  }
  std::vector<std::string> parts;
  for (const char* name : {"slower", "faster", "no detectable difference"}) {
    if (counts.count(name)) parts.push_back(absl::StrFormat("%d %s", counts[name], name));
  }
  return absl::StrJoin(parts, ", ");
}

// Fractions across models in percent: "+5.0% ± 2.0% (+3.0%..+7.0%)".
std::string PercentAcross(const AcrossModels& s) {
  if (s.n() == 0) return "-";
  std::string out = absl::StrFormat("%+.1f%%", 100 * s.mean());
  if (s.n() > 1) {
    out +=
        absl::StrFormat(" ± %.1f%% (%+.1f%%..%+.1f%%)", 100 * s.sd(), 100 * s.min(), 100 * s.max());
  }
  return out;
}

TextTable ExecutionTable(const ReportView& r) {
  TextTable t({{"MODEL"},
               {"BLOCKS/TOKEN", Align::kRight},
               {"EXECUTED", Align::kRight},
               {"FLOPS/TOKEN", Align::kRight},
               {"FLOPS vs DENSE", Align::kRight},
               {"LATENCY us/token", Align::kRight},
               {"DENSE us/token", Align::kRight},
               {"SLOWDOWN vs DENSE [CI]", Align::kRight},
               {"VERDICT"},
               {"PAIRS", Align::kRight}});
  const std::vector<ModelRouting> routing = Routing(r);
  for (const std::string& m : r.models()) {
    std::vector<std::string> row = {m};
    for (std::string& c : ExecutionCells(r, m, routing, false)) row.push_back(std::move(c));
    t.AddRow(std::move(row));
  }
  if (r.models().size() > 1) {
    auto across = [&](const std::string& metric, std::string (*fmt)(double, int), int digits) {
      return AcrossCell(r.Across(kExecution, metric), fmt, digits);
    };
    t.AddRow({kAcrossLabel, routing.empty() ? across(kBlocksPerToken, GeneralDigits, 0) : "",
              across(kBlocksExecutedFraction, Fixed, 4), across(kFlopsPerToken, GeneralDigits, 0),
              PercentAcross(r.Across(kExecution, kFlopsOverhead)),
              across(kLatencyUsPerToken, Fixed, 2), across(kDenseLatencyUsPerToken, Fixed, 2),
              PercentAcross(r.Across(kExecution, kSlowdown)), VerdictsAcross(r), ""});
  }
  if (!r.dense_twin().empty()) {
    std::vector<std::string> row = {r.dense_twin() + " (dense twin)"};
    for (std::string& c : ExecutionCells(r, r.dense_twin(), routing, true)) {
      row.push_back(std::move(c));
    }
    t.AddRow(std::move(row));
  }
  return t;
}

// A mixture of experts' MoE layers in parts (fca.md "Where a mixture of
// experts' time goes"), us/token; empty when no model has them (not timed on
// a GPU, or no routers).
TextTable MoeTimeTable(const ReportView& r) {
  TextTable t({{"MODEL"},
               {"ROUTER", Align::kRight},
               {"DISPATCH", Align::kRight},
               {"EXPERTS", Align::kRight},
               {"TWIN MLP", Align::kRight},
               {"EXPERTS / TWIN MLP", Align::kRight},
               {"REST vs TWIN", Align::kRight}});
  for (const std::string& m : r.models()) {
    auto get = [&](const char* metric) { return r.Find(m, kExecution, metric); };
    const v1::Result *router = get(kRouterUsPerToken), *dispatch = get(kDispatchUsPerToken),
                     *experts = get(kExpertsUsPerToken), *mlp = get(kDenseMlpUsPerToken),
                     *latency = get(kLatencyUsPerToken), *dense = get(kDenseLatencyUsPerToken);
    if (router == nullptr || dispatch == nullptr || experts == nullptr) continue;
    std::string ratio = "-", rest = "-";
    if (mlp != nullptr && latency != nullptr && dense != nullptr && mlp->value() > 0) {
      ratio = absl::StrFormat("%.3f", experts->value() / mlp->value());
      const double moe = router->value() + dispatch->value() + experts->value();
      rest = absl::StrFormat("%+.2f", (latency->value() - moe) - (dense->value() - mlp->value()));
    }
    t.AddRow({m, Cell(router, Fixed, 2), Cell(dispatch, Fixed, 2), Cell(experts, Fixed, 2),
              mlp != nullptr ? Cell(mlp, Fixed, 2) : "-", ratio, rest});
  }
  return t;
}

// The EXECUTION section's note: what each column is and the rule the
// verdict applies, as the engine applies it (fca.md "Execution"), and a
// dense twin that the spec says does not match.
std::string ExecutionNote(const ReportView& r) {
  std::string note =
      "BLOCKS/TOKEN counted per token (a mixture of experts: routed experts per token at each "
      "router layer, k of E), FLOPS vs DENSE = F_model / F_dense - 1; LATENCY and DENSE = "
      "medians of the model's and of the dense twin's forwards in the model's own pairs; "
      "slowdown = geometric mean over interleaved pairs of t_model / t_dense, minus 1, with the "
      "Student t-interval of both timing blocks' pairs pooled; verdict slower (faster) only when "
      "each of the two timing blocks' own CIs lies above (below) 0, else no detectable "
      "difference, whatever the pooled CI";
  const std::string& why = r.job().spec().dense_twin_mismatch();
  if (!why.empty()) {
    absl::StrAppend(&note,
                    "; the spec lets the dense twin differ from the models (dense_twin_mismatch: ",
                    SanitizeForTerminal(why), ")");
  }
  return note;
}

// Router layers up to this many get a column each in the agreement table;
// more (OLMoE-1B-7B has 16) get one "min..max" column.
constexpr size_t kMaxLayerColumns = 8;

// "lo..hi" over the defined values of `rows`, "" when none is defined.
std::string RangeCell(const std::vector<const v1::Result*>& rows) {
  bool any = false;
  double lo = 0, hi = 0;
  for (const v1::Result* row : rows) {
    if (row == nullptr || !row->defined()) continue;
    lo = any ? std::min(lo, row->value()) : row->value();
    hi = any ? std::max(hi, row->value()) : row->value();
    any = true;
  }
  return any ? absl::StrFormat("%s..%s", Fixed(lo, 4), Fixed(hi, 4)) : "";
}

// Whether any routed model has a top-k overlap row.
bool HasTopkOverlap(const ReportView& r, const std::vector<ModelRouting>& routing) {
  for (const ModelRouting& m : routing) {
    for (const std::string& i : r.interventions()) {
      if (r.Find(m.model, i, kTopkOverlap) != nullptr) return true;
    }
  }
  return false;
}

// Per model and intervention (InGroupOrder, as the dependence table): the
// top-k agreement with LIVE over every (token, router layer), its top-k
// overlap (when stored), per layer agreement, and its n.
TextTable RoutingAgreementTable(const ReportView& r, const std::vector<ModelRouting>& routing) {
  std::vector<int64_t> layers;  // of every routed model
  for (const ModelRouting& m : routing) {
    for (const RoutingLayer& l : m.layers) layers.push_back(l.layer);
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  const bool per_column = layers.size() <= kMaxLayerColumns;
  std::vector<TextTable::Column> cols = {
      {"MODEL"}, {"INTERVENTION"}, {"TOP-K AGREEMENT", Align::kRight}};
  // Jobs stored before the overlap was written have none: no empty column.
  const bool overlap = HasTopkOverlap(r, routing);
  if (overlap) cols.push_back({"TOP-K OVERLAP", Align::kRight});
  if (per_column) {
    for (int64_t l : layers) cols.push_back({absl::StrCat("LAYER ", l), Align::kRight});
  } else {
    cols.push_back({"PER LAYER min..max", Align::kRight});
  }
  cols.push_back({"N", Align::kRight});
  TextTable t(cols);
  t.set_key_columns(2);  // model, intervention
  for (const ModelRouting& m : routing) {
    for (const std::string& i : InGroupOrder(r.interventions())) {
      const v1::Result* all = r.Find(m.model, i, kTopkAgreement);
      if (all == nullptr) continue;
      std::vector<std::string> row = {m.model, i, Cell(all, Fixed, 4)};
      if (overlap) row.push_back(Cell(r.Find(m.model, i, kTopkOverlap), Fixed, 4));
      std::vector<const v1::Result*> per_layer;
      for (int64_t l : layers) {
        per_layer.push_back(r.Find(m.model, i, LayerKey(kLayerTopkAgreement, l)));
        if (per_column) row.push_back(Cell(per_layer.back(), Fixed, 4));
      }
      if (!per_column) row.push_back(RangeCell(per_layer));
      row.push_back(absl::StrCat(all->n()));
      t.AddRow(std::move(row));
    }
  }
  return t;
}

// Per model and router layer, LIVE: experts run per token, the load's
// entropy beside its maximum ln E, the smallest and largest expert share,
// and the flip rate against float32 when the audit ran in reduced precision
// (per layer, and over all router layers in a row "all").
TextTable RoutingLoadTable(const ReportView& r, const std::vector<ModelRouting>& routing,
                           bool flips) {
  std::vector<TextTable::Column> cols = {{"MODEL"},
                                         {"LAYER", Align::kRight},
                                         {"EXPERTS/TOKEN", Align::kRight},
                                         {"LOAD ENTROPY", Align::kRight},
                                         {"E", Align::kRight},
                                         {"ln E", Align::kRight},
                                         {"EXPERT SHARE min..max", Align::kRight}};
  if (flips) cols.push_back({"FLIP RATE vs FLOAT32", Align::kRight});
  TextTable t(cols);
  t.set_key_columns(2);  // model, layer
  for (const ModelRouting& m : routing) {
    for (const RoutingLayer& l : m.layers) {
      const size_t experts = l.expert_shares.size();
      std::vector<std::string> row = {m.model,
                                      absl::StrCat(l.layer),
                                      Cell(l.experts_per_token, GeneralDigits, 0),
                                      Cell(l.load_entropy, Fixed, 4),
                                      experts > 0 ? absl::StrCat(experts) : "",
                                      experts > 0 ? Fixed(std::log(double(experts)), 4) : "",
                                      RangeCell(l.expert_shares)};
      if (flips) row.push_back(Cell(l.flip_rate, Fixed, 4));
      t.AddRow(std::move(row));
    }
    const v1::Result* flip_rate = r.Find(m.model, kReplay, kRoutingFlipRate);
    if (flips && flip_rate != nullptr) {
      t.AddRow({m.model, "all", "", "", "", "", "", Cell(flip_rate, Fixed, 4)});
    }
  }
  return t;
}

}  // namespace

std::vector<ReportSection> ReportSections(const ReportView& r) {
  std::vector<ReportSection> out;
  out.push_back({"MODELS", "NLL in nats/token over the evaluation windows", ModelsTable(r)});
  out.push_back({"COEFFICIENT VARIATION",
                 "eta2 layer = share of the variance explained by one mean per site (layer "
                 "identity), eta2 (site, channel) by one per site and channel; the within-site "
                 "variance splits into between-input and within-input parts",
                 VariationTable(r)});
  TextTable lookup = LookupTable(r);
  if (!lookup.empty()) {
    out.push_back({"LOOKUP TABLES",
                   "share of the within-site variance explained by the current token id, or by "
                   "(token id, position): IN-SAMPLE on E (each key's own mean: high by chance "
                   "with few repeats per key) and OOS, out of sample (C's static_token / "
                   "static_token_position table on E; the one to read; below 0 when it predicts "
                   "worse than E's mean). EXACT TABLE ON E: sites that are an exact function of "
                   "(token, position) on E, expected from the architecture where the controller "
                   "sees only the current token's embedding and its position (FeatureGate's "
                   "layer 0), not a finding",
                   std::move(lookup)});
  }
  out.push_back({"FUNCTIONAL DEPENDENCE",
                 "penalty = NLL(I) - NLL(correct) in nats/token, with its paired 95% bootstrap CI",
                 DependenceTable(r)});
  out.push_back({"GAP RETENTION",
                 "100 * (NLL(global_mean) - NLL(P)) / (NLL(global_mean) - NLL(correct)); "
                 "undefined when the gap is ~0, above 100 when P beats the model's own A",
                 RetentionTable(r)});
  TextTable calibration = CalibrationTable(r);
  if (!calibration.empty()) {
    out.push_back({"CALIBRATION UNCERTAINTY",
                   "penalty of each intervention estimated on the calibration set: its "
                   "circular block CI over evaluation windows, and the CI that also resamples the "
                   "calibration windows (R re-estimated profiles); CALIB SD = sd of the penalty "
                   "over the R profiles",
                   std::move(calibration)});
  }
  TextTable groups = GroupTable(r);
  if (!groups.empty()) {
    out.push_back({"PER-GROUP DEPENDENCE",
                   "penalty with the intervention at one group of sites and the correct "
                   "coefficients elsewhere, nats/token, 95% CI",
                   std::move(groups)});
  }
  out.push_back({"EXECUTION", ExecutionNote(r), ExecutionTable(r)});
  TextTable moe_time = MoeTimeTable(r);
  if (!moe_time.empty()) {
    out.push_back({"MoE LAYER TIME",
                   "us/token, means over the timing's LIVE forwards (CPU): ROUTER = the routers' "
                   "logits and softmax, DISPATCH = top-k, grouping by expert, gathering and the "
                   "weighted combine, EXPERTS = the experts' MLPs, TWIN MLP = the dense twin's MLP "
                   "in the same pairs; EXPERTS / TWIN MLP = cost per FLOP against the dense MLP; "
                   "REST vs TWIN = what the rest of the forward (attention, norms) costs beyond "
                   "the twin's",
                   std::move(moe_time)});
  }
  const std::vector<ModelRouting> routing = Routing(r);
  if (routing.empty()) return out;  // no routers: the report as it always was
  out.push_back({"ROUTING AGREEMENT",
                 absl::StrCat("mixtures of experts: fraction of (token, router layer) whose chosen "
                              "expert set under the intervention equals LIVE's (correct: 1 by "
                              "construction; random_route: k experts drawn uniformly, the "
                              "same-cost chance baseline), over all router layers and per layer",
                              HasTopkOverlap(r, routing)
                                  ? "; TOP-K OVERLAP = mean over them of |S ∩ S_live| / k, the "
                                    "share of LIVE's k experts kept"
                                  : "",
                              "; N = tokens x router layers"),
                 RoutingAgreementTable(r, routing)});
  bool flips = false;
  for (const ModelRouting& m : routing) {
    for (const RoutingLayer& l : m.layers) flips = flips || l.flip_rate != nullptr;
  }
  out.push_back({"ROUTING LOAD",
                 absl::StrCat("per router layer, over every evaluation token (LIVE's recorded "
                              "router coefficients through the model's own top-k): routed "
                              "experts run per token, entropy of the experts' shares of the "
                              "layer's (token, expert) assignments in nats (ln E when balanced, "
                              "E experts), the smallest and largest share (1/E when balanced)",
                              flips ? "; FLIP RATE = fraction of tokens whose chosen experts "
                                      "differ from those of a float32 recording of the same "
                                      "windows (all: over every token and router layer)"
                                    : ""),
                 RoutingLoadTable(r, routing, flips)});
  for (ReportSection& s : RoutingStatisticsSections(r)) out.push_back(std::move(s));
  return out;
}

bool HasProvenance(const ReportView& r) {
  if (r.job().has_provenance()) return true;
  for (const v1::JobTask& t : r.job().tasks()) {
    if (t.has_provenance()) return true;
  }
  return false;
}

ReportSection ProvenanceSection(const ReportView& r) {
  const v1::Provenance& job = r.job().provenance();
  ReportSection s{"PROVENANCE",
                  absl::StrFormat("eval %s sha256:%s, calib %s sha256:%s, seed %d, T=%d, "
                                  "server %s; each task as its worker recorded it",
                                  job.eval_dataset(), job.eval_sha256(), job.calib_dataset(),
                                  job.calib_sha256(), job.seed(), r.job().spec().window_length(),
                                  job.server_version()),
                  TextTable({{"MODEL"},
                             {"WORKER"},
                             {"HOST"},
                             {"ENGINE"},
                             {"TORCH"},
                             {"DEVICE"},
                             {"DTYPE"},
                             {"THREADS", Align::kRight},
                             {"EVAL (CACHED)", Align::kRight},
                             {"CALIB (CACHED)", Align::kRight},
                             {"WEIGHTS SHA256"}})};
  for (const v1::JobTask& t : r.job().tasks()) {
    if (!t.has_provenance()) continue;
    const v1::TaskProvenance& p = t.provenance();
    s.table.AddRow({t.model(), p.worker(), p.host(), p.engine_version(), p.torch_version(),
                    p.device(), p.dtype(), absl::StrFormat("%d", p.threads()),
                    absl::StrFormat("%d (%d)", p.eval_windows(), p.cached_eval_windows()),
                    absl::StrFormat("%d (%d)", p.calib_windows(), p.cached_calib_windows()),
                    p.weights_sha256()});
  }
  return s;
}

std::string FormatReportText(const ReportView& r, size_t width) {
  const v1::AuditSpec& spec = r.job().spec();
  std::string out = WrapText(
      absl::StrFormat(
          "AUDIT REPORT  %s (%s)\nmodels: %s%s\neval dataset sha256: %s, window length %d\n",
          // A pooled report's job is no job (PoolJobs: id 0).
          r.job().id() == 0 ? "pooled jobs" : absl::StrCat("job ", r.job().id()),
          JobStateName(r.job().state()), SanitizeForTerminal(absl::StrJoin(r.models(), ", ")),
          spec.dense_twin().empty() ? ""
                                    : "; dense twin: " + SanitizeForTerminal(spec.dense_twin()),
          SanitizeForTerminal(r.eval_sha256()), spec.window_length()),
      width);
  for (const ReportSection& section : ReportSections(r)) {
    out += "\n" + WrapText(absl::StrFormat("%s (%s)", section.title, section.note), width) + "\n";
    out += section.table.empty() ? "(no rows)\n" : section.table.Render(width);
  }
  if (r.models().size() > 1) {
    out += "\n" +
           WrapText(absl::StrFormat("mean ± sd (min..max): across the %d audited models (sample "
                                    "sd), computed by the server.",
                                    r.models().size()),
                    width) +
           "\n";
  }
  if (HasProvenance(r)) {
    const ReportSection p = ProvenanceSection(r);
    out += "\n" +
           WrapText(absl::StrFormat("%s (%s)", p.title, SanitizeForTerminal(p.note)), width) +
           "\n" + (p.table.empty() ? "(no rows)\n" : p.table.Render(width));
  }
  return out;
}

// ---------------------------------------------------------------- JSON

std::string FormatReportJson(const ReportView& r) { return ReportJson(r.report()); }

}  // namespace fca::client
