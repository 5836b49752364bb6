#include "client/report_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "client/report_format.h"
#include "common/vocabulary.h"

namespace fca::client {
namespace {

namespace v1 = fca::v1;

// Colour-blind-safe palette (Paul Tol's "bright"), one colour per model.
const char* ModelColour(size_t i) {
  static const char* colours[] = {"#4477aa", "#ee6677", "#228833", "#ccbb44",
                                  "#66ccee", "#aa3377", "#bbbbbb"};
  return colours[i % (sizeof(colours) / sizeof(colours[0]))];
}

// Besides its colour, every model has a number (drawn by its bars and at the
// end of its lines), a fill pattern for bars and a marker shape and line
// style for lines, so that the charts never rest on colour alone.
constexpr int kStyles = 7;

// The fill patterns, defined once per page (kPatternDefs) and referenced by
// every chart and legend: solid, diagonal, dots, cross-hatch, horizontal,
// vertical, back-diagonal.
std::string PatternDefs() {
  std::string defs;
  for (int k = 0; k < kStyles; ++k) {
    const char* c = ModelColour(k);
    std::string body;
    const std::string stroke = absl::StrFormat(" stroke=\"%s\" stroke-width=\"1.6\"", c);
    switch (k) {
      case 1:
        body = "<path d=\"M-1,7 L7,-1\"" + stroke + "/>";
        break;
      case 2:
        body = absl::StrFormat("<circle cx=\"3\" cy=\"3\" r=\"1.6\" fill=\"%s\"/>", c);
        break;
      case 3:
        body = "<path d=\"M-1,7 L7,-1 M-1,-1 L7,7\"" + stroke + "/>";
        break;
      case 4:
        body = "<path d=\"M0,3 H6\"" + stroke + "/>";
        break;
      case 5:
        body = "<path d=\"M3,0 V6\"" + stroke + "/>";
        break;
      case 6:
        body = "<path d=\"M-1,-1 L7,7\"" + stroke + "/>";
        break;
      default:
        break;
    }
    defs += absl::StrFormat(
        "<pattern id=\"fca-fill-%d\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\">"
        "<rect width=\"6\" height=\"6\" fill=\"%s\"/>%s</pattern>\n",
        k, k == 0 ? c : "#fff", body);
  }
  return "<svg width=\"0\" height=\"0\" style=\"position:absolute\" aria-hidden=\"true\" "
         "focusable=\"false\"><defs>\n" +
         defs + "</defs></svg>\n";
}

std::string Fill(size_t k) { return absl::StrFormat("url(#fca-fill-%d)", k % kStyles); }

const char* Dash(size_t k) {
  static const char* dashes[] = {"", "6 3", "2 3", "8 3 2 3", "4 4", "1 3", "10 4"};
  return dashes[k % kStyles];
}

// Marker k at (x, y): circle, square, triangle, diamond, inverted triangle,
// plus, cross; `inner` goes inside the element (a <title>).
std::string Marker(size_t k, double x, double y, double r, const std::string& inner) {
  const char* c = ModelColour(k);
  const std::string paint =
      absl::StrFormat(" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"", c, c);
  auto pts = [&](std::initializer_list<std::pair<double, double>> list) {
    std::vector<std::string> out;
    for (const auto& [dx, dy] : list) out.push_back(absl::StrFormat("%.1f,%.1f", x + dx, y + dy));
    return absl::StrJoin(out, " ");
  };
  switch (k % kStyles) {
    case 0:
      return absl::StrFormat(
          "<circle class=\"marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\"%s>%s</circle>", x, y, r,
          paint, inner);
    case 1:
      return absl::StrFormat(
          "<rect class=\"marker\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"%s>%s</rect>",
          x - r, y - r, 2 * r, 2 * r, paint, inner);
    case 2:
      return absl::StrFormat("<polygon class=\"marker\" points=\"%s\"%s>%s</polygon>",
                             pts({{0, -r - 1}, {r + 1, r}, {-r - 1, r}}), paint, inner);
    case 3:
      return absl::StrFormat("<polygon class=\"marker\" points=\"%s\"%s>%s</polygon>",
                             pts({{0, -r - 1}, {r + 1, 0}, {0, r + 1}, {-r - 1, 0}}), paint, inner);
    case 4:
      return absl::StrFormat("<polygon class=\"marker\" points=\"%s\"%s>%s</polygon>",
                             pts({{0, r + 1}, {r + 1, -r}, {-r - 1, -r}}), paint, inner);
    case 5:
      return absl::StrFormat(
          "<path class=\"marker\" d=\"M%.1f,%.1f H%.1f M%.1f,%.1f V%.1f\" stroke=\"%s\" "
          "stroke-width=\"2.5\">%s</path>",
          x - r, y, x + r, x, y - r, y + r, c, inner);
    default:
      return absl::StrFormat(
          "<path class=\"marker\" d=\"M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f L%.1f,%.1f\" stroke=\"%s\" "
          "stroke-width=\"2.5\">%s</path>",
          x - r, y - r, x + r, y + r, x - r, y + r, x + r, y - r, c, inner);
  }
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

// Room for a chart's title: bold 12 px text from x = 64, 7.5 px a character
// (the system fonts' widest digits and capitals).
double TitleWidth(const std::string& title) { return 64 + 7.5 * title.size() + 8; }

// A chart area with a linear y axis; x positions are given in pixels.
class Chart {
 public:
  static constexpr double kLeft = 64, kRight = 16, kTop = 28, kBottom = 48;

  // `bottom_margin`: room under the plot for the x axis' labels and title.
  Chart(double width, double height, double y_lo, double y_hi, std::string title,
        double bottom_margin = kBottom)
      : width_(std::max(width, TitleWidth(title))),
        height_(height),
        bottom_margin_(bottom_margin),
        title_(std::move(title)) {
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
  double bottom() const { return height_ - bottom_margin_; }
  double Y(double v) const { return kTop + (hi_ - v) / (hi_ - lo_) * (bottom() - kTop); }

  void Add(const std::string& element) { body_ += element; }
  void Text(double x, double y, const std::string& text, const char* anchor = "middle",
            const char* extra = "") {
    Add(absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>%s</text>\n", x, y,
                        anchor, extra, HtmlEscape(text)));
  }
  // The x axis' title, centred under the plot on the margin's last line.
  void XTitle(const std::string& text) {
    Text((left() + right()) / 2, height_ - 8, text, "middle", " class=\"tick axis-x\"");
  }
  void Line(double x1, double y1, double x2, double y2, const char* stroke, double w = 1) {
    Add(
        absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"%.1f\"/>"
                        "\n",
                        x1, y1, x2, y2, stroke, w));
  }

  // The chart keeps its drawn size (its text stays readable) and scrolls
  // sideways in its box where the page is narrower.
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
        "<div class=\"chart-wrap\" role=\"region\" aria-label=\"%s\" tabindex=\"0\">\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%.0f\" height=\"%.0f\" "
        "viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n<title>%s</title>\n"
        "<text x=\"%.1f\" y=\"16\" class=\"title\">%s</text>\n%s"
        "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\" "
        "class=\"tick axis-y\">%s</text>\n%s</svg>\n</div>\n",
        HtmlEscape(title_), width_, height_, width_, height_, HtmlEscape(title_), left(),
        HtmlEscape(title_), axis, (kTop + bottom()) / 2, (kTop + bottom()) / 2, HtmlEscape(y_label),
        body_);
  }

 private:
  double width_, height_, bottom_margin_, lo_ = 0, hi_ = 1;
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

enum class LegendKind { kBars, kLines };

// Each model's number, swatch (its fill pattern, or its marker and line
// style) and name.
std::string Legend(const std::vector<std::string>& models, LegendKind kind, bool with_mean) {
  std::string out = "<ul class=\"legend\">";
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string swatch =
        kind == LegendKind::kBars
            ? absl::StrFormat(
                  "<svg width=\"16\" height=\"16\" aria-hidden=\"true\"><rect x=\"1\" "
                  "y=\"1\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"%s\"/></svg>",
                  Fill(i), ModelColour(i))
            : absl::StrFormat(
                  "<svg width=\"30\" height=\"16\" aria-hidden=\"true\"><line x1=\"1\" "
                  "y1=\"8\" x2=\"29\" y2=\"8\" stroke=\"%s\" stroke-width=\"1.5\" "
                  "stroke-dasharray=\"%s\"/>%s</svg>",
                  ModelColour(i), Dash(i), Marker(i, 15, 8, 3.5, ""));
    out += absl::StrFormat("<li>%s %d. %s</li>", swatch, i + 1, HtmlEscape(models[i]));
  }
  if (with_mean) out += "<li><b>&#9670;</b> mean &#177; sd across models</li>";
  return out + "</ul>\n";
}

// Penalty of every intervention except `correct`: one bar per model with its
// CI as a whisker, and the across-model mean with +-sd; the interventions in
// their groups (InGroupOrder), each group named under its first.
std::string PenaltyChart(const ReportView& r) {
  std::vector<std::string> groups;
  double lo = 0, hi = 0;
  for (const std::string& i : InGroupOrder(r.interventions())) {
    if (i == kCorrect) continue;
    groups.push_back(i);
    for (const std::string& m : r.models()) {
      const v1::Result* p = Plottable(r.Find(m, i, kPenalty));
      if (p == nullptr) continue;
      lo = std::min({lo, p->value(), p->has_ci_low() ? p->ci_low() : p->value()});
      hi = std::max({hi, p->value(), p->has_ci_high() ? p->ci_high() : p->value()});
    }
    const AcrossModels a = r.Across(i, kPenalty);
    if (r.models().size() > 1 && a.n() > 0 && std::isfinite(a.mean()) && std::isfinite(a.sd())) {
      lo = std::min(lo, a.mean() - a.sd());
      hi = std::max(hi, a.mean() + a.sd());
    }
  }
  if (groups.empty() || r.models().empty()) return "";
  const double group_w = 150;
  // Under the plot: the interventions' names, their groups' names, the axis' title.
  const double bottom_margin = 66;
  Chart c(Chart::kLeft + Chart::kRight + group_w * groups.size(), 272 + bottom_margin, lo, hi,
          "Penalty per intervention (nats/token, 95% CI)", bottom_margin);
  const double bar_w = (group_w - 30) / (r.models().size() + (r.models().size() > 1));
  for (size_t g = 0; g < groups.size(); ++g) {
    const double x0 = c.left() + g * group_w + 15;
    for (size_t k = 0; k < r.models().size(); ++k) {
      const v1::Result* p = Plottable(r.Find(r.models()[k], groups[g], kPenalty));
      if (p == nullptr) continue;
      const double x = x0 + k * bar_w, y = c.Y(p->value()), y0 = c.Y(0);
      c.Add(absl::StrFormat(
          "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
          "stroke=\"%s\"><title>%s %s: %+.4f</title></rect>\n",
          x + 1, std::min(y, y0), bar_w - 2, std::max(1.0, std::abs(y0 - y)), Fill(k),
          ModelColour(k), HtmlEscape(r.models()[k]), HtmlEscape(groups[g]), p->value()));
      const double xm = x + bar_w / 2;
      double label_y = std::min(y, y0) - 4;
      if (p->has_ci_low() && p->has_ci_high()) {
        c.Line(xm, c.Y(p->ci_low()), xm, c.Y(p->ci_high()), "#222", 1.5);
        c.Line(xm - 4, c.Y(p->ci_low()), xm + 4, c.Y(p->ci_low()), "#222", 1.5);
        c.Line(xm - 4, c.Y(p->ci_high()), xm + 4, c.Y(p->ci_high()), "#222", 1.5);
        label_y = std::min(label_y, c.Y(p->ci_high()) - 4);
      }
      // The model's number above its bar: the bars differ in more than colour.
      c.Text(xm, label_y, absl::StrCat(k + 1), "middle", " class=\"tick\"");
    }
    const AcrossModels a = r.Across(groups[g], kPenalty);
    if (r.models().size() > 1 && a.n() > 0 && std::isfinite(a.mean()) && std::isfinite(a.sd())) {
      const double xm = x0 + r.models().size() * bar_w + bar_w / 2;
      c.Line(xm, c.Y(a.mean() - a.sd()), xm, c.Y(a.mean() + a.sd()), "#000", 1.5);
      c.Text(xm, c.Y(a.mean()) + 5, "\u25C6");
    }
    c.Text(x0 + (group_w - 30) / 2, c.bottom() + 18, groups[g]);
    const InterventionGroupDef* kind = FindInterventionGroup(groups[g]);
    if (kind != nullptr && (g == 0 || FindInterventionGroup(groups[g - 1]) != kind)) {
      c.Text(x0, c.bottom() + 36, kind->name, "start", " class=\"tick\"");
    }
  }
  c.XTitle("intervention");
  return c.Render("penalty (nats/token)") +
         Legend(r.models(), LegendKind::kBars, r.models().size() > 1);
}

// The per-group penalties of one intervention as bars, one group after the
// other (layers in order): per model the model's value with its CI, or with
// several models the across-model mean with +-sd.
std::string GroupChart(const ReportView& r, const std::string& intervention,
                       const std::vector<GroupPenalty>& groups) {
  const bool across = r.models().size() > 1;
  struct Bar {
    std::string label;
    double value, low, high;
  };
  std::vector<Bar> bars;
  double lo = 0, hi = 0;
  for (const GroupPenalty& g : groups) {
    if (g.intervention != intervention) continue;
    Bar b{g.group, 0, 0, 0};
    if (across) {
      const AcrossModels a = r.Across(g.intervention, g.key);
      if (a.n() == 0 || !std::isfinite(a.mean()) || !std::isfinite(a.sd())) continue;
      b = {g.group, a.mean(), a.mean() - a.sd(), a.mean() + a.sd()};
    } else {
      const v1::Result* p = Plottable(r.Find(r.models()[0], g.intervention, g.key));
      if (p == nullptr) continue;
      b = {g.group, p->value(), p->has_ci_low() ? p->ci_low() : p->value(),
           p->has_ci_high() ? p->ci_high() : p->value()};
    }
    lo = std::min({lo, b.value, b.low});
    hi = std::max({hi, b.value, b.high});
    bars.push_back(b);
  }
  if (bars.empty()) return "";
  const double step = std::max(14.0, std::min(48.0, 640.0 / bars.size()));
  Chart c(std::max(340.0, Chart::kLeft + Chart::kRight + step * bars.size()), 220, lo, hi,
          absl::StrFormat("%s at one %s at a time: penalty (%s)", intervention, groups[0].scope,
                          across ? "mean \u00B1 sd across models" : "95% CI"));
  for (size_t k = 0; k < bars.size(); ++k) {
    const Bar& b = bars[k];
    const double x = c.left() + k * step, y = c.Y(b.value), y0 = c.Y(0), xm = x + step / 2;
    c.Add(absl::StrFormat(
        "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
        "<title>%s %s: %+.4f</title></rect>\n",
        x + 1, std::min(y, y0), step - 2, std::max(1.0, std::abs(y0 - y)), ModelColour(0),
        HtmlEscape(groups[0].scope), HtmlEscape(b.label), b.value));
    c.Line(xm, c.Y(b.low), xm, c.Y(b.high), "#222", 1.2);
    // Long site names would overlap: label every bar only when they fit.
    if (b.label.size() * 6.5 < step || k % std::max<size_t>(1, bars.size() / 12) == 0) {
      c.Text(xm, c.bottom() + 16, b.label, "middle", " class=\"tick\"");
    }
  }
  c.XTitle(groups[0].scope);
  return c.Render("penalty (nats/token)");
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
  c.XTitle("layer");
  for (size_t k = 0; k < r.models().size(); ++k) {
    auto it = by_model.find(r.models()[k]);
    if (it == by_model.end()) continue;
    std::vector<std::string> points, markers;
    for (const SitePoint& p : it->second) {
      const double v = variance ? p.variance() : p.mean();
      points.push_back(absl::StrFormat("%.1f,%.1f", x_of(p.layer()), c.Y(v)));
      markers.push_back(
          Marker(k, x_of(p.layer()), c.Y(v), 3.5,
                 absl::StrFormat("<title>%s %s: %.5g</title>", HtmlEscape(r.models()[k]),
                                 HtmlEscape(p.site()), v)) +
          "\n");
    }
    // Line style and marker shape per model, and its number at the line's end.
    c.Add(
        absl::StrFormat("<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                        "stroke-dasharray=\"%s\"/>\n",
                        absl::StrJoin(points, " "), ModelColour(k), Dash(k)));
    for (const std::string& m : markers) c.Add(m);
    const SitePoint& last = it->second.back();
    c.Text(x_of(last.layer()) + 8, c.Y(variance ? last.variance() : last.mean()) - 6,
           absl::StrCat(k + 1), "start", " class=\"tick\"");
  }
  return c.Render(variance ? "coefficient variance" : "coefficient mean");
}

constexpr char kStyle[] = R"(<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
p.note { color: #555; margin: 0.2em 0 0.8em; }
code { overflow-wrap: anywhere; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 0.2em 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: left;
         white-space: nowrap; }
thead th { background: #f4f4f4; } tbody th { font-weight: normal; }
td.num, th.num { text-align: right; }
/* Charts keep their drawn size and scroll sideways in .chart-wrap, as tables do. */
.chart-wrap { overflow-x: auto; max-width: 100%; }
svg.chart { display: block; margin: 0.5em 0; }
svg text { font-size: 12px; fill: #222; }
svg text.title { font-weight: 600; } svg text.tick { font-size: 11px; fill: #555; }
ul.legend { list-style: none; padding: 0; margin: 0.3em 0 1em; display: flex; flex-wrap: wrap;
            gap: 0.3em 1.2em; }
ul.legend li { white-space: nowrap; } ul.legend svg { vertical-align: -3px; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.charts > * { min-width: 0; max-width: 100%; }
footer { color: #777; margin-top: 3em; font-size: 12px; }
</style>
)";

// "FUNCTIONAL DEPENDENCE" -> "Functional Dependence".
std::string TitleCase(const std::string& title) {
  std::string t = title;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i - 1] != ' ') t[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i])));
  }
  return t;
}

std::string SectionHtml(const ReportSection& s) {
  return absl::StrFormat(
      "<p class=\"note\">%s</p>\n%s", HtmlEscape(s.note),
      s.table.empty() ? "<p>(no rows)</p>\n" : s.table.RenderHtml(TitleCase(s.title)));
}

std::string Heading(const std::string& title) {
  return "<h2>" + HtmlEscape(TitleCase(title)) + "</h2>\n";
}

}  // namespace

std::string FormatReportHtml(const ReportView& r) {
  const v1::AuditSpec& spec = r.job().spec();
  std::string out = absl::StrFormat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>fca audit report: job %d</title>\n%s</head>\n<body>\n%s"
      "<h1>Frozen-controller audit: job %d (%s)</h1>\n"
      "<p>Models: %s%s. Evaluation dataset sha256 <code>%s</code>, window length %d.</p>\n",
      r.job().id(), kStyle, PatternDefs(), r.job().id(), JobStateName(r.job().state()),
      HtmlEscape(absl::StrJoin(r.models(), ", ")),
      spec.dense_twin().empty() ? "" : "; dense twin: " + HtmlEscape(spec.dense_twin()),
      HtmlEscape(r.eval_sha256()), spec.window_length());
  for (const ReportSection& s : ReportSections(r)) {
    out += Heading(s.title);
    if (s.title == "FUNCTIONAL DEPENDENCE") out += PenaltyChart(r);
    if (s.title == "PER-GROUP DEPENDENCE") {
      const std::vector<GroupPenalty> groups = GroupPenalties(r);
      std::vector<std::string> names;
      for (const GroupPenalty& g : groups) {
        if (std::find(names.begin(), names.end(), g.intervention) == names.end()) {
          names.push_back(g.intervention);
        }
      }
      out += "<div class=\"charts\">\n";
      for (const std::string& i : names) out += GroupChart(r, i, groups);
      out += "</div>\n";
    }
    out += SectionHtml(s);
    if (s.title == "COEFFICIENT VARIATION") {
      out += Legend(r.models(), LegendKind::kLines, false) + "<div class=\"charts\">\n";
      for (const std::string& f : r.families()) {
        out += LayerChart(r, f, false) + LayerChart(r, f, true);
      }
      out += "</div>\n";
    }
  }
  if (r.models().size() > 1) {
    out += absl::StrFormat(
        "<p class=\"note\">mean &#177; sd (min..max): across the %d audited "
        "models (sample standard deviation), computed by the server.</p>\n",
        r.models().size());
  }
  if (HasProvenance(r)) {
    const ReportSection p = ProvenanceSection(r);
    out += Heading(p.title) + SectionHtml(p);
  }
  return out +
         "<footer>Written by <code>fca report</code> from the report the server computed "
         "from this job's stored rows.</footer>\n</body>\n</html>\n";
}

}  // namespace fca::client
