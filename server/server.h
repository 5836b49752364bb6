// The audit server as one object (after TF Serving's Server::BuildAndStart):
// the store, the model repository, the coordinator, this server's own
// workers, the Slurm executor, the gRPC services (AuditService,
// WorkerService, health, reflection) and the HTTP gateway, built and
// started from a ServerOptions, and drained by Shutdown().
//
// fca-server's main maps its flags to ServerOptions and runs one; the tests
// and benchmarks that need a real gRPC server on 127.0.0.1 build one too.
// Flag checks, logging set-up and signals stay with main.
#ifndef FCA_SERVER_SERVER_H_
#define FCA_SERVER_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/backups.h"
#include "server/core/retention.h"
#include "server/core/service.h"
#include "server/core/webhooks.h"
#include "server/http/gateway.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/event_hub.h"
#include "server/jobs/slurm_executor.h"
#include "server/jobs/webhook_sender.h"
#include "server/jobs/worker_pool.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/worker.h"
#include "storage/store.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace fca {

namespace engine {
class WeightsHashCache;
}  // namespace engine
namespace jobs {
class ServerGauges;
}  // namespace jobs
namespace auth {
class Authenticator;
}  // namespace auth
namespace grpc_server {
class AuditServiceImpl;
class WorkerServiceImpl;
}  // namespace grpc_server

// --executor=slurm: each queued task becomes one sbatch job running
// fca-worker --task=ID.
struct SlurmServerOptions {
  // partition, sbatch_args, max_in_flight, cpus_per_task, max_attempts,
  // log_dir ("" = slurm-logs beside the database); worker_command is made
  // from the fields below and the server's own.
  jobs::SlurmExecutor::Options executor;
  std::string worker;                    // "" = fca-worker beside this binary
  std::vector<std::string> worker_args;  // appended to the worker command
  std::string coordinator;               // HOST:PORT the workers dial; "" = this server
};

// What the server serves instead of building its own store, repository,
// coordinator and workers (tests: a core over ":memory:", a fault-injecting
// store). Its owner starts and stops the coordinator; the server's
// Shutdown() still ends the hub's streams.
struct ExistingCore {
  storage::Store* store = nullptr;
  jobs::EventHub* hub = nullptr;
  jobs::Coordinator* coordinator = nullptr;
  core::AuditServiceCore* core = nullptr;
};

// What fca-server's flags decide. The defaults suit an embedded server
// (tests, benchmarks): loopback on a free port, no HTTP, no workers of its
// own; fca-server's defaults are its flags'.
struct ServerOptions {
  // ------------------------------------------------------------- gRPC
  std::string listen = "127.0.0.1:0";       // port 0 picks a free one (grpc_port())
  std::string tls_cert_file, tls_key_file;  // both: TLS (gRPC and HTTP); neither: plaintext
  int max_rpc_threads = 0;                  // threads serving RPCs; 0 = gRPC's default
  // Tests: false serves without the interceptors fca-server installs
  // (grpc_server::ServerInterceptors()), to show what gRPC does alone.
  bool interceptors = true;

  // ------------------------------------------------------------- HTTP
  // The JSON-over-HTTP gateway; nullopt = off. tls_cert_file, tls_key_file
  // and ready are the server's.
  std::optional<http::GatewayOptions> http;
  // Its address taken: serve without HTTP (a warning) instead of failing.
  bool http_may_be_taken = false;

  // ------------------------------------------------------------- auth
  bool auth = false;          // callers present a key
  std::string api_keys_file;  // lines "<key> <user> <role>"; keys are also in the store
  // With auth, a database of the server's own that holds no API key, and
  // a key file that gives none, nobody could log in (a lost database
  // replaced by a new, empty one): the server refuses to start
  // (FAILED_PRECONDITION) unless this is set.
  bool allow_empty_auth_db = false;

  // ------------------------------------------------------------- store
  std::string db;  // the SQLite file (required unless existing_core)
  int64_t coeff_cache_bytes = storage::StoreOptions().coeff_cache_budget_bytes;
  // Bytes kept free for deletes on a full disk in "<db>.reserve"
  // (StoreOptions::disk_reserve_bytes); 0 = none.
  int64_t disk_reserve_bytes = 0;
  // File of the weights hash cache: "" = "<db>.weights-hash-cache";
  // "none" = in memory only.
  std::string weights_hash_cache;

  // ------------------------------------------------------------- backups
  // Folder of online backups (server/core/backups.h); "" = the
  // BackupDatabase RPC is refused (FAILED_PRECONDITION). It must exist.
  std::string backup_dir;
  // A scheduled backup this long after the newest one in backup_dir (at
  // once when none); zero = none. Needs backup_dir.
  absl::Duration backup_every = absl::ZeroDuration();
  int backup_keep = 7;  // scheduled backups kept, the newest

  // ------------------------------------------------------------- retention
  // Days kept by default, the cache's age limit, the passes' interval
  // (server/core/retention.h; its audit_log is the server's).
  core::RetentionOptions retention;

  // ------------------------------------------------------------- audit log
  // Rows older than this are purged in the background (server/core/
  // audit_log.h); zero keeps them forever.
  absl::Duration audit_log_keep = core::AuditLog::Options().keep;
  // ------------------------------------------------------------- webhooks
  // Hosts webhooks may call (jobs::WebhookAllowlist); empty: every URL is
  // refused. Bad entries fail the start (INVALID_ARGUMENT).
  std::vector<std::string> webhook_allow;
  // The dashboard's address for the job links webhooks send; "" = the
  // gateway's address (none when HTTP is off).
  std::string external_url;
  // The sender's retries, timeout and clock; `allow` is the server's.
  jobs::WebhookSender::Options webhook_sender;

  // ------------------------------------------------------------- models, work
  // root, compute (the device and dtype of every model; a worker's device is
  // its own), memory_budget_bytes. on_load and weights_hash_cache are the
  // server's.
  runtime::ModelRepository::Options repository;
  int threads = 0;  // torch threads of the engine (0 = one per core)
  // One worker of this server's own per entry ("cpu", "cuda:0"); none:
  // only remote workers run tasks.
  std::vector<std::string> worker_devices;
  runtime::Worker::Options worker;          // of each of them; name is the server's
  jobs::Coordinator::Options coordinator;   // models is the server's
  std::optional<SlurmServerOptions> slurm;  // nullopt: --executor=local
  core::ServiceLimits limits;

  // ------------------------------------------------------------- injection
  std::optional<ExistingCore> existing_core;
};

class Server {
 public:
  // Builds every part and starts serving: the gRPC port (and the HTTP one)
  // listens, the coordinator and the workers run. UNAVAILABLE when an
  // address cannot be bound; the store's, the repository's and the
  // authenticator's errors as they come.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> BuildAndStart(ServerOptions options);
  ~Server();  // Shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The store as the server opens it: exclusive (one server per database),
  // watched (a deleted or replaced file is noticed within
  // kFileCheckIntervalMs), with its disk reserve, and with a warning when
  // the file is open to group or others.
  static constexpr int kFileCheckIntervalMs = 1000;
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<storage::Store>> OpenStore(
      const ServerOptions& options);

  int grpc_port() const { return grpc_port_; }
  int http_port() const;  // 0 when HTTP is off
  bool http_tls() const;  // the gateway serves HTTPS

  // What grpc.health.v1 says of the server and of fca.v1.AuditService.
  void SetServing(bool serving);

  // Drains: health NOT_SERVING, open streams end, the gateway stops, running
  // tasks go back to the queue (refunded) and the coordinator stops, then
  // gRPC waits up to 5 s for calls in flight. Idempotent.
  void Shutdown();

 private:
  explicit Server(ServerOptions options);
  [[nodiscard]] absl::Status Start();
  // The parts built unless options_.existing_core.
  [[nodiscard]] absl::Status OpenStoreAndModels();
  // ServerOptions::allow_empty_auth_db's check, on the server's own store.
  [[nodiscard]] absl::Status CheckSomeoneCanLogIn(const auth::Authenticator& authenticator) const;
  [[nodiscard]] absl::Status BuildRunners();
  [[nodiscard]] absl::Status StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials);
  [[nodiscard]] absl::Status StartHttp(const auth::Authenticator& authenticator);
  [[nodiscard]] absl::Status StartSlurm();
  // The audit log over the served store, given to the core (unless it has
  // one) and to `authenticator` (refused calls), its sweeper started.
  void StartAuditLog(auth::Authenticator* authenticator);
  // --backup_dir: the RPC's folder, and the scheduler when backup_every.
  [[nodiscard]] absl::Status StartBackups();
  // The retention thread, and the defaults GetRetention reports.
  void StartRetention();
  // The webhook RPCs, the coordinator's end observer and the sender.
  [[nodiscard]] absl::Status BuildWebhooks();
  // The job links' base once the gateway listens.
  std::string DashboardUrl() const;

  ServerOptions options_;
  // Built unless options_.existing_core.
  std::unique_ptr<storage::Store> own_store_;
  std::unique_ptr<engine::WeightsHashCache> weights_hash_cache_;
  std::unique_ptr<runtime::ModelRepository> models_;
  std::unique_ptr<jobs::EventHub> own_hub_;
  std::unique_ptr<jobs::Coordinator> own_coordinator_;
  std::unique_ptr<jobs::WorkerPool> workers_;
  std::unique_ptr<core::AuditServiceCore> own_core_;
  std::unique_ptr<jobs::ServerGauges> gauges_;
  // Records into the served store; made after it, so destroyed before it.
  std::unique_ptr<core::AuditLog> audit_log_;
  ExistingCore served_;  // the parts served: the own ones or the existing ones
  std::unique_ptr<grpc_server::WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc_server::AuditServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<http::Gateway> gateway_;
  std::unique_ptr<jobs::SlurmExecutor> executor_;
  std::unique_ptr<core::BackupDirectory> backups_;
  std::unique_ptr<core::BackupScheduler> backup_scheduler_;
  std::unique_ptr<core::Retention> retention_;
  std::unique_ptr<jobs::WebhookSender> webhook_sender_;
  std::unique_ptr<core::Webhooks> webhooks_;
  int grpc_port_ = 0;
  bool running_ = false;
};

}  // namespace fca

#endif  // FCA_SERVER_SERVER_H_
