// fca_workers_bench (issue 10): what the coordinator costs a task, and how
// long a dead worker's task waits before it runs again. In-process, on a real
// SQLite file:
//   - overhead: every TaskBroker call a worker makes for one task (claim,
//     lease renewals, dataset reads, progress, notes, rows, cache, finish) is
//     timed; their sum per task is what the coordinator adds to the audit
//     (target < 50 ms), next to the audit's own time;
//   - death to rerun: a worker claims the task and goes silent (as if
//     killed); the time until another worker holds the task, for a given
//     lease, is about the lease plus one sweep.
// Throughput of six audits across worker layouts, Slurm included, is
// bench/scale_out.sh (real processes).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bench/bench_models.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/model_config.h"
#include "server/engine/models/transformer_model.h"
#include "server/jobs/coordinator.h"
#include "server/jobs/mapping.h"
#include "server/runtime/worker.h"
#include "storage/store.h"

namespace fca {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// A TaskBroker that times every call it passes on.
class TimingBroker : public runtime::TaskBroker {
  // Defined first: the methods below deduce their types from it.
  template <typename F>
  auto Timed(F f) {
    const Clock::time_point t0 = Clock::now();
    auto result = f();
    std::lock_guard<std::mutex> lock(mu_);
    ms_ += Ms(t0);
    return result;
  }

 public:
  explicit TimingBroker(runtime::TaskBroker* inner) : inner_(inner) {}

  double TakeMs() {
    std::lock_guard<std::mutex> lock(mu_);
    const double ms = ms_;
    ms_ = 0;
    return ms;
  }

  absl::StatusOr<std::optional<runtime::TaskAssignment>> Claim(const std::string& worker,
                                                               int64_t task_id) override {
    return Timed([&] { return inner_->Claim(worker, task_id); });
  }
  absl::StatusOr<bool> Renew(const runtime::Lease& lease) override {
    return Timed([&] { return inner_->Renew(lease); });
  }
  absl::Status ReportProgress(const runtime::Lease& lease,
                              const engine::AuditProgress& p) override {
    return Timed([&] { return inner_->ReportProgress(lease, p); });
  }
  absl::Status ReportNote(const runtime::Lease& lease, const std::string& text) override {
    return Timed([&] { return inner_->ReportNote(lease, text); });
  }
  absl::Status ReportRows(const runtime::Lease& lease, const std::string& model,
                          const std::string& weights,
                          const std::vector<engine::ResultRow>& rows) override {
    return Timed([&] { return inner_->ReportRows(lease, model, weights, rows); });
  }
  absl::Status Finish(const runtime::Lease& lease, const absl::Status& outcome,
                      const v1::TaskProvenance& provenance) override {
    return Timed([&] { return inner_->Finish(lease, outcome, provenance); });
  }
  absl::Status Release(const runtime::Lease& lease, const absl::Status& reason,
                       bool refund) override {
    return Timed([&] { return inner_->Release(lease, reason, refund); });
  }
  absl::Status Refuse(const runtime::Lease& lease, const absl::Status& reason) override {
    return Timed([&] { return inner_->Refuse(lease, reason); });
  }
  absl::StatusOr<runtime::DatasetBytes> ReadDataset(const runtime::Lease& lease,
                                                    bool calibration) override {
    return Timed([&] { return inner_->ReadDataset(lease, calibration); });
  }
  std::optional<std::string> GetCoefficients(const runtime::Lease& lease,
                                             const engine::CoefficientCacheKey& key) override {
    return Timed([&] { return inner_->GetCoefficients(lease, key); });
  }
  void PutCoefficients(const runtime::Lease& lease, const engine::CoefficientCacheKey& key,
                       const std::string& bytes) override {
    Timed([&] {
      inner_->PutCoefficients(lease, key, bytes);
      return 0;
    });
  }

 private:
  runtime::TaskBroker* inner_;
  std::mutex mu_;
  double ms_ = 0;
};

std::string Letters(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + rng.Uniform(26));
  return s;
}

v1::AuditSpec Spec() {
  v1::AuditSpec spec;
  spec.add_models("fg");
  spec.set_eval_dataset("eval");
  spec.set_calib_dataset("calib");
  spec.set_window_length(32);
  spec.set_max_eval_windows(16);
  spec.set_max_calib_windows(16);
  spec.set_batch_size(8);
  spec.set_bootstrap_resamples(200);
  spec.set_timing_repeats(2);
  spec.set_ci_level(0.95);
  return spec;
}

struct Env {
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<runtime::ModelRepository> models;
  jobs::EventHub hub;
};

absl::Status Open(const std::string& root, Env* env) {
  std::filesystem::create_directories(root + "/models");
  FCA_RETURN_IF_ERROR(bench::WriteSmallModel(root + "/models/fg", 64, 128));
  storage::StoreOptions options;
  options.path = root + "/fca.sqlite";
  FCA_ASSIGN_OR_RETURN(env->store, storage::Store::Open(options));
  FCA_RETURN_IF_ERROR(
      env->store->PutDataset("eval", "text", "local", Letters(32 * 16, 1)).status());
  FCA_RETURN_IF_ERROR(
      env->store->PutDataset("calib", "text", "local", Letters(32 * 16, 2)).status());
  runtime::ModelRepository::Options repo;
  repo.root = root + "/models";
  FCA_ASSIGN_OR_RETURN(env->models, runtime::ModelRepository::Open(repo));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Submit(storage::Store* store) {
  FCA_ASSIGN_OR_RETURN(storage::JobRecord job,
                       store->CreateJob("local", runtime::SpecToJson(Spec()), {"fg"}));
  return job.id;
}

absl::Status Overhead(Env* env, int tasks) {
  jobs::Coordinator coordinator(env->store.get(), &env->hub, {});
  TimingBroker timing(&coordinator);
  runtime::Worker::Options options;
  options.name = std::string(jobs::Coordinator::kLocalWorkerPrefix) + "0";
  options.threads = 1;
  runtime::Worker worker(&timing, env->models.get(), options);
  std::vector<double> overhead, total;
  for (int i = -1; i < tasks; ++i) {  // one warm-up (model load)
    FCA_RETURN_IF_ERROR(Submit(env->store.get()).status());
    const Clock::time_point t0 = Clock::now();
    FCA_ASSIGN_OR_RETURN(const bool ran, worker.RunOne(0));
    if (!ran) return absl::InternalError("no task to run");
    const double wall = Ms(t0), spent = timing.TakeMs();
    if (i >= 0) {
      overhead.push_back(spent);
      total.push_back(wall);
    }
  }
  std::printf("coordinator overhead per task (%d one-model tasks, SQLite file, WAL):\n", tasks);
  std::printf("  in TaskBroker calls    median %7.2f ms   max %7.2f ms   target < 50 ms: %s\n",
              engine::Median(overhead), *std::max_element(overhead.begin(), overhead.end()),
              *std::max_element(overhead.begin(), overhead.end()) < 50 ? "ok" : "MISSED");
  std::printf("  whole task             median %7.2f ms\n", engine::Median(total));
  return absl::OkStatus();
}

absl::Status DeathToRerun(Env* env, std::chrono::milliseconds lease) {
  jobs::Coordinator::Options options;
  options.lease = lease;
  jobs::Coordinator coordinator(env->store.get(), &env->hub, options);
  FCA_RETURN_IF_ERROR(coordinator.Start());
  FCA_ASSIGN_OR_RETURN(const int64_t job, Submit(env->store.get()));
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::TaskRecord> tasks, env->store->ListTasks(job));
  const int64_t task = tasks.at(0).id;
  FCA_ASSIGN_OR_RETURN(std::optional<runtime::TaskAssignment> dead,
                       coordinator.Claim("dead", task));
  if (!dead) return absl::InternalError("nothing to claim");
  const Clock::time_point died = Clock::now();  // it never renews
  std::optional<runtime::TaskAssignment> again;
  while (!again && Ms(died) < 10 * lease.count() + 5000) {
    FCA_ASSIGN_OR_RETURN(again, coordinator.Claim("alive", task));
    if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double ms = Ms(died);
  const absl::Status finished =
      again ? coordinator.Finish(again->lease, absl::CancelledError("benchmark"), {})
            : absl::OkStatus();
  coordinator.Stop();
  if (!again) return absl::DeadlineExceededError("the task never ran again");
  FCA_RETURN_IF_ERROR(finished);
  std::printf("  lease %6lld ms: task held again after %7.1f ms (sweep every 200 ms)\n",
              static_cast<long long>(lease.count()), ms);
  return absl::OkStatus();
}

absl::Status Bench() {
  const std::string root = "/tmp/fca_workers_bench_" + std::to_string(getpid());
  Env env;
  FCA_RETURN_IF_ERROR(Open(root, &env));
  FCA_RETURN_IF_ERROR(Overhead(&env, 20));
  std::printf("a worker's death to its task claimed again:\n");
  for (int ms : {1000, 3000}) {
    FCA_RETURN_IF_ERROR(DeathToRerun(&env, std::chrono::milliseconds(ms)));
  }
  std::filesystem::remove_all(root);
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca

int main() {
  const absl::Status st = fca::Bench();
  if (!st.ok()) {
    std::fprintf(stderr, "fca_workers_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
