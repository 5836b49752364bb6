// fca-worker: runs audit tasks for a coordinator on another machine.
//
//   fca-worker --coordinator=HOST:PORT --models=DIR [--device=cuda:0]
//
// Claims tasks (one model of a job each) over gRPC (fca.v1.WorkerService)
// and runs them on its own models: --models is the same model folder as the
// coordinator's (a shared file system), and a model whose weights differ
// from the coordinator's is refused, never audited. With --task=ID it runs
// exactly that task and exits (a Slurm job). SIGTERM or SIGINT stops it: a
// running task is interrupted within one batch and given back to the queue.
//
// Exit codes: 0 done (or stopped); 1 an error (flags, key, coordinator);
// 3 --task could not be claimed; 75 --task was given back on a signal.
#include <glog/logging.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/file.h"
#include "common/flags_usage.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"
#include "server/grpc/remote_broker.h"
#include "server/runtime/model_repository.h"
#include "server/runtime/worker.h"

// Allowed ranges of the numeric flags (as fca-server's: they catch typos).
namespace fca::worker_limits {
constexpr int64_t kMaxThreads = 1024;
constexpr int64_t kMinPollMs = 10;
constexpr int64_t kMaxPollMs = 600000;
constexpr int64_t kMaxModelMemoryBytes = int64_t{1} << 50;
constexpr int64_t kMaxTaskId = int64_t{1} << 62;
constexpr int64_t kMaxTaskSeconds = int64_t{365} * 24 * 3600;
}  // namespace fca::worker_limits

ABSL_FLAG(std::string, coordinator, "", "HOST:PORT of the coordinator (fca-server)");
ABSL_FLAG(std::string, models, "",
          "model folder: the coordinator's, shared (weights that differ are refused)");
ABSL_FLAG(std::string, device, "cpu", "torch device: cpu, cuda, cuda:N");
ABSL_FLAG(std::string, dtype, "float32",
          "compute dtype: float32 | bfloat16 | float16 (float16 needs a cuda device)");
ABSL_FLAG(int, threads, 0,
          absl::StrFormat("torch threads, 0..%d (0 = one per core)",
                          fca::worker_limits::kMaxThreads));
ABSL_FLAG(std::string, name, "",
          "this worker's name in job events, unique among the coordinator's workers, 1-128 "
          "chars of [A-Za-z0-9._:-] [host:pid]");
ABSL_FLAG(std::string, api_key_file, "",
          "file holding the worker's API key (role worker), mode 0600 [env FCA_API_KEY]");
ABSL_FLAG(bool, tls, false, "connect with TLS (system root certificates)");
ABSL_FLAG(std::string, tls_ca, "", "PEM file of root certificates for TLS; implies --tls");
ABSL_FLAG(int64_t, task, 0,
          absl::StrFormat("claim exactly this task, run it and exit (3 when it cannot be "
                          "claimed), 0..%d (0 = serve tasks until stopped)",
                          fca::worker_limits::kMaxTaskId));
ABSL_FLAG(int64_t, model_memory_bytes, 0,
          absl::StrFormat("memory budget of the loaded models, bytes, 0..%d (0 = unlimited)",
                          fca::worker_limits::kMaxModelMemoryBytes));
ABSL_FLAG(int64_t, poll_ms, 1000,
          absl::StrFormat("wait between claims while idle, ms, %d..%d",
                          fca::worker_limits::kMinPollMs, fca::worker_limits::kMaxPollMs));
ABSL_FLAG(int64_t, max_task_seconds, 24 * 3600,
          absl::StrFormat("a task's audit is stopped and failed after this long, 0..%d "
                          "(0 = no limit)",
                          fca::worker_limits::kMaxTaskSeconds));
ABSL_FLAG(bool, coeff_cache, true, "reuse the coordinator's cached coefficients");
ABSL_FLAG(std::string, weights_hash_cache, "",
          "file remembering the SHA-256 of each model's weight files by path, size, times and "
          "inode, so a worker started per task (Slurm) does not read an unchanged model in "
          "full to hash it (as fca-server --weights_hash_cache; workers of one node may share "
          "it); empty: remember within this process only");

namespace fca {
namespace {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

// host:pid, with anything a name may not hold in the host replaced.
std::string DefaultName() {
  std::string name = engine::HostName();
  for (char& c : name) {
    if (!NameChar(c) || c == ':') c = '-';
  }
  return absl::StrCat(name.substr(0, 100), ":", getpid());
}

[[nodiscard]] absl::Status ValidateFlags() {
  if (absl::GetFlag(FLAGS_coordinator).empty()) {
    return absl::InvalidArgumentError("--coordinator=HOST:PORT is required");
  }
  if (absl::GetFlag(FLAGS_models).empty()) {
    return absl::InvalidArgumentError("--models is required (the shared model folder)");
  }
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("threads", absl::GetFlag(FLAGS_threads), 0, worker_limits::kMaxThreads));
  FCA_RETURN_IF_ERROR(
      CheckFlagRange("task", absl::GetFlag(FLAGS_task), 0, worker_limits::kMaxTaskId));
  FCA_RETURN_IF_ERROR(CheckFlagRange("model_memory_bytes", absl::GetFlag(FLAGS_model_memory_bytes),
                                     0, worker_limits::kMaxModelMemoryBytes));
  FCA_RETURN_IF_ERROR(CheckFlagRange("poll_ms", absl::GetFlag(FLAGS_poll_ms),
                                     worker_limits::kMinPollMs, worker_limits::kMaxPollMs));
  FCA_RETURN_IF_ERROR(CheckFlagRange("max_task_seconds", absl::GetFlag(FLAGS_max_task_seconds), 0,
                                     worker_limits::kMaxTaskSeconds));
  const std::string device = absl::GetFlag(FLAGS_device);
  FCA_RETURN_IF_ERROR(CheckDeviceFlag("device", device));
  FCA_ASSIGN_OR_RETURN(const ComputeDType dtype, ParseComputeDTypeFlag(absl::GetFlag(FLAGS_dtype)));
  if (dtype == ComputeDType::kFloat16 && device == "cpu") {
    return absl::InvalidArgumentError(
        "--dtype=float16 needs a cuda device (float16 matmul is not implemented on CPU; use "
        "bfloat16)");
  }
  const std::string name = absl::GetFlag(FLAGS_name);
  if (!name.empty() && (name.size() > 128 || !std::all_of(name.begin(), name.end(), NameChar))) {
    return absl::InvalidArgumentError("--name must be 1-128 chars of [A-Za-z0-9._:-]");
  }
  return absl::OkStatus();
}

// The worker's key: --api_key_file (which only its owner may read: a key
// anyone can read is anyone's), else $FCA_API_KEY, else none (auth off).
absl::StatusOr<std::string> ApiKey() {
  std::string key;
  const std::string path = absl::GetFlag(FLAGS_api_key_file);
  if (!path.empty()) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0) {
      return absl::NotFoundError(
          absl::StrFormat("cannot read the API key file %s: %s", path, std::strerror(errno)));
    }
    if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the API key file %s has mode %04o, open to group or others; run: chmod 600 %s", path,
          info.st_mode & 07777, path));
    }
    FCA_ASSIGN_OR_RETURN(key, ReadFile(path, "the API key file"));
  } else if (const char* env = std::getenv("FCA_API_KEY"); env != nullptr) {
    key = env;
  }
  key = std::string(absl::StripAsciiWhitespace(key));
  // An HTTP/2 header value: printable ASCII without spaces.
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c <= '~'; })) {
    return absl::InvalidArgumentError(
        "the API key must be one line of printable ASCII without spaces");
  }
  return key;
}

absl::StatusOr<int> Run(const sigset_t& signals) {
  FCA_RETURN_IF_ERROR(ValidateFlags());
  grpc_server::RemoteBroker::Options broker_options;
  broker_options.address = absl::GetFlag(FLAGS_coordinator);
  FCA_ASSIGN_OR_RETURN(broker_options.api_key, ApiKey());
  broker_options.use_tls = absl::GetFlag(FLAGS_tls);
  if (const std::string ca = absl::GetFlag(FLAGS_tls_ca); !ca.empty()) {
    FCA_ASSIGN_OR_RETURN(broker_options.tls_ca_pem, ReadFile(ca, "the CA certificate file"));
    broker_options.use_tls = true;
  }
  const std::string name =
      absl::GetFlag(FLAGS_name).empty() ? DefaultName() : absl::GetFlag(FLAGS_name);
  broker_options.worker = name;

  runtime::ModelRepository::Options repository;
  repository.root = absl::GetFlag(FLAGS_models);
  repository.compute.device = absl::GetFlag(FLAGS_device);
  repository.compute.dtype = *ParseComputeDType(absl::GetFlag(FLAGS_dtype));  // checked
  repository.memory_budget_bytes = absl::GetFlag(FLAGS_model_memory_bytes);
  // No store here (no on_load): the coordinator records the weights its
  // results name.
  const std::unique_ptr<engine::WeightsHashCache> weights_hash_cache =
      engine::WeightsHashCache::Open(absl::GetFlag(FLAGS_weights_hash_cache));
  repository.weights_hash_cache = weights_hash_cache.get();
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ModelRepository> models,
                       runtime::ModelRepository::Open(repository));
  // GetQueue's loaded_on: where a task of a model starts without a load.
  const runtime::ModelRepository* loaded = models.get();
  broker_options.loaded_models = [loaded] { return loaded->LoadedNames(); };

  FCA_ASSIGN_OR_RETURN(std::unique_ptr<grpc_server::RemoteBroker> broker,
                       grpc_server::RemoteBroker::Create(broker_options));
  FCA_ASSIGN_OR_RETURN(
      const v1::RegisterWorkerResponse terms,
      broker->Register(repository.compute.device, engine::HostName(), engine::EngineVersion()));
  LOG(INFO) << absl::StrFormat("fca-worker: registered with %s as %s (device %s, lease %.3g s)",
                               broker_options.address, terms.holder(), repository.compute.device,
                               static_cast<double>(terms.lease_ms()) / 1000);
  if (terms.coordinator_version() != engine::EngineVersion()) {
    LOG(WARNING) << "fca-worker: warning: engine version " << engine::EngineVersion()
                 << " differs from the coordinator's (" << terms.coordinator_version()
                 << "); results may differ from its own workers'";
  }

  runtime::Worker::Options worker_options;
  worker_options.name = name;
  worker_options.threads = absl::GetFlag(FLAGS_threads);
  worker_options.poll_interval = std::chrono::milliseconds(absl::GetFlag(FLAGS_poll_ms));
  worker_options.heartbeat_interval = std::chrono::milliseconds(terms.heartbeat_ms());
  worker_options.max_task_duration = std::chrono::seconds(absl::GetFlag(FLAGS_max_task_seconds));
  worker_options.use_coefficient_cache = absl::GetFlag(FLAGS_coeff_cache);
  runtime::Worker worker(broker.get(), models.get(), worker_options);

  const int64_t task_id = absl::GetFlag(FLAGS_task);
  if (task_id == 0) {
    worker.Start();
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    LOG(INFO) << "fca-worker: signal " << signal_number
              << ": stopping; a running task goes back to the queue";
    broker->StopRetrying();
    worker.Stop();
    LOG(INFO) << "fca-worker: stopped";
    return 0;
  }

  // One task on this thread; a signal interrupts it (it goes back).
  std::atomic<bool> done{false}, signalled{false};
  std::thread signal_thread([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    if (done) return;  // woken below: the task has ended
    LOG(INFO) << "fca-worker: signal " << signal_number
              << ": stopping; the task goes back to the queue";
    signalled = true;
    broker->StopRetrying();
    worker.RequestStop();
  });
  engine::ConfigureRuntime({worker_options.threads});
  const absl::StatusOr<bool> claimed = worker.RunOne(task_id);
  done = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  FCA_ASSIGN_OR_RETURN(const bool ran, claimed);
  if (!ran) {
    LOG(WARNING) << "fca-worker: task " << task_id
                 << " cannot be claimed (unknown, not queued, or its job was cancelled)";
    return 3;
  }
  if (signalled) return 75;
  LOG(INFO) << "fca-worker: task " << task_id << " done";
  return 0;
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  fca::InitServerLogging(argv[0]);
  absl::SetProgramUsageMessage(
      "fca-worker --coordinator=HOST:PORT --models=DIR [--device=cuda:0] [flags]: runs audit "
      "tasks for an fca-server");
  // --help lists the flags of this file.
  fca::ConfigureFlagsUsage("fca-worker", [](absl::string_view file) {
    return absl::EndsWith(file, "server/worker/main.cc");
  });
  // Before any thread starts: they all inherit the blocked signals.
  const sigset_t signals = fca::BlockShutdownSignals();
  fca::ExitZeroAfterHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<int> code = fca::Run(signals);
  if (!code.ok()) {
    // The answer to the command line (a bad flag, no coordinator), plain
    // like the CLI's errors: the process ends with it.
    std::fprintf(stderr, "fca-worker: %s: %s\n",
                 absl::StatusCodeToString(code.status().code()).c_str(),
                 std::string(code.status().message()).c_str());
    return 1;
  }
  return *code;
}
