// The execution audit's timing (fca.md "Execution"): interleaved pairs, the
// adaptive stop and the verdict, with hand-made timings and with a real
// model timed against itself.
#include "server/engine/audit/execution.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

TimingPlan Plan(int min_pairs, int max_pairs) {
  TimingPlan p;
  p.warmup_pairs = 1;
  p.min_pairs = min_pairs;
  p.max_pairs = max_pairs;
  p.budget_seconds = 1e9;
  return p;
}

// A forward that "takes" the given microseconds per token and logs its name.
TimedForward Fake(std::string name, std::vector<double> times, std::string* log) {
  auto next = std::make_shared<size_t>(0);
  return [=]() -> absl::StatusOr<double> {
    *log += name;
    return times[(*next)++ % times.size()];
  };
}

TEST(TimePairsTest, AlternatesTheOrderAndStopsWhenTheEffectIsResolved) {
  std::string log;
  auto t = TimePairs(Fake("m", {125}, &log), Fake("d", {100}, &log), Plan(3, 50), nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  // Warm-up, then model first in even pairs and twin first in odd ones;
  // the rule is checked at the first even count from the minimum (4).
  EXPECT_EQ(log,
            "md"
            "md"
            "dm"
            "md"
            "dm");
  EXPECT_EQ(t->model.size(), 4u);
  EXPECT_EQ(t->stop, TimingStop::kResolved);
}

TEST(TimePairsTest, IdenticalTimesArePreciseAndShowNoDifference) {
  std::string log;
  auto t = TimePairs(Fake("m", {100}, &log), Fake("d", {100}, &log), Plan(4, 50), nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->stop, TimingStop::kPrecise);
  EXPECT_EQ(t->model.size(), 4u);
  EXPECT_EQ(PairedSlowdown(t->model, t->twin, 1000, 0.95, 0).verdict, 0);
}

TEST(TimePairsTest, NoisyPairsRunToTheMaximumOrTheBudget) {
  std::string log;
  // Pair ratios 1.5, 1/1.5, ...: no difference, never within 1%.
  auto t =
      TimePairs(Fake("m", {150, 100}, &log), Fake("d", {100, 150}, &log), Plan(2, 30), nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->stop, TimingStop::kMaxPairs);
  EXPECT_EQ(t->model.size(), 30u);
  TimingPlan budget = Plan(2, 30);
  budget.budget_seconds = 0;
  t = TimePairs(Fake("m", {150, 100}, &log), Fake("d", {100, 150}, &log), budget, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->stop, TimingStop::kBudget);
  EXPECT_EQ(t->model.size(), 2u);
}

TEST(TimePairsTest, ErrorsAndCancellationStopIt) {
  std::string log;
  TimedForward failing = []() -> absl::StatusOr<double> { return absl::InternalError("boom"); };
  EXPECT_EQ(TimePairs(Fake("m", {1}, &log), failing, Plan(2, 4), nullptr).status().code(),
            absl::StatusCode::kInternal);
  auto cancel = [](int64_t pairs) {
    return pairs >= 3 ? absl::CancelledError("stop") : absl::OkStatus();
  };
  EXPECT_EQ(
      TimePairs(Fake("m", {1}, &log), Fake("d", {2}, &log), Plan(10, 20), cancel).status().code(),
      absl::StatusCode::kCancelled);
}

TEST(DecideTimingStopTest, FollowsTheDocumentedRule) {
  TimingPlan p = Plan(4, 8);
  const std::vector<double> twin(6, 100.0);
  std::vector<double> slower(6, 103.0);  // +3%, exactly: resolved
  EXPECT_EQ(DecideTimingStop({103, 103}, {100, 100}, 0, p), TimingStop::kContinue);  // < min
  EXPECT_EQ(DecideTimingStop(slower, twin, 0, p), TimingStop::kResolved);
  slower.pop_back();
  EXPECT_EQ(DecideTimingStop(slower, std::vector<double>(5, 100.0), 0, p),
            TimingStop::kContinue);  // odd count
  EXPECT_EQ(DecideTimingStop(std::vector<double>(8, 150.0), std::vector<double>(8, 100.0), 0, p),
            TimingStop::kMaxPairs);
}

// A model timed against itself does the same work: the CI must contain 0
// and the verdict must be "no detectable difference". Robust on a noisy
// machine: the same object on both sides (no layout differences), even
// pair counts (order effects cancel) and a 99.9% CI.
TEST(ExecutionTimingTest, AModelTimedAgainstItselfShowsNoDifference) {
  TransformerConfig c = testing::TinyConfig("dense");
  c.d_model = 128;
  c.d_ff = 512;
  c.n_layers = 3;
  c.n_heads = 4;
  auto model = testing::RandomModel(c, InitOptions{});
  const at::Tensor ids = at::randint(0, 256, {4, 64}, at::kLong);
  auto forward = [&]() -> absl::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = model->Forward(ids, CoefficientMode::kLive, nullptr);
    if (!out.ok()) return out.status();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  TimingPlan p = Plan(20, 200);
  p.warmup_pairs = 3;
  p.ci_level = 0.999;
  p.resamples = 4000;
  p.budget_seconds = 4;
  auto t = TimePairs(forward, forward, p, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  const SlowdownEstimate e = PairedSlowdown(t->model, t->twin, p.resamples, p.ci_level, 1);
  EXPECT_LE(e.ci.low, 0.0) << e.slowdown << " after " << e.pairs << " pairs";
  EXPECT_GE(e.ci.high, 0.0) << e.slowdown << " after " << e.pairs << " pairs";
  EXPECT_EQ(e.verdict, 0);
  EXPECT_EQ(e.pairs % 2, 0);
}

}  // namespace
}  // namespace fca::engine
