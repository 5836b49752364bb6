#include "tests/http/prom_text.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fca::prom {
namespace {

bool ValidMetricName(const std::string& s) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s, re);
}

bool ValidLabelName(const std::string& s) {
  static const std::regex re("[a-zA-Z_][a-zA-Z0-9_]*");
  return std::regex_match(s, re) && s.rfind("__", 0) != 0;
}

// Go's ParseFloat as Prometheus reads values, without hex and underscores.
bool ParseValue(const std::string& s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *out = NAN;
    return true;
  }
  static const std::regex re(R"([-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(s, re)) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return true;
}

absl::Status Bad(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

// Unescapes `text` where only the escapes in `allowed` (besides \\ and
// \n) may follow a backslash.
bool Unescape(const std::string& text, bool quote_allowed, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      *out += text[i];
      continue;
    }
    if (++i == text.size()) return false;
    if (text[i] == '\\') {
      *out += '\\';
    } else if (text[i] == 'n') {
      *out += '\n';
    } else if (text[i] == '"' && quote_allowed) {
      *out += '"';
    } else {
      return false;
    }
  }
  return true;
}

// `{a="x",b="y"}` starting at text[*pos] == '{'; *pos ends after '}'.
bool ParseLabels(const std::string& text, size_t* pos, std::map<std::string, std::string>* labels,
                 std::string* why) {
  size_t i = *pos + 1;
  while (true) {
    if (i < text.size() && text[i] == '}') {
      *pos = i + 1;
      return true;
    }
    const size_t eq = text.find('=', i);
    if (eq == std::string::npos) {
      *why = "a label without '='";
      return false;
    }
    const std::string name = text.substr(i, eq - i);
    if (!ValidLabelName(name)) {
      *why = "bad label name '" + name + "'";
      return false;
    }
    if (eq + 1 >= text.size() || text[eq + 1] != '"') {
      *why = "a label value must be quoted";
      return false;
    }
    size_t j = eq + 2;
    std::string raw;
    while (j < text.size() && text[j] != '"') {
      if (text[j] == '\n') {
        *why = "a raw newline in a label value";
        return false;
      }
      if (text[j] == '\\' && j + 1 < text.size()) raw += text[j++];
      raw += text[j++];
    }
    if (j >= text.size()) {
      *why = "an unterminated label value";
      return false;
    }
    std::string value;
    if (!Unescape(raw, /*quote_allowed=*/true, &value)) {
      *why = "a bad escape in a label value";
      return false;
    }
    if (!labels->emplace(name, value).second) {
      *why = "label '" + name + "' twice";
      return false;
    }
    i = j + 1;
    if (i < text.size() && text[i] == ',') {
      ++i;
    } else if (i >= text.size() || text[i] != '}') {
      *why = "expected ',' or '}' after a label";
      return false;
    }
  }
}

// The family a sample name belongs to, given the declared types.
std::string FamilyOf(const std::string& sample, const std::map<std::string, Family>& families) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = families.find(base);
      if (it != families.end() &&
          (it->second.type == "histogram" || (it->second.type == "summary" && s != "_bucket"))) {
        return base;
      }
    }
  }
  return sample;
}

std::string SeriesKey(const Sample& s, const std::string& drop = "") {
  std::string key = s.name + "{";
  for (const auto& [k, v] : s.labels) {
    if (k != drop) key += k + "=" + v + ",";
  }
  return key + "}";
}

absl::Status CheckHistogram(const Family& f) {
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // le, count in order
    bool has_sum = false, has_count = false;
    double count = 0;
  };
  std::map<std::string, Series> series;  // by labels without le
  for (const Sample& s : f.samples) {
    Sample base = s;
    base.name = f.name;
    const std::string key = SeriesKey(base, "le");
    Series& x = series[key];
    if (s.name == f.name + "_bucket") {
      auto le = s.labels.find("le");
      double bound = 0;
      if (le == s.labels.end() || !ParseValue(le->second, &bound)) {
        return absl::InvalidArgumentError(f.name + ": a bucket without a valid le");
      }
      x.buckets.emplace_back(bound, s.value);
    } else if (s.name == f.name + "_sum") {
      x.has_sum = true;
    } else if (s.name == f.name + "_count") {
      x.has_count = true;
      x.count = s.value;
    } else {
      return absl::InvalidArgumentError(f.name + ": sample " + s.name + " in a histogram");
    }
  }
  for (const auto& [key, x] : series) {
    if (x.buckets.empty() || !std::isinf(x.buckets.back().first) || !x.has_sum || !x.has_count) {
      return absl::InvalidArgumentError(key +
                                        ": a histogram needs buckets up to le=\"+Inf\", _sum "
                                        "and _count");
    }
    for (size_t i = 1; i < x.buckets.size(); ++i) {
      if (!(x.buckets[i].first > x.buckets[i - 1].first) ||
          x.buckets[i].second < x.buckets[i - 1].second) {
        return absl::InvalidArgumentError(key + ": buckets not ascending or not cumulative");
      }
    }
    if (x.buckets.back().second != x.count) {
      return absl::InvalidArgumentError(key + ": the +Inf bucket differs from _count");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, Family>> Parse(const std::string& text) {
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("the text must end with a newline");
  }
  std::map<std::string, Family> families;
  std::set<std::string> ended;   // families whose samples are over
  std::set<std::string> series;  // every series seen
  std::string current;           // the family of the last sample
  const std::vector<std::string> lines = absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    const int line = static_cast<int>(n) + 1;
    const std::string& l = lines[n];
    if (l.empty()) return Bad(line, "an empty line");
    if (l.find('\r') != std::string::npos) return Bad(line, "a carriage return");
    if (l[0] == '#') {
      const std::vector<std::string> parts = absl::StrSplit(l, absl::MaxSplits(' ', 3));
      if (parts.size() >= 3 && (parts[1] == "HELP" || parts[1] == "TYPE")) {
        const std::string& name = parts[2];
        if (!ValidMetricName(name)) return Bad(line, "bad metric name '" + name + "'");
        if (ended.count(name) || current == name) {
          return Bad(line, name + ": HELP or TYPE after its samples");
        }
        // Another family's header ends the group of samples before it.
        if (!current.empty()) {
          ended.insert(current);
          current.clear();
        }
        Family& f = families[name];
        f.name = name;
        const std::string rest = parts.size() > 3 ? parts[3] : "";
        if (parts[1] == "HELP") {
          if (!f.help.empty()) return Bad(line, name + ": HELP twice");
          if (!Unescape(rest, /*quote_allowed=*/false, &f.help)) {
            return Bad(line, name + ": a bad escape in HELP");
          }
          if (f.help.empty()) f.help = " ";  // present, empty
        } else {
          if (!f.type.empty()) return Bad(line, name + ": TYPE twice");
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                       "untyped"};
          if (!kTypes.count(rest)) return Bad(line, name + ": unknown type '" + rest + "'");
          f.type = rest;
        }
      }
      continue;  // other comments are allowed
    }
    // A sample: name[{labels}] value [timestamp]
    Sample s;
    size_t i = 0;
    while (i < l.size() && l[i] != '{' && l[i] != ' ') ++i;
    s.name = l.substr(0, i);
    if (!ValidMetricName(s.name)) return Bad(line, "bad metric name '" + s.name + "'");
    if (i < l.size() && l[i] == '{') {
      std::string why;
      if (!ParseLabels(l, &i, &s.labels, &why)) return Bad(line, why);
    }
    if (i >= l.size() || l[i] != ' ') return Bad(line, "expected a space before the value");
    const std::vector<std::string> fields = absl::StrSplit(l.substr(i + 1), ' ');
    if (fields.empty() || fields.size() > 2)
      return Bad(line, "expected a value and a timestamp at most");
    if (!ParseValue(fields[0], &s.value)) return Bad(line, "bad value '" + fields[0] + "'");
    if (fields.size() == 2) {
      static const std::regex ts("-?[0-9]+");
      if (!std::regex_match(fields[1], ts)) return Bad(line, "bad timestamp");
    }
    const std::string family = FamilyOf(s.name, families);
    auto it = families.find(family);
    if (it == families.end() || it->second.type.empty()) {
      return Bad(line, s.name + ": a sample without a TYPE line before it");
    }
    if (family != current) {
      if (ended.count(family)) return Bad(line, family + ": its samples are not in one group");
      if (!current.empty()) ended.insert(current);
      current = family;
    }
    if (!series.insert(SeriesKey(s)).second) return Bad(line, "series twice: " + SeriesKey(s));
    if (it->second.type == "counter" && !(s.value >= 0)) {
      return Bad(line, s.name + ": a counter must be >= 0");
    }
    if (it->second.type == "counter" && s.name != family) {
      return Bad(line, s.name + ": a counter's sample has the family's name");
    }
    if (s.labels.count("le") && it->second.type != "histogram") {
      return Bad(line, "label le outside a histogram");
    }
    it->second.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : families) {
    if (f.type.empty()) return absl::InvalidArgumentError(name + ": HELP without TYPE");
    if (f.type == "histogram") {
      absl::Status st = CheckHistogram(f);
      if (!st.ok()) return st;
    }
  }
  return families;
}

double Value(const std::map<std::string, Family>& families, const std::string& name,
             const std::map<std::string, std::string>& labels, double missing) {
  for (const auto& [family_name, f] : families) {
    for (const Sample& s : f.samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
  }
  return missing;
}

}  // namespace fca::prom
