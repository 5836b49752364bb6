// fca-server: the lab-wide audit service.
//
//   fca-server --models=DIR --db=FILE [--listen=127.0.0.1:7400]
//
// Loopback by default. SIGTERM or SIGINT drains: the server stops accepting
// calls, a running job is interrupted within one batch and queued again,
// and the process exits; the next start resumes it.
#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/file.h"
#include "common/flags_usage.h"
#include "common/host_port.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "server/core/service.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/controlled_model.h"
#include "server/grpc/audit_service_impl.h"
#include "server/grpc/worker_service_impl.h"
#include "server/http/gateway.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/model_registry.h"
#include "server/jobs/server_metrics.h"
#include "server/jobs/slurm_executor.h"
#include "server/jobs/worker_pool.h"
#include "server/worker/model_repository.h"
#include "storage/store.h"

// Allowed ranges of the numeric flags, checked at start (ValidateFlags).
// The upper bounds only catch typos and overflow: each is far beyond what
// one server can use.
namespace fca::flag_limits {
constexpr int64_t kMaxThreads = 1024;
constexpr int64_t kMaxDatasetBytes = int64_t{1} << 40;  // 1 TiB
// gRPC's default 4 MiB receive limit carries a Tokenize request; its reply
// (up to one id per byte) must fit the CLI's 16 MiB.
constexpr int64_t kMaxTokenizeBytes = 3 << 20;
// The spec fields' ranges (common/spec_fields.h).
constexpr int64_t kMaxWindows = spec_fields::kMaxEvalWindows.max;
constexpr int64_t kMinWindowLength = spec_fields::kWindowLength.min;
constexpr int64_t kMaxWindowLength = spec_fields::kWindowLength.max;
constexpr int64_t kMaxQueuedJobs = 100000;
constexpr int64_t kMaxCoeffCacheBytes = int64_t{1} << 40;  // 1 TiB
constexpr int64_t kMaxJobsPerUser = int64_t{1} << 30;
constexpr int64_t kMaxUserBytes = int64_t{1} << 50;  // 1 PiB
constexpr int64_t kMaxWatchStreams = 100000;
constexpr int64_t kMaxRpcThreads = 100000;
constexpr int64_t kMaxAttempts = 100;
constexpr int64_t kMaxJobSeconds = int64_t{365} * 24 * 3600;
// Past any machine, and far from overflowing the sums of estimates.
constexpr int64_t kMaxModelMemoryBytes = int64_t{1} << 50;
constexpr int64_t kMaxWorkers = 256;
constexpr int64_t kMinLeaseSeconds = 1;
constexpr int64_t kMaxLeaseSeconds = 24 * 3600;
}  // namespace fca::flag_limits

ABSL_FLAG(std::string, models, "", "model repository: a folder with one folder per model");
ABSL_FLAG(std::string, db, "",
          "SQLite database file (created if absent, mode 0600; the server runs with umask 077)");
ABSL_FLAG(std::string, listen, "127.0.0.1:7400",
          "address to listen on; port 0 picks a free port (printed on stdout)");
ABSL_FLAG(int, threads, 0,
          absl::StrFormat("torch threads for the engine, 0..%d (0 = one per core)",
                          fca::flag_limits::kMaxThreads));
ABSL_FLAG(std::string, device, "cpu", "torch device for every model: cpu, cuda, cuda:N");
ABSL_FLAG(std::string, dtype, "float32",
          "compute dtype: float32 | bfloat16 | float16 (float16 needs a cuda device)");
ABSL_FLAG(int64_t, max_dataset_bytes, 256ll << 20,
          absl::StrFormat("largest dataset upload, bytes, 1..%d",
                          fca::flag_limits::kMaxDatasetBytes));
ABSL_FLAG(int64_t, max_tokenize_bytes, 1 << 20,
          absl::StrFormat("largest text one Tokenize call takes, bytes, 1..%d",
                          fca::flag_limits::kMaxTokenizeBytes));
ABSL_FLAG(int64_t, max_windows, fca::core::SpecLimits().max_windows,
          absl::StrFormat("most windows per dataset in one job, 1..%d",
                          fca::flag_limits::kMaxWindows));
ABSL_FLAG(int64_t, max_window_length, fca::core::SpecLimits().max_window_length,
          absl::StrFormat("longest window, tokens, %d..%d", fca::flag_limits::kMinWindowLength,
                          fca::flag_limits::kMaxWindowLength));
ABSL_FLAG(int64_t, max_queued_jobs, 16,
          absl::StrFormat("most queued jobs per user, 1..%d", fca::flag_limits::kMaxQueuedJobs));
ABSL_FLAG(int64_t, coeff_cache_bytes, 1ll << 30,
          absl::StrFormat("coefficient cache budget, bytes (LRU), 0..%d (0 = store nothing)",
                          fca::flag_limits::kMaxCoeffCacheBytes));
ABSL_FLAG(int64_t, max_jobs_per_user, 10000,
          absl::StrFormat("quota: most jobs a user keeps, in any state (delete finished ones to "
                          "make room), 1..%d",
                          fca::flag_limits::kMaxJobsPerUser));
ABSL_FLAG(int64_t, max_user_bytes, 4ll << 30,
          absl::StrFormat("quota: most bytes of datasets a user keeps (uploads in progress "
                          "count), 1..%d",
                          fca::flag_limits::kMaxUserBytes));
ABSL_FLAG(int64_t, max_watch_streams, 256,
          absl::StrFormat("most WatchJob streams open at once, all users, 1..%d",
                          fca::flag_limits::kMaxWatchStreams));
ABSL_FLAG(int64_t, max_rpc_threads, 512,
          absl::StrFormat("most threads serving RPCs (calls beyond it are refused with "
                          "RESOURCE_EXHAUSTED), 16..%d",
                          fca::flag_limits::kMaxRpcThreads));
ABSL_FLAG(int64_t, max_attempts, 3,
          absl::StrFormat("a task (one model of a job) whose worker was lost (crash, kill, "
                          "lease expired) this many times fails instead of running again, 1..%d",
                          fca::flag_limits::kMaxAttempts));
ABSL_FLAG(int64_t, max_job_seconds, 24 * 3600,
          absl::StrFormat("the audit of one model of a job is stopped and failed after this "
                          "long, 0..%d (0 = no limit)",
                          fca::flag_limits::kMaxJobSeconds));
ABSL_FLAG(int64_t, workers, 1,
          absl::StrFormat("audits run at once by this server's own workers, each on --device "
                          "with its own copy of the models it runs, 0..%d (0 = none: only "
                          "remote workers run tasks)",
                          fca::flag_limits::kMaxWorkers));
ABSL_FLAG(std::string, devices, "",
          "one worker per listed device, e.g. cpu,cuda:0,cuda:1 (instead of --workers and "
          "--device)");
ABSL_FLAG(int, threads_per_worker, 0,
          "torch threads of each worker, 0..--threads limit (0 = --threads)");
ABSL_FLAG(std::string, executor, "local",
          "where tasks run besides this server's own workers: local (nowhere else; remote "
          "fca-worker processes may still connect) | slurm (one sbatch job per task)");
ABSL_FLAG(std::string, slurm_partition, "", "--executor=slurm: partition (default: the cluster's)");
ABSL_FLAG(std::string, slurm_sbatch_args, "",
          "--executor=slurm: extra sbatch arguments, space-separated (e.g. '--gres=gpu:1 "
          "--time=2:00:00')");
ABSL_FLAG(int64_t, slurm_max_tasks, 8,
          "--executor=slurm: most tasks placed as Slurm jobs and not ended, 1..10000");
ABSL_FLAG(int64_t, slurm_cpus_per_task, 1, "--executor=slurm: CPUs of each Slurm job, 1..1024");
ABSL_FLAG(std::string, slurm_worker, "",
          "--executor=slurm: the fca-worker binary as the compute nodes see it (default: "
          "fca-worker beside this fca-server)");
ABSL_FLAG(std::string, slurm_worker_args, "",
          "--executor=slurm: extra fca-worker arguments, space-separated (e.g. "
          "'--api_key_file=/etc/fca/worker.key --tls_ca=/etc/fca/ca.pem')");
ABSL_FLAG(std::string, slurm_coordinator, "",
          "--executor=slurm: HOST:PORT the workers dial (default: this host's name and the "
          "listening port)");
ABSL_FLAG(std::string, slurm_log_dir, "",
          "--executor=slurm: folder of the Slurm jobs' output (default: slurm-logs beside --db)");
ABSL_FLAG(int64_t, lease_seconds, 30,
          absl::StrFormat("a task whose worker has not renewed its lease for this long runs "
                          "again elsewhere, %d..%d",
                          fca::flag_limits::kMinLeaseSeconds, fca::flag_limits::kMaxLeaseSeconds));
ABSL_FLAG(int64_t, model_memory_bytes, 0,
          absl::StrFormat("memory budget of the loaded models together, bytes, estimated from "
                          "their safetensors headers; least recently used models are unloaded "
                          "to make room, 0..%d (0 = unlimited)",
                          fca::flag_limits::kMaxModelMemoryBytes));
ABSL_FLAG(bool, coeff_cache, true, "reuse cached coefficients across audits");
ABSL_FLAG(std::string, weights_hash_cache, "",
          "file remembering the SHA-256 of each model's weight files by path, size, times and "
          "inode, so an unchanged model is not read in full to hash it at every start; a stale "
          "or damaged file is ignored and rewritten (default: <db>.weights-hash-cache beside "
          "the database; 'none': remember within this process only)");
ABSL_FLAG(bool, auth, false,
          "require 'authorization: Bearer <key>' on every call (implied by --api_keys)");
ABSL_FLAG(std::string, api_keys, "",
          "file of '<key> <user> <user|admin>' lines; implies --auth; must be mode 0600 "
          "(no access for group or others)");
ABSL_FLAG(std::string, create_api_key, "",
          "create an API key for this user in --db, print it and exit");
ABSL_FLAG(std::string, role, "user",
          "role of --create_api_key: user | admin | worker (fca-worker: the worker protocol "
          "only, no user's data)");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:7401",
          "address of the JSON-over-HTTP gateway, /metrics, /healthz and /readyz; empty = off; "
          "port 0 picks a free port (printed on stdout). With --tls_cert/--tls_key it serves "
          "HTTPS. When the default address is taken the server starts without HTTP (a warning)");
ABSL_FLAG(std::string, http_allowed_hosts, "",
          "comma-separated host names the HTTP API answers to besides IP addresses, localhost, "
          "this machine's name and --http_listen's name (a DNS-rebinding guard): the names a "
          "lab reaches the server by, e.g. fca.lab.example.org; '.example.org' for a domain, "
          "'*' for any (a proxy in front checks Host)");
ABSL_FLAG(std::string, http_allowed_origins, "",
          "comma-separated origins (https://host[:port]) of web pages allowed to call the HTTP "
          "API besides the server's own dashboard; they get CORS headers. Others are refused "
          "(403), with or without --auth");
ABSL_FLAG(int64_t, max_http_threads, 32,
          absl::StrFormat("threads serving HTTP connections (each job event stream holds one; "
                          "at most half of them stream), 4..%d",
                          fca::flag_limits::kMaxRpcThreads));
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain; with --tls_key enables TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");

namespace fca {
namespace {

// --------------------------------------------------------------- flags

[[nodiscard]] absl::Status CheckOneOf(absl::string_view flag, const std::string& value,
                                      const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("--%s='%s' is not one of: %s", flag, value, absl::StrJoin(allowed, ", ")));
}

// "cpu", "cuda" or "cuda:N": what the engine can run on. Checked here so a
// typo stops the server at start instead of failing every model load.
[[nodiscard]] absl::Status CheckDevice(const std::string& device) {
  if (IsDeviceName(device)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "--%s='%s' is not cpu, cuda or cuda:N",
      absl::GetFlag(FLAGS_devices).empty() ? "device" : "devices entry", device.substr(0, 64)));
}

// The devices of this server's own workers: --devices, or --workers times
// --device.
std::vector<std::string> WorkerDevices() {
  const std::string listed = absl::GetFlag(FLAGS_devices);
  if (!listed.empty()) return absl::StrSplit(listed, ',');
  return std::vector<std::string>(static_cast<size_t>(absl::GetFlag(FLAGS_workers)),
                                  absl::GetFlag(FLAGS_device));
}

// Every flag with a bounded value; the first bad one is reported with the
// flag's name and its allowed range.
[[nodiscard]] absl::Status ValidateFlags() {
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("threads", absl::GetFlag(FLAGS_threads), 0, flag_limits::kMaxThreads));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_dataset_bytes", absl::GetFlag(FLAGS_max_dataset_bytes), 1,
                                     flag_limits::kMaxDatasetBytes));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_tokenize_bytes", absl::GetFlag(FLAGS_max_tokenize_bytes),
                                     1, flag_limits::kMaxTokenizeBytes));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("max_windows", absl::GetFlag(FLAGS_max_windows), 1, flag_limits::kMaxWindows));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_window_length", absl::GetFlag(FLAGS_max_window_length),
                                     flag_limits::kMinWindowLength, flag_limits::kMaxWindowLength));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_queued_jobs", absl::GetFlag(FLAGS_max_queued_jobs), 1,
                                     flag_limits::kMaxQueuedJobs));
  FCA_RETURN_IF_ERROR(CheckFlagRange("coeff_cache_bytes", absl::GetFlag(FLAGS_coeff_cache_bytes), 0,
                                     flag_limits::kMaxCoeffCacheBytes));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_jobs_per_user", absl::GetFlag(FLAGS_max_jobs_per_user), 1,
                                     flag_limits::kMaxJobsPerUser));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_user_bytes", absl::GetFlag(FLAGS_max_user_bytes), 1,
                                     flag_limits::kMaxUserBytes));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_watch_streams", absl::GetFlag(FLAGS_max_watch_streams), 1,
                                     flag_limits::kMaxWatchStreams));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_rpc_threads", absl::GetFlag(FLAGS_max_rpc_threads), 16,
                                     flag_limits::kMaxRpcThreads));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_http_threads", absl::GetFlag(FLAGS_max_http_threads), 4,
                                     flag_limits::kMaxRpcThreads));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_attempts", absl::GetFlag(FLAGS_max_attempts), 1,
                                     flag_limits::kMaxAttempts));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_job_seconds", absl::GetFlag(FLAGS_max_job_seconds), 0,
                                     flag_limits::kMaxJobSeconds));
  FCA_RETURN_IF_ERROR(CheckFlagRange("model_memory_bytes", absl::GetFlag(FLAGS_model_memory_bytes),
                                     0, flag_limits::kMaxModelMemoryBytes));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("workers", absl::GetFlag(FLAGS_workers), 0, flag_limits::kMaxWorkers));
  FCA_RETURN_IF_ERROR(CheckFlagRange("threads_per_worker", absl::GetFlag(FLAGS_threads_per_worker),
                                     0, flag_limits::kMaxThreads));
  FCA_RETURN_IF_ERROR(CheckFlagRange("lease_seconds", absl::GetFlag(FLAGS_lease_seconds),
                                     flag_limits::kMinLeaseSeconds, flag_limits::kMaxLeaseSeconds));
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  FCA_RETURN_IF_ERROR(CheckOneOf("dtype", dtype, {"float32", "bfloat16", "float16"}));
  FCA_RETURN_IF_ERROR(CheckOneOf("executor", absl::GetFlag(FLAGS_executor), {"local", "slurm"}));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("slurm_max_tasks", absl::GetFlag(FLAGS_slurm_max_tasks), 1, 10000));
  FCA_RETURN_IF_ERROR(CheckFlagRange("slurm_cpus_per_task",
                                     absl::GetFlag(FLAGS_slurm_cpus_per_task), 1,
                                     flag_limits::kMaxThreads));
  for (const std::string& device : WorkerDevices()) {
    FCA_RETURN_IF_ERROR(CheckDevice(device));
    if (dtype == "float16" && device == "cpu") {
      return absl::InvalidArgumentError(
          "--dtype=float16 needs a cuda --device (float16 matmul is not implemented on CPU; "
          "use bfloat16)");
    }
  }
  FCA_RETURN_IF_ERROR(CheckOneOf("role", absl::GetFlag(FLAGS_role), {"user", "admin", "worker"}));
  if (absl::GetFlag(FLAGS_listen).empty()) {
    return absl::InvalidArgumentError("--listen must not be empty (e.g. 127.0.0.1:7400)");
  }
  const std::string http = absl::GetFlag(FLAGS_http_listen);
  if (const absl::StatusOr<HostPort> address = ParseHostPort(http);
      !http.empty() && !address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen=", address.status().message(), " (empty: no HTTP)"));
  }
  return absl::OkStatus();
}

// --auth, or implied by --api_keys: a key file nobody checks would let
// every caller in as the local admin while the operator believes the
// server is protected. Only an explicit --auth=false together with
// --api_keys is refused, as a contradiction.
[[nodiscard]] absl::StatusOr<bool> AuthEnabled(bool auth_specified) {
  const bool auth = absl::GetFlag(FLAGS_auth);
  if (absl::GetFlag(FLAGS_api_keys).empty() || auth) return auth;
  if (auth_specified) {
    return absl::InvalidArgumentError(
        "--api_keys with --auth=false: the keys would never be checked; drop --auth=false");
  }
  LOG(INFO) << "fca-server: --api_keys implies --auth: authentication is on";
  return true;
}

// Where the listening address reaches beyond this host.
bool IsLoopback(const std::string& listen) {
  return absl::StartsWith(listen, "127.") || absl::StartsWith(listen, "[::1]:") ||
         absl::StartsWith(listen, "localhost:") || absl::StartsWith(listen, "unix:");
}

// --------------------------------------------------------------- files

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

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
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

absl::StatusOr<std::unique_ptr<storage::Store>> OpenStore() {
  storage::StoreOptions options;
  options.path = absl::GetFlag(FLAGS_db);
  options.coeff_cache_budget_bytes = absl::GetFlag(FLAGS_coeff_cache_bytes);
  // One server per database: a second one would run the same jobs again.
  options.exclusive = true;
  if (options.path.empty()) return absl::InvalidArgumentError("--db is required");
  WarnIfOpenToOthers(options.path);
  return storage::Store::Open(options);
}

std::unique_ptr<engine::WeightsHashCache> OpenWeightsHashCache() {
  std::string path = absl::GetFlag(FLAGS_weights_hash_cache);
  if (path.empty()) path = absl::GetFlag(FLAGS_db) + ".weights-hash-cache";
  if (path == "none") path.clear();
  LOG(INFO) << "fca-server: weights hashes are remembered "
            << (path.empty() ? "in memory only" : "in ") << path;
  return engine::WeightsHashCache::Open(path);
}

absl::Status CreateApiKey() {
  FCA_ASSIGN_OR_RETURN(auto store, OpenStore());
  FCA_ASSIGN_OR_RETURN(std::string key, storage::Store::GenerateApiKey());
  FCA_RETURN_IF_ERROR(
      store->AddApiKey(absl::GetFlag(FLAGS_create_api_key), absl::GetFlag(FLAGS_role), key));
  std::printf("%s\n", key.c_str());
  return absl::OkStatus();
}

core::ServiceLimits Limits() {
  core::ServiceLimits limits;
  limits.max_dataset_bytes = absl::GetFlag(FLAGS_max_dataset_bytes);
  limits.max_tokenize_bytes = absl::GetFlag(FLAGS_max_tokenize_bytes);
  limits.max_queued_jobs_per_user = absl::GetFlag(FLAGS_max_queued_jobs);
  limits.max_jobs_per_user = absl::GetFlag(FLAGS_max_jobs_per_user);
  limits.max_user_bytes = absl::GetFlag(FLAGS_max_user_bytes);
  limits.max_watch_streams = absl::GetFlag(FLAGS_max_watch_streams);
  limits.spec.max_windows = absl::GetFlag(FLAGS_max_windows);
  limits.spec.max_window_length = absl::GetFlag(FLAGS_max_window_length);
  return limits;
}

// The start-up lines an operator needs to see: whether callers must
// authenticate, and where keys come from.
void LogAuthMode(bool auth) {
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string http = absl::GetFlag(FLAGS_http_listen);
  if (!auth) {
    const char* open_to_others = !IsLoopback(listen)
                                     ? " (and --listen is not a loopback address; use --auth)"
                                 : !http.empty() && !IsLoopback(http)
                                     ? " (and --http_listen is not a loopback address; use --auth)"
                                     : "";
    LOG(WARNING) << "fca-server: authentication is off: every caller is the admin"
                 << open_to_others;
    return;
  }
  LOG(INFO) << "fca-server: authentication is on; keys from the database"
            << (absl::GetFlag(FLAGS_api_keys).empty() ? "" : " and --api_keys")
            << " (create one with fca-server --db=FILE --create_api_key=USER)";
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

std::vector<std::string> SplitArgs(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipWhitespace());
}

// --executor=slurm: the executor, its fca-worker command dialing this
// server at `port`.
absl::StatusOr<std::unique_ptr<core::SlurmExecutor>> SlurmExecutorFromFlags(
    storage::Store* store, core::Coordinator* coordinator, int port) {
  core::SlurmExecutor::Options o;
  o.partition = absl::GetFlag(FLAGS_slurm_partition);
  o.sbatch_args = SplitArgs(absl::GetFlag(FLAGS_slurm_sbatch_args));
  o.max_in_flight = static_cast<int>(absl::GetFlag(FLAGS_slurm_max_tasks));
  o.cpus_per_task = static_cast<int>(absl::GetFlag(FLAGS_slurm_cpus_per_task));
  o.max_attempts = static_cast<int>(absl::GetFlag(FLAGS_max_attempts));
  std::string worker = absl::GetFlag(FLAGS_slurm_worker);
  if (worker.empty()) worker = OwnFolder() + "/fca-worker";
  std::string coordinator_address = absl::GetFlag(FLAGS_slurm_coordinator);
  if (coordinator_address.empty()) {
    // The listening host, unless it is a wildcard: then this host's name.
    const std::string listen = absl::GetFlag(FLAGS_listen);
    std::string host = listen.substr(0, listen.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    coordinator_address = absl::StrCat(host, ":", port);
  }
  o.worker_command = {Absolute(worker),
                      "--coordinator=" + coordinator_address,
                      "--models=" + Absolute(absl::GetFlag(FLAGS_models)),
                      "--device=" + absl::GetFlag(FLAGS_device),
                      "--dtype=" + absl::GetFlag(FLAGS_dtype),
                      absl::StrCat("--threads=", o.cpus_per_task)};
  for (const std::string& arg : SplitArgs(absl::GetFlag(FLAGS_slurm_worker_args))) {
    o.worker_command.push_back(arg);
  }
  o.log_dir = absl::GetFlag(FLAGS_slurm_log_dir);
  if (o.log_dir.empty()) {
    o.log_dir =
        std::filesystem::path(Absolute(absl::GetFlag(FLAGS_db))).parent_path() / "slurm-logs";
  }
  o.log_dir = Absolute(o.log_dir);
  std::error_code error;
  std::filesystem::create_directories(o.log_dir, error);
  if (error) return absl::FailedPreconditionError("cannot create --slurm_log_dir " + o.log_dir);
  auto executor = std::make_unique<core::SlurmExecutor>(store, coordinator, o);
  FCA_RETURN_IF_ERROR(executor->CheckCluster());
  LOG(INFO) << "fca-server: tasks run as Slurm jobs ("
            << (o.partition.empty() ? "default partition" : o.partition) << ", logs in "
            << o.log_dir << ")";
  return executor;
}

// The HTTP gateway on --http_listen, or null when it is off (or, for the
// default address only, when that address is taken).
absl::StatusOr<std::unique_ptr<http::Gateway>> StartHttp(core::AuditServiceCore* core,
                                                         const auth::Authenticator& authenticator,
                                                         storage::Store* store,
                                                         core::Coordinator* coordinator,
                                                         bool http_specified) {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return nullptr;
  http::GatewayOptions options;
  options.listen = listen;
  options.threads = static_cast<int>(absl::GetFlag(FLAGS_max_http_threads));
  options.max_event_streams = absl::GetFlag(FLAGS_max_watch_streams);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.allowed_hosts = absl::GetFlag(FLAGS_http_allowed_hosts);
  options.allowed_origins = absl::GetFlag(FLAGS_http_allowed_origins);
  options.ready = [store, coordinator]() -> absl::Status {
    if (!coordinator->Running()) return absl::UnavailableError("the coordinator is not running");
    absl::StatusOr<int64_t> queued = store->CountJobs(std::nullopt, {storage::JobState::kQueued});
    if (!queued.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the store does not answer: ", queued.status().message()));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<http::Gateway>> gateway =
      http::Gateway::Start(core, authenticator, options);
  if (!gateway.ok() && absl::IsUnavailable(gateway.status()) && !http_specified) {
    LOG(WARNING) << "fca-server: warning: " << gateway.status().message()
                 << "; serving without HTTP (set --http_listen)";
    return nullptr;
  }
  return gateway;
}

absl::Status Serve(const sigset_t& signals, bool auth, bool http_specified) {
  const core::ServiceLimits limits = Limits();
  engine::ConfigureRuntime({absl::GetFlag(FLAGS_threads)});
  core::ModelRepository::Options repo_options;
  repo_options.root = absl::GetFlag(FLAGS_models);
  repo_options.compute.device = absl::GetFlag(FLAGS_device);
  repo_options.compute.dtype = absl::GetFlag(FLAGS_dtype);
  repo_options.memory_budget_bytes = absl::GetFlag(FLAGS_model_memory_bytes);
  // The repository's folder is checked first: a wrong --models must not
  // leave a new database behind. The repository proper records its loads
  // in the store's models table, so it is opened after the store.
  FCA_RETURN_IF_ERROR(core::ModelRepository::Open(repo_options).status());
  FCA_ASSIGN_OR_RETURN(auto store, OpenStore());
  repo_options.on_load = core::RecordLoadsIn(store.get());
  // Opened once the store's lock is held: one server writes the file.
  const std::unique_ptr<engine::WeightsHashCache> weights_hash_cache = OpenWeightsHashCache();
  repo_options.weights_hash_cache = weights_hash_cache.get();
  FCA_ASSIGN_OR_RETURN(auto models, core::ModelRepository::Open(repo_options));
  FCA_ASSIGN_OR_RETURN(auto authenticator, fca::auth::Authenticator::Create(
                                               auth, absl::GetFlag(FLAGS_api_keys), store.get()));
  LogAuthMode(auth);
  FCA_ASSIGN_OR_RETURN(auto credentials, Credentials());
  core::EventHub hub;
  core::Coordinator::Options coordinator_options;
  coordinator_options.max_attempts = static_cast<int>(absl::GetFlag(FLAGS_max_attempts));
  coordinator_options.lease = std::chrono::seconds(absl::GetFlag(FLAGS_lease_seconds));
  coordinator_options.models = models.get();
  core::Coordinator coordinator(store.get(), &hub, coordinator_options);
  std::unique_ptr<core::WorkerPool> workers;
  if (!WorkerDevices().empty()) {
    core::WorkerPool::Options pool;
    pool.devices = WorkerDevices();
    pool.repository = repo_options;
    // Torch's thread count is per thread: each worker sets its own.
    pool.worker.threads = absl::GetFlag(FLAGS_threads_per_worker) > 0
                              ? absl::GetFlag(FLAGS_threads_per_worker)
                              : absl::GetFlag(FLAGS_threads);
    pool.worker.use_coefficient_cache = absl::GetFlag(FLAGS_coeff_cache);
    pool.worker.max_task_duration = std::chrono::seconds(absl::GetFlag(FLAGS_max_job_seconds));
    FCA_ASSIGN_OR_RETURN(workers, core::WorkerPool::Create(&coordinator, pool));
  }
  core::AuditServiceCore core(store.get(), models.get(), &coordinator, &hub, limits);
  core.set_facts({WorkerDevices(), absl::GetFlag(FLAGS_executor), auth});
  // Jobs by state, the cache's size and busy workers, at every scrape.
  const core::ServerGauges gauges(store.get(), workers.get());
  // fca-worker processes (worker keys) claim and run tasks through it.
  grpc_server::WorkerServiceImpl worker_service(&coordinator, authenticator);
  const fca::auth::Authenticator http_authenticator = authenticator;
  grpc_server::AuditServiceImpl service(&core, std::move(authenticator));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Each streaming or unary call holds a thread of the synchronous server:
  // bounded, so a flood of streams cannot exhaust the process.
  grpc::ResourceQuota quota("fca-server");
  quota.SetMaxThreads(static_cast<int>(absl::GetFlag(FLAGS_max_rpc_threads)));
  builder.SetResourceQuota(quota);
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), credentials, &port);
  builder.RegisterService(&service);
  builder.RegisterService(&worker_service);
  builder.experimental().SetInterceptorCreators(grpc_server::ServerInterceptors());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError("cannot listen on " + absl::GetFlag(FLAGS_listen));
  }
  // Health checks name the service as well as the server ("").
  grpc_server::SetServing(*server, true);
  FCA_ASSIGN_OR_RETURN(
      std::unique_ptr<http::Gateway> gateway,
      StartHttp(&core, http_authenticator, store.get(), &coordinator, http_specified));
  std::unique_ptr<core::SlurmExecutor> executor;
  if (absl::GetFlag(FLAGS_executor) == "slurm") {
    FCA_ASSIGN_OR_RETURN(executor, SlurmExecutorFromFlags(store.get(), &coordinator, port));
    coordinator.SetExecutor(executor.get());
  }
  FCA_RETURN_IF_ERROR(coordinator.Start());
  if (workers != nullptr) workers->Start();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::printf("fca-server: listening on %s:%d\n", listen.substr(0, listen.rfind(':')).c_str(),
              port);
  // After the gRPC line: scripts that read the first "listening on" line
  // get the gRPC port.
  if (gateway != nullptr) {
    const std::string http = absl::GetFlag(FLAGS_http_listen);
    std::printf("fca-server: http listening on %s:%d\n", http.substr(0, http.rfind(':')).c_str(),
                gateway->port());
    LOG(INFO) << "fca-server: the HTTP gateway serves "
              << (gateway->tls() ? "HTTPS (--tls_cert, --tls_key)"
                                 : "plain HTTP (for loopback, or behind a TLS proxy)");
  }
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LOG(INFO) << "fca-server: signal " << signal_number << ": draining";
  grpc_server::SetServing(*server, false);
  service.Shutdown();
  // Ends its event streams (within half a second) and waits for its calls.
  if (gateway != nullptr) gateway->Shutdown();
  hub.Shutdown();
  // Running tasks go back to the queue (refunded) through the coordinator,
  // which stops after them.
  if (workers != nullptr) workers->Stop();
  coordinator.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  LOG(INFO) << "fca-server: stopped";
  return absl::OkStatus();
}

absl::Status Run(const sigset_t& signals) {
  FCA_RETURN_IF_ERROR(ValidateFlags());
  if (!absl::GetFlag(FLAGS_create_api_key).empty()) return CreateApiKey();
  if (absl::GetFlag(FLAGS_models).empty()) {
    return absl::InvalidArgumentError("--models is required (the model repository folder)");
  }
  // Given explicitly (the command line or a --flagfile), or defaulted.
  FCA_ASSIGN_OR_RETURN(const bool auth, AuthEnabled(FlagSpecified("auth")));
  return Serve(signals, auth, FlagSpecified("http_listen"));
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  fca::InitServerLogging(argv[0]);
  // Before anything creates a file: the database, its -wal and -shm hold
  // every user's data and the API key hashes.
  umask(0077);
  absl::SetProgramUsageMessage(
      "fca-server --models=DIR --db=FILE [--listen=127.0.0.1:7400] [flags]: the FCA audit "
      "service");
  // --help lists the flags of this file.
  fca::ConfigureFlagsUsage(
      "fca-server", [](absl::string_view file) { return absl::EndsWith(file, "server/main.cc"); });
  const sigset_t signals = fca::BlockShutdownSignals();
  absl::ParseCommandLine(argc, argv);
  const absl::Status st = fca::Run(signals);
  if (!st.ok()) {
    // The answer to the command line (a bad flag, a database in use), plain
    // like the CLI's errors: the process ends with it.
    std::fprintf(stderr, "fca-server: %s: %s\n", absl::StatusCodeToString(st.code()).c_str(),
                 std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
