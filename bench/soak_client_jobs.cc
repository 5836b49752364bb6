// fca_soak_bench: the client's calls about jobs and their results.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/soak_client.h"
#include "common/vocabulary.h"

namespace fca::soak {
namespace {

using grpc::StatusCode;

// What the audits name: the interventions the soak was written with
// (static_token and neutral came later; adding them would change the seeded
// mix of every soak run since).
const char* const kInterventions[] = {kCorrect,     kCrossInput,          kTokenShuffle,
                                      kStaticLayer, kStaticLayerPosition, kGlobalMean};
// What the queries filter on: some stored interventions and metrics.
const char* const kResultInterventions[] = {kCorrect,   kCrossInput, kGlobalMean, kReplay,
                                            kVariation, kExecution,  kStaticLayer};
const std::string kMetrics[] = {
    kNll,     kPenalty,  kRetentionPct,  StoredMetricName(FamilyKey(kEta2, "attn_gate")),
    kLiveNll, kSlowdown, kBlocksPerToken};

int64_t ToMicros(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}
void SetMicros(int64_t us, google::protobuf::Timestamp* t) {
  t->set_seconds(us / 1000000);
  t->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}

}  // namespace

// --- SubmitAudit: a small audit; RESOURCE_EXHAUSTED at the queue limit.
void Client::Submit() {
  JobInfo job;
  v1::SubmitAuditRequest req;
  v1::AuditSpec* spec = req.mutable_spec();
  const uint64_t which = rng_.Uniform(3);
  if (which != 1) job.models.push_back("fg-a");
  if (which != 0) job.models.push_back("fg-b");
  for (const std::string& m : job.models) spec->add_models(m);
  if (Chance(0.5)) spec->set_dense_twin(kDenseModel);
  job.window = Chance(0.7) ? 16 : 32;
  job.eval_windows = 2 + rng_.Uniform(7);
  // Own datasets large enough for the windows asked for.
  std::vector<int> usable;
  for (size_t i = 0; i < datasets_.size(); ++i) {
    const int64_t ids = datasets_[i].tokens ? datasets_[i].size / 4 : datasets_[i].size;
    if (ids >= job.window * job.eval_windows && datasets_[i].size < 64 * 1024) {
      usable.push_back(static_cast<int>(i));
    }
  }
  const uint64_t eval_choice = rng_.Uniform(100);
  if (eval_choice < 15 && !usable.empty()) {
    job.dataset = PickOf(usable);
    spec->set_eval_dataset(datasets_[job.dataset].name);
  } else if (eval_choice < 25) {
    spec->set_eval_dataset("sha256:" + shared_->eval_sha);
  } else {
    spec->set_eval_dataset("eval");
  }
  spec->set_calib_dataset("calib");
  if (Chance(0.6)) {
    std::vector<int> order = {0, 1, 2, 3, 4, 5};
    for (int i = 5; i > 0; --i) std::swap(order[i], order[rng_.Uniform(i + 1)]);
    const int n = 1 + static_cast<int>(rng_.Uniform(3));
    for (int i = 0; i < n; ++i) spec->add_interventions(kInterventions[order[i]]);
  }
  spec->set_window_length(job.window);
  spec->set_max_eval_windows(job.eval_windows);
  spec->set_max_calib_windows(2 + rng_.Uniform(7));
  spec->set_batch_size(4);
  spec->set_seed(rng_.Uniform(1000));
  spec->set_per_site_shuffle(Chance(0.3));
  spec->set_bootstrap_resamples(50 + rng_.Uniform(151));
  spec->set_timing_repeats(static_cast<int32_t>(rng_.Uniform(2)));
  spec->set_label(absl::StrFormat("soak client %d", index_));
  req.set_project(WriteProject());

  Call call(this, kSubmitAudit, kUnaryDeadlineS);
  v1::SubmitAuditResponse resp;
  const grpc::Status st = stub_->SubmitAudit(&call.ctx, req, &resp);
  std::string bad;
  if (st.ok() && (resp.job().id() <= 0 || resp.job().state() != v1::JOB_STATE_QUEUED ||
                  resp.job().spec().models_size() != spec->models_size() ||
                  (user_ != nullptr && resp.job().project() != req.project()))) {
    bad = absl::StrFormat("SubmitAudit returned job %d in state %s, project '%s'", resp.job().id(),
                          v1::JobState_Name(resp.job().state()), resp.job().project());
  }
  Finish(call, st, bad, {StatusCode::RESOURCE_EXHAUSTED});
  if (!st.ok() || !bad.empty()) return;
  ++shared_->submitted;
  job.id = resp.job().id();
  if (user_ != nullptr) shared_->NoteJob(user_->write, job.id);
  int64_t seen = shared_->max_job_id.load();
  while (job.id > seen && !shared_->max_job_id.compare_exchange_weak(seen, job.id)) {
  }
  jobs_.push_back(job);
  if (jobs_.size() > 200) jobs_.erase(jobs_.begin());
  // Like `fca audit` without --detach: follow it to its end.
  if (Chance(0.3) && !Done()) WatchCall(jobs_.back(), 0, -1);
}

// --- WatchJob: follow a job to its end from the start, resume after a
// seq seen before, or drop the stream after a few events.
void Client::Watch(int index) {
  if (index < 0 && user_ != nullptr) {
    // No job of its own yet: a job of a project it belongs to.
    JobInfo other;
    other.id = ReadableJob();
    if (other.id > 0) WatchCall(other, 0, -1);
    return;
  }
  if (index < 0) {
    // No job of its own yet: any job (all clients are the same user).
    const int64_t max = shared_->max_job_id.load();
    if (max == 0) return GetJobCall(1 + rng_.Uniform(1000000), /*expect_missing=*/true, nullptr);
    JobInfo other;
    other.id = 1 + static_cast<int64_t>(rng_.Uniform(max));
    WatchCall(other, 0, -1);
    return;
  }
  JobInfo& job = jobs_[index];
  const uint64_t mode = rng_.Uniform(100);
  if (mode < 55) {
    WatchCall(job, 0, -1);
  } else if (mode < 80) {
    WatchCall(job, job.last_seq > 0 ? job.last_seq : 1 + rng_.Uniform(3), -1);
  } else {
    WatchCall(job, 0, 1 + static_cast<int>(rng_.Uniform(3)));
  }
}

// Watches `job` after `after_seq`; drops the stream after `drop_after`
// events when that is >= 0.
void Client::WatchCall(JobInfo& job, int64_t after_seq, int drop_after) {
  Call call(this, kWatchJob, kWatchDeadlineS);
  v1::WatchJobRequest req;
  req.set_job_id(job.id);
  req.set_after_seq(after_seq);
  auto reader = stub_->WatchJob(&call.ctx, req);
  v1::WatchJobResponse msg;
  std::string bad;
  int64_t expect_seq = after_seq + 1;
  int events = 0;
  bool terminal = false;
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  v1::JobState job_state = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&msg)) {
    // A resumed watch waits for the job's next event, which may be far off
    // (a queued job): only watches from the start time their first message.
    if (after_seq == 0) call.FirstMessage();
    ++events;
    job_state = msg.job().state();
    const v1::JobEvent& e = msg.event();
    if (bad.empty() && terminal) bad = "WatchJob sent an event after the terminal one";
    if (bad.empty() && e.seq() != expect_seq) {
      bad = absl::StrFormat("WatchJob %d after %d: seq %d where %d was due", job.id, after_seq,
                            e.seq(), expect_seq);
    }
    if (bad.empty() && msg.job().id() != job.id) bad = "WatchJob event of another job";
    expect_seq = e.seq() + 1;
    if (e.has_state()) {
      last_state = e.state();
      terminal = IsTerminal(e.state());
    }
    if (drop_after >= 0 && events >= drop_after && !terminal) {
      call.dropped = true;
      call.ctx.TryCancel();
      break;
    }
  }
  const grpc::Status st = reader->Finish();
  if (st.ok() && !call.dropped && bad.empty() && events > 0 && !terminal) {
    bad = absl::StrFormat(
        "WatchJob %d (after_seq %d) ended OK after %d events (last seq %d) without a terminal "
        "state event; the job was %s at the last event",
        job.id, after_seq, events, expect_seq - 1, v1::JobState_Name(job_state));
  }
  Finish(call, st, bad, {});
  if (expect_seq - 1 > job.last_seq) job.last_seq = expect_seq - 1;
  if (terminal) {
    NoteState(job, last_state);
    ++shared_->watched_to_end;
  }
}

// --- GetJob: own job, someone's job, or an id that does not exist.
void Client::GetJob() {
  if (Chance(0.05)) return GetJobCall(1000000000 + rng_.Uniform(1000), true, nullptr);
  const int index = PickJob(/*prefer_running=*/true);
  if (index < 0 && user_ != nullptr) {
    const int64_t id = ReadableJob();
    return GetJobCall(id > 0 ? id : 1000000000, id == 0, nullptr);
  }
  if (index < 0) {
    const int64_t max = shared_->max_job_id.load();
    return GetJobCall(max > 0 ? 1 + rng_.Uniform(max) : 1000000000, max == 0, nullptr);
  }
  GetJobCall(jobs_[index].id, false, &jobs_[index]);
}

void Client::GetJobCall(int64_t id, bool expect_missing, JobInfo* job) {
  Call call(this, kGetJob, kUnaryDeadlineS);
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::GetJobResponse resp;
  const grpc::Status st = stub_->GetJob(&call.ctx, req, &resp);
  std::string bad;
  if (st.ok()) {
    const v1::Job& j = resp.job();
    if (expect_missing) {
      bad = absl::StrFormat("GetJob of unknown job %d answered OK", id);
    } else if (j.id() != id || j.progress() < 0 || j.progress() > 1) {
      bad = absl::StrFormat("GetJob %d: id %d, progress %g", id, j.id(), j.progress());
    } else if (job != nullptr && IsTerminal(job->state) && j.state() != job->state) {
      bad = absl::StrFormat("job %d was %s, GetJob now says %s", id, v1::JobState_Name(job->state),
                            v1::JobState_Name(j.state()));
    } else if (IsTerminal(j.state()) && !j.has_finished_at()) {
      bad = absl::StrFormat("job %d is %s without finished_at", id, v1::JobState_Name(j.state()));
    }
  }
  Finish(call, st, bad,
         expect_missing ? std::initializer_list<StatusCode>{StatusCode::NOT_FOUND}
                        : std::initializer_list<StatusCode>{});
  if (st.ok() && bad.empty() && job != nullptr) NoteState(*job, resp.job().state());
}

// --- ListJobs: pages of all jobs or of one state, newest first; with
// --projects, of a project the client writes or reads, and no other's.
void Client::ListJobs() {
  static const int kSizes[] = {0, 1, 5, 20, 100, 500};
  v1::ListJobsRequest req;
  if (user_ != nullptr) req.set_project(kProjects[Chance(0.6) ? user_->write : user_->read]);
  req.set_page_size(kSizes[rng_.Uniform(6)]);
  if (Chance(0.3)) req.set_state(static_cast<v1::JobState>(1 + rng_.Uniform(5)));
  const int pages = Chance(0.1) ? 20 : 1 + static_cast<int>(rng_.Uniform(3));
  int64_t last_id = INT64_MAX;
  for (int p = 0; p < pages && !Done(); ++p) {
    Call call(this, kListJobs, kUnaryDeadlineS);
    v1::ListJobsResponse resp;
    const grpc::Status st = stub_->ListJobs(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok()) {
      const int limit = req.page_size() == 0 ? 50 : req.page_size();
      if (resp.jobs_size() > limit) bad = "ListJobs page larger than page_size";
      for (const v1::Job& j : resp.jobs()) {
        if (j.id() >= last_id) {
          bad = absl::StrFormat("ListJobs not newest first across pages: %d after %d", j.id(),
                                last_id);
        }
        if (req.state() != v1::JOB_STATE_UNSPECIFIED && j.state() != req.state()) {
          bad = "ListJobs state filter not respected";
        }
        if (user_ != nullptr && j.project() != req.project()) {
          ++shared_->cross_project_ok;
          bad = absl::StrFormat("ListJobs of %s listed job %d of project %s", req.project(), j.id(),
                                j.project());
        }
        last_id = j.id();
      }
    }
    Finish(call, st, bad, {});
    if (!st.ok() || resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
}

// --- CancelJob: mostly jobs not known to be finished;
// FAILED_PRECONDITION when it had finished.
void Client::Cancel() {
  const int index = PickJob(/*prefer_running=*/true);
  if (index < 0) return;
  JobInfo& job = jobs_[index];
  Call call(this, kCancelJob, kUnaryDeadlineS);
  v1::CancelJobRequest req;
  req.set_job_id(job.id);
  v1::CancelJobResponse resp;
  const grpc::Status st = stub_->CancelJob(&call.ctx, req, &resp);
  std::string bad;
  if (st.ok()) {
    const v1::Job& j = resp.job();
    const bool fine = j.state() == v1::JOB_STATE_CANCELLED ||
                      (j.state() == v1::JOB_STATE_RUNNING && j.cancel_requested());
    if (!fine) {
      bad = absl::StrFormat("CancelJob %d answered OK with state %s cancel_requested %d", job.id,
                            v1::JobState_Name(j.state()), j.cancel_requested());
    } else if (IsTerminal(job.state)) {
      bad = absl::StrFormat("CancelJob of job %d, known %s, answered OK", job.id,
                            v1::JobState_Name(job.state));
    }
  }
  Finish(call, st, bad, {StatusCode::FAILED_PRECONDITION});
  if (st.ok() && bad.empty()) {
    ++shared_->cancels_accepted;
    if (resp.job().state() == v1::JOB_STATE_CANCELLED) NoteState(job, v1::JOB_STATE_CANCELLED);
  }
}

// --- QueryResults: by job with optional filters, or across jobs (the
// caller is an admin without --auth); paged, oldest first.
void Client::QueryResults() {
  v1::QueryResultsRequest req;
  v1::ResultFilter* f = req.mutable_filter();
  const JobInfo* job = nullptr;
  std::vector<const JobInfo*> done;
  for (const JobInfo& j : jobs_) {
    if (j.state == v1::JOB_STATE_SUCCEEDED) done.push_back(&j);
  }
  // Across jobs is for admins: a --projects client names one of its own.
  if (user_ != nullptr && jobs_.empty()) return;
  const bool across = user_ == nullptr && (Chance(0.2) || jobs_.empty());
  if (!across) {
    job = !done.empty() && Chance(0.8) ? PickOf(done) : &jobs_[rng_.Uniform(jobs_.size())];
    f->set_job_id(job->id);
  }
  if (Chance(across ? 0.6 : 0.3)) f->set_metric(kMetrics[rng_.Uniform(7)]);
  if (Chance(0.3)) f->set_intervention(kResultInterventions[rng_.Uniform(7)]);
  if (Chance(0.3)) f->set_model(PickModel(/*dense_too=*/true));
  if (Chance(0.1)) f->set_dataset_sha256(shared_->eval_sha);
  int64_t after_us = 0, before_us = 0;
  if (Chance(0.15)) after_us = WallMicros() - static_cast<int64_t>(rng_.Uniform(120)) * 1000000;
  if (Chance(0.1)) before_us = WallMicros() - static_cast<int64_t>(rng_.Uniform(60)) * 1000000;
  // Both drawn: a range, never an empty one (created_after > created_before
  // is refused as INVALID_ARGUMENT, which would count as an error here).
  if (after_us != 0 && before_us != 0 && after_us > before_us) std::swap(after_us, before_us);
  if (after_us != 0) SetMicros(after_us, f->mutable_created_after());
  if (before_us != 0) SetMicros(before_us, f->mutable_created_before());
  static const int kSizes[] = {0, 10, 50, 200, 1000};
  req.set_page_size(kSizes[rng_.Uniform(5)]);
  const bool unfiltered = !across && f->model().empty() && f->metric().empty() &&
                          f->intervention().empty() && f->dataset_sha256().empty() &&
                          after_us == 0 && before_us == 0;
  const int pages = across ? 1 + static_cast<int>(rng_.Uniform(2)) : 50;
  std::set<std::string> keys;
  int64_t last_created = 0, rows = 0;
  for (int p = 0; p < pages && !Done(); ++p) {
    Call call(this, kQueryResults, kUnaryDeadlineS);
    v1::QueryResultsResponse resp;
    const grpc::Status st = stub_->QueryResults(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok()) {
      const int limit = req.page_size() == 0 ? 100 : req.page_size();
      if (resp.results_size() > limit) bad = "QueryResults page larger than page_size";
      for (const v1::Result& r : resp.results()) {
        const int64_t created = ToMicros(r.created_at());
        if ((f->job_id() != 0 && r.job_id() != f->job_id()) ||
            (!f->model().empty() && r.model() != f->model()) ||
            (!f->metric().empty() && r.metric() != f->metric()) ||
            (!f->intervention().empty() && r.intervention() != f->intervention()) ||
            (!f->dataset_sha256().empty() && r.dataset_sha256() != f->dataset_sha256()) ||
            (after_us != 0 && created < after_us) || (before_us != 0 && created >= before_us)) {
          bad = absl::StrFormat("QueryResults row (job %d, %s, %s, %s) outside the filter %s",
                                r.job_id(), r.model(), r.intervention(), r.metric(),
                                f->ShortDebugString());
        }
        if (created < last_created) bad = "QueryResults rows not oldest first";
        last_created = created;
        const std::string key =
            absl::StrCat(r.job_id(), "/", r.model(), "/", r.intervention(), "/", r.metric());
        if (!keys.insert(key).second) bad = "QueryResults row twice: " + key;
      }
      rows += resp.results_size();
      if (bad.empty() && resp.next_page_token().empty() && unfiltered &&
          job->state == v1::JOB_STATE_SUCCEEDED && rows == 0) {
        bad = absl::StrFormat("succeeded job %d has no result rows", job->id);
      }
    }
    Finish(call, st, bad, {});
    if (!st.ok() || resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
}

}  // namespace fca::soak
