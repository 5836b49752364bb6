// fca_soak_bench: with --projects, the client's calls where it may not go.
// A stranger (no member of the project) naming a job or the project itself
// must get NOT_FOUND, as for nothing; a reader's write PERMISSION_DENIED; a
// reader's read of the project's job is answered, with the job in it. Every
// probe counts in Shared::probes by kind and code; an OK where a refusal
// was due counts in Shared::cross_project_ok or reader_writes_ok, and as an
// error of the RPC.
#include <string>

#include "absl/strings/str_format.h"
#include "bench/soak_client.h"

namespace fca::soak {

using grpc::StatusCode;

void Client::Probe() {
  if (Chance(0.6)) {
    StrangerProbe();
  } else {
    ReaderProbe();
  }
}

void Client::FinishProbe(Call& call, const std::string& kind, const grpc::Status& st,
                         StatusCode want, std::string bad, std::atomic<int64_t>* leaks) {
  if (st.ok() && want != StatusCode::OK) {
    ++*leaks;
    bad = absl::StrFormat("%s by %s answered OK (%s was due)", kind, user_->name, CodeName(want));
  }
  shared_->NoteProbe(kind, st.error_code());
  Finish(call, st, bad, {want});
}

// A small valid audit of the shared "eval" and "calib" of `project`.
void Client::SubmitTo(const std::string& project, Call& call, grpc::Status* st) {
  v1::SubmitAuditRequest req;
  req.set_project(project);
  v1::AuditSpec* spec = req.mutable_spec();
  spec->add_models(kGateModels[0]);
  spec->set_eval_dataset("eval");
  spec->set_calib_dataset("calib");
  spec->set_window_length(16);
  spec->set_max_eval_windows(2);
  spec->set_max_calib_windows(2);
  spec->set_bootstrap_resamples(50);
  spec->set_label("soak probe");
  v1::SubmitAuditResponse resp;
  *st = stub_->SubmitAudit(&call.ctx, req, &resp);
}

// One unary probe by a stranger: `rpc` with `req`, recorded as `op`;
// NOT_FOUND is due.
template <typename Req, typename Resp>
void Client::StrangerCall(int op, const std::string& kind,
                          grpc::Status (v1::AuditService::Stub::*rpc)(grpc::ClientContext*,
                                                                      const Req&, Resp*),
                          const Req& req) {
  Call call(this, op, kUnaryDeadlineS);
  Resp resp;
  const grpc::Status st = (stub_.get()->*rpc)(&call.ctx, req, &resp);
  FinishProbe(call, "stranger " + kind, st, StatusCode::NOT_FOUND, "", &shared_->cross_project_ok);
}

// Names a job of the project the client is no member of, or the project.
void Client::StrangerProbe() {
  using Stub = v1::AuditService::Stub;
  const std::string project = kProjects[user_->stranger];
  const int64_t job = shared_->JobOf(user_->stranger, rng_);
  // Kinds 0-3 name a job: none yet, a kind naming the project instead.
  uint64_t kind = rng_.Uniform(7);
  if (job == 0 && kind < 4) kind += 4;
  v1::GetJobRequest get;
  get.set_job_id(job);
  v1::QueryResultsRequest query;
  query.mutable_filter()->set_job_id(job);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job);
  v1::ListJobsRequest jobs;
  jobs.set_project(project);
  v1::ListDatasetsRequest datasets;
  datasets.set_project(project);
  switch (kind) {
    case 0:
      return StrangerCall(kGetJob, "GetJob", &Stub::GetJob, get);
    case 1:
      return StrangerWatch(job);
    case 2:
      return StrangerCall(kQueryResults, "QueryResults", &Stub::QueryResults, query);
    case 3:
      return StrangerCall(kCancelJob, "CancelJob", &Stub::CancelJob, cancel);
    case 4:
      return StrangerCall(kListJobs, "ListJobs", &Stub::ListJobs, jobs);
    case 5:
      return StrangerCall(kListDatasets, "ListDatasets", &Stub::ListDatasets, datasets);
    default: {
      Call call(this, kSubmitAudit, kUnaryDeadlineS);
      grpc::Status st;
      SubmitTo(project, call, &st);
      return FinishProbe(call, "stranger SubmitAudit", st, StatusCode::NOT_FOUND, "",
                         &shared_->cross_project_ok);
    }
  }
}

// WatchJob of a stranger's job: any event sent is a leak.
void Client::StrangerWatch(int64_t job) {
  Call call(this, kWatchJob, kUnaryDeadlineS);
  v1::WatchJobRequest req;
  req.set_job_id(job);
  auto reader = stub_->WatchJob(&call.ctx, req);
  v1::WatchJobResponse msg;
  const bool shown = reader->Read(&msg);
  if (shown) {
    call.ctx.TryCancel();  // a stream wrongly open is not followed to its end
    while (reader->Read(&msg)) {
    }
  }
  const grpc::Status st = reader->Finish();
  // An event sent counts as answered whatever the status after the cancel.
  FinishProbe(call, "stranger WatchJob", shown ? grpc::Status::OK : st, StatusCode::NOT_FOUND, "",
              &shared_->cross_project_ok);
}

// In the project the client reads: a job is shown (in that project);
// submitting, uploading and cancelling are PERMISSION_DENIED.
void Client::ReaderProbe() {
  const std::string project = kProjects[user_->read];
  const int64_t job = shared_->JobOf(user_->read, rng_);
  uint64_t kind = rng_.Uniform(4);
  if (job == 0 && (kind == 0 || kind == 3)) kind = 1;
  switch (kind) {
    case 0: {
      Call call(this, kGetJob, kUnaryDeadlineS);
      v1::GetJobRequest req;
      req.set_job_id(job);
      v1::GetJobResponse resp;
      const grpc::Status st = stub_->GetJob(&call.ctx, req, &resp);
      std::string bad;
      if (st.ok() && (resp.job().id() != job || resp.job().project() != project)) {
        ++shared_->cross_project_ok;
        bad = absl::StrFormat("GetJob %d by a reader of %s: job %d of project '%s'", job, project,
                              resp.job().id(), resp.job().project());
      }
      return FinishProbe(call, "reader GetJob", st, StatusCode::OK, bad, nullptr);
    }
    case 1: {
      Call call(this, kSubmitAudit, kUnaryDeadlineS);
      grpc::Status st;
      SubmitTo(project, call, &st);
      return FinishProbe(call, "reader SubmitAudit", st, StatusCode::PERMISSION_DENIED, "",
                         &shared_->reader_writes_ok);
    }
    case 2: {
      const std::string bytes = Letters(4096, rng_.Next());
      Call call(this, kUploadDataset, kUploadDeadlineS);
      v1::UploadDatasetResponse resp;
      auto writer = stub_->UploadDataset(&call.ctx, &resp);
      v1::UploadDatasetRequest header;
      header.mutable_header()->set_name(absl::StrFormat("%s-probe-c%d", shared_->run_tag, index_));
      header.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
      header.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
      header.mutable_header()->set_project(project);
      v1::UploadDatasetRequest chunk;
      chunk.set_chunk(bytes);
      if (writer->Write(header) && writer->Write(chunk)) writer->WritesDone();
      const grpc::Status st = writer->Finish();
      return FinishProbe(call, "reader UploadDataset", st, StatusCode::PERMISSION_DENIED, "",
                         &shared_->reader_writes_ok);
    }
    default: {
      Call call(this, kCancelJob, kUnaryDeadlineS);
      v1::CancelJobRequest req;
      req.set_job_id(job);
      v1::CancelJobResponse resp;
      const grpc::Status st = stub_->CancelJob(&call.ctx, req, &resp);
      return FinishProbe(call, "reader CancelJob", st, StatusCode::PERMISSION_DENIED, "",
                         &shared_->reader_writes_ok);
    }
  }
}

}  // namespace fca::soak
