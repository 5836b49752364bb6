// common/metrics.h and the strict text-format parser the HTTP tests use:
// the parser refuses what the format forbids, and the registry's exposition
// passes it, escaping included.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "tests/http/prom_text.h"

namespace fca {
namespace {

TEST(PromTextTest, AcceptsTheFormat) {
  const std::string text =
      "# HELP a_total Things.\n"
      "# TYPE a_total counter\n"
      "a_total{x=\"1\",y=\"q\\\"\\\\\\n\"} 3\n"
      "a_total 1.5e3 1700000000000\n"
      "# some comment\n"
      "# TYPE h histogram\n"
      "h_bucket{le=\"0.5\"} 1\n"
      "h_bucket{le=\"+Inf\"} 2\n"
      "h_sum 1.25\n"
      "h_count 2\n"
      "# TYPE g gauge\n"
      "g -Inf\n";
  auto parsed = prom::Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(prom::Value(*parsed, "a_total", {{"x", "1"}, {"y", "q\"\\\n"}}), 3);
  EXPECT_EQ(prom::Value(*parsed, "a_total"), 1500);
  EXPECT_EQ(prom::Value(*parsed, "h_count"), 2);
  EXPECT_TRUE(std::isinf(prom::Value(*parsed, "g")));
}

TEST(PromTextTest, RefusesWhatTheFormatForbids) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no final newline", "# TYPE a gauge\na 1"},
      {"no TYPE", "a 1\n"},
      {"bad name", "# TYPE 1a gauge\n1a 1\n"},
      {"bad label name", "# TYPE a gauge\na{1x=\"1\"} 1\n"},
      {"unquoted value", "# TYPE a gauge\na{x=1} 1\n"},
      {"bad escape", "# TYPE a gauge\na{x=\"\\t\"} 1\n"},
      {"bad value", "# TYPE a gauge\na one\n"},
      {"lower-case inf", "# TYPE a gauge\na inf\n"},
      {"duplicate series", "# TYPE a gauge\na 1\na 2\n"},
      {"split family", "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"2\"} 1\n"},
      {"TYPE after samples", "# TYPE a gauge\na 1\n# TYPE a gauge\n"},
      {"TYPE twice", "# TYPE a gauge\n# TYPE a counter\na 1\n"},
      {"unknown type", "# TYPE a meter\na 1\n"},
      {"negative counter", "# TYPE a_total counter\na_total -1\n"},
      {"empty line", "# TYPE a gauge\n\na 1\n"},
      {"histogram without +Inf", "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"},
      {"histogram not cumulative",
       "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"},
      {"+Inf differs from count",
       "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n"},
      {"label twice", "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n"},
  };
  for (const auto& [why, text] : bad) {
    EXPECT_FALSE(prom::Parse(text).ok()) << why;
  }
}

TEST(MetricsTest, ExposesCountersGaugesAndHistogramsInTheTextFormat) {
  metrics::Registry r;
  auto& c = r.AddCounter("t_requests_total", "Requests\\served.\nSecond line.", {"method", "code"});
  c.WithLabels({"Get\"Job\"", "OK"}).Increment();
  c.WithLabels({"Get\"Job\"", "OK"}).Increment(2);
  c.WithLabels({"a\\b\nc", "NOT_FOUND"}).Increment(-5);  // ignored: counters only go up
  auto& g = r.AddGauge("t_open", "Open things.");
  g.WithLabels().Set(-2.5);
  auto& h = r.AddHistogram("t_seconds", "Latency.", {"method"}, {0.1, 1, 10});
  h.WithLabels({"x"}).Observe(0.05);
  h.WithLabels({"x"}).Observe(0.1);  // le is inclusive
  h.WithLabels({"x"}).Observe(5);
  h.WithLabels({"x"}).Observe(100);
  h.WithLabels({"x"}).Observe(NAN);  // ignored
  const std::string text = r.Expose();
  auto parsed = prom::Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(parsed->at("t_requests_total").help, "Requests\\served.\nSecond line.");
  EXPECT_EQ(prom::Value(*parsed, "t_requests_total", {{"method", "Get\"Job\""}, {"code", "OK"}}),
            3);
  EXPECT_EQ(
      prom::Value(*parsed, "t_requests_total", {{"method", "a\\b\nc"}, {"code", "NOT_FOUND"}}), 0);
  EXPECT_EQ(prom::Value(*parsed, "t_open"), -2.5);
  EXPECT_EQ(prom::Value(*parsed, "t_seconds_bucket", {{"method", "x"}, {"le", "0.1"}}), 2);
  EXPECT_EQ(prom::Value(*parsed, "t_seconds_bucket", {{"method", "x"}, {"le", "10"}}), 3);
  EXPECT_EQ(prom::Value(*parsed, "t_seconds_bucket", {{"method", "x"}, {"le", "+Inf"}}), 4);
  EXPECT_EQ(prom::Value(*parsed, "t_seconds_count", {{"method", "x"}}), 4);
  EXPECT_DOUBLE_EQ(prom::Value(*parsed, "t_seconds_sum", {{"method", "x"}}), 105.15);
}

TEST(MetricsTest, SameNameSameFamilyOtherwiseNeverExposedTwice) {
  metrics::Registry r;
  auto& a = r.AddCounter("t_total", "A.", {"x"});
  auto& b = r.AddCounter("t_total", "A again.", {"x"});
  EXPECT_EQ(&a, &b);
  // Another type or other labels: a usable family that is not exposed.
  r.AddGauge("t_total", "Clash.").WithLabels().Set(7);
  r.AddCounter("t_total", "Clash.", {"y"}).WithLabels({"1"}).Increment();
  r.AddCounter("bad name", "Invalid.").WithLabels().Increment();
  a.WithLabels({"1"}).Increment();
  auto parsed = prom::Parse(r.Expose());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->size(), 1u);
  EXPECT_EQ(prom::Value(*parsed, "t_total", {{"x", "1"}}), 1);
}

TEST(MetricsTest, CollectorsRunAtExpositionUntilTheirHandleGoes) {
  metrics::Registry r;
  auto& g = r.AddGauge("t_rows", "Rows.");
  int calls = 0;
  {
    metrics::Registry::CollectorHandle handle = r.AddCollector([&] {
      ++calls;
      g.WithLabels().Set(42);
    });
    auto parsed = prom::Parse(r.Expose());
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(prom::Value(*parsed, "t_rows"), 42);
  }
  (void)r.Expose();
  EXPECT_EQ(calls, 1);
}

TEST(MetricsTest, RemovedSeriesAreNoLongerExposed) {
  metrics::Registry r;
  auto& progress = r.AddGauge("t_progress", "Progress.", {"job"});
  progress.WithLabels({"1"}).Set(0.25);
  progress.WithLabels({"2"}).Set(0.5);
  progress.Remove({"1"});
  progress.Remove({"3"});  // none: nothing happens
  auto parsed = prom::Parse(r.Expose());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(prom::Value(*parsed, "t_progress", {{"job", "1"}}), -1);
  EXPECT_EQ(prom::Value(*parsed, "t_progress", {{"job", "2"}}), 0.5);
  // The family stays, and a removed series comes back from zero.
  EXPECT_EQ(progress.WithLabels({"1"}).value(), 0);
}

TEST(MetricsTest, ValuesAndEscapes) {
  EXPECT_EQ(metrics::FormatValue(3), "3");
  EXPECT_EQ(metrics::FormatValue(-0.0), "0");
  EXPECT_EQ(metrics::FormatValue(0.1), "0.1");
  EXPECT_EQ(metrics::FormatValue(1e300), "1e+300");
  EXPECT_EQ(metrics::FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(metrics::FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(metrics::FormatValue(NAN), "NaN");
  EXPECT_EQ(metrics::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(metrics::EscapeHelp("a\"b\\c\nd"), "a\"b\\\\c\\nd");
  EXPECT_TRUE(metrics::ValidMetricName("fca:x_total"));
  EXPECT_FALSE(metrics::ValidMetricName("9x"));
  EXPECT_FALSE(metrics::ValidLabelName("__name"));
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  metrics::Registry r;
  auto& c = r.AddCounter("t_total", "T.", {"k"});
  auto& h = r.AddHistogram("t_seconds", "T.", {}, metrics::LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.WithLabels({std::to_string(i % 3)}).Increment();
        h.WithLabels().Observe(0.001 * t);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto parsed = prom::Parse(r.Expose());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  double total = 0;
  for (const auto& s : parsed->at("t_total").samples) total += s.value;
  EXPECT_EQ(total, 40000);
  EXPECT_EQ(prom::Value(*parsed, "t_seconds_count"), 40000);
}

}  // namespace
}  // namespace fca
