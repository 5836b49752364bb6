// AuditServiceCore: dataset uploads (DatasetUpload) and ListDatasets.
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
#include "server/core/service.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/torch_util.h"
#include "server/jobs/datasets.h"
#include "server/jobs/mapping.h"
#include "server/jobs/server_metrics.h"

namespace fca::core {

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
  FCA_RETURN_IF_ERROR(runtime::ValidateName(header.name(), "dataset"));
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
      store_->FinishUpload(upload_id_, header_.name(), jobs::DatasetKindName(header_.kind()), sha));
  upload_id_ = 0;
  v1::UploadDatasetResponse response;
  *response.mutable_dataset() = jobs::ToProto(record);
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
  for (const storage::DatasetRecord& d : page.datasets) *response.add_datasets() = jobs::ToProto(d);
  response.set_next_page_token(page.next_page_token);
  return response;
}

}  // namespace fca::core
