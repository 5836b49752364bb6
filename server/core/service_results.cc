// AuditServiceCore: results, coefficients, reports, the queue, server info, job windows, backups
// and webhooks.
#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/build_version.h"
#include "common/host_port.h"
#include "common/json.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/vocabulary.h"
#include "server/core/metric_catalog.h"
#include "server/core/pooling.h"
#include "server/core/report_assembly.h"
#include "server/core/service.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/torch_util.h"
#include "server/jobs/datasets.h"
#include "server/jobs/mapping.h"
#include "server/jobs/server_metrics.h"

namespace fca::core {

// --- results ---

namespace {

// Repeated filter values, bounded: each becomes one bound SQL parameter.
template <typename Repeated, typename T>
absl::Status CopyFilterValues(const Repeated& values, const char* field, std::vector<T>* out) {
  if (values.size() > AuditServiceCore::kMaxFilterValues) {
    return absl::InvalidArgumentError(absl::StrFormat("filter.%s has %d values; at most %d", field,
                                                      values.size(),
                                                      AuditServiceCore::kMaxFilterValues));
  }
  out->assign(values.begin(), values.end());
  return absl::OkStatus();
}

std::optional<std::string> NonEmpty(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return s;
}

// A metric filter names a stored metric of the vocabulary (common/vocabulary.h,
// its one home): a typo would otherwise match no row and look like "no
// results". The refusal lists the known names, keyed ones as patterns.
absl::Status CheckMetricName(const std::string& metric) {
  if (metric.empty() || FindMetric(metric) != nullptr) return absl::OkStatus();
  std::vector<std::string> known;
  for (const MetricDef& d : MetricDefs()) known.push_back(MetricPattern(d));
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown metric '%s'; the known metrics (a <field> stands for its key, as in "
                      "\"eta2.attn_gate\"): %s",
                      json::ToValidUtf8(metric.substr(0, 64)), absl::StrJoin(known, ", ")));
}

}  // namespace

absl::StatusOr<storage::ResultFilter> AuditServiceCore::ResultFilterFor(const Caller& caller,
                                                                        const v1::ResultFilter& f) {
  storage::ResultFilter filter;
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.job_ids(), "job_ids", &filter.job_ids));
  if (f.job_id() != 0) filter.job_id = f.job_id();
  if (!filter.job_id && filter.job_ids.empty() && !caller.admin) {
    return absl::InvalidArgumentError(
        "filter.job_id or filter.job_ids is required (only admins query all jobs)");
  }
  if (filter.job_id) FCA_RETURN_IF_ERROR(VisibleJob(caller, *filter.job_id).status());
  for (int64_t id : filter.job_ids) FCA_RETURN_IF_ERROR(VisibleJob(caller, id).status());
  filter.model = NonEmpty(f.model());
  filter.dataset_sha256 = NonEmpty(f.dataset_sha256());
  filter.intervention = NonEmpty(f.intervention());
  FCA_RETURN_IF_ERROR(CheckMetricName(f.metric()));
  for (const std::string& metric : f.metrics()) FCA_RETURN_IF_ERROR(CheckMetricName(metric));
  filter.metric = NonEmpty(f.metric());
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.models(), "models", &filter.models));
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.interventions(), "interventions", &filter.interventions));
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.metrics(), "metrics", &filter.metrics));
  FCA_ASSIGN_OR_RETURN(
      filter.created_after_us,
      runtime::TimeBound(f.has_created_after(), f.created_after(), "created_after"));
  FCA_ASSIGN_OR_RETURN(
      filter.created_before_us,
      runtime::TimeBound(f.has_created_before(), f.created_before(), "created_before"));
  FCA_RETURN_IF_ERROR(runtime::CheckTimeRange(filter.created_after_us, filter.created_before_us));
  return filter;
}

absl::StatusOr<v1::QueryResultsResponse> AuditServiceCore::QueryResults(
    const Caller& caller, const v1::QueryResultsRequest& request) {
  FCA_ASSIGN_OR_RETURN(const storage::ResultFilter filter,
                       ResultFilterFor(caller, request.filter()));
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError("page_size must be in [0, 1000]");
  }
  FCA_ASSIGN_OR_RETURN(storage::ResultPage page,
                       store_->QueryResults(filter, request.page_size(), request.page_token()));
  v1::QueryResultsResponse response;
  for (const storage::ResultRow& r : page.rows) *response.add_results() = jobs::ToProto(r);
  response.set_next_page_token(page.next_page_token);
  return response;
}

absl::Status AuditServiceCore::ExportCoefficients(
    const Caller& caller, const v1::ExportCoefficientsRequest& request,
    const std::function<bool(const v1::ExportCoefficientsResponse&)>& write) {
  // Before the model: a non-member learns nothing, and loads no weights.
  FCA_ASSIGN_OR_RETURN(const std::string project, ProjectOrPersonal(caller, request.project()));
  FCA_RETURN_IF_ERROR(RoleIn(caller, project).status());
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<engine::ControlledModel> model,
                       models_->Get(request.model()));
  const std::string dtype =
      request.dtype().empty() ? ComputeDTypeName(ComputeDType::kFloat32) : request.dtype();
  if (request.window_hash().empty()) return absl::InvalidArgumentError("window_hash is empty");
  // The project's entries only: a guessed window hash must not reveal, let
  // alone hand over, what another project audited.
  FCA_ASSIGN_OR_RETURN(
      std::optional<storage::CoefficientEntry> entry,
      store_->GetCoefficients({project, model->info().weights_sha256, request.window_hash(), dtype,
                               model->info().compute.device}));
  if (!entry) {
    return absl::NotFoundError(
        absl::StrFormat("no cached coefficients of model '%s' on window %s in %s", request.model(),
                        request.window_hash().substr(0, 64), dtype));
  }
  int64_t per_token = 0;
  for (const engine::CoefficientSite& s : model->sites()) per_token += s.channels;
  // Entries are stored under the names of common/vocabulary.h's dtypes.
  const std::optional<ComputeDType> stored = ParseComputeDType(dtype);
  if (!stored) return absl::DataLossError("a cached entry has no known dtype: " + dtype);
  const int64_t element = ComputeDTypeDefOf(*stored).element_bytes;
  v1::ExportCoefficientsResponse header;
  v1::CoefficientsHeader* h = header.mutable_header();
  h->set_model(request.model());
  h->set_weights_sha256(model->info().weights_sha256);
  h->set_window_hash(request.window_hash());
  h->set_dtype(dtype);
  h->set_window_length(per_token > 0 ? entry->blob.size() / (per_token * element) : 0);
  *h->mutable_sites() = jobs::ToProto(model->info(), model->sites(), "").sites();
  h->set_total_bytes(entry->blob.size());
  if (!write(header)) return absl::OkStatus();
  for (size_t off = 0; off < entry->blob.size(); off += kChunkBytes) {
    v1::ExportCoefficientsResponse chunk;
    chunk.set_chunk(entry->blob.substr(off, kChunkBytes));
    if (!write(chunk)) return absl::OkStatus();
  }
  return absl::OkStatus();
}

// --- reports, server info, windows ---

absl::StatusOr<std::vector<v1::Result>> AuditServiceCore::JobRows(int64_t job_id) {
  storage::ResultFilter filter;
  filter.job_id = job_id;
  std::vector<v1::Result> rows;
  std::string token;
  do {
    FCA_ASSIGN_OR_RETURN(storage::ResultPage page,
                         store_->QueryResults(filter, storage::Store::kMaxPageSize, token));
    for (const storage::ResultRow& r : page.rows) rows.push_back(jobs::ToProto(r));
    token = page.next_page_token;
  } while (!token.empty());
  return rows;
}

absl::StatusOr<v1::GetReportResponse> AuditServiceCore::GetReport(
    const Caller& caller, const v1::GetReportRequest& request) {
  FCA_ASSIGN_OR_RETURN(const storage::JobRecord job, VisibleJob(caller, request.job_id()));
  FCA_ASSIGN_OR_RETURN(const v1::Job proto, JobWithTasks(job));
  FCA_ASSIGN_OR_RETURN(const std::vector<v1::Result> rows, JobRows(job.id));
  return BuildReport(proto, rows);
}

absl::StatusOr<v1::CompareJobsResponse> AuditServiceCore::CompareJobs(
    const Caller& caller, const v1::CompareJobsRequest& request) {
  if (request.job_ids().empty() || request.job_ids_size() > kMaxCompareJobs) {
    return absl::InvalidArgumentError(absl::StrFormat("compare 1 to %d jobs; the request names %d",
                                                      kMaxCompareJobs, request.job_ids_size()));
  }
  v1::CompareJobsResponse response;
  for (int64_t id : request.job_ids()) {
    v1::GetReportRequest one;
    one.set_job_id(id);
    FCA_ASSIGN_OR_RETURN(v1::GetReportResponse report, GetReport(caller, one));
    if (!request.include_sites()) report.clear_sites();
    *response.add_reports() = std::move(report);
  }
  return response;
}

absl::StatusOr<v1::PoolJobsResponse> AuditServiceCore::PoolJobs(
    const Caller& caller, const v1::PoolJobsRequest& request) {
  FCA_RETURN_IF_ERROR(CheckPoolRequest(request));
  // Every job's visibility before anything about any of them is said.
  std::vector<storage::JobRecord> records;
  for (int64_t id : request.job_ids()) {
    FCA_ASSIGN_OR_RETURN(storage::JobRecord job, VisibleJob(caller, id));
    records.push_back(std::move(job));
  }
  std::vector<std::pair<v1::Job, std::vector<v1::Result>>> jobs;
  for (const storage::JobRecord& job : records) {
    FCA_ASSIGN_OR_RETURN(v1::Job proto, JobWithTasks(job));
    FCA_ASSIGN_OR_RETURN(std::vector<v1::Result> rows, JobRows(job.id));
    jobs.emplace_back(std::move(proto), std::move(rows));
  }
  return PoolReports(jobs);
}

absl::StatusOr<v1::GetQueueResponse> AuditServiceCore::GetQueue(const Caller& caller) {
  return QueueView(caller, store_, loaded_models_);
}

absl::StatusOr<v1::GetServerInfoResponse> AuditServiceCore::GetServerInfo(const Caller&) {
  v1::GetServerInfoResponse r;
  r.set_server_version(BuildVersion());
  r.set_engine_version(engine::EngineVersion());
  r.set_torch_version(engine::TorchVersion());
  r.mutable_devices()->Assign(facts_.devices.begin(), facts_.devices.end());
  r.set_dtype(ComputeDTypeName(models_->options().compute.dtype));
  r.set_workers(static_cast<int32_t>(facts_.devices.size()));
  r.set_executor(facts_.executor);
  r.set_auth(facts_.auth);
  r.set_max_dataset_bytes(limits_.max_dataset_bytes);
  r.set_max_windows(limits_.spec.max_windows);
  r.set_max_window_length(limits_.spec.max_window_length);
  r.set_max_models(limits_.spec.max_models);
  r.set_max_queued_jobs_per_user(limits_.max_queued_jobs_per_user);
  AddVocabulary(&r);
  return r;
}

namespace {

// One dataset's windows as a task cuts them (engine::ModelAudit): the
// token stream up to the windows' need, then MakeWindows.
absl::StatusOr<engine::WindowSet> JobWindows(storage::Store* store, const v1::AuditSpec& spec,
                                             const std::string& project,
                                             const engine::Tokenizer& tokenizer, bool calibration) {
  FCA_ASSIGN_OR_RETURN(runtime::DatasetBytes bytes,
                       jobs::ReadJobDataset(store, spec, project, calibration));
  FCA_ASSIGN_OR_RETURN(const engine::Dataset dataset, runtime::MakeDataset(std::move(bytes)));
  const int64_t max_windows = calibration ? spec.max_calib_windows() : spec.max_eval_windows();
  FCA_ASSIGN_OR_RETURN(const std::vector<int32_t> stream,
                       engine::TokenStream(dataset, tokenizer, max_windows * spec.window_length()));
  return engine::MakeWindows(stream, spec.window_length(), max_windows, dataset.name);
}

}  // namespace

absl::StatusOr<v1::ListJobWindowsResponse> AuditServiceCore::ListJobWindows(
    const Caller& caller, const v1::ListJobWindowsRequest& request) {
  FCA_ASSIGN_OR_RETURN(const storage::JobRecord job, VisibleJob(caller, request.job_id()));
  FCA_ASSIGN_OR_RETURN(const v1::AuditSpec spec, jobs::StoredSpec(job));
  const std::string model =
      request.model().empty() && spec.models_size() > 0 ? spec.models(0) : request.model();
  if (std::find(spec.models().begin(), spec.models().end(), model) == spec.models().end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job %d does not audit model '%s'", job.id, model.substr(0, 128)));
  }
  // The tokenizer only: listing windows must not load multi-GB weights.
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const engine::Tokenizer> tokenizer,
                       models_->GetTokenizer(model));
  v1::ListJobWindowsResponse response;
  response.set_model(model);
  response.set_window_length(spec.window_length());
  for (const bool calibration : {false, true}) {
    FCA_ASSIGN_OR_RETURN(const engine::WindowSet windows,
                         JobWindows(store_, spec, job.project, *tokenizer, calibration));
    for (int64_t i = 0; i < windows.count(); ++i) {
      v1::Window* w = response.add_windows();
      w->set_index(i);
      w->set_hash(windows.hashes[i]);
      w->set_calibration(calibration);
    }
  }
  return response;
}

absl::StatusOr<v1::BackupDatabaseResponse> AuditServiceCore::BackupDatabaseUnrecorded(
    const Caller& caller, const v1::BackupDatabaseRequest& request) {
  if (!caller.admin) return absl::PermissionDeniedError("only admins back up the database");
  if (backups_ == nullptr) {
    return absl::FailedPreconditionError(
        "the server has no --backup_dir: backups over the API are off");
  }
  return backups_->Write(request.name());
}

absl::StatusOr<Webhooks*> AuditServiceCore::WebhooksOrOff() const {
  if (webhooks_ == nullptr) {
    return absl::FailedPreconditionError("this server does not send webhooks");
  }
  return webhooks_;
}

absl::StatusOr<v1::AddWebhookResponse> AuditServiceCore::AddWebhook(
    const Caller& caller, const v1::AddWebhookRequest& request) {
  absl::StatusOr<v1::AddWebhookResponse> result = [&]() -> absl::StatusOr<v1::AddWebhookResponse> {
    FCA_ASSIGN_OR_RETURN(Webhooks * webhooks, WebhooksOrOff());
    return webhooks->Add(caller, request);
  }();
  Record(caller, audit_action::kWebhookAdd,
         {"webhook", result.ok() ? absl::StrCat(result->webhook().id()) : ""}, result.status(),
         absl::StrCat("project ", request.project().empty() ? caller.user : request.project()));
  return result;
}

absl::StatusOr<v1::ListWebhooksResponse> AuditServiceCore::ListWebhooks(
    const Caller& caller, const v1::ListWebhooksRequest& request) {
  FCA_ASSIGN_OR_RETURN(Webhooks * webhooks, WebhooksOrOff());
  return webhooks->List(caller, request);
}

absl::StatusOr<v1::RemoveWebhookResponse> AuditServiceCore::RemoveWebhook(
    const Caller& caller, const v1::RemoveWebhookRequest& request) {
  absl::StatusOr<v1::RemoveWebhookResponse> result =
      [&]() -> absl::StatusOr<v1::RemoveWebhookResponse> {
    FCA_ASSIGN_OR_RETURN(Webhooks * webhooks, WebhooksOrOff());
    return webhooks->Remove(caller, request);
  }();
  Record(caller, audit_action::kWebhookRemove, {"webhook", absl::StrCat(request.webhook_id())},
         result.status());
  return result;
}

absl::StatusOr<v1::ListWebhookDeliveriesResponse> AuditServiceCore::ListWebhookDeliveries(
    const Caller& caller, const v1::ListWebhookDeliveriesRequest& request) {
  FCA_ASSIGN_OR_RETURN(Webhooks * webhooks, WebhooksOrOff());
  return webhooks->ListDeliveries(caller, request);
}

}  // namespace fca::core
