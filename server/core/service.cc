#include "server/core/service.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

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
#include "proto/fca/v1/job_states.h"
#include "server/core/metric_catalog.h"
#include "server/core/report_assembly.h"
#include "server/engine/audit/dense_twin.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/torch_util.h"
#include "server/jobs/datasets.h"
#include "server/jobs/mapping.h"
#include "server/jobs/server_metrics.h"

namespace fca::core {
namespace {

// A window longer than a model's context would fail the job only when a
// worker runs it; refused at submission instead.
absl::Status CheckWindowFits(const runtime::ModelRepository::Listing& m, int64_t window_length) {
  const int64_t max = m.description.info.max_seq_len;
  if (max <= 0 || window_length <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("window_length %d exceeds the max_seq_len of model '%s' (%d tokens)",
                      window_length, m.description.info.name, max));
}

}  // namespace

// --- models ---

absl::StatusOr<v1::ListModelsResponse> AuditServiceCore::ListModels(const Caller&) {
  // From config.json and the safetensors headers: listing loads no weights.
  // A folder the engine refuses is listed apart with its reason, so a user
  // sees why a model is missing (the repository also logs it, once).
  v1::ListModelsResponse response;
  std::vector<runtime::ModelRepository::UnavailableFolder> unavailable;
  for (const runtime::ModelRepository::Listing& m : models_->List(&unavailable)) {
    *response.add_models() =
        jobs::ToProto(m.description.info, m.description.sites, m.tokenizer->name());
  }
  for (const runtime::ModelRepository::UnavailableFolder& folder : unavailable) {
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
                       jobs::FindDatasetRef(store_, spec.eval_dataset(), project));
  FCA_ASSIGN_OR_RETURN(const storage::DatasetRecord calib,
                       jobs::FindDatasetRef(store_, spec.calib_dataset(), project));
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
        job,
        store_->CreateJob(caller.user, runtime::SpecToJson(spec), models,
                          runtime::ToStoredJson(SubmitProvenance(spec, eval, calib)), project));
    FCA_ASSIGN_OR_RETURN(seq, store_->AppendJobEvent(job.id, queued_event.SerializeAsString()));
    return absl::OkStatus();
  }));
  hub_->Notify(job.id, seq);
  jobs::JobSubmitted(job);
  coordinator_->Wake();
  v1::SubmitAuditResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), jobs::ToProto(job, 0.0));
  return response;
}

namespace {

// "bpe (50277 ids)": what must match for two models to read the same text
// as the same token stream.
std::string TokenizerIdentity(const runtime::ModelRepository::Listing& m) {
  return absl::StrFormat("%s (%d ids)", m.tokenizer->name(), m.tokenizer->vocab_size());
}

// Every model of a job tokenizes the datasets itself: NLLs per token, their
// mean across models and the timed forwards are only comparable when the
// token streams are the same.
absl::Status CheckSameTokenizer(const runtime::ModelRepository::Listing& first,
                                const runtime::ModelRepository::Listing& other) {
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
  std::optional<runtime::ModelRepository::Listing> first;
  std::vector<engine::ModelInfo> audited;
  for (const std::string& name : spec.models()) {
    FCA_ASSIGN_OR_RETURN(runtime::ModelRepository::Listing m, models_->Describe(name));
    audited.push_back(m.description.info);
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
  FCA_ASSIGN_OR_RETURN(runtime::ModelRepository::Listing twin,
                       models_->Describe(spec.dense_twin()));
  FCA_RETURN_IF_ERROR(models_->CheckFitsBudget(twin));
  if (!twin.description.sites.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense twin '%s' has controller coefficients; a dense twin must have none",
                        spec.dense_twin()));
  }
  if (first) FCA_RETURN_IF_ERROR(CheckSameTokenizer(*first, twin));
  // The FLOPs need a forward: the engine compares them when the job runs.
  for (const engine::ModelInfo& m : audited) {
    FCA_RETURN_IF_ERROR(
        engine::CheckTwinArchitecture(m, twin.description.info, spec.dense_twin_mismatch()));
  }
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
  FCA_ASSIGN_OR_RETURN(v1::Job out, jobs::ToProto(job, hub_->Progress(job.id)));
  out.set_notice(hub_->GetNotice(job.id).first);
  return out;
}

absl::StatusOr<v1::Job> AuditServiceCore::JobWithTasks(const storage::JobRecord& job) {
  FCA_ASSIGN_OR_RETURN(v1::Job out, JobProto(job));
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::TaskRecord> tasks, store_->ListTasks(job.id));
  for (const storage::TaskRecord& task : tasks) {
    FCA_ASSIGN_OR_RETURN(v1::JobTask one, jobs::ToProto(task));
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
    FCA_ASSIGN_OR_RETURN(filter.state, jobs::FromProto(request.state()));
  }
  if (!request.model().empty()) filter.model = request.model();
  if (!request.dataset().empty()) filter.dataset = request.dataset();
  if (!request.label().empty()) filter.label = request.label();
  FCA_ASSIGN_OR_RETURN(
      filter.created_after_us,
      runtime::TimeBound(request.has_created_after(), request.created_after(), "created_after"));
  FCA_ASSIGN_OR_RETURN(
      filter.created_before_us,
      runtime::TimeBound(request.has_created_before(), request.created_before(), "created_before"));
  FCA_RETURN_IF_ERROR(runtime::CheckTimeRange(filter.created_after_us, filter.created_before_us));
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
  runtime::ToTimestamp(stored.created_at_us, e.mutable_time());
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
  runtime::ToTimestamp(absl::ToUnixMicros(absl::Now()), e->mutable_time());
  FCA_ASSIGN_OR_RETURN(*response.mutable_job(), JobProto(job));
  return write(response);
}

absl::Status AuditServiceCore::WatchJob(
    const Caller& caller, const v1::WatchJobRequest& request,
    const std::function<bool(const v1::WatchJobResponse&)>& write,
    const std::function<bool()>& stop, const std::function<absl::Status(bool)>& may_go_on) {
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<StreamShares::Slot> slot,
                       watch_streams_.Acquire(caller.user, "job streams"));
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
      if (e->has_state() && v1::IsTerminal(e->state())) return absl::OkStatus();
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
  FCA_RETURN_IF_ERROR(runtime::ValidateName(request.name(), "dataset"));
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
  FCA_RETURN_IF_ERROR(jobs::CheckDatasetUnused(store_, *dataset));
  FCA_ASSIGN_OR_RETURN(const int64_t freed, store_->DeleteDataset(dataset->id));
  v1::DeleteDatasetResponse response;
  response.set_bytes_freed(freed);
  return response;
}

}  // namespace fca::core
