// The logic behind every fca.v1.AuditService RPC, free of gRPC so it is
// tested with plain calls. The gRPC layer authenticates the caller, calls
// one method here and converts the status once.
#ifndef FCA_SERVER_CORE_SERVICE_H_
#define FCA_SERVER_CORE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/byte_budget.h"
#include "common/sha256.h"
#include "common/stream_shares.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/audit_log.h"
#include "server/core/backups.h"
#include "server/core/caller.h"
#include "server/core/projects.h"
#include "server/core/queue_view.h"
#include "server/core/spec_policy.h"
#include "server/core/webhooks.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/event_hub.h"
#include "server/runtime/model_repository.h"
#include "storage/store.h"

namespace fca::core {

struct ServiceLimits {
  int64_t max_dataset_bytes = 256ll << 20;
  // Per-user quotas: bytes of datasets kept (uploads in progress count) and
  // jobs kept in any state (delete finished ones to make room).
  int64_t max_user_bytes = 4ll << 30;
  int64_t max_jobs_per_user = 10000;
  // WatchJob streams open at once, over all users: each holds a thread.
  int64_t max_watch_streams = 256;
  // Text a Tokenize call may send: ids are returned in one message, and a
  // check of "what the model sees" needs a sample, not a corpus.
  int64_t max_tokenize_bytes = 1 << 20;
  int64_t max_queued_jobs_per_user = 16;
  // Uploads in flight, over all users and transports (gRPC UploadDataset
  // by its announced size, HTTP request bodies by Content-Length): their
  // bytes held at once in memory are bounded by this. RESOURCE_EXHAUSTED
  // ("retry shortly"; HTTP 429) for an upload beyond it.
  int64_t max_upload_bytes_in_flight = 512ll << 20;
  // What one client may hold of it: each address and each user counts on
  // its own (common/byte_budget.h), so that one address or key cannot stop
  // everyone's uploads. The default lets one upload of the largest dataset
  // (--max_dataset_bytes' default) through.
  int64_t max_upload_bytes_per_client = 256ll << 20;
  SpecLimits spec;
};

// What GetServerInfo says about the process beyond its limits; fca-server
// sets it from its flags (tests may leave the defaults).
struct ServerFacts {
  std::vector<std::string> devices;  // one per worker of the server's own
  std::string executor = "local";    // "local" | "slurm"
  bool auth = false;
  // The users of the --api_keys file's keys (the store's are looked up).
  std::set<std::string> key_file_users;
};

// The largest chunk of a dataset upload (UploadDataset) and of a coefficient
// export (ExportCoefficients).
inline constexpr int64_t kChunkBytes = 1 << 20;

// Receives one dataset upload, checking limits and the caller's quota as
// bytes arrive. Chunks go straight to the store (staged), so the server holds
// one chunk of an upload in memory, never the whole of it. An upload that is
// not finished (client gone, a refused chunk) is dropped from the store when
// this object is destroyed. With `in_flight`, the announced size is reserved
// from it from Start() until then (the transport's buffers hold at most that).
class DatasetUpload {
 public:
  DatasetUpload(const Caller& caller, storage::Store* store, const ServiceLimits& limits,
                ByteBudget* in_flight = nullptr)
      : caller_(caller), store_(store), limits_(limits), in_flight_(in_flight) {}
  ~DatasetUpload();
  DatasetUpload(const DatasetUpload&) = delete;
  DatasetUpload& operator=(const DatasetUpload&) = delete;

  // The first message. INVALID_ARGUMENT for a bad name/kind/size,
  // RESOURCE_EXHAUSTED when the announced size exceeds the limit, the
  // caller's quota or what is left of the uploads in flight's budget;
  // NOT_FOUND / PERMISSION_DENIED unless the caller writes in the project.
  [[nodiscard]] absl::Status Start(const v1::UploadDatasetHeader& header);
  [[nodiscard]] absl::Status Append(const std::string& chunk);
  // Verifies size (and checksum if given) and stores the dataset.
  [[nodiscard]] absl::StatusOr<v1::UploadDatasetResponse> Finish();

 private:
  Caller caller_;
  storage::Store* store_;
  ServiceLimits limits_;
  ByteBudget* in_flight_;
  ByteBudget::Lease held_;
  bool started_ = false;
  v1::UploadDatasetHeader header_;
  std::string project_;
  int64_t upload_id_ = 0;  // staged in the store; 0 when nothing is staged
  int64_t received_ = 0;
  Sha256 hash_;
};

class AuditServiceCore {
 public:
  AuditServiceCore(storage::Store* store, runtime::ModelRepository* models,
                   jobs::Coordinator* coordinator, jobs::EventHub* hub, ServiceLimits limits)
      : store_(store),
        models_(models),
        coordinator_(coordinator),
        hub_(hub),
        limits_(limits),
        watch_streams_(limits.max_watch_streams),
        uploads_in_flight_(limits.max_upload_bytes_in_flight, limits.max_upload_bytes_per_client) {}

  const ServiceLimits& limits() const { return limits_; }
  // Shared by the transports' uploads (DatasetUpload, HTTP bodies).
  ByteBudget* upload_budget() { return &uploads_in_flight_; }
  storage::Store* store() const { return store_; }
  // Before the server takes calls.
  void set_facts(ServerFacts facts) { facts_ = std::move(facts); }
  // Before the server takes calls: where BackupDatabase writes (nullptr,
  // the default: no --backup_dir, the RPC is refused).
  void set_backups(BackupDirectory* backups) { backups_ = backups; }
  // Before the server takes calls: where state-changing calls are recorded
  // (nullptr, the default: nowhere; QueryAuditLog is then refused).
  void set_audit_log(AuditLog* audit_log) { audit_log_ = audit_log; }
  AuditLog* audit_log() const { return audit_log_; }

  // UploadDataset: `read` gives the stream's messages in order (false at
  // its end); DatasetUpload does the work; the upload is recorded.
  [[nodiscard]] absl::StatusOr<v1::UploadDatasetResponse> UploadDataset(
      const Caller& caller, const std::function<bool(v1::UploadDatasetRequest*)>& read);
  // Before the server takes calls: the webhook RPCs' logic (nullptr, the
  // default: they are refused with FAILED_PRECONDITION).
  void set_webhooks(Webhooks* webhooks) { webhooks_ = webhooks; }
  // Before the server takes calls: what its own and remote workers hold
  // loaded, for GetQueue (unset, the default: nothing shown loaded).
  void set_loaded_models(LoadedModels loaded) { loaded_models_ = std::move(loaded); }
  // Before the server takes calls: the retention days of projects that set
  // none (the default: keep forever).
  void set_retention_defaults(storage::RetentionDays days) { retention_defaults_ = days; }

  // The RPCs. Defined across service.cc (models, jobs and their events),
  // service_datasets.cc (UploadDataset's DatasetUpload, ListDatasets),
  // service_results.cc (results, coefficients, reports, the queue, server
  // info, job windows, backups, webhooks), and the files their headings name.
  [[nodiscard]] absl::StatusOr<v1::ListModelsResponse> ListModels(const Caller& caller);
  [[nodiscard]] absl::StatusOr<v1::ListDatasetsResponse> ListDatasets(
      const Caller& caller, const v1::ListDatasetsRequest& request);
  [[nodiscard]] absl::StatusOr<v1::SubmitAuditResponse> SubmitAudit(
      const Caller& caller, const v1::SubmitAuditRequest& request);
  [[nodiscard]] absl::StatusOr<v1::GetJobResponse> GetJob(const Caller& caller,
                                                          const v1::GetJobRequest& request);
  // ListJobs' default and largest page (ListJobsRequest.page_size): less
  // than the store's (Store::kMaxPageSize), each job carrying its spec and
  // provenance; bench/listing_bench.sh keeps a page of 500 under 20 ms.
  static constexpr int kDefaultJobsPerPage = 50;
  static constexpr int kMaxJobsPerPage = 500;
  [[nodiscard]] absl::StatusOr<v1::ListJobsResponse> ListJobs(const Caller& caller,
                                                              const v1::ListJobsRequest& request);
  [[nodiscard]] absl::StatusOr<v1::CancelJobResponse> CancelJob(
      const Caller& caller, const v1::CancelJobRequest& request);
  [[nodiscard]] absl::StatusOr<v1::DeleteJobResponse> DeleteJob(
      const Caller& caller, const v1::DeleteJobRequest& request);
  [[nodiscard]] absl::StatusOr<v1::DeleteDatasetResponse> DeleteDataset(
      const Caller& caller, const v1::DeleteDatasetRequest& request);
  [[nodiscard]] absl::StatusOr<v1::QueryResultsResponse> QueryResults(
      const Caller& caller, const v1::QueryResultsRequest& request);
  // Streams events after request.after_seq until the job is terminal, the
  // writer fails (client gone) or `stop()` returns true. RESOURCE_EXHAUSTED
  // when max_watch_streams streams are open already. `may_go_on` (if set)
  // is asked before each event (true) and at each wait (false); its error
  // ends the stream (the caller's key was revoked: auth::StreamKeyCheck).
  [[nodiscard]] absl::Status WatchJob(const Caller& caller, const v1::WatchJobRequest& request,
                                      const std::function<bool(const v1::WatchJobResponse&)>& write,
                                      const std::function<bool()>& stop,
                                      const std::function<absl::Status(bool)>& may_go_on = {});
  // The model's tokenizer on request.text (no BOS/EOS added).
  [[nodiscard]] absl::StatusOr<v1::TokenizeResponse> Tokenize(const Caller& caller,
                                                              const v1::TokenizeRequest& request);
  [[nodiscard]] absl::Status ExportCoefficients(
      const Caller& caller, const v1::ExportCoefficientsRequest& request,
      const std::function<bool(const v1::ExportCoefficientsResponse&)>& write);
  // The job's report from its stored rows (server/core/report_assembly.h).
  [[nodiscard]] absl::StatusOr<v1::GetReportResponse> GetReport(
      const Caller& caller, const v1::GetReportRequest& request);
  // The reports of 1 to kMaxCompareJobs jobs, in request order.
  [[nodiscard]] absl::StatusOr<v1::CompareJobsResponse> CompareJobs(
      const Caller& caller, const v1::CompareJobsRequest& request);
  // 2 to kMaxPoolJobs SUCCEEDED jobs the caller can see as one report
  // (server/core/pooling.h).
  [[nodiscard]] absl::StatusOr<v1::PoolJobsResponse> PoolJobs(const Caller& caller,
                                                              const v1::PoolJobsRequest& request);
  [[nodiscard]] absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo(const Caller& caller);
  // The queue now, as the caller may see it (server/core/queue_view.h).
  [[nodiscard]] absl::StatusOr<v1::GetQueueResponse> GetQueue(const Caller& caller);
  // The job's windows as its tasks cut them: the datasets tokenized with the
  // model's tokenizer, at most the spec's max windows each.
  [[nodiscard]] absl::StatusOr<v1::ListJobWindowsResponse> ListJobWindows(
      const Caller& caller, const v1::ListJobWindowsRequest& request);
  // Admins only: a checked copy of the database into the backup folder.
  [[nodiscard]] absl::StatusOr<v1::BackupDatabaseResponse> BackupDatabase(
      const Caller& caller, const v1::BackupDatabaseRequest& request);
  // Webhooks (server/core/webhooks.h): the project's managers only.
  [[nodiscard]] absl::StatusOr<v1::AddWebhookResponse> AddWebhook(
      const Caller& caller, const v1::AddWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListWebhooksResponse> ListWebhooks(
      const Caller& caller, const v1::ListWebhooksRequest& request);
  [[nodiscard]] absl::StatusOr<v1::RemoveWebhookResponse> RemoveWebhook(
      const Caller& caller, const v1::RemoveWebhookRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListWebhookDeliveriesResponse> ListWebhookDeliveries(
      const Caller& caller, const v1::ListWebhookDeliveriesRequest& request);

  // ---- API keys and the audit log (service_keys.cc). Keys: a user sees,
  // creates (role "user"), revokes and rotates their own; an admin anyone's.
  [[nodiscard]] absl::StatusOr<v1::CreateApiKeyResponse> CreateApiKey(
      const Caller& caller, const v1::CreateApiKeyRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListApiKeysResponse> ListApiKeys(
      const Caller& caller, const v1::ListApiKeysRequest& request);
  [[nodiscard]] absl::StatusOr<v1::RevokeApiKeyResponse> RevokeApiKey(
      const Caller& caller, const v1::RevokeApiKeyRequest& request);
  [[nodiscard]] absl::StatusOr<v1::RotateApiKeyResponse> RotateApiKey(
      const Caller& caller, const v1::RotateApiKeyRequest& request);
  // Admins only.
  [[nodiscard]] absl::StatusOr<v1::QueryAuditLogResponse> QueryAuditLog(
      const Caller& caller, const v1::QueryAuditLogRequest& request);
  // The longest grace RotateApiKey gives the old key.
  static constexpr int64_t kMaxRotationGraceSeconds = int64_t{30} * 24 * 3600;

  // --- projects (service_projects.cc) ---
  [[nodiscard]] absl::StatusOr<v1::CreateProjectResponse> CreateProject(
      const Caller& caller, const v1::CreateProjectRequest& request);
  [[nodiscard]] absl::StatusOr<v1::ListProjectsResponse> ListProjects(
      const Caller& caller, const v1::ListProjectsRequest& request);
  [[nodiscard]] absl::StatusOr<v1::GetProjectResponse> GetProject(
      const Caller& caller, const v1::GetProjectRequest& request);
  [[nodiscard]] absl::StatusOr<v1::AddProjectMemberResponse> AddProjectMember(
      const Caller& caller, const v1::AddProjectMemberRequest& request);
  [[nodiscard]] absl::StatusOr<v1::RemoveProjectMemberResponse> RemoveProjectMember(
      const Caller& caller, const v1::RemoveProjectMemberRequest& request);
  [[nodiscard]] absl::StatusOr<v1::DeleteProjectResponse> DeleteProject(
      const Caller& caller, const v1::DeleteProjectRequest& request);
  // A project's retention (server/core/retention.h): members read it,
  // owners set it.
  [[nodiscard]] absl::StatusOr<v1::GetRetentionResponse> GetRetention(
      const Caller& caller, const v1::GetRetentionRequest& request);
  [[nodiscard]] absl::StatusOr<v1::SetRetentionResponse> SetRetention(
      const Caller& caller, const v1::SetRetentionRequest& request);

  // The access check of every RPC (server/core/projects.h): the caller's
  // role in `project`, NOT_FOUND for a non-member.
  [[nodiscard]] absl::StatusOr<ProjectRole> RoleIn(const Caller& caller,
                                                   absl::string_view project) {
    return core::RoleIn(store_, caller, project);
  }

  static constexpr int kMaxCompareJobs = 16;
  // Values of one repeated ResultFilter field.
  static constexpr int kMaxFilterValues = 100;

 private:
  // The state-changing calls as service.cc does them; the public methods
  // (service_keys.cc) call these and record the outcome in the audit log.
  [[nodiscard]] absl::StatusOr<v1::SubmitAuditResponse> SubmitAuditUnrecorded(
      const Caller& caller, const v1::SubmitAuditRequest& request);
  [[nodiscard]] absl::StatusOr<v1::CancelJobResponse> CancelJobUnrecorded(
      const Caller& caller, const v1::CancelJobRequest& request);
  [[nodiscard]] absl::StatusOr<v1::DeleteJobResponse> DeleteJobUnrecorded(
      const Caller& caller, const v1::DeleteJobRequest& request);
  [[nodiscard]] absl::StatusOr<v1::DeleteDatasetResponse> DeleteDatasetUnrecorded(
      const Caller& caller, const v1::DeleteDatasetRequest& request);
  [[nodiscard]] absl::StatusOr<v1::BackupDatabaseResponse> BackupDatabaseUnrecorded(
      const Caller& caller, const v1::BackupDatabaseRequest& request);
  // `caller` did `action` on `object` with `outcome` (nothing without an
  // audit log).
  void Record(const Caller& caller, absl::string_view action, const AuditObject& object,
              const absl::Status& outcome, absl::string_view detail = "");
  // The key, if the caller may act on it; NOT_FOUND otherwise.
  [[nodiscard]] absl::StatusOr<storage::ApiKeyRecord> VisibleKey(const Caller& caller, int64_t id);
  // Whether `user` has an API key to call with: an active one in the store,
  // or one in the key file (ServerFacts::key_file_users).
  [[nodiscard]] absl::StatusOr<bool> UserHasKey(const std::string& user);

  // Audited models exist, have coefficient sites and share a family; the
  // dense twin exists and has none; every model takes windows of the
  // spec's length.
  [[nodiscard]] absl::Status CheckModels(const v1::AuditSpec& spec);
  // ListJobs' request as a store filter, with the caller's visibility.
  [[nodiscard]] absl::StatusOr<storage::JobFilter> JobFilterFor(const Caller& caller,
                                                                const v1::ListJobsRequest& request);
  // QueryResults' filter as a store filter; the caller must see every job
  // it names.
  [[nodiscard]] absl::StatusOr<storage::ResultFilter> ResultFilterFor(
      const Caller& caller, const v1::ResultFilter& filter);
  // Every stored row of a job, in insertion order.
  [[nodiscard]] absl::StatusOr<std::vector<v1::Result>> JobRows(int64_t job_id);
  // The job, if the caller is a member of its project; NOT_FOUND otherwise
  // (not PERMISSION_DENIED: other projects' job ids are not disclosed).
  [[nodiscard]] absl::StatusOr<storage::JobRecord> VisibleJob(const Caller& caller, int64_t job_id);
  // VisibleJob, when the caller may also cancel or delete it (its writer
  // who submitted it, or an owner); PERMISSION_DENIED for other members.
  [[nodiscard]] absl::StatusOr<storage::JobRecord> ChangeableJob(const Caller& caller,
                                                                 int64_t job_id);
  // The project with its members, as GetProject and the membership calls
  // answer; `role` is the caller's.
  [[nodiscard]] absl::StatusOr<v1::Project> ProjectWithMembers(const std::string& name,
                                                               ProjectRole role);
  // WatchJob: sends the job's notice (a seq-0 note) when it changed since
  // version *sent; false when the client went away.
  [[nodiscard]] absl::StatusOr<bool> SendNotice(
      const storage::JobRecord& job, int64_t* sent,
      const std::function<bool(const v1::WatchJobResponse&)>& write);
  // The job as the server knows it: the stored record with the hub's
  // progress and notice.
  [[nodiscard]] absl::StatusOr<v1::Job> JobProto(const storage::JobRecord& job);
  // The job with its tasks (each with its provenance and placement), as
  // GetJob and GetReport return it.
  [[nodiscard]] absl::StatusOr<v1::Job> JobWithTasks(const storage::JobRecord& job);

  // The webhooks, or FAILED_PRECONDITION when the server has none.
  [[nodiscard]] absl::StatusOr<Webhooks*> WebhooksOrOff() const;

  storage::Store* store_;
  runtime::ModelRepository* models_;
  jobs::Coordinator* coordinator_;
  jobs::EventHub* hub_;
  ServiceLimits limits_;
  ServerFacts facts_;
  BackupDirectory* backups_ = nullptr;
  AuditLog* audit_log_ = nullptr;
  Webhooks* webhooks_ = nullptr;
  LoadedModels loaded_models_;
  storage::RetentionDays retention_defaults_;
  StreamShares watch_streams_;  // WatchJob's, each user a share
  ByteBudget uploads_in_flight_;
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_SERVICE_H_
