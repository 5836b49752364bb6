#include "server/server.h"

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "server/auth/authenticator.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"
#include "server/grpc/audit_service_impl.h"
#include "server/grpc/auth.h"
#include "server/grpc/listener.h"
#include "server/grpc/worker_service_impl.h"
#include "server/jobs/model_registry.h"
#include "server/jobs/server_metrics.h"

namespace fca {
namespace {

// Where the listening address reaches beyond this host.
bool IsLoopback(const std::string& listen) {
  return absl::StartsWith(listen, "127.") || absl::StartsWith(listen, "[::1]:") ||
         absl::StartsWith(listen, "localhost:") || absl::StartsWith(listen, "unix:");
}

// The start-up lines an operator needs to see: whether callers must
// authenticate, and where keys come from.
void LogAuthMode(const ServerOptions& options) {
  if (!options.auth) {
    const char* open_to_others = !IsLoopback(options.listen)
                                     ? " (and --listen is not a loopback address; use --auth)"
                                 : options.http.has_value() && !IsLoopback(options.http->listen)
                                     ? " (and --http_listen is not a loopback address; use --auth)"
                                     : "";
    LOG(WARNING) << "fca-server: authentication is off: every caller is the admin"
                 << open_to_others;
    return;
  }
  LOG(INFO) << "fca-server: authentication is on; keys from the database"
            << (options.api_keys_file.empty() ? "" : " and --api_keys")
            << " (create one with fca-server --db=FILE --create_api_key=USER)";
}

// An existing database (or its -wal/-shm) that group or others may read
// holds every user's datasets, results and API key hashes. umask 077 only
// protects files created from now on, so an old one is reported at start.
void WarnIfOpenToOthers(const std::string& db) {
  for (const std::string& path : {db, db + "-wal", db + "-shm"}) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0 || (info.st_mode & (S_IRWXG | S_IRWXO)) == 0) continue;
    LOG(WARNING) << absl::StrFormat(
        "fca-server: warning: %s has mode %04o and is open to group or others; run: chmod 600 %s",
        path, info.st_mode & 07777, path);
  }
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const std::string& cert,
                                                                     const std::string& key) {
  if (cert.empty() && key.empty()) return grpc::InsecureServerCredentials();
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  FCA_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(cert, "the TLS certificate file"));
  FCA_ASSIGN_OR_RETURN(pair.private_key, ReadFile(key, "the TLS key file"));
  options.pem_key_cert_pairs.push_back(pair);
  return grpc::SslServerCredentials(options);
}

std::unique_ptr<engine::WeightsHashCache> OpenWeightsHashCache(const ServerOptions& options) {
  std::string path = options.weights_hash_cache;
  if (path.empty()) path = options.db + ".weights-hash-cache";
  if (path == "none") path.clear();
  LOG(INFO) << "fca-server: weights hashes are remembered "
            << (path.empty() ? "in memory only" : "in ") << path;
  return engine::WeightsHashCache::Open(path);
}

// The folder this binary lies in ("" when unknown).
std::string OwnFolder() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? "" : self.parent_path().string();
}

std::string Absolute(const std::string& path) {
  std::error_code error;
  const std::filesystem::path p = std::filesystem::absolute(path, error);
  return error ? path : p.lexically_normal().string();
}

// The HOST:PORT others reach a listener at (Slurm's workers, the job links
// of webhooks): the listening host, unless it is a wildcard: then this
// host's name.
std::string CoordinatorAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

// The executor's options with its fca-worker command dialing this server
// at `port`, and its log folder created.
absl::StatusOr<jobs::SlurmExecutor::Options> SlurmExecutorOptions(const ServerOptions& options,
                                                                  int port) {
  const SlurmServerOptions& slurm = *options.slurm;
  jobs::SlurmExecutor::Options o = slurm.executor;
  const std::string worker = slurm.worker.empty() ? OwnFolder() + "/fca-worker" : slurm.worker;
  const std::string coordinator =
      slurm.coordinator.empty() ? CoordinatorAddress(options.listen, port) : slurm.coordinator;
  o.worker_command = {Absolute(worker),
                      "--coordinator=" + coordinator,
                      "--models=" + Absolute(options.repository.root),
                      "--device=" + options.repository.compute.device,
                      absl::StrCat("--dtype=", ComputeDTypeName(options.repository.compute.dtype)),
                      absl::StrCat("--threads=", o.cpus_per_task)};
  o.worker_command.insert(o.worker_command.end(), slurm.worker_args.begin(),
                          slurm.worker_args.end());
  if (o.log_dir.empty()) {
    o.log_dir = std::filesystem::path(Absolute(options.db)).parent_path() / "slurm-logs";
  }
  o.log_dir = Absolute(o.log_dir);
  std::error_code error;
  std::filesystem::create_directories(o.log_dir, error);
  if (error) return absl::FailedPreconditionError("cannot create --slurm_log_dir " + o.log_dir);
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<storage::Store>> Server::OpenStore(const ServerOptions& options) {
  storage::StoreOptions store_options;
  store_options.path = options.db;
  store_options.coeff_cache_budget_bytes = options.coeff_cache_bytes;
  // One server per database: a second one would run the same jobs again.
  store_options.exclusive = true;
  store_options.file_check_interval_ms = kFileCheckIntervalMs;
  store_options.disk_reserve_bytes = options.disk_reserve_bytes;
  if (store_options.path.empty()) return absl::InvalidArgumentError("--db is required");
  WarnIfOpenToOthers(store_options.path);
  return storage::Store::Open(store_options);
}

absl::StatusOr<std::unique_ptr<Server>> Server::BuildAndStart(ServerOptions options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  FCA_RETURN_IF_ERROR(server->Start());
  return server;
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Shutdown(); }

int Server::http_port() const { return gateway_ != nullptr ? gateway_->port() : 0; }

bool Server::http_tls() const { return gateway_ != nullptr && gateway_->tls(); }

absl::Status Server::Start() {
  if (options_.existing_core.has_value()) {
    served_ = *options_.existing_core;
  } else {
    engine::ConfigureRuntime({options_.threads});
    FCA_RETURN_IF_ERROR(OpenStoreAndModels());
  }
  FCA_ASSIGN_OR_RETURN(
      auth::Authenticator authenticator,
      auth::Authenticator::Create(options_.auth, options_.api_keys_file, served_.store));
  LogAuthMode(options_);
  if (own_store_ != nullptr) FCA_RETURN_IF_ERROR(CheckSomeoneCanLogIn(authenticator));
  FCA_ASSIGN_OR_RETURN(auto credentials,
                       Credentials(options_.tls_cert_file, options_.tls_key_file));
  if (!options_.existing_core.has_value()) FCA_RETURN_IF_ERROR(BuildRunners());
  StartAuditLog(&authenticator);
  served_.core->set_facts({options_.worker_devices, options_.slurm.has_value() ? "slurm" : "local",
                           options_.auth, authenticator.file_key_users()});
  // Jobs by state, the cache's size and busy workers, at every scrape.
  gauges_ = std::make_unique<jobs::ServerGauges>(served_.store, workers_.get());
  // fca-worker processes (worker keys) claim and run tasks through it.
  worker_service_ =
      std::make_unique<grpc_server::WorkerServiceImpl>(served_.coordinator, authenticator);
  service_ = std::make_unique<grpc_server::AuditServiceImpl>(served_.core, authenticator);
  FCA_RETURN_IF_ERROR(StartBackups());
  StartRetention();
  FCA_RETURN_IF_ERROR(BuildWebhooks());
  FCA_RETURN_IF_ERROR(StartGrpc(credentials));
  FCA_RETURN_IF_ERROR(StartHttp(authenticator));
  webhooks_->set_dashboard_url(DashboardUrl());
  if (options_.slurm.has_value()) FCA_RETURN_IF_ERROR(StartSlurm());
  if (own_coordinator_ != nullptr) FCA_RETURN_IF_ERROR(own_coordinator_->Start());
  if (workers_ != nullptr) workers_->Start();
  webhook_sender_->Start();
  running_ = true;
  audit_log_->RecordServer(core::audit_action::kServerStart,
                           absl::StrCat("listening on port ", grpc_port_));
  return absl::OkStatus();
}

void Server::StartAuditLog(auth::Authenticator* authenticator) {
  core::AuditLog::Options options;
  options.keep = options_.audit_log_keep;
  audit_log_ = std::make_unique<core::AuditLog>(served_.store, options);
  if (served_.core->audit_log() == nullptr) served_.core->set_audit_log(audit_log_.get());
  authenticator->set_refusal_sink(
      [log = audit_log_.get()](absl::string_view peer, absl::string_view reason) {
        return log->RecordRefusal(peer, reason);
      });
  audit_log_->Start();
}

absl::Status Server::StartBackups() {
  if (options_.backup_every > absl::ZeroDuration() && options_.backup_dir.empty()) {
    return absl::InvalidArgumentError("scheduled backups need a backup folder (--backup_dir)");
  }
  if (options_.backup_dir.empty()) return absl::OkStatus();
  if (options_.backup_keep < 1) {
    return absl::InvalidArgumentError("--backup_keep must be at least 1");
  }
  FCA_ASSIGN_OR_RETURN(backups_,
                       core::BackupDirectory::Open(served_.store->path(), options_.backup_dir));
  served_.core->set_backups(backups_.get());
  if (options_.backup_every > absl::ZeroDuration()) {
    backup_scheduler_ = std::make_unique<core::BackupScheduler>(
        backups_.get(), options_.backup_every, options_.backup_keep);
    LOG(INFO) << "backups: every " << absl::FormatDuration(options_.backup_every) << " into "
              << backups_->dir() << ", the newest " << options_.backup_keep << " kept";
  }
  return absl::OkStatus();
}

void Server::StartRetention() {
  served_.core->set_retention_defaults(options_.retention.defaults);
  core::RetentionOptions retention = options_.retention;
  retention.audit_log = audit_log_.get();
  retention_ = std::make_unique<core::Retention>(served_.store, std::move(retention));
  retention_->Start();
}

absl::Status Server::BuildWebhooks() {
  jobs::WebhookSender::Options sender = options_.webhook_sender;
  FCA_ASSIGN_OR_RETURN(sender.allow, jobs::WebhookAllowlist::Parse(options_.webhook_allow));
  const bool off = sender.allow.empty();
  core::WebhookOptions webhooks;
  webhooks.allow = sender.allow;
  webhook_sender_ = std::make_unique<jobs::WebhookSender>(served_.store, std::move(sender));
  webhooks.on_enqueued = [sender = webhook_sender_.get()] { sender->Wake(); };
  webhooks_ = std::make_unique<core::Webhooks>(served_.store, std::move(webhooks));
  served_.core->set_webhooks(webhooks_.get());
  // An existing core's coordinator may run already: its owner wires it.
  if (own_coordinator_ != nullptr) {
    own_coordinator_->SetEndObserver([webhooks = webhooks_.get()](const storage::JobRecord& job) {
      return webhooks->JobEnded(job);
    });
  }
  LOG(INFO) << "fca-server: webhooks "
            << (off ? "are off (no --webhook_allow)"
                    : "may call " + absl::StrJoin(options_.webhook_allow, ", "));
  return absl::OkStatus();
}

std::string Server::DashboardUrl() const {
  if (!options_.external_url.empty()) return options_.external_url;
  if (gateway_ == nullptr) return "";
  return absl::StrCat(gateway_->tls() ? "https://" : "http://",
                      CoordinatorAddress(options_.http->listen, gateway_->port()));
}

absl::Status Server::CheckSomeoneCanLogIn(const auth::Authenticator& authenticator) const {
  if (!options_.auth || options_.allow_empty_auth_db || authenticator.file_key_count() > 0) {
    return absl::OkStatus();
  }
  FCA_ASSIGN_OR_RETURN(const int64_t keys, own_store_->CountApiKeys());
  if (keys > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--auth is on, but the database %s holds no API key and no --api_keys file gives one: "
      "nobody could log in. If the database was lost or replaced by a new one, restore "
      "it from a backup; for a new server, create the first key: fca-server --db=%s "
      "--create_api_key=USER --role=admin; to start anyway, pass --allow_empty_auth_db",
      options_.db, options_.db));
}

absl::Status Server::OpenStoreAndModels() {
  runtime::ModelRepository::Options& repository = options_.repository;
  // The repository's folder is checked first: a wrong --models must not
  // leave a new database behind. The repository proper records its loads
  // in the store's models table, so it is opened after the store.
  FCA_RETURN_IF_ERROR(runtime::ModelRepository::Open(repository).status());
  FCA_ASSIGN_OR_RETURN(own_store_, OpenStore(options_));
  served_.store = own_store_.get();
  repository.on_load = jobs::RecordLoadsIn(own_store_.get());
  // Opened once the store's lock is held: one server writes the file.
  weights_hash_cache_ = OpenWeightsHashCache(options_);
  repository.weights_hash_cache = weights_hash_cache_.get();
  FCA_ASSIGN_OR_RETURN(models_, runtime::ModelRepository::Open(repository));
  return absl::OkStatus();
}

absl::Status Server::BuildRunners() {
  own_hub_ = std::make_unique<jobs::EventHub>();
  served_.hub = own_hub_.get();
  jobs::Coordinator::Options coordinator = options_.coordinator;
  coordinator.models = models_.get();
  own_coordinator_ =
      std::make_unique<jobs::Coordinator>(own_store_.get(), own_hub_.get(), coordinator);
  served_.coordinator = own_coordinator_.get();
  if (!options_.worker_devices.empty()) {
    jobs::WorkerPool::Options pool;
    pool.devices = options_.worker_devices;
    pool.repository = options_.repository;
    pool.worker = options_.worker;
    FCA_ASSIGN_OR_RETURN(workers_, jobs::WorkerPool::Create(own_coordinator_.get(), pool));
  }
  own_core_ = std::make_unique<core::AuditServiceCore>(
      own_store_.get(), models_.get(), own_coordinator_.get(), own_hub_.get(), options_.limits);
  served_.core = own_core_.get();
  // Own workers ("local/N") and remote ones ("<worker>@<user>"): the
  // names cannot collide (a remote name holds no '/').
  const jobs::WorkerPool* pool = workers_.get();
  jobs::Coordinator* remote = own_coordinator_.get();
  own_core_->set_loaded_models([pool, remote] {
    std::map<std::string, std::vector<std::string>> loaded = remote->RemoteLoadedModels();
    if (pool != nullptr) loaded.merge(pool->LoadedModels());
    return loaded;
  });
  return absl::OkStatus();
}

absl::Status Server::StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc_server::ListenOptions listen;
  listen.address = options_.listen;
  listen.credentials = credentials;
  listen.max_rpc_threads = options_.max_rpc_threads;
  if (options_.interceptors) listen.interceptors = grpc_server::ServerInterceptors();
  FCA_ASSIGN_OR_RETURN(
      grpc_server::Listener listener,
      grpc_server::Listen({service_.get(), worker_service_.get()}, std::move(listen)));
  grpc_ = std::move(listener.server);
  grpc_port_ = listener.port;
  // Health checks name the service as well as the server ("").
  SetServing(true);
  return absl::OkStatus();
}

// The HTTP gateway, unless it is off (or, when it may be, its address is
// taken).
absl::Status Server::StartHttp(const auth::Authenticator& authenticator) {
  if (!options_.http.has_value()) return absl::OkStatus();
  // ---- The gateway's options: ServerOptions::http as fca-server's main
  // filled it, and what the server adds.
  http::GatewayOptions gateway = *options_.http;
  gateway.tls_cert_file = options_.tls_cert_file;
  gateway.tls_key_file = options_.tls_key_file;
  gateway.ready = [store = served_.store, coordinator = served_.coordinator]() -> absl::Status {
    if (!coordinator->Running()) return absl::UnavailableError("the coordinator is not running");
    FCA_RETURN_IF_ERROR(store->CheckFile());  // deleted or replaced under the server
    if (const int64_t blocked_us = store->WritesBlockedForUs();
        blocked_us > storage::Store::kWriteStallLimitUs) {
      return absl::UnavailableError(absl::StrFormat(
          "the store cannot take writes: another process has held the database's write lock "
          "for %d s",
          blocked_us / 1000000));
    }
    absl::StatusOr<int64_t> queued = store->CountJobs(std::nullopt, {storage::JobState::kQueued});
    if (!queued.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the store does not answer: ", queued.status().message()));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<http::Gateway>> started =
      http::Gateway::Start(served_.core, authenticator, std::move(gateway));
  if (!started.ok() && absl::IsUnavailable(started.status()) && options_.http_may_be_taken) {
    LOG(WARNING) << "fca-server: warning: " << started.status().message()
                 << "; serving without HTTP (set --http_listen)";
    return absl::OkStatus();
  }
  FCA_ASSIGN_OR_RETURN(gateway_, std::move(started));
  LOG(INFO) << "fca-server: the HTTP gateway serves "
            << (gateway_->tls() ? "HTTPS (--tls_cert, --tls_key)"
                                : "plain HTTP (for loopback, or behind a TLS proxy)");
  return absl::OkStatus();
}

absl::Status Server::StartSlurm() {
  FCA_ASSIGN_OR_RETURN(jobs::SlurmExecutor::Options o, SlurmExecutorOptions(options_, grpc_port_));
  executor_ = std::make_unique<jobs::SlurmExecutor>(served_.store, served_.coordinator, o);
  FCA_RETURN_IF_ERROR(executor_->CheckCluster());
  LOG(INFO) << "fca-server: tasks run as Slurm jobs ("
            << (o.partition.empty() ? "default partition" : o.partition) << ", logs in "
            << o.log_dir << ")";
  served_.coordinator->SetExecutor(executor_.get());
  return absl::OkStatus();
}

void Server::SetServing(bool serving) {
  if (grpc_ != nullptr) grpc_server::SetServing(*grpc_, serving);
}

void Server::Shutdown() {
  if (!running_) return;
  running_ = false;
  SetServing(false);
  // A scheduled copy in progress is cancelled (nothing is left of it).
  if (backup_scheduler_ != nullptr) backup_scheduler_->Stop();
  // A purge in progress ends after its current row.
  if (retention_ != nullptr) retention_->Stop();
  service_->Shutdown();
  // Ends its event streams (within half a second) and waits for its calls.
  if (gateway_ != nullptr) gateway_->Shutdown();
  served_.hub->Shutdown();
  // Running tasks go back to the queue (refunded) through the coordinator,
  // which stops after them.
  if (workers_ != nullptr) workers_->Stop();
  if (own_coordinator_ != nullptr) own_coordinator_->Stop();
  // Pending deliveries stay in the store for the next start.
  webhook_sender_->Stop();
  grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // Last: the refusal counts not written yet, then the stop itself.
  audit_log_->Stop();
  audit_log_->RecordServer(core::audit_action::kServerStop, "drained");
  if (served_.core->audit_log() == audit_log_.get()) served_.core->set_audit_log(nullptr);
}

}  // namespace fca
