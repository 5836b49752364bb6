#include "client/manifest.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "common/file.h"
#include "common/proto_json.h"

namespace fca::client {

namespace v1 = ::fca::v1;

absl::StatusOr<v1::AuditSpec> ParseManifest(std::string_view json) {
  v1::AuditSpec spec;
  // A typo must not be ignored. Both spellings of a field load: manifests
  // written before fca's JSON was snake_case (`windowLength`) too.
  const absl::Status status = ParseProtoJson(json, &spec, UnknownFields::kRefuse);
  if (!status.ok()) {
    return UsageError(absl::StrFormat("not an AuditSpec manifest: %s", status.message()));
  }
  return spec;
}

absl::StatusOr<v1::AuditSpec> LoadManifest(const std::string& path) {
  const absl::StatusOr<std::string> text = ReadFile(path, "manifest");
  if (!text.ok()) return UsageError(std::string(text.status().message()));
  auto spec = ParseManifest(*text);
  if (!spec.ok()) {
    return UsageError(absl::StrFormat("manifest %s: %s", path, spec.status().message()));
  }
  return spec;
}

std::string ManifestJson(const v1::AuditSpec& spec) {
  // Printing fails only on invalid UTF-8, which a spec the server accepted
  // does not hold; an empty object is the least surprising fallback.
  absl::StatusOr<std::string> out = PrintProtoJson(spec, /*pretty=*/true);
  return out.ok() ? *std::move(out) : std::string("{}\n");
}

absl::Status SaveManifest(const std::string& path, const v1::AuditSpec& spec) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << ManifestJson(spec);
    out.close();
    if (!out) {
      std::remove(temp.c_str());
      return UsageError(absl::StrFormat("cannot write manifest %s", path));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return UsageError(absl::StrFormat("cannot write manifest %s", path));
  }
  return absl::OkStatus();
}

namespace {

void ReplaceRepeated(const std::vector<std::string>& values,
                     google::protobuf::RepeatedPtrField<std::string>* field) {
  field->Clear();
  for (const auto& v : values) *field->Add() = v;
}

}  // namespace

v1::AuditSpec MergeSpec(v1::AuditSpec base, const SpecOverrides& o) {
  if (o.models) ReplaceRepeated(*o.models, base.mutable_models());
  if (o.dense_twin) base.set_dense_twin(*o.dense_twin);
  if (o.eval_dataset) base.set_eval_dataset(*o.eval_dataset);
  if (o.calib_dataset) base.set_calib_dataset(*o.calib_dataset);
  if (o.interventions) {
    ReplaceRepeated(*o.interventions, base.mutable_interventions());
  }
  if (o.window_length) base.set_window_length(*o.window_length);
  if (o.max_eval_windows) base.set_max_eval_windows(*o.max_eval_windows);
  if (o.max_calib_windows) base.set_max_calib_windows(*o.max_calib_windows);
  if (o.batch_size) base.set_batch_size(*o.batch_size);
  if (o.seed) base.set_seed(*o.seed);
  if (o.per_site_shuffle) base.set_per_site_shuffle(*o.per_site_shuffle);
  if (o.bootstrap_resamples) {
    base.set_bootstrap_resamples(*o.bootstrap_resamples);
  }
  if (o.ci_level) base.set_ci_level(*o.ci_level);
  if (o.allow_overlap) base.set_allow_overlap(*o.allow_overlap);
  if (o.timing_repeats) base.set_timing_repeats(*o.timing_repeats);
  if (o.label) base.set_label(*o.label);
  if (o.timing_max_repeats) base.set_timing_max_repeats(*o.timing_max_repeats);
  if (o.timing_budget_seconds) base.set_timing_budget_seconds(*o.timing_budget_seconds);
  if (o.per_layer_interventions) {
    ReplaceRepeated(*o.per_layer_interventions, base.mutable_per_layer_interventions());
  }
  if (o.per_layer_scope) base.set_per_layer_scope(*o.per_layer_scope);
  if (o.fidelity_check_every) base.set_fidelity_check_every(*o.fidelity_check_every);
  if (o.retention_baseline) base.set_retention_baseline(*o.retention_baseline);
  if (o.bootstrap_block_length) base.set_bootstrap_block_length(*o.bootstrap_block_length);
  if (o.static_token_min_count) base.set_static_token_min_count(*o.static_token_min_count);
  if (o.calib_resamples) base.set_calib_resamples(*o.calib_resamples);
  if (o.dense_twin_mismatch) base.set_dense_twin_mismatch(*o.dense_twin_mismatch);
  return base;
}

absl::StatusOr<v1::AuditSpec> RerunSpec(const v1::Job& job) {
  const v1::Provenance& p = job.provenance();
  if (p.eval_sha256().empty() || p.calib_sha256().empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %d was stored without its dataset hashes (before provenance was kept); "
        "its spec is in `fca jobs show %d`",
        job.id(), job.id()));
  }
  v1::AuditSpec spec = job.spec();
  spec.set_eval_dataset("sha256:" + p.eval_sha256());
  spec.set_calib_dataset("sha256:" + p.calib_sha256());
  return spec;
}

absl::Status CheckSpecComplete(const v1::AuditSpec& spec) {
  if (spec.models_size() == 0) {
    return UsageError("no models: pass --models=a,b or a --manifest");
  }
  if (spec.eval_dataset().empty()) {
    return UsageError("no evaluation dataset: pass --eval=NAME or a --manifest");
  }
  return absl::OkStatus();
}

}  // namespace fca::client
