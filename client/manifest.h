// Job manifests: the proto3 canonical JSON of fca.v1.AuditSpec.
//
// `fca audit --save_manifest=FILE` writes exactly the spec it submits and
// `fca audit --manifest=FILE` reads it back, so any job can be rerun. Flags
// given explicitly on the command line override the manifest field by field
// (MergeSpec). Problems with a manifest are usage errors (exit 2): the
// server is never asked.
#ifndef FCA_CLIENT_MANIFEST_H_
#define FCA_CLIENT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca::client {

// Strict parse: an unknown field, a wrong type or malformed JSON is a usage
// error naming the problem. Both lowerCamelCase and snake_case names are
// accepted (the proto3 JSON mapping allows either).
[[nodiscard]] absl::StatusOr<fca::v1::AuditSpec> ParseManifest(std::string_view json);
// ParseManifest of a file; an unreadable file is a usage error too. Errors
// are prefixed with the path.
[[nodiscard]] absl::StatusOr<fca::v1::AuditSpec> LoadManifest(const std::string& path);

// Pretty canonical JSON with every field printed (defaults included), so a
// saved manifest doubles as a template showing every knob.
std::string ManifestJson(const fca::v1::AuditSpec& spec);
// Writes ManifestJson to `path` (via a temporary file and a rename, so a
// failed write never leaves half a manifest). Usage error on failure.
[[nodiscard]] absl::Status SaveManifest(const std::string& path, const fca::v1::AuditSpec& spec);

// The manifest that reruns a stored job (`fca jobs manifest`): its spec as
// the server normalized it (every default applied), with both datasets
// pinned by content ("sha256:<hex>" from the job's provenance), so a rerun
// reads the same bytes whatever the names stand for by then.
// FAILED_PRECONDITION for a job stored before provenance was kept (its
// dataset hashes are unknown).
[[nodiscard]] absl::StatusOr<fca::v1::AuditSpec> RerunSpec(const fca::v1::Job& job);

// The AuditSpec fields a user set explicitly with flags; unset members leave
// the base spec's field alone.
struct SpecOverrides {
  std::optional<std::vector<std::string>> models;
  std::optional<std::string> dense_twin;
  std::optional<std::string> eval_dataset;
  std::optional<std::string> calib_dataset;
  std::optional<std::vector<std::string>> interventions;
  std::optional<int64_t> window_length;
  std::optional<int64_t> max_eval_windows;
  std::optional<int64_t> max_calib_windows;
  std::optional<int64_t> batch_size;
  std::optional<uint64_t> seed;
  std::optional<bool> per_site_shuffle;
  std::optional<int32_t> bootstrap_resamples;
  std::optional<double> ci_level;
  std::optional<bool> allow_overlap;
  std::optional<int32_t> timing_repeats;
  std::optional<std::string> label;
  std::optional<int32_t> timing_max_repeats;
  std::optional<double> timing_budget_seconds;
  std::optional<std::vector<std::string>> per_layer_interventions;
  std::optional<std::string> per_layer_scope;
  std::optional<int32_t> fidelity_check_every;
  std::optional<std::string> retention_baseline;
  std::optional<int64_t> bootstrap_block_length;
  std::optional<int32_t> static_token_min_count;
  std::optional<int32_t> calib_resamples;
  std::optional<std::string> dense_twin_mismatch;
};

// `base` with every set override applied; repeated fields are replaced, not
// appended (`--models=a` on top of a manifest naming b,c audits only a).
fca::v1::AuditSpec MergeSpec(fca::v1::AuditSpec base, const SpecOverrides& overrides);

// Client-side sanity check before submitting: at least one model and an
// evaluation dataset. Everything else is the server's to validate, so the
// CLI never disagrees with it. Usage error naming the missing flag.
[[nodiscard]] absl::Status CheckSpecComplete(const fca::v1::AuditSpec& spec);

}  // namespace fca::client

#endif  // FCA_CLIENT_MANIFEST_H_
