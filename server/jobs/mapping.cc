#include "server/jobs/mapping.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/proto_json.h"

namespace fca::jobs {

v1::JobState ToProto(storage::JobState s) {
  switch (s) {
    case storage::JobState::kQueued:
      return v1::JOB_STATE_QUEUED;
    case storage::JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case storage::JobState::kSucceeded:
      return v1::JOB_STATE_SUCCEEDED;
    case storage::JobState::kFailed:
      return v1::JOB_STATE_FAILED;
    case storage::JobState::kCancelled:
      return v1::JOB_STATE_CANCELLED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

absl::StatusOr<storage::JobState> FromProto(v1::JobState s) {
  switch (s) {
    case v1::JOB_STATE_QUEUED:
      return storage::JobState::kQueued;
    case v1::JOB_STATE_RUNNING:
      return storage::JobState::kRunning;
    case v1::JOB_STATE_SUCCEEDED:
      return storage::JobState::kSucceeded;
    case v1::JOB_STATE_FAILED:
      return storage::JobState::kFailed;
    case v1::JOB_STATE_CANCELLED:
      return storage::JobState::kCancelled;
    default:
      return absl::InvalidArgumentError("job state must be set");
  }
}

std::string DatasetKindName(v1::DatasetKind kind) {
  return kind == v1::DATASET_KIND_TOKENS_INT32 ? "tokens" : "text";
}

v1::DatasetKind DatasetKindFromName(const std::string& name) {
  return name == "tokens" ? v1::DATASET_KIND_TOKENS_INT32 : v1::DATASET_KIND_TEXT;
}

v1::Dataset ToProto(const storage::DatasetRecord& d) {
  v1::Dataset out;
  out.set_id(d.id);
  out.set_name(d.name);
  out.set_kind(DatasetKindFromName(d.kind));
  out.set_sha256(d.sha256);
  out.set_size_bytes(d.size_bytes);
  out.set_owner(d.owner);
  out.set_project(d.project);
  runtime::ToTimestamp(d.created_at_us, out.mutable_created_at());
  return out;
}

namespace {

// The fields a stored row shares with an engine row.
engine::ResultRow EngineRow(const storage::ResultRow& r) {
  engine::ResultRow out;
  out.model = r.model;
  out.intervention = r.intervention;
  out.metric = r.metric;
  out.value = r.value;
  out.defined = r.defined;
  out.ci_low = r.ci_low;
  out.ci_high = r.ci_high;
  out.n = r.n;
  return out;
}

}  // namespace

v1::Result ToProto(const storage::ResultRow& r) {
  v1::Result out = runtime::RowToProto(EngineRow(r));
  out.set_job_id(r.job_id);
  out.set_weights_sha256(r.weights_sha256);
  out.set_dataset_sha256(r.dataset_sha256);
  out.set_calib_sha256(r.calib_sha256);
  runtime::ToTimestamp(r.created_at_us, out.mutable_created_at());
  return out;
}

v1::Model ToProto(const engine::ModelInfo& info, const std::vector<engine::CoefficientSite>& sites,
                  const std::string& tokenizer) {
  v1::Model m;
  m.set_name(info.name);
  m.set_family(info.family);
  m.set_weights_sha256(info.weights_sha256);
  m.set_num_parameters(info.num_parameters);
  m.set_vocab_size(info.vocab_size);
  m.set_max_seq_len(info.max_seq_len);
  m.set_num_layers(info.num_layers);
  m.set_tokenizer(tokenizer);
  for (const engine::CoefficientSite& s : sites) {
    v1::CoefficientSite* out = m.add_sites();
    out->set_name(s.name);
    out->set_family(s.family);
    out->set_layer(s.layer);
    out->set_channels(s.channels);
  }
  return m;
}

absl::StatusOr<v1::AuditSpec> StoredSpec(const storage::JobRecord& job) {
  v1::AuditSpec spec;
  const absl::Status st = ParseProtoJson(job.spec_json, &spec);
  if (!st.ok()) {
    return absl::DataLossError(absl::StrFormat("job %d: stored spec: %s", job.id, st.message()));
  }
  return spec;
}

absl::StatusOr<v1::Job> ToProto(const storage::JobRecord& job, double progress) {
  v1::Job out;
  out.set_id(job.id);
  out.set_owner(job.owner);
  out.set_project(job.project);
  out.set_state(ToProto(job.state));
  auto spec = StoredSpec(job);
  if (!spec.ok()) return spec.status();
  *out.mutable_spec() = *spec;
  runtime::ToTimestamp(job.created_at_us, out.mutable_created_at());
  if (job.started_at_us) runtime::ToTimestamp(job.started_at_us, out.mutable_started_at());
  if (job.finished_at_us) runtime::ToTimestamp(job.finished_at_us, out.mutable_finished_at());
  out.set_error(job.error);
  out.set_attempts(job.attempts);
  out.set_cancel_requested(job.cancel_requested);
  out.set_progress(job.state == storage::JobState::kSucceeded ? 1.0 : progress);
  if (!job.provenance_json.empty()) {
    absl::Status st = runtime::ProvenanceFromJson(job.provenance_json, out.mutable_provenance());
    if (!st.ok()) return st;
  }
  return out;
}

runtime::Lease LeaseOf(const storage::TaskRecord& task) {
  return runtime::Lease{task.id, task.lease_seq};
}

absl::StatusOr<v1::JobTask> ToProto(const storage::TaskRecord& task) {
  v1::JobTask out;
  out.set_index(task.index);
  out.set_model(task.model);
  out.set_state(ToProto(task.state));
  out.set_attempts(task.attempts);
  if (task.state == storage::JobState::kRunning) out.set_worker(task.worker);
  out.set_error(task.error);
  if (task.started_at_us > 0) runtime::ToTimestamp(task.started_at_us, out.mutable_started_at());
  if (task.finished_at_us > 0) runtime::ToTimestamp(task.finished_at_us, out.mutable_finished_at());
  if (!task.provenance_json.empty()) {
    absl::Status st = runtime::ProvenanceFromJson(task.provenance_json, out.mutable_provenance());
    if (!st.ok()) return st;
  }
  return out;
}

std::vector<storage::ResultRow> ToStorageRows(const std::vector<engine::ResultRow>& engine_rows,
                                              const std::string& weights_sha256, int64_t job_id,
                                              const RowDatasets& datasets) {
  std::vector<storage::ResultRow> rows;
  for (const engine::ResultRow& r : engine_rows) {
    storage::ResultRow s;
    s.job_id = job_id;
    s.model = r.model;
    s.weights_sha256 = weights_sha256;
    s.dataset_sha256 = datasets.eval_sha256;
    s.calib_sha256 = datasets.calib_sha256;
    s.intervention = r.intervention;
    s.metric = r.metric;
    s.value = r.value;
    s.defined = r.defined;
    s.ci_low = r.ci_low;
    s.ci_high = r.ci_high;
    s.n = r.n;
    rows.push_back(std::move(s));
  }
  return rows;
}

}  // namespace fca::jobs
