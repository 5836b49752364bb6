// fca_service_bench: what the service adds to an audit. A tiny audit is
// submitted through the real server (fca::Server in-process, 127.0.0.1, real
// SQLite file, one worker) and watched until its last result arrives; the
// same audit also runs directly through the engine. Runs alternate, and the
// medians are compared: service overhead = median(submit -> last result) -
// median(engine alone).
// The coefficient cache is off so both sides do the same work.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/bench_models.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"
#include "server/runtime/model_repository.h"
#include "server/server.h"

namespace fca {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRepeats = 15;
constexpr double kTargetOverheadMs = 50;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

std::string Letters(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + rng.Uniform(26)));
  return s;
}

v1::AuditSpec TinySpec() {
  v1::AuditSpec spec;
  spec.add_models("fg");
  spec.set_eval_dataset("eval");
  spec.set_calib_dataset("calib");
  spec.set_window_length(16);
  spec.set_max_eval_windows(8);
  spec.set_max_calib_windows(8);
  spec.set_batch_size(4);
  spec.set_bootstrap_resamples(200);
  spec.set_timing_repeats(1);
  return spec;
}

// Submit -> the last ResultBatch event, in ms.
absl::StatusOr<double> ServiceAudit(v1::AuditService::Stub& stub) {
  const Clock::time_point t0 = Clock::now();
  grpc::ClientContext submit_ctx;
  v1::SubmitAuditRequest req;
  *req.mutable_spec() = TinySpec();
  v1::SubmitAuditResponse resp;
  grpc::Status st = stub.SubmitAudit(&submit_ctx, req, &resp);
  if (!st.ok()) return absl::InternalError("submit: " + st.error_message());
  grpc::ClientContext watch_ctx;
  v1::WatchJobRequest watch;
  watch.set_job_id(resp.job().id());
  auto reader = stub.WatchJob(&watch_ctx, watch);
  v1::WatchJobResponse event;
  double last_result_ms = -1;
  while (reader->Read(&event)) {
    if (event.event().has_results()) last_result_ms = Ms(t0);
    if (event.event().has_state() && event.event().state() == v1::JOB_STATE_FAILED) {
      return absl::InternalError("job failed: " + event.job().error());
    }
  }
  st = reader->Finish();
  if (!st.ok() || last_result_ms < 0) return absl::InternalError("watch: " + st.error_message());
  return last_result_ms;
}

absl::StatusOr<double> EngineAudit(runtime::ModelRepository& models, const std::string& eval,
                                   const std::string& calib) {
  FCA_ASSIGN_OR_RETURN(const std::shared_ptr<engine::ControlledModel> model, models.Get("fg"));
  engine::AuditRequest req;
  req.models = {model.get()};
  req.eval.name = "eval";
  req.eval.text = eval;
  req.calib.name = "calib";
  req.calib.text = calib;
  const v1::AuditSpec spec = TinySpec();
  req.options.window_length = spec.window_length();
  req.options.max_eval_windows = spec.max_eval_windows();
  req.options.max_calib_windows = spec.max_calib_windows();
  req.options.batch_size = spec.batch_size();
  req.options.bootstrap_resamples = spec.bootstrap_resamples();
  req.options.timing_repeats = spec.timing_repeats();
  const Clock::time_point t0 = Clock::now();
  FCA_RETURN_IF_ERROR(engine::RunAudit(req).status());
  return Ms(t0);
}

absl::Status Bench() {
  engine::ConfigureRuntime({1});
  const std::string root = "/tmp/fca_service_bench_" + std::to_string(getpid());
  std::filesystem::create_directories(root + "/models");
  FCA_RETURN_IF_ERROR(bench::WriteSmallModel(root + "/models/fg", 32, 64));
  const std::string eval = Letters(16 * 8, 1), calib = Letters(16 * 8, 2);
  {
    // The datasets, before the server takes the database for itself.
    storage::StoreOptions store_options;
    store_options.path = root + "/fca.sqlite";
    FCA_ASSIGN_OR_RETURN(auto store, storage::Store::Open(store_options));
    FCA_RETURN_IF_ERROR(store->PutDataset("eval", "text", "local", eval).status());
    FCA_RETURN_IF_ERROR(store->PutDataset("calib", "text", "local", calib).status());
  }
  ServerOptions options;
  options.db = root + "/fca.sqlite";
  options.repository.root = root + "/models";
  options.threads = 1;
  options.worker_devices = {"cpu"};
  options.worker.use_coefficient_cache = false;
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::BuildAndStart(options));
  // The engine's side: its own repository over the same folder.
  FCA_ASSIGN_OR_RETURN(auto models, runtime::ModelRepository::Open(options.repository));
  const int port = server->grpc_port();
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = v1::AuditService::NewStub(channel);
  std::vector<double> service_ms, engine_ms;
  for (int r = -2; r < kRepeats; ++r) {  // two warm-up rounds
    FCA_ASSIGN_OR_RETURN(double s, ServiceAudit(*stub));
    FCA_ASSIGN_OR_RETURN(double e, EngineAudit(*models, eval, calib));
    if (r >= 0) {
      service_ms.push_back(s);
      engine_ms.push_back(e);
    }
  }
  const double s = engine::Median(service_ms), e = engine::Median(engine_ms);
  std::printf(
      "fca_service_bench: tiny audit (1 model, 8+8 windows of 16, all interventions), "
      "%d interleaved repeats\n",
      kRepeats);
  std::printf("  submit -> last result via gRPC   %8.2f ms (median)\n", s);
  std::printf("  engine alone                     %8.2f ms (median)\n", e);
  std::printf("  service overhead                 %8.2f ms   target < %.0f ms: %s\n", s - e,
              kTargetOverheadMs, s - e < kTargetOverheadMs ? "ok" : "MISSED");
  server->Shutdown();
  std::filesystem::remove_all(root);
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca

int main() {
  absl::Status st = fca::Bench();
  if (!st.ok()) {
    std::fprintf(stderr, "fca_service_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
