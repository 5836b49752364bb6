// The HTML form of a report: one self-contained page (inline CSS and SVG, no
// scripts, nothing fetched), so it can be mailed or opened offline.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "client/report.h"

namespace fca::client {
namespace {

namespace v1 = fca::v1;

// Colour-blind-safe palette (Paul Tol's "bright"), one colour per model.
const char* ModelColour(size_t i) {
  static const char* colours[] = {"#4477aa", "#ee6677", "#228833", "#ccbb44",
                                  "#66ccee", "#aa3377", "#bbbbbb"};
  return colours[i % (sizeof(colours) / sizeof(colours[0]))];
}

// Round tick positions covering [lo, hi]: steps of 1, 2 or 5 times a power
// of ten, about five of them. Integer multiples of the step, so a range only
// a few ulps wide cannot stall the loop; at most kMaxTicks.
std::vector<double> Ticks(double lo, double hi) {
  constexpr int64_t kMaxTicks = 12;
  std::vector<double> ticks;
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo)) return ticks;
  const double raw = (hi - lo) / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {2.0, 5.0, 10.0}) {
    if (raw > step) step = m * power;
  }
  const int64_t first = static_cast<int64_t>(std::ceil(lo / step));
  const int64_t last = static_cast<int64_t>(std::floor(hi / step));
  for (int64_t k = first; k <= last && k - first < kMaxTicks; ++k) {
    ticks.push_back(static_cast<double>(k) * step);
  }
  return ticks;
}

// A chart area with a linear y axis; x positions are given in pixels.
class Chart {
 public:
  static constexpr double kLeft = 64, kRight = 16, kTop = 28, kBottom = 48;

  Chart(double width, double height, double y_lo, double y_hi, std::string title)
      : width_(width), height_(height), title_(std::move(title)) {
    // A flat (or nearly flat) series still gets a visible range.
    const double scale = std::max(std::abs(y_lo), std::abs(y_hi));
    if (!(y_hi - y_lo > 1e-9 * scale)) {
      const double pad = scale == 0 ? 1.0 : scale * 0.1;
      y_lo -= pad;
      y_hi += pad;
    }
    const double pad = (y_hi - y_lo) * 0.05;
    lo_ = y_lo - pad;
    hi_ = y_hi + pad;
  }

  double left() const { return kLeft; }
  double right() const { return width_ - kRight; }
  double bottom() const { return height_ - kBottom; }
  double Y(double v) const { return kTop + (hi_ - v) / (hi_ - lo_) * (bottom() - kTop); }

  void Add(const std::string& element) { body_ += element; }
  void Text(double x, double y, const std::string& text, const char* anchor = "middle",
            const char* extra = "") {
    Add(absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>%s</text>\n", x, y,
                        anchor, extra, HtmlEscape(text)));
  }
  void Line(double x1, double y1, double x2, double y2, const char* stroke, double w = 1) {
    Add(absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"/>"
        "\n",
        x1, y1, x2, y2, stroke, w));
  }

  std::string Render(const std::string& y_label) const {
    std::string axis;
    for (double t : Ticks(lo_, hi_)) {
      const double y = Y(t);
      axis += absl::StrFormat(
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n"
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n",
          left(), y, right(), y, t == 0 ? "#444" : "#ddd", left() - 6, y + 4,
          absl::StrFormat("%.4g", t));
    }
    return absl::StrFormat(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n<title>%s</title>\n"
        "<text x=\"%.1f\" y=\"16\" class=\"title\">%s</text>\n%s"
        "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\" "
        "class=\"tick\">%s</text>\n%s</svg>\n",
        width_, height_, width_, height_, HtmlEscape(title_), left(), HtmlEscape(title_), axis,
        (kTop + bottom()) / 2, (kTop + bottom()) / 2, HtmlEscape(y_label), body_);
  }

 private:
  double width_, height_, lo_ = 0, hi_ = 1;
  std::string title_, body_;
};

// A defined, finite row with finite CI bounds (if any), else nullptr: what
// a chart can draw.
const v1::Result* Plottable(const v1::Result* r) {
  if (r == nullptr || !r->defined() || !std::isfinite(r->value())) return nullptr;
  if (r->has_ci_low() && !std::isfinite(r->ci_low())) return nullptr;
  if (r->has_ci_high() && !std::isfinite(r->ci_high())) return nullptr;
  return r;
}

std::string Legend(const std::vector<std::string>& models, bool with_mean) {
  std::string out = "<p class=\"legend\">";
  for (size_t i = 0; i < models.size(); ++i) {
    out += absl::StrFormat("<span><i style=\"background:%s\"></i>%s</span>", ModelColour(i),
                           HtmlEscape(models[i]));
  }
  if (with_mean) out += "<span><b>&#9670;</b> mean &#177; sd across models</span>";
  return out + "</p>\n";
}

// Penalty of every intervention except `correct`: one bar per model with its
// CI as a whisker, and the across-model mean with +-sd.
std::string PenaltyChart(const ReportView& r) {
  std::vector<std::string> groups;
  double lo = 0, hi = 0;
  for (const std::string& i : r.interventions()) {
    if (i == "correct") continue;
    groups.push_back(i);
    for (const std::string& m : r.models()) {
      const v1::Result* p = Plottable(r.Find(m, i, "penalty"));
      if (p == nullptr) continue;
      lo = std::min({lo, p->value(), p->has_ci_low() ? p->ci_low() : p->value()});
      hi = std::max({hi, p->value(), p->has_ci_high() ? p->ci_high() : p->value()});
    }
    const AcrossModels a = r.Across(i, "penalty");
    if (r.models().size() > 1 && a.n() > 0 && std::isfinite(a.mean()) && std::isfinite(a.sd())) {
      lo = std::min(lo, a.mean() - a.sd());
      hi = std::max(hi, a.mean() + a.sd());
    }
  }
  if (groups.empty() || r.models().empty()) return "";
  const double group_w = 150;
  Chart c(Chart::kLeft + Chart::kRight + group_w * groups.size(), 320, lo, hi,
          "Penalty per intervention (nats/token, 95% CI)");
  const double bar_w = (group_w - 30) / (r.models().size() + (r.models().size() > 1));
  for (size_t g = 0; g < groups.size(); ++g) {
    const double x0 = c.left() + g * group_w + 15;
    for (size_t k = 0; k < r.models().size(); ++k) {
      const v1::Result* p = Plottable(r.Find(r.models()[k], groups[g], "penalty"));
      if (p == nullptr) continue;
      const double x = x0 + k * bar_w, y = c.Y(p->value()), y0 = c.Y(0);
      c.Add(absl::StrFormat(
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
          "<title>%s %s: %+.4f</title></rect>\n",
          x + 1, std::min(y, y0), bar_w - 2, std::abs(y0 - y), ModelColour(k),
          HtmlEscape(r.models()[k]), HtmlEscape(groups[g]), p->value()));
      if (p->has_ci_low() && p->has_ci_high()) {
        const double xm = x + bar_w / 2;
        c.Line(xm, c.Y(p->ci_low()), xm, c.Y(p->ci_high()), "#222", 1.5);
        c.Line(xm - 4, c.Y(p->ci_low()), xm + 4, c.Y(p->ci_low()), "#222", 1.5);
        c.Line(xm - 4, c.Y(p->ci_high()), xm + 4, c.Y(p->ci_high()), "#222", 1.5);
      }
    }
    const AcrossModels a = r.Across(groups[g], "penalty");
    if (r.models().size() > 1 && a.n() > 0 && std::isfinite(a.mean()) && std::isfinite(a.sd())) {
      const double xm = x0 + r.models().size() * bar_w + bar_w / 2;
      c.Line(xm, c.Y(a.mean() - a.sd()), xm, c.Y(a.mean() + a.sd()), "#000", 1.5);
      c.Text(xm, c.Y(a.mean()) + 5, "\u25C6");
    }
    c.Text(x0 + (group_w - 30) / 2, c.bottom() + 18, groups[g]);
  }
  return c.Render("penalty (nats/token)") + Legend(r.models(), r.models().size() > 1);
}

// One value per site and layer of `family` for every model, as lines.
std::string LayerChart(const ReportView& r, const std::string& family, bool variance) {
  std::map<std::string, std::vector<SitePoint>> by_model;
  double lo = variance ? 0 : 1e300, hi = variance ? 0 : -1e300;
  int64_t max_layer = 0;
  for (const std::string& m : r.models()) {
    for (const SitePoint& p : r.Sites(m)) {
      if (p.family() != family || !std::isfinite(p.mean()) || !std::isfinite(p.variance())) {
        continue;
      }
      const double v = variance ? p.variance() : p.mean();
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      max_layer = std::max(max_layer, p.layer());
      by_model[m].push_back(p);
    }
  }
  if (by_model.empty()) return "";
  const double step = 56;
  // At least wide enough for the title.
  Chart c(std::max(340.0, Chart::kLeft + Chart::kRight + step * (max_layer + 1)), 260, lo, hi,
          absl::StrFormat("%s: coefficient %s per layer", family, variance ? "variance" : "mean"));
  const double plot_step = (c.right() - c.left()) / (max_layer + 1);
  auto x_of = [&](int64_t layer) { return c.left() + plot_step * (layer + 0.5); };
  for (int64_t l = 0; l <= max_layer; ++l) {
    c.Text(x_of(l), c.bottom() + 18, absl::StrCat(l), "middle", " class=\"tick\"");
  }
  c.Text((c.left() + c.right()) / 2, c.bottom() + 36, "layer", "middle", " class=\"tick\"");
  for (size_t k = 0; k < r.models().size(); ++k) {
    auto it = by_model.find(r.models()[k]);
    if (it == by_model.end()) continue;
    std::vector<std::string> points;
    for (const SitePoint& p : it->second) {
      const double v = variance ? p.variance() : p.mean();
      points.push_back(absl::StrFormat("%.1f,%.1f", x_of(p.layer()), c.Y(v)));
      c.Add(absl::StrFormat(
          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s %s: %.5g</title>"
          "</circle>\n",
          x_of(p.layer()), c.Y(v), ModelColour(k), HtmlEscape(r.models()[k]), HtmlEscape(p.site()),
          v));
    }
    c.Add(absl::StrFormat("<polyline points=\"%s\" fill=\"none\" stroke=\"%s\"/>\n",
                          absl::StrJoin(points, " "), ModelColour(k)));
  }
  return c.Render(variance ? "variance" : "mean");
}

constexpr char kStyle[] = R"(<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
p.note { color: #555; margin: 0.2em 0 0.8em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: left;
         white-space: nowrap; }
th { background: #f4f4f4; } td.num, th.num { text-align: right; }
svg { display: block; margin: 0.5em 0; } svg text { font-size: 12px; fill: #222; }
svg text.title { font-weight: 600; } svg text.tick { font-size: 11px; fill: #555; }
p.legend span { margin-right: 1.2em; white-space: nowrap; }
p.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
             vertical-align: -1px; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
footer { color: #777; margin-top: 3em; font-size: 12px; }
</style>
)";

std::string SectionHtml(const ReportSection& s) {
  return absl::StrFormat("<p class=\"note\">%s</p>\n%s", HtmlEscape(s.note),
                         s.table.empty() ? "<p>(no rows)</p>\n" : s.table.RenderHtml());
}

std::string Heading(const std::string& title) {
  std::string t = title;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i - 1] != ' ') t[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i])));
  }
  return "<h2>" + HtmlEscape(t) + "</h2>\n";
}

}  // namespace

std::string FormatReportHtml(const ReportView& r) {
  const v1::AuditSpec& spec = r.job().spec();
  std::string out = absl::StrFormat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>fca audit report: job %d</title>\n%s</head>\n<body>\n"
      "<h1>Frozen-controller audit: job %d (%s)</h1>\n"
      "<p>Models: %s%s. Evaluation dataset sha256 <code>%s</code>, window length %d.</p>\n",
      r.job().id(), kStyle, r.job().id(), JobStateName(r.job().state()),
      HtmlEscape(absl::StrJoin(r.models(), ", ")),
      spec.dense_twin().empty() ? "" : "; dense twin: " + HtmlEscape(spec.dense_twin()),
      HtmlEscape(r.eval_sha256()), spec.window_length());
  for (const ReportSection& s : ReportSections(r)) {
    out += Heading(s.title);
    if (s.title == "FUNCTIONAL DEPENDENCE") out += PenaltyChart(r);
    out += SectionHtml(s);
    if (s.title == "COEFFICIENT VARIATION") {
      out += Legend(r.models(), false) + "<div class=\"charts\">\n";
      for (const std::string& f : r.families()) {
        out += LayerChart(r, f, false) + LayerChart(r, f, true);
      }
      out += "</div>\n";
    }
  }
  if (r.models().size() > 1) {
    out += absl::StrFormat("<p class=\"note\">mean &#177; sd (min..max): across the %d audited "
                           "models (sample standard deviation), computed by the server.</p>\n",
                           r.models().size());
  }
  return out + "<footer>Written by <code>fca report</code> from the report the server computed "
               "from this job's stored rows.</footer>\n</body>\n</html>\n";
}

}  // namespace fca::client
