#include "common/metrics.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fca::metrics {
namespace {

void AtomicAdd(std::atomic<double>* value, double by) {
  double old = value->load(std::memory_order_relaxed);
  while (!value->compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` (with `extra` appended as one more label), or "" when
// there are no labels at all.
std::string LabelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

void Header(const FamilyBase& family, std::string* out) {
  *out += "# HELP " + family.name() + " " + EscapeHelp(family.help()) + "\n";
  *out += "# TYPE " + family.name() + " " + TypeName(family.type()) + "\n";
}

template <typename T>
std::unique_ptr<T> MakeSeries(const std::vector<double>& buckets) {
  return std::make_unique<T>();
}
template <>
std::unique_ptr<Histogram> MakeSeries<Histogram>(const std::vector<double>& buckets) {
  return std::make_unique<Histogram>(buckets);
}

void ExposeSeries(const std::string& name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, const Counter& c, std::string* out) {
  *out += name + LabelText(label_names, values) + " " + FormatValue(c.value()) + "\n";
}
void ExposeSeries(const std::string& name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, const Gauge& g, std::string* out) {
  *out += name + LabelText(label_names, values) + " " + FormatValue(g.value()) + "\n";
}
void ExposeSeries(const std::string& name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, const Histogram& h, std::string* out) {
  const Histogram::Snapshot s = h.Take();
  for (size_t i = 0; i <= s.bounds.size(); ++i) {
    const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
    *out += name + "_bucket" + LabelText(label_names, values, "le", le) + " " +
            FormatValue(static_cast<double>(s.cumulative[i])) + "\n";
  }
  *out += name + "_sum" + LabelText(label_names, values) + " " + FormatValue(s.sum) + "\n";
  *out += name + "_count" + LabelText(label_names, values) + " " +
          FormatValue(static_cast<double>(s.count)) + "\n";
}

bool SameBuckets(const std::vector<double>& a, const std::vector<double>& b) { return a == b; }

// Ascending, finite, no duplicates.
std::vector<double> CleanBounds(std::vector<double> bounds) {
  bounds.erase(
      std::remove_if(bounds.begin(), bounds.end(), [](double b) { return !std::isfinite(b); }),
      bounds.end());
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

}  // namespace

// ------------------------------------------------------------- series

void Counter::Increment(double by) {
  if (!(by > 0)) return;  // also drops NaN
  AtomicAdd(&value_, by);
}

void Gauge::Add(double by) { AtomicAdd(&value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(CleanBounds(std::move(bounds))), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) out.push_back(b);
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
}

std::vector<double> DurationBuckets() {
  return {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, 172800};
}

// ------------------------------------------------------------- family

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  std::vector<std::string> key = values;
  key.resize(label_names().size());
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& series = series_[key];
  if (series == nullptr) series = MakeSeries<T>(buckets_);
  return *series;
}

template <typename T>
void Family<T>::Remove(const std::vector<std::string>& values) {
  std::vector<std::string> key = values;
  key.resize(label_names().size());
  absl::MutexLock lock(&mu_);
  series_.erase(key);
}

template <typename T>
void Family<T>::Expose(std::string* out) const {
  Header(*this, out);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, series] : series_) {
    ExposeSeries(name(), label_names(), values, *series, out);
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ----------------------------------------------------------- registry

Registry& Registry::Default() {
  static Registry* registry = new Registry();  // never destroyed: used until exit
  return *registry;
}

FamilyBase* Registry::Find(const std::string& name, Type type,
                           const std::vector<std::string>& label_names,
                           const std::vector<double>& buckets) {
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  FamilyBase* f = it->second.get();
  bool same = f->type() == type && f->label_names() == label_names;
  if (same && type == Type::kHistogram) {
    same = SameBuckets(static_cast<Family<Histogram>*>(f)->buckets_, CleanBounds(buckets));
  }
  if (same) return f;
  LOG(ERROR) << "metrics: " << name << " registered again with another type, labels or buckets";
  return nullptr;
}

template <typename M>
Family<M>& Registry::Add(const std::string& name, const std::string& help,
                         const std::vector<std::string>& label_names, Type type,
                         const std::vector<double>& buckets) {
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, type, label_names, buckets)) return *static_cast<Family<M>*>(f);
  std::unique_ptr<Family<M>> f(new Family<M>(name, help, label_names, type, CleanBounds(buckets)));
  Family<M>& ref = *f;
  // "le" is a histogram's own label.
  const bool valid = ValidMetricName(name) &&
                     std::all_of(label_names.begin(), label_names.end(), [&](const std::string& l) {
                       return ValidLabelName(l) && (type != Type::kHistogram || l != "le");
                     });
  if (families_.count(name) || !valid) {
    orphans_.push_back(std::move(f));
  } else {
    families_[name] = std::move(f);
  }
  return ref;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& label_names) {
  return Add<Counter>(name, help, label_names, Type::kCounter, {});
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names) {
  return Add<Gauge>(name, help, label_names, Type::kGauge, {});
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          const std::vector<std::string>& label_names,
                                          const std::vector<double>& buckets) {
  return Add<Histogram>(name, help, label_names, Type::kHistogram, buckets);
}

Registry::CollectorHandle::CollectorHandle(CollectorHandle&& other) noexcept
    : registry_(other.registry_), id_(other.id_) {
  other.registry_ = nullptr;
}

Registry::CollectorHandle& Registry::CollectorHandle::operator=(CollectorHandle&& other) noexcept {
  if (this != &other) {
    if (registry_ != nullptr) registry_->RemoveCollector(id_);
    registry_ = other.registry_;
    id_ = other.id_;
    other.registry_ = nullptr;
  }
  return *this;
}

Registry::CollectorHandle::~CollectorHandle() {
  if (registry_ != nullptr) registry_->RemoveCollector(id_);
}

Registry::CollectorHandle Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collect_mu_);
  const int64_t id = next_collector_++;
  collectors_[id] = std::move(collect);
  return CollectorHandle(this, id);
}

void Registry::RemoveCollector(int64_t id) {
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::string Registry::Expose() const {
  {
    absl::MutexLock lock(&collect_mu_);
    for (const auto& [id, collect] : collectors_) collect();
  }
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->Expose(&out);
  return out;
}

// --------------------------------------------------------------- text

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

namespace {

// The text format's escapes: backslash and newline everywhere, the double
// quote only inside a label value (which it delimits).
std::string Escape(std::string_view text, bool quotes) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeHelp(std::string_view text) { return Escape(text, /*quotes=*/false); }

std::string EscapeLabelValue(std::string_view text) { return Escape(text, /*quotes=*/true); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";
  char buffer[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", v);
    return buffer;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  return buffer;
}

}  // namespace fca::metrics
