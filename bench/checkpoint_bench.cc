// fca_checkpoint_bench: a full-size checkpoint of any family on this machine.
// Loads the folder given by --model (bench/muddpythia_1p4b.sh writes a random
// MUDDPythia-1.4B, bench/olmoe_1b7b.sh a random OLMoE-1B-7B, each with the
// public checkpoint's names, shapes and bfloat16 dtype),
// then times forwards of one [1, T] window in the compute dtype: LIVE (the
// controllers run) and REPLAY (the recorded coefficients are substituted), in
// alternating order, and checks that REPLAY of the recording reproduces LIVE.
// Prints load time (and how much of it hashed the weights, or whether the
// hash came from --weights_hash_cache), peak RSS against the weight bytes,
// and tokens/s; --json=FILE also writes them for the scripts.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/torch_util.h"

ABSL_FLAG(std::string, model, "", "model folder (config.json and safetensors)");
ABSL_FLAG(std::string, dtype, "bfloat16", "compute dtype: bfloat16 | float32");
ABSL_FLAG(std::string, device, "cpu", "torch device: cpu, cuda, cuda:N");
ABSL_FLAG(int64_t, seq, 512, "tokens per forward (T)");
ABSL_FLAG(int, repeats, 3, "timed forwards per mode");
ABSL_FLAG(int, threads, 0, "torch threads (0 = one per core)");
ABSL_FLAG(double, rss_target, 1.3, "peak RSS / weight bytes must stay below this");
ABSL_FLAG(double, load_seconds_target, 5, "the load must take at most this long");
ABSL_FLAG(double, load_rss_target, 1.1,
          "peak RSS / weight bytes after the load must stay at or below this");
ABSL_FLAG(std::string, json, "", "also write the figures to this JSON file");
ABSL_FLAG(std::string, weights_hash_cache, "",
          "file remembering the weights' SHA-256 across runs (fca-server "
          "--weights_hash_cache); empty: hash them every run");

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Peak resident set of this process so far, bytes.
double PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

// Resident set of this process now, bytes.
double RssBytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

const char* Verdict(bool met) { return met ? "met" : "MISSED"; }

double WeightBytes(const std::string& dir) {
  double total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") total += entry.file_size();
  }
  return total;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  // One forward of one sequence at a time: its threads work inside the ops.
  ConfigureRuntime({absl::GetFlag(FLAGS_threads), Parallelism::kWithinOps});
  ComputeOptions compute;
  FCA_ASSIGN_OR_RETURN(compute.dtype, ParseComputeDTypeFlag(absl::GetFlag(FLAGS_dtype)));
  compute.device = absl::GetFlag(FLAGS_device);
  const std::unique_ptr<WeightsHashCache> hash_cache =
      WeightsHashCache::Open(absl::GetFlag(FLAGS_weights_hash_cache));
  const double rss_before_load = RssBytes();
  const Clock::time_point t0 = Clock::now();
  FCA_ASSIGN_OR_RETURN(std::unique_ptr<ControlledModel> model,
                       LoadModel(dir, "bench", compute, hash_cache.get()));
  const double load_s = Seconds(t0);
  const double rss_after_load = PeakRssBytes();
  const double weights = WeightBytes(dir);
  std::printf("model %s: %s, %lld parameters, %lld layers, %zu coefficient sites, %s compute\n",
              dir.c_str(), model->info().family.c_str(),
              static_cast<long long>(model->info().num_parameters),
              static_cast<long long>(model->info().num_layers), model->sites().size(),
              ComputeDTypeName(compute.dtype));
  const WeightsHashCache::Stats hashing = hash_cache->stats();
  const std::string hash_note =
      hashing.misses > 0
          ? absl::StrFormat("of which %.1f s hashing %.2f GB at %.0f MB/s", hashing.hash_seconds,
                            hashing.bytes_hashed / 1e9,
                            hashing.bytes_hashed / 1e6 / std::max(hashing.hash_seconds, 1e-9))
          : std::string("SHA-256 from the weights hash cache, no byte hashed");
  const double load_target = absl::GetFlag(FLAGS_load_seconds_target);
  std::printf("load: %.2f s (%s; weights %.2f GB): target <= %.1f s %s\n", load_s,
              hash_note.c_str(), weights / 1e9, load_target, Verdict(load_s <= load_target));
  const double load_rss_target = absl::GetFlag(FLAGS_load_rss_target);
  std::printf(
      "load RSS: %.2f GB before the load, peak %.2f GB after = %.3fx the weights: "
      "target <= %.2fx %s\n",
      rss_before_load / 1e9, rss_after_load / 1e9, rss_after_load / weights, load_rss_target,
      Verdict(rss_after_load / weights <= load_rss_target));

  const int64_t T = absl::GetFlag(FLAGS_seq);
  const at::Tensor ids = at::randint(0, model->info().vocab_size, {1, T}, at::kLong);
  std::vector<at::Tensor> recorded;
  FCA_ASSIGN_OR_RETURN(at::Tensor live_logits,
                       model->Forward(ids, CoefficientMode::kLiveRecord, &recorded));
  const double rss_after_live = PeakRssBytes();
  FCA_ASSIGN_OR_RETURN(at::Tensor replay_logits,
                       model->Forward(ids, CoefficientMode::kReplay, &recorded));
  // at::equal allocates nothing, so the check does not inflate the peak.
  const bool bitwise = at::equal(live_logits, replay_logits);
  const bool finite = live_logits.isfinite().all().item<bool>();
  live_logits.reset();
  replay_logits.reset();

  std::vector<double> live_s, replay_s;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool live = (r + k) % 2 == 0;  // alternate which goes first
      std::vector<at::Tensor> given = recorded;
      // On a GPU the forward only queues its kernels: the clock waits for
      // the device at both ends.
      SynchronizeDevice(compute.device);
      const Clock::time_point t = Clock::now();
      FCA_RETURN_IF_ERROR(model
                              ->Forward(ids,
                                        live ? CoefficientMode::kLive : CoefficientMode::kReplay,
                                        live ? nullptr : &given)
                              .status());
      SynchronizeDevice(compute.device);
      (live ? live_s : replay_s).push_back(Seconds(t));
    }
  }
  const double peak = PeakRssBytes();
  std::printf(
      "peak RSS: %.2f GB after load, %.2f GB after the first forward, %.2f GB after "
      "all = %.2fx the weights (target < %.1fx): %s\n",
      rss_after_load / 1e9, rss_after_live / 1e9, peak / 1e9, peak / weights,
      absl::GetFlag(FLAGS_rss_target), Verdict(peak / weights < absl::GetFlag(FLAGS_rss_target)));
  std::printf(
      "T = %lld, median of %zu: LIVE %.2f s (%.1f tokens/s), REPLAY %.2f s "
      "(%.1f tokens/s), REPLAY/LIVE throughput %.3f\n",
      static_cast<long long>(T), live_s.size(), Median(live_s), T / Median(live_s),
      Median(replay_s), T / Median(replay_s), Median(live_s) / Median(replay_s));
  std::printf("replay fidelity: REPLAY(A(x)) logits %s LIVE; logits %s\n",
              bitwise ? "are bitwise equal to" : "DIFFER from", finite ? "finite" : "NOT FINITE");
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << absl::StrFormat(
        "{\"family\": \"%s\", \"parameters\": %d, \"weight_bytes\": %.0f, \"load_s\": %.3f, "
        "\"rss_after_load_bytes\": %.0f, \"peak_rss_bytes\": %.0f, \"seq\": %d, "
        "\"repeats\": %d, \"live_s\": %.4f, \"replay_s\": %.4f, \"replay_bitwise\": %s, "
        "\"threads\": %d, \"device\": \"%s\", \"device_name\": \"%s\"}\n",
        model->info().family, model->info().num_parameters, weights, load_s, rss_after_load, peak,
        T, static_cast<int>(live_s.size()), Median(live_s), Median(replay_s),
        bitwise ? "true" : "false", at::get_num_threads(), compute.device,
        DeviceName(compute.device));
    if (!out) return absl::InternalError("cannot write " + json_path);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_model).empty()) {
    std::fprintf(stderr,
                 "usage: fca_checkpoint_bench --model=DIR [--seq=512] [--dtype=bfloat16]\n");
    return 2;
  }
  absl::Status st = fca::engine::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "fca_checkpoint_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
