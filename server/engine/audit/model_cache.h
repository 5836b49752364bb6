// The coefficient cache as one model's audit uses it (fca.md "Cached
// coefficients"): windows read and written in the model's compute dtype,
// the verdict on whether its entries can be trusted, and the time spent.
// Torch-free header; tensors are forward-declared.
#ifndef FCA_SERVER_ENGINE_AUDIT_MODEL_CACHE_H_
#define FCA_SERVER_ENGINE_AUDIT_MODEL_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/audit/audit_types.h"
#include "server/engine/audit/coefficients.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// Thread-safe: batches running at once read, write and judge through one.
class ModelCache {
 public:
  // Whether the audit may take coefficients from the cache: not until one
  // cached batch has matched a fresh recording (Judge). Ignoring is final.
  enum class Trust { kUnchecked, kTrusted, kIgnored };

  // `cache` may be null: nothing is found and nothing is written.
  ModelCache(CoefficientCache* cache, const ControlledModel& model, const AuditOptions& options)
      : cache_(cache), model_(model), opt_(options) {}

  bool enabled() const { return cache_ != nullptr; }
  Trust trust() const;

  // The cached coefficients of windows [b, e) of `w` as [e-b, T, d_s]
  // tensors on the host, or an empty list unless every window is cached
  // (always empty once the cache is ignored).
  SiteTensors Read(const WindowSet& w, int64_t b, int64_t e);
  // Stores the recorded coefficients of windows [b, b + batch) of `w`,
  // given on the host (ToHost).
  void Write(const WindowSet& w, const SiteTensors& rec, int64_t b);

  // Compares a cached batch with a fresh recording of the same windows:
  // entries made in another batch layout differ by rounding (trusted within
  // the fidelity tolerance, plus one unit in the last place of a 16-bit
  // dtype); entries that differ by more (a corrupt cache, a model that is not
  // deterministic) make the cache ignored for this model and rewritten,
  // never fail the audit. Returns the note to show when this call is the one
  // that ignored it, else "". `set` names the windows' set in that note.
  // Both lists are on the host.
  std::string Judge(const SiteTensors& cached, const SiteTensors& rec, const char* set, int64_t b,
                    int64_t e);

  // Largest |cached - fresh| Judge has seen (0 when it never compared).
  double max_abs_diff() const;
  // Thread-seconds spent reading (lookups and decoding, hits and misses)
  // and writing.
  double read_seconds() const;
  double write_seconds() const;

 private:
  SiteTensors ReadWindows(const WindowSet& w, int64_t b, int64_t e) const;
  void WriteWindows(const WindowSet& w, const SiteTensors& rec, int64_t b) const;
  SiteTensors DecodeWindows(const std::vector<std::string>& blobs) const;
  CoefficientCacheKey Key(const std::string& window_hash) const;
  size_t WindowBytes() const;
  size_t ElementSize() const;

  CoefficientCache* const cache_ ABSL_PT_GUARDED_BY(cache_mu_);
  const ControlledModel& model_;
  const AuditOptions& opt_;
  mutable absl::Mutex mu_;
  Trust trust_ ABSL_GUARDED_BY(mu_) = Trust::kUnchecked;
  double max_abs_diff_ ABSL_GUARDED_BY(mu_) = 0;
  double read_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double write_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  // CoefficientCache is thread-compatible: one call at a time.
  mutable absl::Mutex cache_mu_;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_MODEL_CACHE_H_
