// ReportView and the text and JSON forms of a report.
#include "client/report.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "common/json.h"

namespace fca::client {
namespace {

namespace v1 = fca::v1;

// fca.md's interventions in the order reports list them.
const std::vector<std::string>& InterventionOrder() {
  static const auto* order =
      new std::vector<std::string>{"correct",      "cross_input",           "token_shuffle",
                                   "static_layer", "static_layer_position", "global_mean"};
  return *order;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

ReportView::ReportView(v1::Job job, const std::vector<v1::Result>& results)
    : job_(std::move(job)) {
  const auto& spec = job_.spec();
  std::set<std::string> audited(spec.models().begin(), spec.models().end());
  std::set<std::string> with_rows, names_with_nll, families;
  for (const v1::Result& r : results) {
    const bool is_twin = !spec.dense_twin().empty() && r.model() == spec.dense_twin();
    if (!audited.count(r.model()) && !is_twin) continue;
    rows_[Key(r.model(), r.intervention(), r.metric())] = r;
    if (is_twin) {
      dense_twin_ = r.model();
      continue;
    }
    with_rows.insert(r.model());
    if (r.metric() == "nll") names_with_nll.insert(r.intervention());
    if (r.intervention() == "variation" && StartsWith(r.metric(), "eta2.")) {
      families.insert(r.metric().substr(5));
    }
  }
  for (const std::string& m : spec.models()) {
    if (with_rows.count(m)) models_.push_back(m);
  }
  for (const std::string& i : InterventionOrder()) {
    if (names_with_nll.count(i)) interventions_.push_back(i);
  }
  families_.assign(families.begin(), families.end());
}

const v1::Result* ReportView::Find(const std::string& model, const std::string& intervention,
                                   const std::string& metric) const {
  auto it = rows_.find(Key(model, intervention, metric));
  return it == rows_.end() ? nullptr : &it->second;
}

AcrossModels ReportView::Across(const std::string& intervention,
                                const std::string& metric) const {
  AcrossModels a;
  std::vector<double> values;
  for (const std::string& m : models_) {
    const v1::Result* r = Find(m, intervention, metric);
    if (r == nullptr) continue;
    if (r->defined()) {
      values.push_back(r->value());
    } else {
      ++a.undefined;
    }
  }
  a.n = static_cast<int64_t>(values.size());
  if (values.empty()) return a;
  double sum = 0;
  for (double v : values) sum += v;
  a.mean = sum / a.n;
  if (a.n > 1) {
    double ss = 0;
    for (double v : values) ss += (v - a.mean) * (v - a.mean);
    a.sd = std::sqrt(ss / (a.n - 1));
  }
  return a;
}

std::vector<SitePoint> ReportView::Sites(const std::string& model) const {
  std::vector<SitePoint> out;
  const std::string prefix = "site_mean.";
  for (auto it = rows_.lower_bound(Key(model, "variation", prefix)); it != rows_.end(); ++it) {
    const auto& [m, intervention, metric] = it->first;
    if (m != model || intervention != "variation" || !StartsWith(metric, prefix)) break;
    SitePoint p;
    p.site = metric.substr(prefix.size());
    const size_t dot = p.site.rfind('.');
    if (dot == std::string::npos || !absl::SimpleAtoi(p.site.substr(dot + 1), &p.layer)) continue;
    p.family = p.site.substr(0, dot);
    p.mean = it->second.value();
    const v1::Result* var = Find(model, "variation", "site_variance." + p.site);
    if (var != nullptr) p.variance = var->value();
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const SitePoint& a, const SitePoint& b) {
    return std::tie(a.family, a.layer) < std::tie(b.family, b.layer);
  });
  return out;
}

std::string ReportView::eval_sha256() const {
  for (const auto& [key, r] : rows_) {
    if (!r.dataset_sha256().empty()) return r.dataset_sha256();
  }
  return "";
}

// ---------------------------------------------------------------- text

namespace {

using Align = TextTable::Align;

std::string Fixed(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }
std::string Signed(double v, int digits) { return absl::StrFormat("%+.*f", digits, v); }
std::string General(double v) { return absl::StrFormat("%.4g", v); }

// "value" or "value [lo, hi]" or "undefined" or "" (no row).
std::string Cell(const v1::Result* r, std::string (*fmt)(double, int), int digits) {
  if (r == nullptr) return "";
  if (!r->defined()) return "undefined";
  std::string s = fmt(r->value(), digits);
  if (r->has_ci_low() && r->has_ci_high()) {
    s += absl::StrFormat(" [%s, %s]", fmt(r->ci_low(), digits), fmt(r->ci_high(), digits));
  }
  return s;
}

// "mean ± sd (n)", with the number of undefined models when there are any.
std::string AcrossCell(const AcrossModels& a, std::string (*fmt)(double, int), int digits) {
  if (a.n == 0) return a.undefined > 0 ? "undefined" : "";
  // A spread has no sign: signed values get an unsigned sd.
  const std::string sd = fmt == Signed ? Fixed(a.sd, digits) : fmt(a.sd, digits);
  std::string s = absl::StrFormat("%s ± %s", fmt(a.mean, digits), sd);
  if (a.undefined > 0) s += absl::StrFormat(" (%d undefined)", a.undefined);
  return s;
}

std::string GeneralDigits(double v, int) { return General(v); }

TextTable ModelsTable(const ReportView& r) {
  TextTable t({{"MODEL"}, {"LIVE NLL", Align::kRight}, {"REPLAY MAX |dLOGIT|", Align::kRight},
               {"EVAL WINDOWS", Align::kRight}});
  for (const std::string& m : r.models()) {
    const v1::Result* live = r.Find(m, "replay", "live_nll");
    const v1::Result* fid = r.Find(m, "replay", "max_abs_logit_diff");
    t.AddRow({m, Cell(live, Fixed, 4), fid ? General(fid->value()) : "",
              live ? absl::StrCat(live->n()) : ""});
  }
  return t;
}

TextTable VariationTable(const ReportView& r) {
  TextTable t({{"FAMILY"}, {"MODEL"}, {"ETA2", Align::kRight}, {"TOTAL VAR", Align::kRight},
               {"BETWEEN-INPUT VAR", Align::kRight}, {"WITHIN-INPUT VAR", Align::kRight}});
  for (const std::string& f : r.families()) {
    const std::string eta = "eta2." + f, total = "total_variance." + f,
                      between = "between_input_variance." + f, within = "within_input_variance." + f;
    for (const std::string& m : r.models()) {
      t.AddRow({f, m, Cell(r.Find(m, "variation", eta), Fixed, 4),
                Cell(r.Find(m, "variation", total), GeneralDigits, 0),
                Cell(r.Find(m, "variation", between), GeneralDigits, 0),
                Cell(r.Find(m, "variation", within), GeneralDigits, 0)});
    }
    if (r.models().size() > 1) {
      t.AddRow({f, "mean ± sd", AcrossCell(r.Across("variation", eta), Fixed, 4),
                AcrossCell(r.Across("variation", total), GeneralDigits, 0),
                AcrossCell(r.Across("variation", between), GeneralDigits, 0),
                AcrossCell(r.Across("variation", within), GeneralDigits, 0)});
    }
  }
  return t;
}

TextTable DependenceTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {{"INTERVENTION"}, {"NLL mean ± sd", Align::kRight}};
  for (const std::string& m : r.models()) cols.push_back({"PENALTY " + m, Align::kRight});
  if (r.models().size() > 1) cols.push_back({"PENALTY mean ± sd", Align::kRight});
  TextTable t(cols);
  for (const std::string& i : r.interventions()) {
    std::vector<std::string> row = {i, AcrossCell(r.Across(i, "nll"), Fixed, 4)};
    for (const std::string& m : r.models()) row.push_back(Cell(r.Find(m, i, "penalty"), Signed, 4));
    if (r.models().size() > 1) row.push_back(AcrossCell(r.Across(i, "penalty"), Signed, 4));
    if (i == "correct") std::fill(row.begin() + 2, row.end(), "-");
    t.AddRow(std::move(row));
  }
  return t;
}

TextTable RetentionTable(const ReportView& r) {
  std::vector<TextTable::Column> cols = {{"PROFILE"}};
  for (const std::string& m : r.models()) cols.push_back({"RETENTION % " + m, Align::kRight});
  if (r.models().size() > 1) cols.push_back({"mean ± sd", Align::kRight});
  TextTable t(cols);
  for (const std::string i : {"static_layer", "static_layer_position"}) {
    std::vector<std::string> row = {i};
    bool has = false;
    for (const std::string& m : r.models()) {
      const v1::Result* x = r.Find(m, i, "retention_pct");
      has = has || x != nullptr;
      row.push_back(Cell(x, Fixed, 1));
    }
    if (!has) continue;
    if (r.models().size() > 1) row.push_back(AcrossCell(r.Across(i, "retention_pct"), Fixed, 1));
    t.AddRow(std::move(row));
  }
  return t;
}

std::vector<std::string> ExecutionCells(const ReportView& r, const std::string& m) {
  auto get = [&](const std::string& metric) { return r.Find(m, "execution", metric); };
  const v1::Result* slowdown = get("slowdown");
  return {Cell(get("blocks_per_token"), GeneralDigits, 0),
          Cell(get("blocks_executed_fraction"), Fixed, 4),
          Cell(get("flops_per_token"), GeneralDigits, 0),
          Cell(get("latency_us_per_token"), Fixed, 2),
          slowdown ? absl::StrFormat("%+.1f%%", 100 * slowdown->value()) : "-"};
}

TextTable ExecutionTable(const ReportView& r) {
  TextTable t({{"MODEL"}, {"BLOCKS/TOKEN", Align::kRight}, {"EXECUTED", Align::kRight},
               {"FLOPS/TOKEN", Align::kRight}, {"LATENCY us/token", Align::kRight},
               {"SLOWDOWN vs DENSE", Align::kRight}});
  for (const std::string& m : r.models()) {
    std::vector<std::string> row = {m};
    for (std::string& c : ExecutionCells(r, m)) row.push_back(std::move(c));
    t.AddRow(std::move(row));
  }
  if (r.models().size() > 1) {
    auto across = [&](const std::string& metric, std::string (*fmt)(double, int), int digits) {
      return AcrossCell(r.Across("execution", metric), fmt, digits);
    };
    const AcrossModels s = r.Across("execution", "slowdown");
    t.AddRow({"mean ± sd", across("blocks_per_token", GeneralDigits, 0),
              across("blocks_executed_fraction", Fixed, 4), across("flops_per_token", GeneralDigits, 0),
              across("latency_us_per_token", Fixed, 2),
              s.n ? absl::StrFormat("%+.1f%% ± %.1f%%", 100 * s.mean, 100 * s.sd) : "-"});
  }
  if (!r.dense_twin().empty()) {
    std::vector<std::string> row = {r.dense_twin() + " (dense twin)"};
    for (std::string& c : ExecutionCells(r, r.dense_twin())) row.push_back(std::move(c));
    t.AddRow(std::move(row));
  }
  return t;
}

}  // namespace

std::vector<ReportSection> ReportSections(const ReportView& r) {
  std::vector<ReportSection> out;
  out.push_back({"MODELS", "NLL in nats/token over the evaluation windows", ModelsTable(r)});
  out.push_back({"COEFFICIENT VARIATION",
                 "eta2 = share of the variance between sites; the within-site variance splits "
                 "into between-input and within-input parts",
                 VariationTable(r)});
  out.push_back({"FUNCTIONAL DEPENDENCE",
                 "penalty = NLL(I) - NLL(correct) in nats/token, with its paired 95% bootstrap CI",
                 DependenceTable(r)});
  out.push_back({"GAP RETENTION",
                 "100 * (NLL(global_mean) - NLL(P)) / (NLL(global_mean) - NLL(correct)); "
                 "undefined when the gap is ~0, above 100 when P beats the model's own A",
                 RetentionTable(r)});
  out.push_back({"EXECUTION",
                 "counted blocks and matmul FLOPs per token; slowdown = t_model / t_dense - 1",
                 ExecutionTable(r)});
  return out;
}

std::string FormatReportText(const ReportView& r) {
  const v1::AuditSpec& spec = r.job().spec();
  std::string out = absl::StrFormat(
      "AUDIT REPORT  job %d (%s)\nmodels: %s%s\neval dataset sha256: %s, window length %d\n",
      r.job().id(), JobStateName(r.job().state()),
      SanitizeForTerminal(absl::StrJoin(r.models(), ", ")),
      spec.dense_twin().empty() ? "" : "; dense twin: " + SanitizeForTerminal(spec.dense_twin()),
      SanitizeForTerminal(r.eval_sha256()), spec.window_length());
  for (const ReportSection& section : ReportSections(r)) {
    out += absl::StrFormat("\n%s (%s)\n", section.title, section.note);
    out += section.table.empty() ? "(no rows)\n" : section.table.Render();
  }
  if (r.models().size() > 1) {
    out += absl::StrFormat("\nmean ± sd: across the %d audited models (sample sd).\n",
                           r.models().size());
  }
  return out;
}

// ---------------------------------------------------------------- JSON

namespace {

json::Value Str(const std::string& s) { return json::Value::String(s); }

json::Value RowJson(const v1::Result& r) {
  json::Value v = json::Value::MakeObject();
  v.Set("intervention", Str(r.intervention()));
  v.Set("metric", Str(r.metric()));
  v.Set("value", r.defined() ? json::Value::Number(r.value()) : json::Value::Null());
  if (r.has_ci_low()) v.Set("ci_low", json::Value::Number(r.ci_low()));
  if (r.has_ci_high()) v.Set("ci_high", json::Value::Number(r.ci_high()));
  v.Set("n", json::Value::Int(r.n()));
  return v;
}

json::Value RowsJson(const std::vector<v1::Result>& rows) {
  json::Value out = json::Value::MakeArray();
  for (const v1::Result& x : rows) out.mutable_array().push_back(RowJson(x));
  return out;
}

json::Value SitesJson(const std::vector<SitePoint>& sites) {
  json::Value out = json::Value::MakeArray();
  for (const SitePoint& s : sites) {
    json::Value v = json::Value::MakeObject();
    v.Set("site", Str(s.site));
    v.Set("family", Str(s.family));
    v.Set("layer", json::Value::Int(s.layer));
    v.Set("mean", json::Value::Number(s.mean));
    v.Set("variance", json::Value::Number(s.variance));
    out.mutable_array().push_back(std::move(v));
  }
  return out;
}

// The (intervention, metric) pairs a report shows, grouped by section; the
// per-site rows are not among them (they go to "sites").
std::vector<std::pair<std::string, std::string>> ReportKeys(const ReportView& r) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const std::string& i : r.interventions()) {
    for (const char* metric : {"nll", "penalty", "retention_pct"}) keys.emplace_back(i, metric);
  }
  for (const std::string& f : r.families()) {
    for (const char* m : {"eta2.", "total_variance.", "within_site_variance.",
                          "between_input_variance.", "within_input_variance."}) {
      keys.emplace_back("variation", m + f);
    }
  }
  for (const char* m : {"blocks_per_token", "blocks_executed_fraction", "flops_per_token",
                        "replay_flops_per_token", "latency_us_per_token",
                        "dense_latency_us_per_token", "slowdown"}) {
    keys.emplace_back("execution", m);
  }
  for (const char* m : {"live_nll", "max_abs_logit_diff"}) keys.emplace_back("replay", m);
  return keys;
}

std::vector<v1::Result> RowsOf(const ReportView& r, const std::string& model) {
  std::vector<v1::Result> out;
  for (const auto& [intervention, metric] : ReportKeys(r)) {
    if (const v1::Result* x = r.Find(model, intervention, metric)) out.push_back(*x);
  }
  return out;
}

json::Value AcrossJson(const ReportView& r) {
  json::Value out = json::Value::MakeArray();
  for (const auto& [intervention, metric] : ReportKeys(r)) {
    const AcrossModels a = r.Across(intervention, metric);
    if (a.n == 0 && a.undefined == 0) continue;
    json::Value v = json::Value::MakeObject();
    v.Set("intervention", Str(intervention));
    v.Set("metric", Str(metric));
    v.Set("n_models", json::Value::Int(a.n));
    v.Set("undefined", json::Value::Int(a.undefined));
    v.Set("mean", a.n ? json::Value::Number(a.mean) : json::Value::Null());
    v.Set("sd", a.n ? json::Value::Number(a.sd) : json::Value::Null());
    out.mutable_array().push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::string FormatReportJson(const ReportView& r) {
  json::Value v = json::Value::MakeObject();
  const v1::Job& job = r.job();
  v.Set("job_id", json::Value::Int(job.id()));
  v.Set("state", Str(JobStateName(job.state())));
  v.Set("dense_twin", r.dense_twin().empty() ? json::Value::Null() : Str(r.dense_twin()));
  v.Set("eval_dataset_sha256", Str(r.eval_sha256()));
  v.Set("window_length", json::Value::Int(job.spec().window_length()));
  json::Value models = json::Value::MakeArray();
  for (const std::string& m : r.models()) {
    json::Value o = json::Value::MakeObject();
    o.Set("model", Str(m));
    const v1::Result* any = r.Find(m, "replay", "live_nll");
    o.Set("weights_sha256", Str(any ? any->weights_sha256() : ""));
    o.Set("results", RowsJson(RowsOf(r, m)));
    o.Set("sites", SitesJson(r.Sites(m)));
    models.mutable_array().push_back(std::move(o));
  }
  v.Set("models", std::move(models));
  if (!r.dense_twin().empty()) {
    json::Value o = json::Value::MakeObject();
    o.Set("model", Str(r.dense_twin()));
    o.Set("results", RowsJson(RowsOf(r, r.dense_twin())));
    v.Set("dense_twin_execution", std::move(o));
  }
  v.Set("across_models", AcrossJson(r));
  return json::Write(v, /*pretty=*/true) + "\n";
}

}  // namespace fca::client
