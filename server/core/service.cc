#include "server/core/service.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/build_version.h"
#include "common/host_port.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "server/core/metric_catalog.h"
#include "server/core/report_assembly.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/torch_util.h"
#include "server/jobs/datasets.h"
#include "server/jobs/mapping.h"
#include "server/jobs/server_metrics.h"

namespace fca::core {
namespace {

constexpr int64_t kChunkBytes = 1 << 20;

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// A listing's time bound, when set: protobuf's Timestamp keeps nanos in
// [0, 1e9); anything else is a client bug worth naming, not a bound.
absl::StatusOr<std::optional<int64_t>> TimeBound(bool set, const google::protobuf::Timestamp& t,
                                                 const char* field) {
  if (!set) return std::nullopt;
  if (t.nanos() < 0 || t.nanos() >= 1000000000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has nanos %d; they must be in [0, 999999999]", field, t.nanos()));
  }
  return FromTimestamp(t);
}

// created_after <= created_before when both are set: a reversed range is a
// mistake (swapped flags), not a wish for nothing.
absl::Status CheckTimeRange(const std::optional<int64_t>& after,
                            const std::optional<int64_t>& before) {
  if (after && before && *after > *before) {
    return absl::InvalidArgumentError("created_after is later than created_before");
  }
  return absl::OkStatus();
}

// A window longer than a model's context would fail the job only when a
// worker runs it; refused at submission instead.
absl::Status CheckWindowFits(const ModelRepository::Listing& m, int64_t window_length) {
  const int64_t max = m.description.info.max_seq_len;
  if (max <= 0 || window_length <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("window_length %d exceeds the max_seq_len of model '%s' (%d tokens)",
                      window_length, m.description.info.name, max));
}

}  // namespace

// --- datasets ---

DatasetUpload::~DatasetUpload() {
  if (upload_id_ == 0) return;
  // Dropped at the next start at the latest (Store::DropUnfinishedUploads).
  LogIfError("cannot drop an unfinished upload", store_->AbortUpload(upload_id_));
}

absl::Status DatasetUpload::Start(const v1::UploadDatasetHeader& header) {
  if (started_) return absl::InvalidArgumentError("upload sent a second header");
  started_ = true;
  header_ = header;
  FCA_RETURN_IF_ERROR(ValidateName(header.name(), "dataset"));
  if (header.kind() != v1::DATASET_KIND_TEXT && header.kind() != v1::DATASET_KIND_TOKENS_INT32) {
    return absl::InvalidArgumentError("upload header must set kind (text or tokens)");
  }
  if (header.size_bytes() < 0) return absl::InvalidArgumentError("upload size_bytes is negative");
  FCA_ASSIGN_OR_RETURN(project_, ProjectOrPersonal(caller_, header.project()));
  FCA_RETURN_IF_ERROR(RequireRole(store_, caller_, project_, ProjectRole::kWriter).status());
  if (header.size_bytes() > limits_.max_dataset_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("dataset of %d bytes exceeds the server's limit of %d bytes",
                        header.size_bytes(), limits_.max_dataset_bytes));
  }
  if (header.kind() == v1::DATASET_KIND_TOKENS_INT32 && header.size_bytes() % 4 != 0) {
    return absl::InvalidArgumentError("a tokens dataset must be a whole number of int32 ids");
  }
  FCA_ASSIGN_OR_RETURN(const int64_t used, store_->UserBytes(caller_.user));
  if (used + header.size_bytes() > limits_.max_user_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "storage quota: you keep %d bytes of datasets and the quota is %d bytes; delete "
        "datasets you no longer need",
        used, limits_.max_user_bytes));
  }
  if (in_flight_ != nullptr) {
    FCA_ASSIGN_OR_RETURN(
        held_, in_flight_->TryReserve(header.size_bytes(),
                                      ByteBudget::Clients(PeerHost(caller_.peer), caller_.user)));
  }
  FCA_ASSIGN_OR_RETURN(upload_id_, store_->BeginUpload(caller_.user, project_));
  return absl::OkStatus();
}

absl::Status DatasetUpload::Append(const std::string& chunk) {
  if (!started_) return absl::InvalidArgumentError("upload must start with a header");
  if (static_cast<int64_t>(chunk.size()) > kChunkBytes) {
    return absl::InvalidArgumentError("upload chunks must be at most 1 MiB");
  }
  if (received_ + static_cast<int64_t>(chunk.size()) > header_.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "upload carries more than the %d bytes its header announced", header_.size_bytes()));
  }
  FCA_RETURN_IF_ERROR(store_->AppendUpload(upload_id_, chunk));
  hash_.Update(chunk);
  received_ += static_cast<int64_t>(chunk.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::UploadDatasetResponse> DatasetUpload::Finish() {
  if (!started_) return absl::InvalidArgumentError("upload carried no header");
  if (received_ != header_.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "upload carried %d bytes; its header announced %d", received_, header_.size_bytes()));
  }
  const std::string sha = hash_.FinishHex();
  if (!header_.sha256().empty() && absl::AsciiStrToLower(header_.sha256()) != sha) {
    return absl::InvalidArgumentError("upload checksum mismatch: the bytes' SHA-256 is " + sha);
  }
  // Only the project's datasets: whether another project holds these bytes
  // is not the caller's business.
  const absl::StatusOr<storage::DatasetRecord> mine = store_->FindDatasetByContent(sha, project_);
  if (!mine.ok() && !absl::IsNotFound(mine.status())) return mine.status();
  const bool known = mine.ok();
  FCA_ASSIGN_OR_RETURN(
      const storage::DatasetRecord record,
      store_->FinishUpload(upload_id_, header_.name(), DatasetKindName(header_.kind()), sha));
  upload_id_ = 0;
  v1::UploadDatasetResponse response;
  *response.mutable_dataset() = ToProto(record);
  response.set_deduplicated(known);
  return response;
}

absl::StatusOr<v1::ListDatasetsResponse> AuditServiceCore::ListDatasets(
    const Caller& caller, const v1::ListDatasetsRequest& request) {
  // An admin who names no project sees every project's, as before projects.
  std::optional<std::string> project;
  if (!caller.admin || !request.project().empty()) {
    FCA_ASSIGN_OR_RETURN(project, ProjectOrPersonal(caller, request.project()));
    FCA_RETURN_IF_ERROR(RoleIn(caller, *project).status());
  }
  if (request.page_size() < 0 || request.page_size() > storage::Store::kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("page_size must be in [0, %d]", storage::Store::kMaxPageSize));
  }
  FCA_ASSIGN_OR_RETURN(const storage::DatasetPage page,
                       store_->ListDatasets(project, request.page_size(), request.page_token()));
  v1::ListDatasetsResponse response;
  for (const storage::DatasetRecord& d : page.datasets) *response.add_datasets() = ToProto(d);
  response.set_next_page_token(page.next_page_token);
  return response;
}

// --- models ---

absl::StatusOr<v1::ListModelsResponse> AuditServiceCore::ListModels(const Caller&) {
  // From config.json and the safetensors headers: listing loads no weights.
  // A folder the engine refuses is listed apart with its reason, so a user
  // sees why a model is missing (the repository also logs it, once).
  v1::ListModelsResponse response;
  std::vector<ModelRepository::UnavailableFolder> unavailable;
  for (const ModelRepository::Listing& m : models_->List(&unavailable)) {
    *response.add_models() = ToProto(m.description.info, m.description.sites, m.tokenizer->name());
  }
  for (const ModelRepository::UnavailableFolder& folder : unavailable) {
    v1::UnavailableModel* out = response.add_unavailable();
    out->set_name(folder.name);
    out->set_reason(folder.reason);
  }
  return response;
}

absl::StatusOr<v1::TokenizeResponse> AuditServiceCore::Tokenize(
    const Caller&, const v1::TokenizeRequest& request) {
  const int64_t bytes = static_cast<int64_t>(request.text().size());
  if (bytes > limits_.max_tokenize_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("text is %d bytes; Tokenize takes at most %d (tokenize a sample)", bytes,
                        limits_.max_tokenize_bytes));
  }
  // Only the tokenizer: a check of a sample need not load multi-GB weights.
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<const engine::Tokenizer> loaded,
                       models_->GetTokenizer(request.model()));
  const engine::Tokenizer& tokenizer = *loaded;
  FCA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(request.text()));
  v1::TokenizeResponse response;
  response.set_model(request.model());
  response.set_tokenizer(tokenizer.name());
  response.set_vocab_size(tokenizer.vocab_size());
  response.mutable_ids()->Add(ids.begin(), ids.end());
  return response;
}

// --- jobs ---

namespace {

// What a spec is resolved to at submission, kept with the job: the bytes
// its dataset names stand for now, and the server that took it.
v1::Provenance SubmitProvenance(const v1::AuditSpec& spec, const storage::DatasetRecord& eval,
                                const storage::DatasetRecord& calib) {
  v1::Provenance p;
  p.set_eval_dataset(spec.eval_dataset());
  p.set_eval_sha256(eval.sha256);
  p.set_calib_dataset(spec.calib_dataset());
  p.set_calib_sha256(calib.sha256);
  p.set_server_version(BuildVersion());
  p.set_seed(spec.seed());
  return p;
}

}  // namespace

absl::StatusOr<v1::SubmitAuditResponse> AuditServiceCore::SubmitAuditUnrecorded(
    const Caller& caller, const v1::SubmitAuditRequest& request) {
  FCA_ASSIGN_OR_RETURN(const std::string project, ProjectOrPersonal(caller, request.project()));
  FCA_RETURN_IF_ERROR(RequireRole(store_, caller, project, ProjectRole::kWriter).status());
  FCA_ASSIGN_OR_RETURN(v1::AuditSpec spec, NormalizeSpec(request.spec(), limits_.spec));
  FCA_RETURN_IF_ERROR(CheckModels(spec));
  // The job reads its own project's datasets only.
  FCA_ASSIGN_OR_RETURN(const storage::DatasetRecord eval,
                       FindDatasetRef(store_, spec.eval_dataset(), project));
  FCA_ASSIGN_OR_RETURN(const storage::DatasetRecord calib,
                       FindDatasetRef(store_, spec.calib_dataset(), project));
  FCA_ASSIGN_OR_RETURN(int64_t queued,
                       store_->CountJobs(caller.user, {storage::JobState::kQueued}));
  if (queued >= limits_.max_queued_jobs_per_user) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("you have %d queued jobs; the limit is %d per user", queued,
                        limits_.max_queued_jobs_per_user));
  }
  FCA_ASSIGN_OR_RETURN(int64_t kept, store_->CountJobs(caller.user, {}));
  if (kept >= limits_.max_jobs_per_user) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "job quota: you keep %d jobs and the quota is %d; delete finished jobs you no longer "
        "need",
        kept, limits_.max_jobs_per_user));
  }
  // The job, its tasks and its QUEUED event commit together, so no worker
  // can claim a task (and emit RUNNING) before QUEUED is event 1.
  storage::JobRecord job;
  int64_t seq = 0;
  v1::JobEvent queued_event;
  queued_event.set_state(v1::JOB_STATE_QUEUED);
  FCA_RETURN_IF_ERROR(store_->Transaction([&]() -> absl::Status {
    const std::vector<std::string> models(spec.models().begin(), spec.models().end());
    // Used now: retention keeps them, and a dataset it purged since it was
    // found above fails the submission here.
    for (const storage::DatasetRecord* used : {&eval, &calib}) {
      const absl::Status touched = store_->TouchDataset(used->id);
      if (absl::IsNotFound(touched)) {
        return absl::NotFoundError(
            absl::StrFormat("dataset '%s' was deleted meanwhile; upload it again", used->name));
      }
      FCA_RETURN_IF_ERROR(touched);
    }
    FCA_ASSIGN_OR_RETURN(
        job, store_->CreateJob(caller.user, SpecToJson(spec), models,
                               ToStoredJson(SubmitProvenance(spec, eval, calib)), project));
    FCA_ASSIGN_OR_RETURN(seq, store_->AppendJobEvent(job.id, queued_event.SerializeAsString()));
    return absl::OkStatus();
  }));
  hub_->Notify(job.id, seq);
  JobSubmitted(job);
  coordinator_->Wake();
  v1::SubmitAuditResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), ToProto(job, 0.0));
  return response;
}

namespace {

// "bpe (50277 ids)": what must match for two models to read the same text
// as the same token stream.
std::string TokenizerIdentity(const ModelRepository::Listing& m) {
  return absl::StrFormat("%s (%d ids)", m.tokenizer->name(), m.tokenizer->vocab_size());
}

// Every model of a job tokenizes the datasets itself: NLLs per token, their
// mean across models and the timed forwards are only comparable when the
// token streams are the same.
absl::Status CheckSameTokenizer(const ModelRepository::Listing& first,
                                const ModelRepository::Listing& other) {
  if (TokenizerIdentity(first) == TokenizerIdentity(other)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("models of one job must share a tokenizer: '%s' uses %s, '%s' uses %s",
                      first.description.info.name, TokenizerIdentity(first),
                      other.description.info.name, TokenizerIdentity(other)));
}

}  // namespace

// From the models' descriptions: a submission loads no weights (the
// workers load them when the job runs, and a load that fails then fails
// the job with the loader's error).
absl::Status AuditServiceCore::CheckModels(const v1::AuditSpec& spec) {
  std::optional<ModelRepository::Listing> first;
  for (const std::string& name : spec.models()) {
    FCA_ASSIGN_OR_RETURN(ModelRepository::Listing m, models_->Describe(name));
    FCA_RETURN_IF_ERROR(models_->CheckFitsBudget(m));
    if (m.description.sites.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model '%s' has no controller coefficients to audit; name it as dense_twin", name));
    }
    if (first && m.description.info.family != first->description.info.family) {
      return absl::InvalidArgumentError(
          absl::StrFormat("models of one job must share a family: '%s' is %s, not %s", name,
                          m.description.info.family, first->description.info.family));
    }
    if (first) FCA_RETURN_IF_ERROR(CheckSameTokenizer(*first, m));
    FCA_RETURN_IF_ERROR(CheckWindowFits(m, spec.window_length()));
    if (!first) first = std::move(m);
  }
  if (spec.dense_twin().empty()) return absl::OkStatus();
  FCA_ASSIGN_OR_RETURN(ModelRepository::Listing twin, models_->Describe(spec.dense_twin()));
  FCA_RETURN_IF_ERROR(models_->CheckFitsBudget(twin));
  if (!twin.description.sites.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense twin '%s' has controller coefficients; a dense twin must have none",
                        spec.dense_twin()));
  }
  if (first) FCA_RETURN_IF_ERROR(CheckSameTokenizer(*first, twin));
  return CheckWindowFits(twin, spec.window_length());
}

absl::StatusOr<storage::JobRecord> AuditServiceCore::VisibleJob(const Caller& caller,
                                                                int64_t job_id) {
  const absl::Status absent = absl::NotFoundError(absl::StrFormat("job %d does not exist", job_id));
  absl::StatusOr<storage::JobRecord> job = store_->GetJob(job_id);
  if (absl::IsNotFound(job.status())) return absent;
  FCA_RETURN_IF_ERROR(job.status());
  const absl::StatusOr<ProjectRole> role = RoleIn(caller, job->project);
  if (absl::IsNotFound(role.status())) return absent;
  FCA_RETURN_IF_ERROR(role.status());
  return job;
}

absl::StatusOr<storage::JobRecord> AuditServiceCore::ChangeableJob(const Caller& caller,
                                                                   int64_t job_id) {
  FCA_ASSIGN_OR_RETURN(storage::JobRecord job, VisibleJob(caller, job_id));
  FCA_ASSIGN_OR_RETURN(const ProjectRole role, RoleIn(caller, job.project));
  FCA_RETURN_IF_ERROR(
      RequireOwnOrOwner(role, caller, job.owner, absl::StrFormat("job %d", job_id), job.project));
  return job;
}

absl::StatusOr<v1::GetJobResponse> AuditServiceCore::GetJob(const Caller& caller,
                                                            const v1::GetJobRequest& request) {
  FCA_ASSIGN_OR_RETURN(storage::JobRecord job, VisibleJob(caller, request.job_id()));
  v1::GetJobResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), JobWithTasks(job));
  return response;
}

absl::StatusOr<v1::Job> AuditServiceCore::JobProto(const storage::JobRecord& job) {
  FCA_ASSIGN_OR_RETURN(v1::Job out, ToProto(job, hub_->Progress(job.id)));
  out.set_notice(hub_->GetNotice(job.id).first);
  return out;
}

absl::StatusOr<v1::Job> AuditServiceCore::JobWithTasks(const storage::JobRecord& job) {
  FCA_ASSIGN_OR_RETURN(v1::Job out, JobProto(job));
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::TaskRecord> tasks, store_->ListTasks(job.id));
  for (const storage::TaskRecord& task : tasks) {
    FCA_ASSIGN_OR_RETURN(v1::JobTask one, ToProto(task));
    one.set_placement(coordinator_->DescribePlacement(task));
    *out.add_tasks() = std::move(one);
  }
  return out;
}

absl::StatusOr<storage::JobFilter> AuditServiceCore::JobFilterFor(
    const Caller& caller, const v1::ListJobsRequest& request) {
  storage::JobFilter filter;
  if (!request.project().empty()) {
    // A member sees every job of the project, and may ask for one member's.
    FCA_RETURN_IF_ERROR(ProjectOrPersonal(caller, request.project()).status());
    FCA_RETURN_IF_ERROR(RoleIn(caller, request.project()).status());
    filter.project = request.project();
  } else if (!caller.admin) {
    // As before projects: without one named, a user lists their personal
    // project and names no other owner; an admin lists every project's.
    if (!request.owner().empty() && request.owner() != caller.user) {
      return absl::PermissionDeniedError(
          "only admins list other users' jobs across projects; name a --project");
    }
    FCA_RETURN_IF_ERROR(RoleIn(caller, caller.user).status());
    filter.project = caller.user;
  }
  if (!request.owner().empty()) filter.owner = request.owner();
  if (request.state() != v1::JOB_STATE_UNSPECIFIED) {
    FCA_ASSIGN_OR_RETURN(filter.state, FromProto(request.state()));
  }
  if (!request.model().empty()) filter.model = request.model();
  if (!request.dataset().empty()) filter.dataset = request.dataset();
  if (!request.label().empty()) filter.label = request.label();
  FCA_ASSIGN_OR_RETURN(
      filter.created_after_us,
      TimeBound(request.has_created_after(), request.created_after(), "created_after"));
  FCA_ASSIGN_OR_RETURN(
      filter.created_before_us,
      TimeBound(request.has_created_before(), request.created_before(), "created_before"));
  FCA_RETURN_IF_ERROR(CheckTimeRange(filter.created_after_us, filter.created_before_us));
  return filter;
}

absl::StatusOr<v1::ListJobsResponse> AuditServiceCore::ListJobs(
    const Caller& caller, const v1::ListJobsRequest& request) {
  FCA_ASSIGN_OR_RETURN(const storage::JobFilter filter, JobFilterFor(caller, request));
  if (request.page_size() < 0 || request.page_size() > kMaxJobsPerPage) {
    return absl::InvalidArgumentError(
        absl::StrFormat("page_size must be in [0, %d]", kMaxJobsPerPage));
  }
  const int page_size = request.page_size() == 0 ? kDefaultJobsPerPage : request.page_size();
  FCA_ASSIGN_OR_RETURN(storage::JobPage page,
                       store_->ListJobs(filter, page_size, request.page_token()));
  v1::ListJobsResponse response;
  for (const storage::JobRecord& job : page.jobs) {
    FCA_ASSIGN_OR_RETURN(*response.add_jobs(), JobProto(job));
  }
  response.set_next_page_token(page.next_page_token);
  FCA_ASSIGN_OR_RETURN(const int64_t total, store_->CountJobs(filter));
  response.set_total_count(total);
  return response;
}

absl::StatusOr<v1::CancelJobResponse> AuditServiceCore::CancelJobUnrecorded(
    const Caller& caller, const v1::CancelJobRequest& request) {
  FCA_RETURN_IF_ERROR(ChangeableJob(caller, request.job_id()).status());
  // A queued job ends here: its state and its terminal event commit
  // together, so a watcher never sees the one without the other.
  v1::JobEvent cancelled;
  cancelled.set_state(v1::JOB_STATE_CANCELLED);
  absl::StatusOr<storage::JobRecord> job;
  int64_t seq = 0;
  const absl::Status written = store_->Transaction([&]() -> absl::Status {
    job = store_->RequestCancel(request.job_id());
    if (!job.ok() || job->state != storage::JobState::kCancelled) return job.status();
    FCA_ASSIGN_OR_RETURN(seq, store_->AppendJobEvent(job->id, cancelled.SerializeAsString()));
    return coordinator_->ObserveEnd(*job);
  });
  if (absl::IsFailedPrecondition(written)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("job %d has already finished", request.job_id()));
  }
  FCA_RETURN_IF_ERROR(written);
  if (job->state == storage::JobState::kRunning) {
    coordinator_->Cancel(job->id);
  } else {
    hub_->Notify(job->id, seq);
  }
  v1::CancelJobResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), JobProto(*job));
  return response;
}

namespace {

// Counts one open stream for as long as it lives.
class StreamSlot {
 public:
  explicit StreamSlot(std::atomic<int64_t>* open) : open_(open) { count_ = ++*open_; }
  ~StreamSlot() { --*open_; }
  int64_t count() const { return count_; }

 private:
  std::atomic<int64_t>* open_;
  int64_t count_ = 0;
};

// The job as of an event (WatchJobResponse.job), from the job as it is now
// and the stored events up to it: its state is the last state event's, its
// progress the last progress event's fraction, and what only a later state
// sets (started_at before RUNNING; finished_at and error before the end)
// is cleared. attempts, cancel_requested and the notice are as now: the
// events do not record them.
class JobAsOf {
 public:
  // Each stored event, in seq order.
  void See(const v1::JobEvent& e) {
    if (e.has_state()) {
      state_ = e.state();
      started_ = started_ || state_ == v1::JOB_STATE_RUNNING;
    }
    if (e.has_progress()) progress_ = e.progress().fraction();
  }

  v1::Job Apply(v1::Job job) const {
    if (state_ == v1::JOB_STATE_UNSPECIFIED) return job;  // no state seen (cannot happen)
    job.set_state(state_);
    const bool ended = state_ == v1::JOB_STATE_SUCCEEDED || state_ == v1::JOB_STATE_FAILED ||
                       state_ == v1::JOB_STATE_CANCELLED;
    if (!ended) {
      job.clear_finished_at();
      job.clear_error();
      job.set_progress(progress_);
    }
    if (!started_) job.clear_started_at();
    return job;
  }

 private:
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  bool started_ = false;
  double progress_ = 0;
};

// The stored event as sent: its payload with its seq and time.
absl::StatusOr<v1::JobEvent> StoredEvent(int64_t job_id, const storage::JobEvent& stored) {
  v1::JobEvent e;
  if (!e.ParseFromString(stored.payload)) {
    return absl::DataLossError(
        absl::StrFormat("job %d: event %d is unreadable", job_id, stored.seq));
  }
  e.set_seq(stored.seq);
  ToTimestamp(stored.created_at_us, e.mutable_time());
  return e;
}

}  // namespace

absl::StatusOr<bool> AuditServiceCore::SendNotice(
    const storage::JobRecord& job, int64_t* sent,
    const std::function<bool(const v1::WatchJobResponse&)>& write) {
  const auto [text, version] = hub_->GetNotice(job.id);
  if (version == 0 || version == *sent) return true;
  *sent = version;
  v1::WatchJobResponse response;
  v1::JobEvent* e = response.mutable_event();
  e->set_seq(0);  // not stored: not replayed, and resuming is unaffected
  e->set_message(text);
  ToTimestamp(absl::ToUnixMicros(absl::Now()), e->mutable_time());
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), JobProto(job));
  return write(response);
}

absl::Status AuditServiceCore::WatchJob(
    const Caller& caller, const v1::WatchJobRequest& request,
    const std::function<bool(const v1::WatchJobResponse&)>& write,
    const std::function<bool()>& stop, const std::function<absl::Status(bool)>& may_go_on) {
  const StreamSlot slot(&watch_streams_);
  if (slot.count() > limits_.max_watch_streams) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the server is following %d job streams, its limit; retry shortly",
                        limits_.max_watch_streams));
  }
  FCA_RETURN_IF_ERROR(VisibleJob(caller, request.job_id()).status());
  if (request.after_seq() < 0) return absl::InvalidArgumentError("after_seq is negative");
  int64_t after = request.after_seq();
  // A resumed watch: the events before it, for the job as of each event.
  JobAsOf as_of;
  for (int64_t seen = 0; seen < after;) {
    FCA_ASSIGN_OR_RETURN(const std::vector<storage::JobEvent> before,
                         store_->ListJobEvents(request.job_id(), seen, 256));
    if (before.empty()) break;
    for (const storage::JobEvent& stored : before) {
      if (stored.seq > after) break;
      FCA_ASSIGN_OR_RETURN(const v1::JobEvent e, StoredEvent(request.job_id(), stored));
      as_of.See(e);
      seen = stored.seq;
    }
    if (before.back().seq > after) break;
  }
  bool reread_after_end = false;
  int64_t notice_sent = 0;  // the version of the job's notice sent last
  while (!stop()) {
    if (may_go_on) FCA_RETURN_IF_ERROR(may_go_on(false));
    // A member removed from the job's project stops following it here.
    FCA_RETURN_IF_ERROR(VisibleJob(caller, request.job_id()).status());
    FCA_ASSIGN_OR_RETURN(std::vector<storage::JobEvent> events,
                         store_->ListJobEvents(request.job_id(), after, 256));
    for (const storage::JobEvent& stored : events) {
      v1::WatchJobResponse response;
      FCA_ASSIGN_OR_RETURN(*response.mutable_event(), StoredEvent(request.job_id(), stored));
      const v1::JobEvent* e = &response.event();
      as_of.See(*e);
      FCA_ASSIGN_OR_RETURN(storage::JobRecord job, store_->GetJob(request.job_id()));
      FCA_ASSIGN_OR_RETURN(v1::Job now, JobProto(job));
      *response.mutable_job() = as_of.Apply(std::move(now));
      if (may_go_on) FCA_RETURN_IF_ERROR(may_go_on(true));
      if (!write(response)) return absl::OkStatus();  // client went away
      after = stored.seq;
      // A job's last event is its terminal state; a requeued job's QUEUED
      // event is followed by more.
      if (e->has_state() && IsTerminal(e->state())) return absl::OkStatus();
    }
    if (events.empty()) {
      FCA_ASSIGN_OR_RETURN(storage::JobRecord job, store_->GetJob(request.job_id()));
      FCA_ASSIGN_OR_RETURN(const bool written, SendNotice(job, &notice_sent, write));
      if (!written) return absl::OkStatus();  // client went away
      if (storage::IsTerminal(job.state)) {
        // A terminal state commits with its terminal event: read once more
        // in case both landed between the two reads above.
        if (!reread_after_end) {
          reread_after_end = true;
          continue;
        }
        // Resumed after the last event of a finished job: nothing more will come.
        return absl::OkStatus();
      }
      hub_->Wait(request.job_id(), after, std::chrono::milliseconds(500));
    }
  }
  return absl::UnavailableError("server is shutting down; resume the watch with after_seq");
}

absl::StatusOr<v1::DeleteJobResponse> AuditServiceCore::DeleteJobUnrecorded(
    const Caller& caller, const v1::DeleteJobRequest& request) {
  FCA_RETURN_IF_ERROR(ChangeableJob(caller, request.job_id()).status());
  FCA_RETURN_IF_ERROR(store_->DeleteJob(request.job_id()));
  // The job is deleted either way; its pages are reclaimed with the next
  // deletion's.
  LogIfError("reclaim space", store_->ReclaimSpace());
  return v1::DeleteJobResponse();
}

absl::StatusOr<v1::DeleteDatasetResponse> AuditServiceCore::DeleteDatasetUnrecorded(
    const Caller& caller, const v1::DeleteDatasetRequest& request) {
  // `owner` named a user's datasets before projects: their personal project.
  FCA_ASSIGN_OR_RETURN(
      const std::string project,
      ProjectOrPersonal(caller, request.project().empty() ? request.owner() : request.project()));
  FCA_RETURN_IF_ERROR(ValidateName(request.name(), "dataset"));
  const absl::Status absent =
      absl::NotFoundError(absl::StrFormat("dataset '%s' does not exist", request.name()));
  const absl::StatusOr<ProjectRole> role = RoleIn(caller, project);
  if (absl::IsNotFound(role.status())) return absent;
  FCA_RETURN_IF_ERROR(role.status());
  auto dataset = store_->FindDataset(request.name(), project);
  if (absl::IsNotFound(dataset.status())) return absent;
  if (!dataset.ok()) return dataset.status();
  FCA_RETURN_IF_ERROR(RequireOwnOrOwner(*role, caller, dataset->owner,
                                        absl::StrFormat("dataset '%s'", request.name()), project));
  FCA_RETURN_IF_ERROR(CheckDatasetUnused(store_, *dataset));
  FCA_ASSIGN_OR_RETURN(const int64_t freed, store_->DeleteDataset(dataset->id));
  v1::DeleteDatasetResponse response;
  response.set_bytes_freed(freed);
  return response;
}

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
  filter.metric = NonEmpty(f.metric());
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.models(), "models", &filter.models));
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.interventions(), "interventions", &filter.interventions));
  FCA_RETURN_IF_ERROR(CopyFilterValues(f.metrics(), "metrics", &filter.metrics));
  FCA_ASSIGN_OR_RETURN(filter.created_after_us,
                       TimeBound(f.has_created_after(), f.created_after(), "created_after"));
  FCA_ASSIGN_OR_RETURN(filter.created_before_us,
                       TimeBound(f.has_created_before(), f.created_before(), "created_before"));
  FCA_RETURN_IF_ERROR(CheckTimeRange(filter.created_after_us, filter.created_before_us));
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
  for (const storage::ResultRow& r : page.rows) *response.add_results() = ToProto(r);
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
  *h->mutable_sites() = ToProto(model->info(), model->sites(), "").sites();
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
    for (const storage::ResultRow& r : page.rows) rows.push_back(ToProto(r));
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
  FCA_ASSIGN_OR_RETURN(DatasetBytes bytes, ReadJobDataset(store, spec, project, calibration));
  FCA_ASSIGN_OR_RETURN(const engine::Dataset dataset, MakeDataset(std::move(bytes)));
  const int64_t max_windows = calibration ? spec.max_calib_windows() : spec.max_eval_windows();
  FCA_ASSIGN_OR_RETURN(const std::vector<int32_t> stream,
                       engine::TokenStream(dataset, tokenizer, max_windows * spec.window_length()));
  return engine::MakeWindows(stream, spec.window_length(), max_windows, dataset.name);
}

}  // namespace

absl::StatusOr<v1::ListJobWindowsResponse> AuditServiceCore::ListJobWindows(
    const Caller& caller, const v1::ListJobWindowsRequest& request) {
  FCA_ASSIGN_OR_RETURN(const storage::JobRecord job, VisibleJob(caller, request.job_id()));
  FCA_ASSIGN_OR_RETURN(const v1::AuditSpec spec, StoredSpec(job));
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
