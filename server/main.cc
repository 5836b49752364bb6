// fca-server: the lab-wide audit service.
//
//   fca-server --models=DIR --db=FILE [--listen=127.0.0.1:7400]
//
// Loopback by default. SIGTERM or SIGINT drains: the server stops accepting
// calls, a running job is interrupted within one batch and queued again,
// and the process exits; the next start resumes it.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/core/model_repository.h"
#include "server/core/scheduler.h"
#include "server/core/service.h"
#include "server/engine/models/controlled_model.h"
#include "server/grpc/audit_service_impl.h"
#include "storage/store.h"

ABSL_FLAG(std::string, models, "", "model repository: a folder with one folder per model");
ABSL_FLAG(std::string, db, "", "SQLite database file (created if absent)");
ABSL_FLAG(std::string, listen, "127.0.0.1:7400",
          "address to listen on; port 0 picks a free port (printed on stdout)");
ABSL_FLAG(int, threads, 0, "torch threads for the engine (0 = one per core)");
ABSL_FLAG(std::string, device, "cpu", "torch device for every model: cpu, cuda:0, ...");
ABSL_FLAG(std::string, dtype, "float32", "compute dtype: float32 | bfloat16");
ABSL_FLAG(int64_t, max_dataset_bytes, 256ll << 20, "largest dataset upload, bytes");
ABSL_FLAG(int64_t, max_tokenize_bytes, 1 << 20, "largest text one Tokenize call takes, bytes");
ABSL_FLAG(int64_t, max_windows, 4096, "most windows per dataset in one job");
ABSL_FLAG(int64_t, max_window_length, 4096, "longest window, tokens");
ABSL_FLAG(int64_t, max_queued_jobs, 16, "most queued jobs per user");
ABSL_FLAG(int64_t, max_jobs_per_user, 10000,
          "quota: most jobs a user keeps, in any state (delete finished ones to make room)");
ABSL_FLAG(int64_t, max_user_bytes, 4ll << 30,
          "quota: most bytes of datasets a user keeps (uploads in progress count)");
ABSL_FLAG(int64_t, max_watch_streams, 256, "most WatchJob streams open at once, all users");
ABSL_FLAG(int, max_rpc_threads, 512,
          "most threads serving RPCs; calls beyond it are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_attempts, 3,
          "a job the server stopped while running (crash, kill) this many times is failed "
          "at the next start instead of run again");
ABSL_FLAG(int64_t, max_job_seconds, 24 * 3600,
          "a running job is stopped and failed after this long (0 = no limit)");
ABSL_FLAG(int64_t, coeff_cache_bytes, 1ll << 30, "coefficient cache budget, bytes (LRU)");
ABSL_FLAG(int64_t, model_memory_bytes, 0,
          "memory budget of the loaded models together, bytes, estimated from their "
          "safetensors headers; least recently used models are unloaded to make room "
          "(0 = unlimited)");
ABSL_FLAG(bool, coeff_cache, true, "reuse cached coefficients across audits");
ABSL_FLAG(bool, auth, false, "require 'authorization: Bearer <key>' on every call");
ABSL_FLAG(std::string, api_keys, "", "file of '<key> <user> <user|admin>' lines (with --auth)");
ABSL_FLAG(std::string, create_api_key, "",
          "create an API key for this user in --db, print it and exit");
ABSL_FLAG(std::string, role, "user", "role of --create_api_key: user | admin");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain; with --tls_key enables TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");

namespace fca {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  if (cert.empty() && key.empty()) return grpc::InsecureServerCredentials();
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  FCA_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(cert));
  FCA_ASSIGN_OR_RETURN(pair.private_key, ReadFile(key));
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
  return storage::Store::Open(options);
}

absl::Status CreateApiKey() {
  FCA_ASSIGN_OR_RETURN(auto store, OpenStore());
  FCA_ASSIGN_OR_RETURN(std::string key, storage::Store::GenerateApiKey());
  FCA_RETURN_IF_ERROR(
      store->AddApiKey(absl::GetFlag(FLAGS_create_api_key), absl::GetFlag(FLAGS_role), key));
  std::printf("%s\n", key.c_str());
  return absl::OkStatus();
}

// gRPC's default 4 MiB receive limit carries a Tokenize request; its reply
// (up to one id per byte) must fit the CLI's 16 MiB.
constexpr int64_t kMaxTokenizeBytesLimit = 3 << 20;

absl::StatusOr<core::ServiceLimits> Limits() {
  const int64_t tokenize = absl::GetFlag(FLAGS_max_tokenize_bytes);
  if (tokenize < 1 || tokenize > kMaxTokenizeBytesLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max_tokenize_bytes must be in [1, %d]", kMaxTokenizeBytesLimit));
  }
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

// Blocks SIGTERM/SIGINT in every thread so one thread can wait for them.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// 1 PiB: past any machine, and far from overflowing the sums of estimates.
constexpr int64_t kMaxModelMemoryBytes = 1ll << 50;

absl::StatusOr<core::ModelRepository::Options> RepositoryOptions(storage::Store* store) {
  const int64_t budget = absl::GetFlag(FLAGS_model_memory_bytes);
  if (budget < 0 || budget > kMaxModelMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--model_memory_bytes must be in [0, %d] (0 = unlimited)", kMaxModelMemoryBytes));
  }
  core::ModelRepository::Options options;
  options.root = absl::GetFlag(FLAGS_models);
  options.compute.device = absl::GetFlag(FLAGS_device);
  options.compute.dtype = absl::GetFlag(FLAGS_dtype);
  options.memory_budget_bytes = budget;
  options.registry = store;
  return options;
}

absl::Status Serve(const sigset_t& signals) {
  FCA_ASSIGN_OR_RETURN(const core::ServiceLimits limits, Limits());
  engine::ConfigureRuntime({absl::GetFlag(FLAGS_threads)});
  FCA_ASSIGN_OR_RETURN(auto store, OpenStore());
  FCA_ASSIGN_OR_RETURN(const core::ModelRepository::Options repo_options,
                       RepositoryOptions(store.get()));
  FCA_ASSIGN_OR_RETURN(auto models, core::ModelRepository::Open(repo_options));
  FCA_ASSIGN_OR_RETURN(auto auth, grpc_server::Authenticator::Create(
                                      absl::GetFlag(FLAGS_auth), absl::GetFlag(FLAGS_api_keys),
                                      store.get()));
  FCA_ASSIGN_OR_RETURN(auto credentials, Credentials());
  core::EventHub hub;
  core::Scheduler::Options scheduler_options;
  scheduler_options.use_coefficient_cache = absl::GetFlag(FLAGS_coeff_cache);
  scheduler_options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  scheduler_options.max_job_duration = std::chrono::seconds(absl::GetFlag(FLAGS_max_job_seconds));
  core::Scheduler scheduler(store.get(), models.get(), &hub, scheduler_options);
  core::AuditServiceCore core(store.get(), models.get(), &scheduler, &hub, limits);
  grpc_server::AuditServiceImpl service(&core, std::move(auth));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Each streaming or unary call holds a thread of the synchronous server:
  // bounded, so a flood of streams cannot exhaust the process.
  grpc::ResourceQuota quota("fca-server");
  quota.SetMaxThreads(absl::GetFlag(FLAGS_max_rpc_threads));
  builder.SetResourceQuota(quota);
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), credentials, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError("cannot listen on " + absl::GetFlag(FLAGS_listen));
  }
  FCA_RETURN_IF_ERROR(scheduler.Start());
  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::printf("fca-server: listening on %s:%d\n", listen.substr(0, listen.rfind(':')).c_str(),
              port);
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "fca-server: signal %d: draining\n", signal_number);
  service.Shutdown();
  hub.Shutdown();
  scheduler.Stop(/*requeue=*/true);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::fprintf(stderr, "fca-server: stopped\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fca-server --models=DIR --db=FILE [--listen=127.0.0.1:7400] [flags]: the FCA audit "
      "service");
  const sigset_t signals = fca::BlockShutdownSignals();
  absl::ParseCommandLine(argc, argv);
  const absl::Status st = absl::GetFlag(FLAGS_create_api_key).empty() ? fca::Serve(signals)
                                                                      : fca::CreateApiKey();
  if (!st.ok()) {
    std::fprintf(stderr, "fca-server: %s: %s\n", absl::StatusCodeToString(st.code()).c_str(),
                 std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
