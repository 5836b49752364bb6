// Long file: fca-server's flags, each with its help and range, and their wiring.
// fca-server: the lab-wide audit service.
//
//   fca-server --models=DIR --db=FILE [--listen=127.0.0.1:7400]
//
// Loopback by default. SIGTERM or SIGINT drains: the server stops accepting
// calls, a running job is interrupted within one batch and queued again,
// and the process exits; the next start resumes it.
#include <glog/logging.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
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
#include "common/flags_usage.h"
#include "common/host_port.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "server/core/projects.h"
#include "server/core/retention.h"
#include "server/jobs/refusals.h"
#include "server/jobs/webhook_policy.h"
#include "server/server.h"
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
constexpr int64_t kMaxCoeffCacheBytes = int64_t{1} << 40;   // 1 TiB
constexpr int64_t kMaxDiskReserveBytes = int64_t{1} << 34;  // 16 GiB
constexpr int64_t kMaxBackupEveryHours = 24 * 366;
constexpr int64_t kMaxBackupKeep = 100000;
// Retention days: core::kMaxRetentionDays (SetRetention's bound too).
constexpr int64_t kMaxRetentionIntervalMinutes = 24 * 60;
constexpr int64_t kMaxJobsPerUser = int64_t{1} << 30;
constexpr int64_t kMaxUserBytes = int64_t{1} << 50;  // 1 PiB
constexpr int64_t kMaxWatchStreams = 100000;
constexpr int64_t kMaxRpcThreads = 100000;
constexpr int64_t kMaxUploadBytesInFlight = int64_t{1} << 50;  // 1 PiB
constexpr int64_t kMaxHttpConnections = 1000000;
constexpr int64_t kMaxHttpRequestTimeoutMs = int64_t{3600} * 1000;
constexpr int64_t kMaxAttempts = 100;
constexpr int64_t kMaxRefusalBackoffSeconds =
    std::chrono::duration_cast<std::chrono::seconds>(jobs::RefusalBackoff::kMax).count();
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
ABSL_FLAG(int64_t, disk_reserve_bytes, 64ll << 20,
          absl::StrFormat("bytes kept allocated in <db>.reserve and given back when the disk is "
                          "full, so that deleting jobs and datasets still works, 0..%d (0 = none)",
                          fca::flag_limits::kMaxDiskReserveBytes));
ABSL_FLAG(std::string, backup_dir, "",
          "folder for online backups of the database (the BackupDatabase RPC, `fca admin "
          "backup`, --backup_every_hours); \"\" = backups over the API are off");
ABSL_FLAG(int64_t, backup_every_hours, 0,
          absl::StrFormat("hours between scheduled backups into --backup_dir, 0..%d (0 = none)",
                          fca::flag_limits::kMaxBackupEveryHours));
ABSL_FLAG(int64_t, backup_keep, 7,
          absl::StrFormat("scheduled backups kept in --backup_dir (the newest), 1..%d",
                          fca::flag_limits::kMaxBackupKeep));
ABSL_FLAG(int64_t, keep_jobs_days, 0,
          absl::StrFormat("days a finished job (with its results and events) is kept after it "
                          "ended, unless its project sets its own (SetRetention), 0..%d (0 = "
                          "forever)",
                          fca::core::kMaxRetentionDays));
ABSL_FLAG(int64_t, keep_unused_datasets_days, 0,
          absl::StrFormat("days a dataset is kept after its upload or its last use by a "
                          "submitted job, unless its project sets its own; never while a queued "
                          "or running job names it, 0..%d (0 = forever)",
                          fca::core::kMaxRetentionDays));
ABSL_FLAG(int64_t, coeff_cache_max_age_days, 0,
          absl::StrFormat("coefficient cache entries unused this many days are evicted (besides "
                          "--coeff_cache_bytes), 0..%d (0 = by size only)",
                          fca::core::kMaxRetentionDays));
ABSL_FLAG(int64_t, retention_interval_minutes, 10,
          absl::StrFormat("minutes between retention passes (purging what expired), 1..%d",
                          fca::flag_limits::kMaxRetentionIntervalMinutes));
ABSL_FLAG(std::vector<std::string>, webhook_allow, {},
          "hosts webhooks may call, comma-separated: host (any port) or host:port, matched "
          "exactly; redirects are never followed; empty = webhooks are off");
ABSL_FLAG(std::string, external_url, "",
          "the dashboard's address as users reach it (https://fca.example.org), for the job "
          "links webhooks send; \"\" = the HTTP gateway's own address");
ABSL_FLAG(int64_t, max_jobs_per_user, 10000,
          absl::StrFormat("quota: most jobs a user keeps, in any state (delete finished ones to "
                          "make room), 1..%d",
                          fca::flag_limits::kMaxJobsPerUser));
ABSL_FLAG(int64_t, max_user_bytes, 4ll << 30,
          absl::StrFormat("quota: most bytes of datasets a user keeps (uploads in progress "
                          "count), 1..%d",
                          fca::flag_limits::kMaxUserBytes));
ABSL_FLAG(int64_t, max_watch_streams, 256,
          absl::StrFormat("most WatchJob streams open at once, all users (one user: a quarter "
                          "of them; with the HTTP event streams, which also count here), 1..%d",
                          fca::flag_limits::kMaxWatchStreams));
ABSL_FLAG(int64_t, max_rpc_threads, 512,
          absl::StrFormat("most threads serving RPCs (calls beyond it are refused with "
                          "RESOURCE_EXHAUSTED), 16..%d",
                          fca::flag_limits::kMaxRpcThreads));
ABSL_FLAG(int64_t, max_attempts, 3,
          absl::StrFormat("a task (one model of a job) whose worker was lost (crash, kill, "
                          "lease expired) this many times fails instead of running again, 1..%d",
                          fca::flag_limits::kMaxAttempts));
ABSL_FLAG(int64_t, refusal_grace_seconds,
          std::chrono::duration_cast<std::chrono::seconds>(fca::jobs::RefusalBackoff::kDefaultGrace)
              .count(),
          absl::StrFormat("a task every live worker refused waits this long from its first "
                          "refusal for a worker that can run it (one restarting or resyncing) "
                          "before its job fails, seconds, 0..%d",
                          fca::flag_limits::kMaxRefusalBackoffSeconds));
ABSL_FLAG(int64_t, refusal_backoff_max_seconds,
          std::chrono::duration_cast<std::chrono::seconds>(fca::jobs::RefusalBackoff::kDefaultMax)
              .count(),
          absl::StrFormat(
              "a worker that refused a task (its own state: weights that differ, "
              "no model, no memory) is not offered it again for %g s, doubling "
              "with each refusal up to this, seconds, 1..%d",
              std::chrono::duration<double>(fca::jobs::RefusalBackoff::kDefaultInitial).count(),
              fca::flag_limits::kMaxRefusalBackoffSeconds));
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
ABSL_FLAG(bool, allow_empty_auth_db, false,
          "with --auth, start even when the database holds no API key and --api_keys gives "
          "none (nobody could log in: by default the server refuses, since a lost database "
          "replaced by a new one looks like that)");
ABSL_FLAG(std::string, create_api_key, "",
          "create an API key for this user in --db, print it and exit; works while a server "
          "runs on --db (the new key is accepted at its next call)");
ABSL_FLAG(int64_t, key_expires_days, 0,
          "with --create_api_key: the key expires after this many days; 0 = never");
ABSL_FLAG(int64_t, audit_log_keep_days, 90,
          "audit log rows older than this many days are purged in the background; 0 = keep "
          "them forever");
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
ABSL_FLAG(int64_t, http_request_timeout_ms, fca::http::GatewayOptions().request_timeout.count(),
          absl::StrFormat("plain HTTP: a request's head and body must arrive within this many "
                          "ms in all, however slowly they trickle (408 beyond it); with TLS a "
                          "timeout per read. 1..%d",
                          fca::flag_limits::kMaxHttpRequestTimeoutMs));
ABSL_FLAG(int64_t, max_http_connections, fca::http::GatewayOptions().max_connections,
          absl::StrFormat("plain HTTP: most connections open at once; at the limit the one "
                          "sending its request longest is dropped for a new one (503 when "
                          "none is). Keep it under the open-file limit. 1..%d",
                          fca::flag_limits::kMaxHttpConnections));
ABSL_FLAG(int64_t, max_http_connections_per_address,
          fca::http::GatewayOptions().max_connections_per_address,
          absl::StrFormat("plain HTTP: most connections open at once from one client address "
                          "(at it, the address's oldest one still sending its head is dropped "
                          "for a new one; probes are answered beyond it; a proxy in front is one "
                          "address). 1..%d",
                          fca::flag_limits::kMaxHttpConnections));
ABSL_FLAG(int64_t, max_upload_bytes_in_flight,
          fca::core::ServiceLimits().max_upload_bytes_in_flight,
          absl::StrFormat("most bytes of uploads in flight at once, all users (gRPC "
                          "UploadDataset by announced size, HTTP bodies by Content-Length): "
                          "RESOURCE_EXHAUSTED (HTTP 429) beyond it, retry shortly. 1..%d",
                          fca::flag_limits::kMaxUploadBytesInFlight));
ABSL_FLAG(int64_t, max_upload_bytes_per_client,
          fca::core::ServiceLimits().max_upload_bytes_per_client,
          absl::StrFormat("most bytes of uploads in flight at once from one client address, and "
                          "from one user: RESOURCE_EXHAUSTED (HTTP 429) beyond it; at most "
                          "--max_upload_bytes_in_flight. An HTTP request's key is checked "
                          "before its body's bytes are reserved. 1..%d",
                          fca::flag_limits::kMaxUploadBytesInFlight));
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
  FCA_RETURN_IF_ERROR(CheckFlagRange("disk_reserve_bytes", absl::GetFlag(FLAGS_disk_reserve_bytes),
                                     0, flag_limits::kMaxDiskReserveBytes));
  FCA_RETURN_IF_ERROR(CheckFlagRange("backup_every_hours", absl::GetFlag(FLAGS_backup_every_hours),
                                     0, flag_limits::kMaxBackupEveryHours));
  FCA_RETURN_IF_ERROR(CheckFlagRange("backup_keep", absl::GetFlag(FLAGS_backup_keep), 1,
                                     flag_limits::kMaxBackupKeep));
  for (const auto& [name, flag] :
       {std::pair{"keep_jobs_days", &FLAGS_keep_jobs_days},
        std::pair{"keep_unused_datasets_days", &FLAGS_keep_unused_datasets_days},
        std::pair{"coeff_cache_max_age_days", &FLAGS_coeff_cache_max_age_days}}) {
    FCA_RETURN_IF_ERROR(CheckFlagRange(name, absl::GetFlag(*flag), 0, core::kMaxRetentionDays));
  }
  FCA_RETURN_IF_ERROR(CheckFlagRange("retention_interval_minutes",
                                     absl::GetFlag(FLAGS_retention_interval_minutes), 1,
                                     flag_limits::kMaxRetentionIntervalMinutes));
  FCA_RETURN_IF_ERROR(jobs::WebhookAllowlist::Parse(absl::GetFlag(FLAGS_webhook_allow)).status());
  const std::string external_url = absl::GetFlag(FLAGS_external_url);
  if (!external_url.empty() && !absl::StartsWith(external_url, "http://") &&
      !absl::StartsWith(external_url, "https://")) {
    return absl::InvalidArgumentError("--external_url must start with http:// or https://");
  }
  if (absl::GetFlag(FLAGS_backup_every_hours) > 0 && absl::GetFlag(FLAGS_backup_dir).empty()) {
    return absl::InvalidArgumentError("--backup_every_hours needs --backup_dir");
  }
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
  FCA_RETURN_IF_ERROR(CheckFlagRange("http_request_timeout_ms",
                                     absl::GetFlag(FLAGS_http_request_timeout_ms), 1,
                                     flag_limits::kMaxHttpRequestTimeoutMs));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_http_connections",
                                     absl::GetFlag(FLAGS_max_http_connections), 1,
                                     flag_limits::kMaxHttpConnections));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_http_connections_per_address",
                                     absl::GetFlag(FLAGS_max_http_connections_per_address), 1,
                                     flag_limits::kMaxHttpConnections));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_upload_bytes_in_flight",
                                     absl::GetFlag(FLAGS_max_upload_bytes_in_flight), 1,
                                     flag_limits::kMaxUploadBytesInFlight));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_upload_bytes_per_client",
                                     absl::GetFlag(FLAGS_max_upload_bytes_per_client), 1,
                                     flag_limits::kMaxUploadBytesInFlight));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_attempts", absl::GetFlag(FLAGS_max_attempts), 1,
                                     flag_limits::kMaxAttempts));
  FCA_RETURN_IF_ERROR(CheckFlagRange("refusal_backoff_max_seconds",
                                     absl::GetFlag(FLAGS_refusal_backoff_max_seconds), 1,
                                     flag_limits::kMaxRefusalBackoffSeconds));
  FCA_RETURN_IF_ERROR(CheckFlagRange("refusal_grace_seconds",
                                     absl::GetFlag(FLAGS_refusal_grace_seconds), 0,
                                     flag_limits::kMaxRefusalBackoffSeconds));
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
  FCA_ASSIGN_OR_RETURN(const ComputeDType dtype, ParseComputeDTypeFlag(absl::GetFlag(FLAGS_dtype)));
  FCA_RETURN_IF_ERROR(CheckOneOf("executor", absl::GetFlag(FLAGS_executor), {"local", "slurm"}));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("slurm_max_tasks", absl::GetFlag(FLAGS_slurm_max_tasks), 1, 10000));
  FCA_RETURN_IF_ERROR(CheckFlagRange("slurm_cpus_per_task",
                                     absl::GetFlag(FLAGS_slurm_cpus_per_task), 1,
                                     flag_limits::kMaxThreads));
  for (const std::string& device : WorkerDevices()) {
    FCA_RETURN_IF_ERROR(
        CheckDeviceFlag(absl::GetFlag(FLAGS_devices).empty() ? "device" : "devices entry", device));
    if (dtype == ComputeDType::kFloat16 && device == "cpu") {
      return absl::InvalidArgumentError(
          "--dtype=float16 needs a cuda --device (float16 matmul is not implemented on CPU; "
          "use bfloat16)");
    }
  }
  FCA_RETURN_IF_ERROR(CheckOneOf("role", absl::GetFlag(FLAGS_role), {"user", "admin", "worker"}));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("key_expires_days", absl::GetFlag(FLAGS_key_expires_days), 0, 36500));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("audit_log_keep_days", absl::GetFlag(FLAGS_audit_log_keep_days), 0, 36500));
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

// --------------------------------------------------------------- options

std::vector<std::string> SplitArgs(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipWhitespace());
}

// The store's part of the options (--create_api_key opens the store alone).
ServerOptions StoreOptionsFromFlags() {
  ServerOptions options;
  options.db = absl::GetFlag(FLAGS_db);
  options.coeff_cache_bytes = absl::GetFlag(FLAGS_coeff_cache_bytes);
  options.disk_reserve_bytes = absl::GetFlag(FLAGS_disk_reserve_bytes);
  options.weights_hash_cache = absl::GetFlag(FLAGS_weights_hash_cache);
  return options;
}

// Who created a key from the command line (ApiKey.created_by, the audit log).
constexpr char kCommandLineCreator[] = "fca-server --create_api_key";

// Opens the database without the server's exclusive lock: one insert
// (and its audit log row) next to a running server is safe, SQLite's own
// locking orders it with the server's writes (waiting up to busy_timeout),
// and the server looks keys up at each call, so the key works at once.
absl::Status CreateApiKey() {
  storage::StoreOptions options;
  options.path = absl::GetFlag(FLAGS_db);
  if (options.path.empty()) return absl::InvalidArgumentError("--db is required");
  FCA_RETURN_IF_ERROR(core::ValidateUserName(absl::GetFlag(FLAGS_create_api_key)));
  FCA_ASSIGN_OR_RETURN(auto store, storage::Store::Open(options));
  FCA_ASSIGN_OR_RETURN(std::string key, storage::Store::GenerateApiKey());
  const int64_t days = absl::GetFlag(FLAGS_key_expires_days);
  FCA_ASSIGN_OR_RETURN(const storage::ApiKeyRecord record,
                       store->CreateApiKey(storage::NewApiKey{
                           absl::GetFlag(FLAGS_create_api_key), absl::GetFlag(FLAGS_role), key,
                           days * 24 * 3600 * int64_t{1000000}, kCommandLineCreator}));
  storage::AuditLogRow row;
  row.user = kCommandLineCreator;
  row.action = core::audit_action::kKeyCreate;
  row.object_kind = "api_key";
  row.object_id = absl::StrCat(record.id);
  row.outcome = "OK";
  row.detail =
      absl::StrFormat("user %s, role %s, expires in %d days", record.user, record.role, days);
  LogIfError("audit log", store->AppendAuditLog(row).status());
  std::printf("%s\n", key.c_str());
  std::fprintf(stderr, "fca-server: created API key %lld (prefix %s) for %s, role %s\n",
               static_cast<long long>(record.id), record.prefix.c_str(), record.user.c_str(),
               record.role.c_str());
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
  limits.max_upload_bytes_in_flight = absl::GetFlag(FLAGS_max_upload_bytes_in_flight);
  limits.max_upload_bytes_per_client = absl::GetFlag(FLAGS_max_upload_bytes_per_client);
  limits.spec.max_windows = absl::GetFlag(FLAGS_max_windows);
  limits.spec.max_window_length = absl::GetFlag(FLAGS_max_window_length);
  return limits;
}

// ---- The HTTP gateway's options from the --http_* flags (nullopt: off).
// TLS and readiness are the server's (ServerOptions::http).
std::optional<http::GatewayOptions> GatewayOptionsFromFlags() {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return std::nullopt;
  http::GatewayOptions options;
  options.listen = listen;
  options.threads = static_cast<int>(absl::GetFlag(FLAGS_max_http_threads));
  options.max_event_streams = absl::GetFlag(FLAGS_max_watch_streams);
  options.allowed_hosts = absl::GetFlag(FLAGS_http_allowed_hosts);
  options.allowed_origins = absl::GetFlag(FLAGS_http_allowed_origins);
  options.request_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_http_request_timeout_ms));
  options.max_connections = static_cast<int>(absl::GetFlag(FLAGS_max_http_connections));
  options.max_connections_per_address =
      static_cast<int>(absl::GetFlag(FLAGS_max_http_connections_per_address));
  return options;
}

// --executor=slurm: the executor's options (nullopt: --executor=local).
std::optional<SlurmServerOptions> SlurmOptionsFromFlags() {
  if (absl::GetFlag(FLAGS_executor) != "slurm") return std::nullopt;
  SlurmServerOptions slurm;
  jobs::SlurmExecutor::Options& o = slurm.executor;
  o.partition = absl::GetFlag(FLAGS_slurm_partition);
  o.sbatch_args = SplitArgs(absl::GetFlag(FLAGS_slurm_sbatch_args));
  o.max_in_flight = static_cast<int>(absl::GetFlag(FLAGS_slurm_max_tasks));
  o.cpus_per_task = static_cast<int>(absl::GetFlag(FLAGS_slurm_cpus_per_task));
  o.max_attempts = static_cast<int>(absl::GetFlag(FLAGS_max_attempts));
  o.log_dir = absl::GetFlag(FLAGS_slurm_log_dir);
  slurm.worker = absl::GetFlag(FLAGS_slurm_worker);
  slurm.worker_args = SplitArgs(absl::GetFlag(FLAGS_slurm_worker_args));
  slurm.coordinator = absl::GetFlag(FLAGS_slurm_coordinator);
  return slurm;
}

// The models, this server's own workers and the coordinator.
void SetWorkFromFlags(ServerOptions* options) {
  options->repository.root = absl::GetFlag(FLAGS_models);
  options->repository.compute.device = absl::GetFlag(FLAGS_device);
  options->repository.compute.dtype = *ParseComputeDType(absl::GetFlag(FLAGS_dtype));  // checked
  options->repository.memory_budget_bytes = absl::GetFlag(FLAGS_model_memory_bytes);
  options->threads = absl::GetFlag(FLAGS_threads);
  options->worker_devices = WorkerDevices();
  // Torch's thread count is per thread: each worker sets its own.
  options->worker.threads = absl::GetFlag(FLAGS_threads_per_worker) > 0
                                ? absl::GetFlag(FLAGS_threads_per_worker)
                                : absl::GetFlag(FLAGS_threads);
  options->worker.use_coefficient_cache = absl::GetFlag(FLAGS_coeff_cache);
  options->worker.max_task_duration = std::chrono::seconds(absl::GetFlag(FLAGS_max_job_seconds));
  options->coordinator.max_attempts = static_cast<int>(absl::GetFlag(FLAGS_max_attempts));
  options->coordinator.lease = std::chrono::seconds(absl::GetFlag(FLAGS_lease_seconds));
  options->coordinator.refusal_backoff.max =
      std::chrono::seconds(absl::GetFlag(FLAGS_refusal_backoff_max_seconds));
  options->coordinator.refusal_backoff.grace =
      std::chrono::seconds(absl::GetFlag(FLAGS_refusal_grace_seconds));
}

ServerOptions ServerOptionsFromFlags(bool auth, bool http_specified) {
  ServerOptions options = StoreOptionsFromFlags();
  options.listen = absl::GetFlag(FLAGS_listen);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.max_rpc_threads = static_cast<int>(absl::GetFlag(FLAGS_max_rpc_threads));
  options.http = GatewayOptionsFromFlags();
  // Only the default address may be taken: an explicit one must be served.
  options.http_may_be_taken = !http_specified;
  options.auth = auth;
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys);
  options.allow_empty_auth_db = absl::GetFlag(FLAGS_allow_empty_auth_db);
  SetWorkFromFlags(&options);
  options.slurm = SlurmOptionsFromFlags();
  options.limits = Limits();
  options.backup_dir = absl::GetFlag(FLAGS_backup_dir);
  options.backup_every = absl::Hours(absl::GetFlag(FLAGS_backup_every_hours));
  options.backup_keep = static_cast<int>(absl::GetFlag(FLAGS_backup_keep));
  options.retention.defaults.keep_jobs_days = static_cast<int>(absl::GetFlag(FLAGS_keep_jobs_days));
  options.retention.defaults.keep_unused_datasets_days =
      static_cast<int>(absl::GetFlag(FLAGS_keep_unused_datasets_days));
  options.retention.coeff_cache_max_age_days =
      static_cast<int>(absl::GetFlag(FLAGS_coeff_cache_max_age_days));
  options.retention.interval = absl::Minutes(absl::GetFlag(FLAGS_retention_interval_minutes));
  options.audit_log_keep = absl::Hours(24) * absl::GetFlag(FLAGS_audit_log_keep_days);
  options.webhook_allow = absl::GetFlag(FLAGS_webhook_allow);
  options.external_url = absl::GetFlag(FLAGS_external_url);
  return options;
}

// "HOST:PORT" of a listening address with the port it got.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

absl::Status Serve(const sigset_t& signals, const ServerOptions& options) {
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::BuildAndStart(options));
  std::printf("fca-server: listening on %s\n",
              BoundAddress(options.listen, server->grpc_port()).c_str());
  // After the gRPC line: scripts that read the first "listening on" line
  // get the gRPC port.
  if (server->http_port() != 0) {
    std::printf("fca-server: http listening on %s\n",
                BoundAddress(options.http->listen, server->http_port()).c_str());
  }
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LOG(INFO) << "fca-server: signal " << signal_number << ": draining";
  server->Shutdown();
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
  return Serve(signals, ServerOptionsFromFlags(auth, FlagSpecified("http_listen")));
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
  fca::ExitZeroAfterHelp(argc, argv);
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
