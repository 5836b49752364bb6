// The audit's progress fraction, weighted by each phase's expected cost
// (progress_weights.h, docs/user-guide.md "Progress"): monotone, exactly 1
// at the end, and at each phase boundary the cumulative share of the
// documented weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/progress_weights.h"
#include "tests/engine/audit/auditor_fixture.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::RandomModel;
using testing::RandomText;
using testing::Request;
using testing::Seeded;
using testing::TinyConfig;
using testing::Varying;

TEST(ProgressWeightsTest, EachPhaseCountsItsWindowForwards) {
  AuditOptions o;
  o.batch_size = 4;
  o.timing_warmup = 1;
  o.timing_repeats = 2;
  PhaseCounts c;
  c.eval_windows = 10;
  c.calib_windows = 6;
  c.replays = 3;
  c.dense_twin = true;
  const PhaseWeights w = ExpectedPhaseWeights(o, c);
  EXPECT_EQ(w.live, 10);
  EXPECT_EQ(w.calibration, 6);
  EXPECT_EQ(w.replay, 10);
  EXPECT_EQ(w.replays, 3);
  EXPECT_EQ(w.statistics, kStatisticsPasses * 10);
  // A batch of min(10, 4) = 4 windows: counted by LIVE, REPLAY and the
  // twin's LIVE, then two blocks of (1 + 2) pairs of two forwards.
  EXPECT_EQ(w.timing, 4 * (3 + 2 * 2 * 3));
  EXPECT_EQ(w.Total(), 10 + 6 + 3 * 10 + kStatisticsPasses * 10 + 4 * 15);
  // Alone: LIVE and REPLAY counted, (1 + 2) forwards timed.
  c.dense_twin = false;
  EXPECT_EQ(ExpectedPhaseWeights(o, c).timing, 4 * (2 + 3));
  // No timing: the counting forwards only, of a batch E fills only in part.
  o.timing_repeats = 0;
  c.eval_windows = 3;
  EXPECT_EQ(ExpectedPhaseWeights(o, c).timing, 3 * 2);
}

// The weight the documented model gives a phase of the audit below (E = 8,
// C = 6 windows, batches of 4, a dense twin, two blocks of 1 + 2 pairs).
double PhaseWeight(const std::string& phase) {
  if (phase == "live") return 8;
  if (phase == "calibration") return 6;
  // Each replay over E: an intervention, a calibration resample's, a group's.
  if (absl::StartsWith(phase, "replay:") || absl::StartsWith(phase, "calib ")) return 8;
  if (phase == "statistics") return kStatisticsPasses * 8;
  if (phase == "timing") return 4 * (3 + 2 * 2 * (1 + 2));
  return 0;  // windowing, done
}

TEST(ProgressTest, PhaseBoundariesAreTheWeightsCumulativeShares) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(1));
  auto dense = RandomModel(TinyConfig("dense"), Seeded(1));
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 6, 2));
  req.dense_twin = dense.get();
  req.options.interventions = {InterventionId::kCrossInput, InterventionId::kStaticLayer};
  req.options.calib_resamples = 1;  // static_layer is estimated on C: one more replay
  req.options.per_layer_interventions = {InterventionId::kStaticLayer};
  req.options.timing_warmup = 1;
  req.options.timing_repeats = 2;
  req.options.timing_max_repeats = 2;  // each block exactly 2 pairs
  struct Event {
    std::string phase;
    double fraction;
  };
  std::vector<Event> events;
  req.on_progress = [&](const AuditProgress& p) { events.push_back({p.phase, p.fraction}); };
  ASSERT_TRUE(RunAudit(req).ok());
  // correct (in LIVE), cross_input, static_layer; one calibration resample
  // of static_layer; static_layer at each of the 2 layers.
  const int replays = 2 + 1 + TinyConfig("featuregate").n_layers;
  const double total = 8 + 6 + replays * 8 + PhaseWeight("statistics") + PhaseWeight("timing");
  ASSERT_FALSE(events.empty());
  double before = 0;  // the weights of the phases finished
  int replay_phases = 0;
  std::vector<std::string> seen;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (i > 0) {
      EXPECT_GE(e.fraction, events[i - 1].fraction) << e.phase;
      if (e.phase == events[i - 1].phase) continue;
    }
    // A new phase: it starts where the weights of those before it end.
    if (i > 0) before += PhaseWeight(events[i - 1].phase);
    EXPECT_NEAR(e.fraction, before / total, 1e-12) << e.phase;
    seen.push_back(e.phase);
    replay_phases += PhaseWeight(e.phase) == 8 && e.phase != "live";
  }
  EXPECT_EQ(replay_phases, replays);
  EXPECT_EQ(seen.front(), "windowing");
  EXPECT_EQ(seen.back(), "done");
  EXPECT_EQ(events.back().fraction, 1.0);
  EXPECT_NE(std::find(seen.begin(), seen.end(), "statistics"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "timing"), seen.end());
}

TEST(ProgressTest, EachModelIsAnEqualShare) {
  auto a = RandomModel(TinyConfig("featuregate"), Varying(1));
  auto b = RandomModel(TinyConfig("featuregate"), Varying(2));
  AuditRequest req = Request({a.get(), b.get()}, RandomText(16 * 8, 1), RandomText(16 * 8, 2));
  req.options.interventions = {InterventionId::kCrossInput};
  std::vector<AuditProgress> events;
  req.on_progress = [&](const AuditProgress& p) { events.push_back(p); };
  ASSERT_TRUE(RunAudit(req).ok());
  bool second = false;
  for (const AuditProgress& p : events) {
    if (p.model_index != 1 || second) continue;
    second = true;
    EXPECT_EQ(p.phase, "windowing");
    EXPECT_EQ(p.fraction, 0.5);
  }
  EXPECT_TRUE(second);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().fraction, 1.0);
}

}  // namespace
}  // namespace fca::engine
