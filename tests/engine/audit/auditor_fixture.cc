#include "tests/engine/audit/auditor_fixture.h"

#include <gtest/gtest.h>

#include "common/random.h"

namespace fca::engine::testing {

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

absl::StatusOr<AuditReport> AuditGateDependent(ControlledModel* model) {
  AuditRequest req = Request({model}, GateDependentText(32 * 16, 1), GateDependentText(32 * 16, 2));
  req.options.window_length = 32;
  return RunAudit(req);
}

}  // namespace fca::engine::testing
