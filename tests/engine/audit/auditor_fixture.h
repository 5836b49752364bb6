// What the auditor's tests share (auditor_test.cc, auditor_cache_test.cc,
// auditor_science_test.cc): the datasets, options and request of a small
// audit, models that wrap a real one, and a coefficient cache in memory.
#ifndef FCA_TESTS_ENGINE_AUDIT_AUDITOR_FIXTURE_H_
#define FCA_TESTS_ENGINE_AUDIT_AUDITOR_FIXTURE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/audit/auditor.h"
#include "tests/testing/test_models.h"

namespace fca::engine::testing {

Dataset Text(const std::string& name, std::string text);

std::string RandomText(size_t n, uint64_t seed);

// Random weights whose controller output varies with the input.
InitOptions Varying(uint64_t seed);

InitOptions Seeded(uint64_t seed);

AuditOptions SmallOptions();

AuditRequest Request(std::vector<ControlledModel*> models, std::string eval, std::string calib);

// The report's result for intervention `name` (a test failure when there is none).
const InterventionResult& Find(const ModelReport& r, const std::string& name);

// The whole audit of a GateDependentModel on 16 windows of 32 tokens
// (shorter {a, b} windows repeat by chance between E and C).
absl::StatusOr<AuditReport> AuditGateDependent(ControlledModel* model);

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

}  // namespace fca::engine::testing

#endif  // FCA_TESTS_ENGINE_AUDIT_AUDITOR_FIXTURE_H_
