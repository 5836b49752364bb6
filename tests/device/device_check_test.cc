// The device check (docs/developing.md, "On a GPU"; scripts/device/check.sh):
// the same audits on the test device (FCA_TEST_DEVICE: cuda:0 on a GPU
// machine, cpu here) and on the CPU, row by row.
//
//   - float32 (TF32 off): every defined row of nll, penalty and eta2 metrics
//     within 1e-5 relative (of max(|a|, |b|, 1)), the same rows defined, and
//     every count and fraction of windows, positions and blocks equal;
//   - bfloat16: the same rows within 2^-7 relative, the rounding step of
//     bfloat16 (fca.md, "Numerics");
//   - on the device: REPLAY of the recording bitwise equal to LIVE
//     (replay_max_abs_diff 0), and `correct` agreeing with LIVE's experts at
//     every (token, router layer) of a model with routers.
//
// Models: featuregate-s1 and olmoe-s1 (models/), the tiny MUDDPythia and
// OLMoE checkpoints of tests/data. On the CPU both sides are the CPU: the
// check then shows that two loads audit alike, to the bit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/models/model_loader.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

struct Case {
  const char* name;
  std::string dir;
  int64_t window;
};

std::vector<Case> Cases() {
  const std::string models = FCA_MODELS_DIR, data = FCA_TEST_DATA_DIR;
  return {{"featuregate-s1", models + "/featuregate-s1", 64},
          {"olmoe-s1", models + "/olmoe-s1", 64},
          {"muddpythia-tiny", data + "/muddpythia-tiny-fp32", 32},
          {"olmoe-tiny", data + "/olmoe-tiny", 16}};
}

// Deterministic printable text, the same on every machine.
std::string Text(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(' ' + rng.Uniform(95)));
  return s;
}

using Key = std::tuple<std::string, std::string, std::string>;  // model, intervention, metric

std::map<Key, ResultRow> Rows(const AuditReport& report) {
  std::map<Key, ResultRow> rows;
  for (const ModelReport& m : report.models) {
    for (ResultRow& row : ResultRows(m)) {
      Key key{row.model, row.intervention, row.metric};
      rows.emplace(std::move(key), std::move(row));
    }
  }
  return rows;
}

// The metrics compared by value: NLLs, penalties and the eta2 family.
bool Compared(const std::string& metric) {
  return metric == "nll" || metric == "penalty" || metric.rfind("eta2", 0) == 0;
}

absl::StatusOr<AuditReport> Audit(const Case& c, const ComputeOptions& compute) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<ControlledModel> model, LoadModel(c.dir, c.name, compute));
  AuditRequest req;
  req.models = {model.get()};
  req.eval.name = "eval";
  req.eval.text = Text(static_cast<size_t>(c.window) * 24, 1);
  req.calib.name = "calib";
  req.calib.text = Text(static_cast<size_t>(c.window) * 16, 2);
  req.options.window_length = c.window;
  req.options.batch_size = 4;
  req.options.bootstrap_resamples = 200;
  req.options.timing_repeats = 0;
  req.options.fidelity_check_every = 1;
  req.options.seed = 11;
  return RunAudit(req);
}

class DeviceCheckTest : public ::testing::TestWithParam<ComputeDType> {
 protected:
  static void SetUpTestSuite() {
    // float32 matmuls in float32 (no TF32), as on the CPU.
    at::globalContext().setFloat32MatmulPrecision("highest");
  }
};

TEST_P(DeviceCheckTest, AuditsOnTheDeviceEqualTheCpus) {
  const ComputeDType dtype = GetParam();
  const double rtol = dtype == ComputeDType::kFloat32 ? 1e-5 : std::ldexp(1.0, -7);
  ComputeOptions cpu, device = testing::TestCompute();
  cpu.dtype = device.dtype = dtype;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(std::string(c.name) + " on " + device.device);
    absl::StatusOr<AuditReport> on_cpu = Audit(c, cpu);
    absl::StatusOr<AuditReport> on_device = Audit(c, device);
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
    ASSERT_TRUE(on_device.ok()) << on_device.status();
    const ModelReport& d = on_device->models[0];
    EXPECT_EQ(d.replay_max_abs_diff, 0.0) << "REPLAY of the recording is not LIVE";
    for (const InterventionResult& i : d.interventions) {
      if (i.name == "correct" && i.topk_agreement.has_value()) {
        EXPECT_EQ(i.topk_agreement->fraction, 1.0);
      }
    }
    const std::map<Key, ResultRow> a = Rows(*on_cpu), b = Rows(*on_device);
    ASSERT_EQ(a.size(), b.size());
    int compared = 0;
    for (const auto& [key, x] : a) {
      const auto it = b.find(key);
      ASSERT_NE(it, b.end()) << std::get<1>(key) << " " << std::get<2>(key);
      const ResultRow& y = it->second;
      const std::string what = std::get<1>(key) + " " + std::get<2>(key);
      EXPECT_EQ(x.defined, y.defined) << what;
      EXPECT_EQ(x.n, y.n) << what;
      if (!x.defined || !y.defined || !Compared(x.metric)) continue;
      const double scale = std::max({std::abs(x.value), std::abs(y.value), 1.0});
      EXPECT_LE(std::abs(x.value - y.value), rtol * scale)
          << what << ": " << x.value << " vs " << y.value;
      ++compared;
    }
    EXPECT_GT(compared, 0);
    std::printf("[ measured ] %s, %s: %d rows compared\n", c.name, ComputeDTypeName(dtype),
                compared);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DeviceCheckTest,
                         ::testing::Values(ComputeDType::kFloat32, ComputeDType::kBFloat16),
                         [](const ::testing::TestParamInfo<ComputeDType>& info) {
                           return std::string(ComputeDTypeName(info.param));
                         });

}  // namespace
}  // namespace fca::engine
