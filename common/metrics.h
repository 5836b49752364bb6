// A small metrics registry: counters, gauges and histograms with labels,
// exposed in the Prometheus text format (version 0.0.4). No torch, gRPC or
// SQLite; thread-safe.
//
//   metrics::Registry& r = metrics::Registry::Default();
//   metrics::Family<metrics::Counter>& calls =
//       r.AddCounter("fca_grpc_requests_total", "RPCs served.", {"method", "code"});
//   calls.WithLabels({"/fca.v1.AuditService/GetJob", "OK"}).Increment();
//   std::string text = r.Expose();   // what GET /metrics serves
//
// Registering a name again returns the family registered first (so any
// translation unit may ask for a family by name); registering it with
// another type, other labels or other buckets is a programming error and
// returns a family that is never exposed. Series are created on first use
// and live as long as the registry; label values must come from small,
// bounded sets (method names, states, codes), never from client input.
//
// Scrape-time values (the size of a table, busy workers) come from
// collectors: functions that the registry calls at the start of Expose(),
// which set gauges.
#ifndef FCA_COMMON_METRICS_H_
#define FCA_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fca::metrics {

// A value that only goes up (restarts at 0 with the process).
class Counter {
 public:
  // Negative or NaN increments are ignored: a counter never goes down.
  void Increment(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with upper bounds (cumulative when
// exposed), with their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  // NaN is ignored.
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;        // upper bounds, ascending, without +Inf
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, last is +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bucket bounds: `count` bounds start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Seconds from 1 ms to about 5 minutes, for RPC latencies.
std::vector<double> LatencyBuckets();
// Seconds from 0.1 s to about 1.5 days, for queue waits and run times.
std::vector<double> DurationBuckets();

enum class Type { kCounter, kGauge, kHistogram };

class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  Type type() const { return type_; }

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names, Type type)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        type_(type) {}

 private:
  friend class Registry;
  // Appends the family's HELP, TYPE and sample lines to `out`.
  virtual void Expose(std::string* out) const = 0;

  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const Type type_;
};

// The series of one metric, one per combination of label values.
template <typename T>
class Family final : public FamilyBase {
 public:
  // The series with these label values, in the order of the family's label
  // names (missing values are empty, extra ones dropped). The reference
  // stays valid as long as the registry.
  T& WithLabels(const std::vector<std::string>& values = {});
  // Drops the series with these label values (a per-job gauge once the job
  // has ended), so that it is no longer exposed. A reference WithLabels
  // returned for it dangles: remove only series that every writer looks up
  // anew, under a lock that also orders the removal.
  void Remove(const std::vector<std::string>& values);

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names, Type type,
         std::vector<double> buckets)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), type),
        buckets_(std::move(buckets)) {}
  void Expose(std::string* out) const override;

  const std::vector<double> buckets_;  // histograms only
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process's registry: what fca-server's /metrics exposes.
  static Registry& Default();

  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          const std::vector<std::string>& label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names,
                                  const std::vector<double>& buckets);

  // Runs `collect` at the start of every Expose() (on the scraping thread)
  // until the returned handle is destroyed; destroying it waits for a
  // collection in progress. `collect` sets gauges; it must not add or
  // remove collectors.
  class CollectorHandle {
   public:
    CollectorHandle() = default;
    CollectorHandle(CollectorHandle&& other) noexcept;
    CollectorHandle& operator=(CollectorHandle&& other) noexcept;
    ~CollectorHandle();

   private:
    friend class Registry;
    CollectorHandle(Registry* registry, int64_t id) : registry_(registry), id_(id) {}
    Registry* registry_ = nullptr;
    int64_t id_ = 0;
  };
  [[nodiscard]] CollectorHandle AddCollector(std::function<void()> collect);

  // Every family in the Prometheus text format, families sorted by name,
  // series by label values; each family with its HELP and TYPE lines.
  std::string Expose() const;

 private:
  // The family `name` of type M: the one registered already when it agrees
  // (type, labels, buckets), else a new one, exposed unless the name or a
  // label is invalid or taken (then an orphan: usable, never exposed).
  template <typename M>
  Family<M>& Add(const std::string& name, const std::string& help,
                 const std::vector<std::string>& label_names, Type type,
                 const std::vector<double>& buckets) ABSL_LOCKS_EXCLUDED(mu_);
  FamilyBase* Find(const std::string& name, Type type, const std::vector<std::string>& label_names,
                   const std::vector<double>& buckets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveCollector(int64_t id);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  // Families registered twice inconsistently: usable, never exposed.
  std::vector<std::unique_ptr<FamilyBase>> orphans_ ABSL_GUARDED_BY(mu_);
  // Held while collectors run, and to add or remove one.
  mutable absl::Mutex collect_mu_;
  std::map<int64_t, std::function<void()>> collectors_ ABSL_GUARDED_BY(collect_mu_);
  int64_t next_collector_ ABSL_GUARDED_BY(collect_mu_) = 1;
};

// The text format's pieces, for tests and for other exposers.
// A metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool ValidMetricName(std::string_view name);
// A label name: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
bool ValidLabelName(std::string_view name);
// HELP text: backslash and newline escaped.
std::string EscapeHelp(std::string_view text);
// Label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view text);
// A sample value: integers without a fraction, "+Inf", "-Inf", "NaN",
// otherwise the shortest text that reads back as the same double.
std::string FormatValue(double v);

}  // namespace fca::metrics

#endif  // FCA_COMMON_METRICS_H_
