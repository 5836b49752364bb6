#include "server/jobs/datasets.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/jobs/mapping.h"

namespace fca::jobs {

absl::StatusOr<storage::DatasetRecord> FindDatasetRef(storage::Store* store, const std::string& ref,
                                                      const std::string& project) {
  const std::string prefix = "sha256:";
  if (ref.rfind(prefix, 0) == 0) {
    auto found = store->FindDatasetByContent(ref.substr(prefix.size()), project);
    if (absl::IsNotFound(found.status())) {
      return absl::NotFoundError(
          absl::StrFormat("no dataset of project '%s' has %s", project, ref.substr(0, 80)));
    }
    return found;
  }
  FCA_RETURN_IF_ERROR(runtime::ValidateName(ref, "dataset"));
  auto found = store->FindDataset(ref, project);
  if (absl::IsNotFound(found.status())) {
    return absl::NotFoundError(
        absl::StrFormat("dataset '%s' is not uploaded in project '%s'", ref, project));
  }
  return found;
}

absl::StatusOr<runtime::DatasetBytes> ReadJobDataset(storage::Store* store,
                                                     const v1::AuditSpec& spec,
                                                     const std::string& project, bool calibration) {
  const std::string& ref = calibration ? spec.calib_dataset() : spec.eval_dataset();
  const int64_t max_windows = calibration ? spec.max_calib_windows() : spec.max_eval_windows();
  FCA_ASSIGN_OR_RETURN(storage::DatasetRecord record, FindDatasetRef(store, ref, project));
  // One window more than the job uses, so the engine can tell (and note)
  // that max windows left some out.
  const int64_t max_token_bytes = (max_windows + 1) * spec.window_length() * 4;
  runtime::DatasetBytes out;
  FCA_ASSIGN_OR_RETURN(out.bytes, record.kind == "tokens" && max_windows > 0
                                      ? store->ReadDatasetPrefix(record.id, max_token_bytes)
                                      : store->ReadDatasetBytes(record.id));
  out.name = record.name;
  out.kind = record.kind;
  out.sha256 = record.sha256;
  return out;
}

absl::Status CheckDatasetUnused(storage::Store* store, const storage::DatasetRecord& dataset) {
  storage::JobFilter filter;
  filter.project = dataset.project;
  for (storage::JobState state : {storage::JobState::kQueued, storage::JobState::kRunning}) {
    filter.state = state;
    std::string token;
    do {
      FCA_ASSIGN_OR_RETURN(storage::JobPage page,
                           store->ListJobs(filter, storage::Store::kMaxPageSize, token));
      for (const storage::JobRecord& job : page.jobs) {
        auto spec = StoredSpec(job);
        if (!spec.ok()) continue;
        for (const std::string& ref : {spec->eval_dataset(), spec->calib_dataset()}) {
          if (ref == dataset.name || ref == "sha256:" + dataset.sha256) {
            return absl::FailedPreconditionError(
                absl::StrFormat("dataset '%s' is used by job %d, which is %s; cancel it or wait",
                                dataset.name, job.id, storage::JobStateName(job.state)));
          }
        }
      }
      token = page.next_page_token;
    } while (!token.empty());
  }
  return absl::OkStatus();
}

}  // namespace fca::jobs
