// The whole audit on real (tiny) models: it must tell a model whose
// coefficients do not matter from one whose coefficients do.
#include "server/engine/audit/auditor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "common/random.h"
#include "server/engine/audit/execution.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/text/bpe_tokenizer.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::GateDependentModel;
using testing::GateDependentText;
using testing::RandomModel;
using testing::TinyConfig;

Dataset Text(const std::string& name, std::string text) {
  Dataset d;
  d.name = name;
  d.text = std::move(text);
  return d;
}

std::string RandomText(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + rng.Uniform(26)));
  return s;
}

// Random weights whose controller output varies with the input.
InitOptions Varying(uint64_t seed) {
  InitOptions o;
  o.seed = seed;
  o.controller_out_std = 1.0;
  return o;
}

InitOptions Seeded(uint64_t seed) {
  InitOptions o;
  o.seed = seed;
  return o;
}

AuditOptions SmallOptions() {
  AuditOptions o;
  o.window_length = 16;
  o.batch_size = 4;
  o.bootstrap_resamples = 200;
  o.timing_repeats = 2;
  o.timing_warmup = 0;
  o.seed = 3;
  return o;
}

AuditRequest Request(std::vector<ControlledModel*> models, std::string eval, std::string calib) {
  AuditRequest r;
  r.models = std::move(models);
  r.eval = Text("eval", std::move(eval));
  r.calib = Text("calib", std::move(calib));
  r.options = SmallOptions();
  return r;
}

const InterventionResult& Find(const ModelReport& r, const std::string& name) {
  for (const InterventionResult& i : r.interventions) {
    if (i.name == name) return i;
  }
  ADD_FAILURE() << "no intervention " << name;
  static InterventionResult none;
  return none;
}

TEST(AuditorTest, ConstantControllerHasNoPenaltyAndUndefinedRetention) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});  // W2 = 0: gates == 1
  auto report = RunAudit(Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 6, 2)));
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  EXPECT_EQ(r.eval_windows, 8);
  EXPECT_EQ(r.calib_windows, 6);
  // Every intervention but random_route, which the default list leaves out
  // of a model without routers.
  ASSERT_EQ(r.interventions.size(), InterventionDefs().size() - 1);
  for (const InterventionResult& i : r.interventions) {
    EXPECT_NE(i.name, kRandomRoute);
    EXPECT_FALSE(i.topk_agreement.has_value()) << i.name;
  }
  EXPECT_EQ(r.interventions[0].name, kCorrect);
  for (const InterventionResult& i : r.interventions) {
    EXPECT_NEAR(i.penalty, 0.0, 1e-9) << i.name;
    EXPECT_NEAR(i.penalty_ci.low, 0.0, 1e-9) << i.name;
    EXPECT_NEAR(i.penalty_ci.high, 0.0, 1e-9) << i.name;
  }
  // No gap: retention is undefined against either baseline, and no resample ran.
  ASSERT_FALSE(r.retention.empty());
  for (const RetentionResult& x : r.retention) {
    EXPECT_FALSE(x.estimate.value.has_value()) << x.profile << " vs " << x.baseline;
    EXPECT_EQ(x.estimate.dropped_resamples, 0);
  }
  for (const FamilyVariation& f : r.variation) EXPECT_FALSE(f.eta2.has_value()) << f.family;
  EXPECT_EQ(r.replay_max_abs_diff, 0.0);
  EXPECT_NEAR(r.live_nll, Find(r, kCorrect).nll, 1e-12);
  // Undefined values are rows marked undefined, not numbers.
  bool saw_retention = false;
  for (const ResultRow& row : ResultRows(r)) {
    if (row.metric == "retention_pct") {
      saw_retention = true;
      EXPECT_FALSE(row.defined);
    }
  }
  EXPECT_TRUE(saw_retention);
}

// The whole audit of a GateDependentModel on 16 windows of 32 tokens
// (shorter {a, b} windows repeat by chance between E and C).
absl::StatusOr<AuditReport> AuditGateDependent(ControlledModel* model) {
  AuditRequest req = Request({model}, GateDependentText(32 * 16, 1), GateDependentText(32 * 16, 2));
  req.options.window_length = 32;
  return RunAudit(req);
}

TEST(AuditorTest, InputDependentGatesGiveAClearCrossInputPenalty) {
  auto model = GateDependentModel();
  auto report = AuditGateDependent(model.get());
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  const InterventionResult& cross = Find(r, kCrossInput);
  const InterventionResult& shuffle = Find(r, kTokenShuffle);
  EXPECT_GT(cross.penalty, 0.5);
  EXPECT_GT(cross.penalty_ci.low, 0.0);
  EXPECT_LE(cross.penalty_ci.low, cross.penalty);
  EXPECT_GE(cross.penalty_ci.high, cross.penalty);
  EXPECT_GT(shuffle.penalty, 0.5);
  EXPECT_GT(shuffle.penalty_ci.low, 0.0);
  // Static profiles cannot know which token came before: they lose too.
  EXPECT_GT(Find(r, kStaticLayer).penalty, 0.1);
  EXPECT_GT(Find(r, kGlobalMean).penalty, 0.1);
  ASSERT_NE(r.FindRetention(kStaticLayer, kGlobalMean), nullptr);
  ASSERT_TRUE(r.FindRetention(kStaticLayer, kGlobalMean)->estimate.value.has_value());
  // Only the MLP gate varies (with the input); the attention gate is 1.
  for (const FamilyVariation& f : r.variation) {
    if (f.family == "mlp_gate") {
      EXPECT_GT(f.total_variance, 0.5);
      EXPECT_GT(f.within_input_variance, f.between_input_variance);
    } else {
      EXPECT_FALSE(f.eta2.has_value());
    }
  }
  EXPECT_LE(r.replay_max_abs_diff, 1e-5);
}

TEST(AuditorTest, DeterministicForASeed) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(4));
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 5), RandomText(16 * 8, 6));
  auto a = RunAudit(req);
  auto b = RunAudit(req);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->models[0].interventions.size(); ++i) {
    const InterventionResult& x = a->models[0].interventions[i];
    const InterventionResult& y = b->models[0].interventions[i];
    EXPECT_EQ(x.nll, y.nll) << x.name;
    EXPECT_EQ(x.penalty_ci.low, y.penalty_ci.low) << x.name;
  }
  req.options.seed = 99;
  auto c = RunAudit(req);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(Find(a->models[0], kCrossInput).nll, Find(c->models[0], kCrossInput).nll);
  EXPECT_EQ(Find(a->models[0], kStaticLayer).nll, Find(c->models[0], kStaticLayer).nll);
}

TEST(AuditorTest, RefusesCalibrationEvaluationOverlap) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  const std::string text = RandomText(16 * 8, 7);
  AuditRequest req = Request({model.get()}, text, text.substr(16 * 3));
  auto report = RunAudit(req);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("share 5 window"), std::string::npos) << report.status();
  req.options.allow_overlap = true;
  EXPECT_TRUE(RunAudit(req).ok());
}

// A real model behind the ControlledModel interface; subclasses change what
// Forward returns.
class WrappedModel : public ControlledModel {
 public:
  explicit WrappedModel(ControlledModel* inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_->info(); }
  const std::vector<CoefficientSite>& sites() const override { return inner_->sites(); }
  const Tokenizer& tokenizer() const override { return inner_->tokenizer(); }
  ExecutionCounters counters() const override { return inner_->counters(); }
  void ResetCounters() override { inner_->ResetCounters(); }
  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    return inner_->NeutralCoefficients();
  }
  std::vector<int64_t> RoutedExperts() const override { return inner_->RoutedExperts(); }
  absl::StatusOr<std::vector<at::Tensor>> ChosenExperts(
      const std::vector<at::Tensor>& coefficients) const override {
    return inner_->ChosenExperts(coefficients);
  }
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* c) override {
    return inner_->Forward(ids, mode, c);
  }

 private:
  ControlledModel* inner_;
};

// Wraps a real model but perturbs replayed logits: an unfaithful replay.
class UnfaithfulReplay : public WrappedModel {
 public:
  explicit UnfaithfulReplay(std::unique_ptr<ControlledModel> inner)
      : WrappedModel(inner.get()), owned_(std::move(inner)) {}
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* c) override {
    auto out = WrappedModel::Forward(ids, mode, c);
    if (out.ok() && mode == CoefficientMode::kReplay) return *out + 3e-4;
    return out;
  }

 private:
  std::unique_ptr<ControlledModel> owned_;
};

TEST(AuditorTest, UnfaithfulReplayIsRefusedWithTheMeasuredDifference) {
  UnfaithfulReplay model(RandomModel(TinyConfig("featuregate"), InitOptions{}));
  auto report = RunAudit(Request({&model}, RandomText(16 * 4, 1), RandomText(16 * 4, 2)));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find("0.0003"), std::string::npos) << report.status();
}

TEST(AuditorTest, CancellationStopsBetweenBatches) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 16, 1), RandomText(16 * 8, 2));
  std::atomic<bool> cancel{false};
  int batches_after_cancel = 0;
  req.cancelled = &cancel;
  req.on_progress = [&](const AuditProgress& p) {
    if (cancel.load() && p.windows_done > 0) ++batches_after_cancel;
    if (p.phase == "live" && p.windows_done == 4) cancel = true;
  };
  auto report = RunAudit(req);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(batches_after_cancel, 0);
}

TEST(AuditorTest, ProgressIsMonotonicAndModelsAreReported) {
  auto a = RandomModel(TinyConfig("featuregate"), Varying(1));
  auto b = RandomModel(TinyConfig("featuregate"), Varying(2));
  AuditRequest req = Request({a.get(), b.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  double last = 0;
  std::vector<std::string> done;
  req.on_progress = [&](const AuditProgress& p) {
    EXPECT_GE(p.fraction, last - 1e-12) << p.phase;
    last = p.fraction;
  };
  req.on_model_done = [&](const ModelReport& r) { done.push_back(r.model.name); };
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NEAR(last, 1.0, 1e-9);
  ASSERT_EQ(done.size(), 2u);
  // Aggregation: mean / sd / min / max across the two models.
  const double x = Find(report->models[0], kCrossInput).nll;
  const double y = Find(report->models[1], kCrossInput).nll;
  bool found = false;
  for (const AggregateRow& row : report->aggregate) {
    if (row.intervention != kCrossInput || row.metric != "nll") continue;
    found = true;
    EXPECT_DOUBLE_EQ(row.summary.mean, (x + y) / 2);
    EXPECT_NEAR(row.summary.sd, std::fabs(x - y) / std::sqrt(2.0), 1e-12);
    EXPECT_EQ(row.summary.min, std::min(x, y));
    EXPECT_EQ(row.summary.n, 2);
  }
  EXPECT_TRUE(found);
}

TEST(AuditorTest, ExecutionAgainstADenseTwin) {
  auto gated = RandomModel(TinyConfig("featuregate"), Varying(1));
  auto dense = RandomModel(TinyConfig("dense"), Seeded(1));
  AuditRequest req = Request({gated.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.dense_twin = dense.get();
  req.options.timing_repeats = 4;
  req.options.timing_max_repeats = 6;
  std::vector<AuditProgress> timing;
  double before_timing = 0;
  req.on_progress = [&](const AuditProgress& p) {
    if (p.phase == "timing") timing.push_back(p);
    if (timing.empty()) before_timing = p.fraction;
  };
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  // Timing is a phase of its own: it counts pairs (at most max_pairs, then
  // exactly twice the first block's), moves the fraction, and says how long
  // it has left from its budget and pace.
  ASSERT_GE(timing.size(), 2u);
  EXPECT_EQ(timing.front().windows_done, 0);
  EXPECT_EQ(timing.front().windows_total, 6);
  EXPECT_EQ(timing.front().phase_seconds_left, req.options.timing_budget_seconds);
  EXPECT_EQ(timing.back().windows_done, 8);  // 4 pairs in each block
  EXPECT_EQ(timing.back().windows_total, 8);
  EXPECT_EQ(timing.back().phase_seconds_left, 0);
  EXPECT_GT(timing.back().fraction, before_timing);
  EXPECT_LT(before_timing, 1.0);
  const ExecutionResult& x = report->models[0].execution;
  EXPECT_EQ(x.blocks_per_token, 2.0);
  EXPECT_EQ(x.blocks_executed_fraction, 1.0);
  EXPECT_GT(x.flops_per_token, x.replay_flops_per_token);
  ASSERT_TRUE(x.dense_flops_per_token.has_value());
  EXPECT_EQ(*x.dense_flops_per_token, x.replay_flops_per_token);
  EXPECT_NEAR(*x.flops_overhead, x.flops_per_token / *x.dense_flops_per_token - 1, 1e-12);
  EXPECT_GT(*x.flops_overhead, 0);
  ASSERT_TRUE(x.slowdown.has_value());
  ASSERT_TRUE(x.slowdown_ci.has_value());
  EXPECT_LE(x.slowdown_ci->low, *x.slowdown);
  EXPECT_GE(x.slowdown_ci->high, *x.slowdown);
  // Two blocks (fca.md "Execution"): the first stops within [4, max(4, 6 /
  // 2)] = 4 pairs, the second times as many; the verdict needs both.
  ASSERT_TRUE(x.first_block.has_value());
  ASSERT_TRUE(x.second_block.has_value());
  EXPECT_EQ(x.first_block->pairs, 4);
  EXPECT_EQ(x.second_block->pairs, x.first_block->pairs);
  EXPECT_EQ(x.timing_repeats, x.first_block->pairs + x.second_block->pairs);
  ASSERT_TRUE(x.slowdown_verdict.has_value());
  EXPECT_EQ(*x.slowdown_verdict, CombinedVerdict(x.first_block->verdict, x.second_block->verdict));
  EXPECT_GT(x.latency_us_per_token, 0);
  ASSERT_TRUE(report->dense_twin.has_value());
  EXPECT_EQ(report->dense_twin->blocks_executed_fraction, 1.0);
  EXPECT_EQ(report->dense_twin->flops_per_token, x.replay_flops_per_token);
  EXPECT_EQ(report->dense_twin->timing_repeats, x.timing_repeats);
  // Every execution figure is a row; the slowdown carries its CI.
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& r : ExecutionRows(x)) rows[r.metric] = r;
  for (const char* m : {"dense_flops_per_token", "flops_overhead", "slowdown", "slowdown_verdict",
                        "slowdown_first_block", "slowdown_second_block"}) {
    EXPECT_EQ(rows.count(m), 1u) << m;
  }
  EXPECT_EQ(*rows["slowdown"].ci_low, x.slowdown_ci->low);
  EXPECT_EQ(rows["slowdown"].n, x.timing_repeats);
  // A dense model cannot be the audited model, and a gated one is no twin.
  req.models = {dense.get()};
  req.dense_twin = nullptr;
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.models = {gated.get()};
  req.dense_twin = gated.get();
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// A model whose controller closes both gates of block 1 for every token:
// fca.md "Execution" says the block is skipped, and the counters show it.
TEST(AuditorTest, ABlockSkippedByItsControllerIsCountedAsNotExecuted) {
  TransformerConfig c = TinyConfig("featuregate");
  auto weights = InitTransformerWeights(c, Varying(4));
  ASSERT_TRUE(weights.ok());
  // 2 * sigmoid(-1e4) is exactly 0 in float32.
  testing::SetTensor(&*weights, "blocks.1.ctrl.fc2.bias", std::vector<float>(2 * 4, -1e4f));
  auto closed = testing::LoadWritten(c, *weights);
  auto open = RandomModel(c, Varying(4));
  auto dense = RandomModel(TinyConfig("dense"), Seeded(1));
  AuditRequest req =
      Request({closed.get(), open.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.dense_twin = dense.get();
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();  // replay stays faithful
  const ExecutionResult& x = report->models[0].execution;
  const ExecutionResult& y = report->models[1].execution;
  EXPECT_EQ(x.blocks_per_token, 1.0);
  EXPECT_EQ(x.blocks_executed_fraction, 0.5);
  EXPECT_EQ(y.blocks_executed_fraction, 1.0);
  EXPECT_LT(x.flops_per_token, y.flops_per_token);
  EXPECT_LT(*x.flops_overhead, 0);  // less work than the dense twin
  EXPECT_EQ(report->models[0].replay_max_abs_diff, 0.0);
}

TEST(AuditorTest, BadRequestsAreInvalidArgument) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 4, 1), RandomText(16 * 4, 2));
  req = Request({model.get()}, RandomText(10, 1), RandomText(16 * 4, 2));
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
  req = Request({model.get()}, RandomText(16 * 4, 1), RandomText(16 * 4, 2));
  req.options.window_length = 65;  // beyond max_seq_len 64
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
  req = Request({}, "", "");
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
  // Token ids outside the model's vocabulary.
  TransformerConfig small = TinyConfig("featuregate");
  small.vocab_size = 100;
  auto narrow = RandomModel(small, InitOptions{});
  req = Request({narrow.get()}, RandomText(16 * 4, 1), RandomText(16 * 4, 2));
  auto st = RunAudit(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st;
}

TEST(AuditorTest, SubsetOfInterventionsAndBfloat16) {
  ComputeOptions bf16 = testing::TestCompute();
  bf16.dtype = ComputeDType::kBFloat16;
  auto model = RandomModel(TinyConfig("featuregate"), Varying(2), bf16);
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kCrossInput};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->models[0].interventions.size(), 2u);
  EXPECT_EQ(report->models[0].replay_max_abs_diff, 0.0);  // bitwise in bf16 too
  EXPECT_TRUE(report->models[0].retention.empty());
}

}  // namespace
}  // namespace fca::engine

namespace fca::engine {
namespace {

InitOptions Varying(uint64_t seed);

class MapCache : public CoefficientCache {
 public:
  std::optional<std::string> Get(const CoefficientCacheKey& k) override {
    auto it = map_.find(Key(k));
    if (it == map_.end()) return std::nullopt;
    ++hits;
    return it->second;
  }
  void Put(const CoefficientCacheKey& k, const std::string& bytes) override {
    map_[Key(k)] = bytes;
    ++puts;
  }
  // Flips an exponent bit of each entry's first float32 coefficient.
  void CorruptAll() {
    for (auto& [key, bytes] : map_) bytes[3] ^= 0x40;
  }
  int hits = 0, puts = 0;

 private:
  static std::string Key(const CoefficientCacheKey& k) {
    return k.weights_sha256 + "/" + k.window_hash + "/" + k.dtype + "/" + k.device;
  }
  std::map<std::string, std::string> map_;
};

TEST(AuditorCacheTest, SecondAuditSkipsLiveForCachedWindowsWithIdenticalResults) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(8));
  MapCache cache;
  AuditRequest req = Request({model.get()}, RandomText(16 * 10, 1), RandomText(16 * 6, 2));
  req.cache = &cache;
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto first = RunAudit(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cache.puts, 10 + 6);
  EXPECT_EQ(first->models[0].cached_eval_windows, 0);
  notes.clear();
  auto second = RunAudit(req);
  ASSERT_TRUE(second.ok()) << second.status();
  // The first batch (4 windows) always runs LIVE to check fidelity.
  EXPECT_EQ(second->models[0].cached_eval_windows, 10 - 4);
  EXPECT_EQ(second->models[0].cached_calib_windows, 6);
  EXPECT_EQ(cache.puts, 16);
  for (size_t i = 0; i < first->models[0].interventions.size(); ++i) {
    EXPECT_EQ(first->models[0].interventions[i].nll, second->models[0].interventions[i].nll);
  }
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("6 of 10 evaluation windows came from the coefficient cache"),
            std::string::npos)
      << notes[0];
}

// Issue 9: a cache that disagrees with a fresh recording (corrupt, or a
// model that is not deterministic) must not fail the audit: it is ignored
// for that model, rewritten, and the numbers are those of a fresh audit.
TEST(AuditorCacheTest, ACacheThatDisagreesIsIgnoredAndRewritten) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(8));
  MapCache cache;
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  auto fresh = RunAudit(req);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  req.cache = &cache;
  ASSERT_TRUE(RunAudit(req).ok());
  cache.CorruptAll();
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto after = RunAudit(req);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->models[0].cached_eval_windows, 0);
  EXPECT_EQ(after->models[0].cached_calib_windows, 0);
  for (size_t i = 0; i < fresh->models[0].interventions.size(); ++i) {
    EXPECT_EQ(fresh->models[0].interventions[i].nll, after->models[0].interventions[i].nll);
  }
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("differ from a fresh LIVE recording"), std::string::npos) << notes[0];
  // Rewritten: the next audit uses the cache again.
  auto again = RunAudit(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->models[0].cached_eval_windows, 8 - 4);
}

// Issue 9: entries recorded with batch 8 serve audits with batches 1, 4 and
// 16 and with fewer windows; every NLL stays within the fidelity tolerance
// of an audit without the cache in the same layout.
TEST(AuditorCacheTest, EntriesServeAnyBatchLayoutAndFewerWindows) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(9));
  MapCache cache;
  AuditRequest fill = Request({model.get()}, RandomText(16 * 16, 1), RandomText(16 * 8, 2));
  fill.options.batch_size = 8;
  fill.cache = &cache;
  ASSERT_TRUE(RunAudit(fill).ok());
  ASSERT_EQ(cache.puts, 16 + 8);
  for (int64_t batch : {1, 4, 16}) {
    for (int64_t windows : {int64_t{0}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << ", windows " << windows);
      AuditRequest req = fill;
      req.options.batch_size = batch;
      req.options.max_eval_windows = windows;
      req.cache = nullptr;
      auto plain = RunAudit(req);
      ASSERT_TRUE(plain.ok()) << plain.status();
      req.cache = &cache;
      auto cached = RunAudit(req);
      ASSERT_TRUE(cached.ok()) << cached.status();
      const ModelReport& c = cached->models[0];
      EXPECT_EQ(c.cached_calib_windows, 8);
      EXPECT_LE(c.cache_max_abs_diff, 1e-5);
      for (size_t i = 0; i < c.interventions.size(); ++i) {
        EXPECT_NEAR(c.interventions[i].nll, plain->models[0].interventions[i].nll, 1e-5)
            << c.interventions[i].name;
      }
    }
  }
}

TEST(TokenStreamTest, APrefixGivesTheFirstIdsOfTheWholeText) {
  std::string text;
  for (int line = 0; line < 400; ++line) {
    text += "Line " + std::to_string(line) + ": the quick brown fox,  jumps\n";
    if (line % 7 == 0) text += "\n\n  indented\n";
  }
  Dataset d = Text("t", text);
  auto bpe = BpeTokenizer::FromFile(FCA_TEST_DATA_DIR "/tokenizer/tokenizer.json");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  ByteTokenizer bytes;
  for (const Tokenizer* tok :
       {static_cast<const Tokenizer*>(bpe->get()), static_cast<const Tokenizer*>(&bytes)}) {
    auto whole = TokenStream(d, *tok);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int64_t want : {1, 100, 1000, 5000}) {
      auto part = TokenStream(d, *tok, want);
      ASSERT_TRUE(part.ok()) << part.status();
      ASSERT_GE(static_cast<int64_t>(part->size()), std::min<int64_t>(want, whole->size()));
      if (want * 3 < static_cast<int64_t>(whole->size())) {
        EXPECT_LT(part->size(), whole->size()) << tok->name() << " read everything for " << want;
      }
      EXPECT_TRUE(std::equal(part->begin(), part->end(), whole->begin())) << tok->name();
    }
  }
}

}  // namespace
}  // namespace fca::engine

// --- issue 12: the interventions beyond the paper, per-group dependence,
// fidelity with a full cache, and the window cap ---

namespace fca::engine {
namespace {

// NLL of `text` (byte ids) in T-token windows under REPLAY of all-ones
// gates, from the model's logits by fca.md's formula.
double AllOnesReplayNll(ControlledModel& model, const std::string& text, int64_t T) {
  const int64_t n = static_cast<int64_t>(text.size()) / T;
  std::vector<int64_t> flat;
  for (int64_t i = 0; i < n * T; ++i) flat.push_back(static_cast<uint8_t>(text[i]));
  const at::Tensor ids = at::tensor(flat, at::kLong).view({n, T});
  std::vector<at::Tensor> ones;
  for (const CoefficientSite& s : model.sites()) ones.push_back(at::ones({n, T, s.channels}));
  auto logits = model.Forward(ids, CoefficientMode::kReplay, &ones);
  EXPECT_TRUE(logits.ok()) << logits.status();
  const at::Tensor lp = at::log_softmax(logits->slice(1, 0, T - 1).to(at::kDouble), -1);
  const at::Tensor target = ids.slice(1, 1, T).unsqueeze(-1);
  return -lp.gather(-1, target).mean().item<double>();
}

TEST(AuditorScienceTest, NeutralIsAReplayWithEveryGateOne) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(21));
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model.get()}, eval, RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kNeutral};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  const double want = AllOnesReplayNll(*model, eval, 16);
  EXPECT_NEAR(Find(r, kNeutral).nll, want, 1e-5);
  EXPECT_NEAR(Find(r, kNeutral).penalty, want - Find(r, kCorrect).nll, 1e-5);
  // The gates vary, so removing the controller changes the NLL.
  EXPECT_GT(std::fabs(Find(r, kNeutral).penalty), 1e-4);
}

TEST(AuditorScienceTest, RandomRouteNamedForAModelWithoutRoutersIsRefused) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(21));
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kRandomRoute};
  auto report = RunAudit(req);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("routers only"), std::string::npos) << report.status();
  req.options.interventions = {InterventionId::kNeutral};
  req.options.per_layer_interventions = {InterventionId::kRandomRoute};
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// The tiny OLMoE folder (2 layers, 8 experts, top-2): every intervention
// has top-k agreement rows; correct's are 1 exactly, neutral's (experts
// {0, 1} everywhere) and random_route's lie below.
TEST(AuditorScienceTest, AMixtureOfExpertsGetsTopkAgreementRows) {
  auto model = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", testing::TestCompute());
  ASSERT_TRUE(model.ok()) << model.status();
  AuditRequest req = Request({model->get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kNeutral, InterventionId::kRandomRoute};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) {
    rows[row.intervention + "/" + row.metric] = row;
  }
  for (const char* name : {kCorrect, kNeutral, kRandomRoute}) {
    SCOPED_TRACE(name);
    const std::string i = name;
    ASSERT_TRUE(rows.count(i + "/topk_agreement"));
    EXPECT_EQ(rows[i + "/topk_agreement"].n, 2 * 8 * 16);
    for (const char* layer : {"0", "1"}) {
      const ResultRow& l = rows[i + "/layer_topk_agreement." + layer];
      EXPECT_EQ(l.n, 8 * 16);
      EXPECT_GE(l.value, 0.0);
      EXPECT_LE(l.value, 1.0);
    }
    // The overall fraction is the mean of the two layers' (equal counts).
    EXPECT_DOUBLE_EQ(
        rows[i + "/topk_agreement"].value,
        (rows[i + "/layer_topk_agreement.0"].value + rows[i + "/layer_topk_agreement.1"].value) /
            2);
  }
  EXPECT_EQ(rows["correct/topk_agreement"].value, 1.0);
  EXPECT_LT(rows["random_route/topk_agreement"].value, 0.5);  // 1/28 expected
  EXPECT_LT(rows["neutral/topk_agreement"].value, 1.0);
}

// GateDependentModel's gates read only the current token's embedding: a
// table of the calibration gate per token is the model's own controller.
TEST(AuditorScienceTest, StaticTokenRetainsTheWholeGapOfATokenLookupController) {
  auto model = GateDependentModel();
  auto report = AuditGateDependent(model.get());
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  EXPECT_GT(Find(r, kStaticLayer).penalty, 0.1);
  EXPECT_NEAR(Find(r, kStaticToken).penalty, 0.0, 1e-6);
  const RetentionResult* token = r.FindRetention(kStaticToken, kGlobalMean);
  ASSERT_NE(token, nullptr);
  ASSERT_TRUE(token->estimate.value.has_value());
  EXPECT_NEAR(*token->estimate.value, 100.0, 1e-3);
  ASSERT_TRUE(r.static_token_coverage.has_value());
  EXPECT_EQ(r.static_token_coverage->unseen_positions, 0);
  std::map<std::string, double> rows;
  for (const ResultRow& row : ResultRows(r)) rows[row.intervention + "/" + row.metric] = row.value;
  EXPECT_NEAR(rows.at("static_token/retention_pct"), 100.0, 1e-3);
  // The default baseline's row names it too.
  EXPECT_EQ(rows.at("static_token/retention_pct"),
            rows.at("static_token/retention_vs.global_mean"));
  EXPECT_EQ(rows.at("static_token/unseen_token_positions"), 0.0);
}

TEST(AuditorScienceTest, UnseenEvaluationTokensAreCounted) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(5));
  // C uses only a..m; E's letters n..z (13 ids) are unseen.
  std::string calib = RandomText(16 * 8, 2);
  for (char& ch : calib) ch = static_cast<char>('a' + (ch - 'a') % 13);
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model.get()}, eval, calib);
  req.options.interventions = {InterventionId::kStaticToken};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  // Scored positions only: the last position of a window predicts nothing.
  const int64_t T = req.options.window_length;
  int64_t positions = 0;
  std::set<char> ids;
  for (size_t i = 0; i < eval.size(); ++i) {
    const char ch = eval[i];
    if (static_cast<int64_t>(i % T) == T - 1) continue;
    if (ch > 'm') {
      ++positions;
      ids.insert(ch);
    }
  }
  ASSERT_TRUE(report->models[0].static_token_coverage.has_value());
  EXPECT_EQ(report->models[0].static_token_coverage->unseen_positions, positions);
  EXPECT_EQ(report->models[0].static_token_coverage->unseen_ids, static_cast<int64_t>(ids.size()));
}

// fca.md "Token-keyed profiles": shrunk_ids and shrunk_cells count the
// calibration ids and (id, position) cells seen fewer than
// static_token_min_count times; n is the table's cells.
TEST(AuditorScienceTest, ShrunkIdsAndCellsAreCountedInTheRows) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(5));
  const std::string calib = RandomText(16 * 8, 2);
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), calib);
  req.options.interventions = {InterventionId::kStaticToken, InterventionId::kStaticTokenPosition};
  req.options.static_token_min_count = 6;
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const int64_t T = req.options.window_length;
  std::map<char, int64_t> by_id;
  std::map<std::pair<char, int64_t>, int64_t> by_cell;
  for (size_t i = 0; i < calib.size(); ++i) {
    ++by_id[calib[i]];
    ++by_cell[{calib[i], static_cast<int64_t>(i) % T}];
  }
  auto below = [](const auto& counts) {
    int64_t n = 0;
    for (const auto& [key, count] : counts) n += count < 6;
    return n;
  };
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) {
    rows[row.intervention + "/" + row.metric] = row;
  }
  ASSERT_EQ(rows.count("static_token/shrunk_ids"), 1u);
  ASSERT_EQ(rows.count("static_token_position/shrunk_cells"), 1u);
  EXPECT_EQ(rows.at("static_token/shrunk_ids").value, static_cast<double>(below(by_id)));
  EXPECT_EQ(rows.at("static_token/shrunk_ids").n, static_cast<int64_t>(by_id.size()));
  EXPECT_EQ(rows.at("static_token_position/shrunk_cells").value,
            static_cast<double>(below(by_cell)));
  EXPECT_EQ(rows.at("static_token_position/shrunk_cells").n, static_cast<int64_t>(by_cell.size()));
  // 128 positions over 26 letters: some ids and most cells are rare.
  EXPECT_GT(below(by_id), 0);
  EXPECT_GT(below(by_cell), below(by_id));
}

// Layer 0's gates are 1 whatever the input: replacing them (by their
// calibration mean, another input's, or 1) changes nothing, while layer 1's
// gates depend on the input.
TEST(AuditorScienceTest, PerLayerDependenceIsZeroWhereTheGateIsConstant) {
  auto model = testing::LayerOneDependentModel(7);
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kStaticLayer};
  req.options.per_layer_interventions = {InterventionId::kStaticLayer, InterventionId::kCrossInput,
                                         InterventionId::kNeutral};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  const ModelReport& r = report->models[0];
  ASSERT_EQ(r.dependence.size(), 3u * 2);
  for (const GroupDependence& d : r.dependence) {
    SCOPED_TRACE(d.intervention + " at layer " + d.group);
    EXPECT_EQ(d.scope, kScopeLayer);
    if (d.group == "0") {
      EXPECT_EQ(d.penalty, 0.0);
      EXPECT_EQ(d.penalty_ci.low, 0.0);
      EXPECT_EQ(d.penalty_ci.high, 0.0);
    } else {
      EXPECT_GT(std::fabs(d.penalty), 1e-5);
    }
    if (d.intervention == kStaticLayer && d.group == "1") {
      // Layer 0 is inert, so I at layer 1 alone is I everywhere.
      EXPECT_NEAR(d.nll, Find(r, kStaticLayer).nll, 1e-9);
    }
  }
  bool row = false;
  for (const ResultRow& x : ResultRows(r)) {
    row = row || (x.intervention == kCrossInput && x.metric == "layer_penalty.1" && x.ci_low);
  }
  EXPECT_TRUE(row);
  // The additivity check (fca.md "Per-group dependence"): with layer 0
  // inert, static_layer's per-layer penalties add up to its joint one.
  ASSERT_EQ(r.additivity.size(), 3u);
  const GroupAdditivity& a = r.additivity[0];
  EXPECT_EQ(a.intervention, kStaticLayer);
  EXPECT_EQ(a.groups, 2);
  EXPECT_NEAR(a.penalty_sum, Find(r, kStaticLayer).penalty, 1e-9);
  if (Find(r, kStaticLayer).penalty_ci.low > 0) {
    ASSERT_TRUE(a.ratio.has_value());
    EXPECT_NEAR(*a.ratio, 1.0, 1e-6);
  }
  // Site scope: one group per site, and layer 0's sites are inert.
  req.options.per_layer_interventions = {InterventionId::kCrossInput};
  req.options.per_layer_scope = ScopeId::kSite;
  report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->models[0].dependence.size(), model->sites().size());
  for (const GroupDependence& d : report->models[0].dependence) {
    if (d.group.back() == '0') {
      EXPECT_EQ(d.penalty, 0.0) << d.group;
    }
  }
}

TEST(AuditorScienceTest, BadPerLayerOptionsAreInvalidArgument) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 4, 1), RandomText(16 * 4, 2));
  req.options.per_layer_interventions = {InterventionId::kCorrect};
  auto st = RunAudit(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("correct"), std::string::npos) << st;
  // Interventions and the scope are ids: an unknown name stops at the
  // server's spec check (spec_test) or fca-local-audit's flags.
}

// Every audit compares a LIVE pass with the replay on at least one batch,
// even when every window's coefficients are in the cache.
TEST(AuditorScienceTest, AFullyCachedAuditStillChecksReplayFidelity) {
  auto inner = RandomModel(TinyConfig("featuregate"), Varying(8));
  ControlledModel* real = inner.get();
  MapCache cache;
  AuditRequest req = Request({real}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  req.cache = &cache;
  req.options.fidelity_check_every = 1;
  auto first = RunAudit(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->models[0].fidelity_checked_windows, 8);
  auto second = RunAudit(req);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->models[0].cached_eval_windows, 8 - 4);
  EXPECT_EQ(second->models[0].fidelity_checked_windows, 4);  // the first batch
  // The same weights (so the same cache entries), replayed unfaithfully.
  UnfaithfulReplay unfaithful(std::move(inner));
  req.models = {&unfaithful};
  auto third = RunAudit(req);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition) << third.status();
}

TEST(AuditorScienceTest, AWindowCapThatDropsWindowsIsNoted) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  req.options.max_eval_windows = 8;  // exactly what there is
  ASSERT_TRUE(RunAudit(req).ok());
  EXPECT_TRUE(notes.empty()) << notes[0];
  req.options.max_eval_windows = 5;
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->models[0].eval_windows, 5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("more than 5 windows of 16 tokens"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("max_eval_windows"), std::string::npos) << notes[0];
}

// Batches run on several threads at once give every number one thread gives.
TEST(AuditorParallelTest, ThreeThreadsGiveExactlyTheNumbersOfOne) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(12));
  AuditRequest req = Request({model.get()}, RandomText(16 * 23, 1), RandomText(16 * 13, 2));
  req.options.per_layer_interventions = {InterventionId::kStaticLayer};
  req.threads = 1;
  auto one = RunAudit(req);
  req.threads = 3;
  auto three = RunAudit(req);
  ASSERT_TRUE(one.ok() && three.ok()) << one.status() << three.status();
  const std::vector<ResultRow> a = ResultRows(one->models[0]);
  const std::vector<ResultRow> b = ResultRows(three->models[0]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].intervention == "execution") continue;  // timings
    EXPECT_EQ(a[i].metric, b[i].metric);
    EXPECT_EQ(a[i].value, b[i].value) << a[i].intervention << " " << a[i].metric;
  }
  for (size_t i = 0; i < one->models[0].interventions.size(); ++i) {
    EXPECT_EQ(one->models[0].interventions[i].nll_per_sequence,
              three->models[0].interventions[i].nll_per_sequence);
  }
}

// Perturbs the replayed logits of the one batch whose first window is
// `target`: unfaithful on that batch only.
class UnfaithfulOnOneBatch : public WrappedModel {
 public:
  UnfaithfulOnOneBatch(ControlledModel* inner, at::Tensor target)
      : WrappedModel(inner), target_(std::move(target)) {}
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* c) override {
    auto out = WrappedModel::Forward(ids, mode, c);
    if (out.ok() && mode == CoefficientMode::kReplay && ids[0].equal(target_)) return *out + 1e-3;
    return out;
  }

 private:
  at::Tensor target_;
};

// The gate compares LIVE and replay on the first batch and every k-th after
// it; elsewhere NLL(correct) is the LIVE NLL.
TEST(AuditorTest, TheFidelityGateChecksTheSampledBatches) {
  auto real = RandomModel(TinyConfig("featuregate"), Varying(13));
  const std::string eval = RandomText(16 * 20, 1);  // 5 batches of 4 windows
  AuditRequest req = Request({real.get()}, eval, RandomText(16 * 8, 2));
  req.options.fidelity_check_every = 2;  // batches 0, 2, 4
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->models[0].fidelity_checked_windows, 12);
  EXPECT_NEAR(report->models[0].live_nll, Find(report->models[0], kCorrect).nll, 1e-6);
  req.options.fidelity_check_every = 1;
  report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->models[0].fidelity_checked_windows, 20);

  // Batch 2 (windows 8..11) replays unfaithfully: found when sampled...
  std::vector<int64_t> window8;
  for (int i = 0; i < 16; ++i) window8.push_back(static_cast<unsigned char>(eval[8 * 16 + i]));
  UnfaithfulOnOneBatch model(real.get(), at::tensor(window8, at::kLong));
  req.models = {&model};
  req.options.fidelity_check_every = 2;
  auto refused = RunAudit(req);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("windows 8..11"), std::string::npos)
      << refused.status();
  // ...and not seen when the sample skips it (the price of sampling).
  req.options.fidelity_check_every = 3;  // batches 0 and 3
  EXPECT_TRUE(RunAudit(req).ok());
  req.options.fidelity_check_every = 0;
  EXPECT_EQ(RunAudit(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// The experts a model's top-k chooses at each (window, position) of a
// router site: the stable descending sort's first k (ties to the lower
// index), as a set in increasing order. [B, T, k].
at::Tensor ChosenSets(const at::Tensor& probs, int64_t k) {
  const at::Tensor order =
      std::get<1>(at::sort(probs.to(at::kFloat), /*stable=*/true, /*dim=*/-1, /*descending=*/true));
  return std::get<0>(at::sort(order.slice(-1, 0, k), -1));
}

// fca.md "Routing flip rate": the tiny OLMoE audited in bfloat16 with its
// float32 reference reports how often the two precisions' LIVE passes chose
// different experts, per layer and overall; the test counts the same from
// its own two recordings of the windows. A float32 audit has no such rows.
TEST(AuditorScienceTest, ABfloat16MixtureOfExpertsGetsItsRoutingFlipRate) {
  ComputeOptions bf16 = testing::TestCompute(), f32 = testing::TestCompute();
  bf16.dtype = ComputeDType::kBFloat16;
  auto model = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", bf16);
  auto reference = LoadModel(FCA_TEST_DATA_DIR "/olmoe-tiny", "olmoe-tiny", f32);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string eval = RandomText(16 * 8, 1);
  AuditRequest req = Request({model->get()}, eval, RandomText(16 * 8, 2));
  req.float32_references = {reference->get()};
  req.options.interventions = {InterventionId::kNeutral};
  req.options.timing_repeats = 0;
  req.options.batch_size = 8;  // one forward over E, as below
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, ResultRow> rows;
  for (const ResultRow& row : ResultRows(report->models[0])) rows[row.metric] = row;

  auto ids = (*model)->tokenizer().Encode(eval);
  ASSERT_TRUE(ids.ok());
  const at::Tensor batch = at::tensor(*ids, at::kInt).to(at::kLong).view({8, 16});
  std::vector<at::Tensor> low, high;
  ASSERT_TRUE((*model)->Forward(batch, CoefficientMode::kLiveRecord, &low).ok());
  ASSERT_TRUE((*reference)->Forward(batch, CoefficientMode::kLiveRecord, &high).ok());
  const std::vector<int64_t> k = (*model)->RoutedExperts();
  int64_t flips = 0, positions = 0;
  for (size_t s = 0; s < k.size(); ++s) {
    if (k[s] == 0) continue;
    const at::Tensor differ =
        (ChosenSets(low[s], k[s]) != ChosenSets(high[s], k[s])).any(-1);  // [8, 16]
    const int64_t layer_flips = differ.sum().item<int64_t>();
    const std::string layer = std::to_string((*model)->sites()[s].layer);
    ASSERT_TRUE(rows.count("layer_routing_flip_rate." + layer)) << layer;
    EXPECT_EQ(rows["layer_routing_flip_rate." + layer].n, 8 * 16);
    EXPECT_DOUBLE_EQ(rows["layer_routing_flip_rate." + layer].value, layer_flips / 128.0);
    flips += layer_flips;
    positions += differ.numel();
  }
  ASSERT_TRUE(rows.count("routing_flip_rate"));
  EXPECT_EQ(rows["routing_flip_rate"].n, positions);
  EXPECT_EQ(positions, 2 * 8 * 16);
  EXPECT_DOUBLE_EQ(rows["routing_flip_rate"].value, double(flips) / double(positions));
  std::printf("olmoe-tiny bfloat16 routing flip rate: %lld of %lld (token, layer)\n",
              static_cast<long long>(flips), static_cast<long long>(positions));

  // In float32 there is nothing to compare: no rows, even with a reference.
  AuditRequest same = Request({reference->get()}, eval, RandomText(16 * 8, 2));
  same.float32_references = {reference->get()};
  same.options.interventions = {InterventionId::kNeutral};
  same.options.timing_repeats = 0;
  auto plain = RunAudit(same);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const ResultRow& row : ResultRows(plain->models[0])) {
    EXPECT_EQ(row.metric.find("routing_flip_rate"), std::string::npos) << row.metric;
  }
}

// fca.md "Calibration uncertainty": with calib_resamples the interventions
// estimated on C get a CI that also resamples C. A calibration set of one
// window repeated gives the same profile on every resample (to rounding),
// so the CI is penalty_block's; a varied one widens it. Nothing else changes,
// and without calib_resamples there are no such rows.
TEST(AuditorTest, CalibrationResamplingWidensTheCIOnlyWhereCalibrationVaries) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(11));
  const std::string eval = RandomText(16 * 8, 1);
  std::string same;
  for (int k = 0; k < 6; ++k) same += RandomText(16, 2);
  auto audit = [&](const std::string& calib, int resamples) {
    AuditRequest req = Request({model.get()}, eval, calib);
    req.options.timing_repeats = 0;
    req.options.calib_resamples = resamples;
    auto report = RunAudit(req);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? report->models[0] : ModelReport{};
  };
  const ModelReport fixed = audit(same, 4);
  const ModelReport varied = audit(RandomText(16 * 6, 3), 4);
  const ModelReport off = audit(RandomText(16 * 6, 3), 0);
  for (const InterventionResult& i : fixed.interventions) {
    const bool calibrated = InterventionDefOf(*ParseIntervention(i.name)).calibrated;
    ASSERT_EQ(i.calib.has_value(), calibrated) << i.name;
    if (!calibrated) continue;
    EXPECT_EQ(i.calib->resamples, 4);
    // Equal windows record coefficients equal up to float32 rounding (their
    // rows in the batch differ), so the profiles agree to about 1e-9 nats.
    EXPECT_LT(i.calib->sd, 1e-7) << i.name;
    EXPECT_NEAR(i.calib->ci.low, i.windows.block_ci.low, 1e-7) << i.name;
    EXPECT_NEAR(i.calib->ci.high, i.windows.block_ci.high, 1e-7) << i.name;
  }
  for (const InterventionResult& i : varied.interventions) {
    if (!i.calib) continue;
    // The full-C penalty is the one without resampling.
    EXPECT_EQ(i.penalty, Find(off, i.name).penalty) << i.name;
    EXPECT_GT(i.calib->sd, 1e-6) << i.name;  // 1e-5 to 1e-4 here, 2e-9 above
  }
  const InterventionResult& layer = Find(varied, kStaticLayer);
  ASSERT_TRUE(layer.calib.has_value());
  EXPECT_GT(layer.calib->ci.high - layer.calib->ci.low,
            layer.windows.block_ci.high - layer.windows.block_ci.low);
  int calib_rows = 0;
  for (const ResultRow& row : ResultRows(varied)) {
    if (row.metric != kPenaltyCalib) continue;
    ++calib_rows;
    EXPECT_EQ(row.n, 4);
    EXPECT_TRUE(row.ci_low.has_value() && row.ci_high.has_value());
  }
  EXPECT_EQ(calib_rows, static_cast<int>(CalibratedInterventions().size()));
  for (const ResultRow& row : ResultRows(off)) EXPECT_NE(row.metric, kPenaltyCalib);
}

}  // namespace
}  // namespace fca::engine
