// fca_engine_bench: forward throughput of a ~1M-parameter featuregate model
// (LIVE and REPLAY) and its dense twin, and what a whole audit costs on top
// of its forward passes. Prints a table; --json=FILE also writes the figures.
//
// Timings are medians over --repeats; within each repeat the dense, LIVE and
// REPLAY forwards run back to back in a rotating order, and the timed audits
// are spread between the repeats, so the noise of a shared machine hits all
// of them alike.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"

namespace fca::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTargetReplayOverLive = 1.0;  // REPLAY tokens/s >= LIVE
constexpr double kTargetAuditRatio = 1.15;     // audit wall / forwards

struct BenchOptions {
  int repeats = 15;
  int warmup = 3;
  int threads = 2;
  int audit_repeats = 3;
  int64_t batch = 8;
  int64_t window = 128;
  int64_t eval_windows = 32;
  int64_t calib_windows = 16;
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  std::string json_path;
};

// The timed forwards, all of one fixed batch.
enum Kind { kDenseLive = 0, kGateLive = 1, kGateReplay = 2, kKinds = 3 };

// Per kind: median seconds per batch and relative half-IQR.
struct ForwardTimes {
  double median[kKinds] = {};
  double spread[kKinds] = {};
};

struct AuditTimes {
  double wall = 0;  // median seconds of RunAudit
  // Median of wall x threads / ModelReport::forward_seconds: forward_seconds
  // sums the time of forwards that run side by side (one per audit thread).
  double forward_ratio = 0;
  double expected_ratio = 0;  // wall / (forward counts x standalone medians)
  int64_t live_forwards = 0, replay_forwards = 0;
  int64_t eval_tokens = 0;
  double replay_max_abs_diff = 0;
};

struct DtypeResult {
  std::string dtype;
  int64_t gate_params = 0, dense_params = 0;
  ForwardTimes fwd;
  AuditTimes audit;
};

TransformerConfig BenchConfig(const std::string& family) {
  TransformerConfig c;
  c.family = family;
  c.d_model = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_groups = 8;
  c.d_ff = 512;
  c.controller_width = 64;
  c.vocab_size = 256;
  c.max_seq_len = 256;
  return c;
}

// Writes the featuregate model to `root`/featuregate and its dense twin (the
// same seed, so the shared weights agree) to `root`/dense.
absl::Status WriteModels(const std::string& root) {
  InitOptions init;
  init.seed = 1;
  init.controller_out_std = 1.0;  // input-dependent gates
  for (const std::string family : {"featuregate", "dense"}) {
    FCA_RETURN_IF_ERROR(
        WriteRandomTransformerModelDir(root + "/" + family, BenchConfig(family), init));
  }
  return absl::OkStatus();
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

absl::StatusOr<double> TimeForward(ControlledModel& m, const at::Tensor& ids, CoefficientMode mode,
                                   std::vector<at::Tensor>* coeff) {
  const Clock::time_point t0 = Clock::now();
  FCA_RETURN_IF_ERROR(m.Forward(ids, mode, coeff).status());
  return Since(t0);
}

// (p75 - p25) / 2 / median: a noise figure that ignores outliers.
double RelativeHalfIqr(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const double q1 = x[x.size() / 4], q3 = x[(3 * x.size()) / 4];
  return 0.5 * (q3 - q1) / Median(x);
}

// `chars` random lowercase letters; distinct seeds give distinct windows.
Dataset RandomLetters(const std::string& name, int64_t chars, uint64_t seed) {
  Rng rng(seed);
  Dataset d;
  d.name = name;
  d.kind = Dataset::Kind::kText;
  d.text.resize(chars);
  for (char& c : d.text) c = static_cast<char>('a' + rng.Uniform(26));
  return d;
}

AuditRequest MakeAuditRequest(ControlledModel* gate, const BenchOptions& o) {
  AuditRequest req;
  req.models = {gate};
  req.eval = RandomLetters("eval", o.eval_windows * o.window, 11);
  req.calib = RandomLetters("calib", o.calib_windows * o.window, 22);
  AuditOptions& a = req.options;
  a.window_length = o.window;
  a.max_eval_windows = o.eval_windows;
  a.max_calib_windows = o.calib_windows;
  a.batch_size = o.batch;
  a.timing_repeats = 0;  // the bench times the audit; the audit must not
  a.timing_warmup = 0;
  return req;
}

int64_t Batches(int64_t windows, int64_t batch) { return (windows + batch - 1) / batch; }

// Forward passes RunAudit makes: per eval batch LIVE-record + REPLAY(correct),
// per calib batch LIVE-record, per other intervention and eval batch REPLAY,
// plus one LIVE and one REPLAY counting forward in the execution audit.
void CountForwards(const ModelReport& m, const BenchOptions& o, AuditTimes* a) {
  const int64_t eb = Batches(m.eval_windows, o.batch), cb = Batches(m.calib_windows, o.batch);
  const int64_t others = static_cast<int64_t>(m.interventions.size()) - 1;
  a->live_forwards = eb + cb + 1;
  a->replay_forwards = eb * (1 + others) + 1;
  a->eval_tokens = m.eval_windows * m.window_length;
}

// One dtype's models and inputs.
struct Bench {
  std::unique_ptr<ControlledModel> gate, dense;
  at::Tensor ids;                    // one fixed batch
  std::vector<at::Tensor> recorded;  // its coefficients, recorded once
  AuditRequest audit;
};

// Raw timings in seconds, gathered interleaved.
struct Samples {
  std::vector<double> forward[kKinds];
  std::vector<double> audit_wall, audit_ratio;
};

// One forward of each kind; `rotation` picks who goes first. Null `s`: warm-up.
absl::Status ForwardRound(Bench& b, int rotation, Samples* s) {
  for (int k = 0; k < kKinds; ++k) {
    const int which = (k + rotation) % kKinds;
    double t = 0;
    if (which == kDenseLive) {
      FCA_ASSIGN_OR_RETURN(t, TimeForward(*b.dense, b.ids, CoefficientMode::kLive, nullptr));
    } else if (which == kGateLive) {
      FCA_ASSIGN_OR_RETURN(t, TimeForward(*b.gate, b.ids, CoefficientMode::kLive, nullptr));
    } else {
      FCA_ASSIGN_OR_RETURN(t, TimeForward(*b.gate, b.ids, CoefficientMode::kReplay, &b.recorded));
    }
    if (s != nullptr) s->forward[which].push_back(t);
  }
  return absl::OkStatus();
}

// One whole audit; null `s`: warm-up.
absl::Status AuditOnce(const Bench& b, const BenchOptions& o, Samples* s, AuditTimes* a) {
  const Clock::time_point t0 = Clock::now();
  FCA_ASSIGN_OR_RETURN(AuditReport report, RunAudit(b.audit));
  const double wall = Since(t0);
  const ModelReport& m = report.models.at(0);
  a->replay_max_abs_diff = std::max(a->replay_max_abs_diff, m.replay_max_abs_diff);
  CountForwards(m, o, a);
  if (s != nullptr) {
    s->audit_wall.push_back(wall);
    s->audit_ratio.push_back(wall * AuditThreads() / m.forward_seconds);
  }
  return absl::OkStatus();
}

// Forward rounds with the audits spread evenly between them, so slow phases
// of a shared machine fall on the audits and the standalone forwards alike.
absl::Status Sample(Bench& b, const BenchOptions& o, Samples* s, AuditTimes* a) {
  for (int w = 0; w < o.warmup; ++w) FCA_RETURN_IF_ERROR(ForwardRound(b, w, nullptr));
  if (o.warmup > 0) FCA_RETURN_IF_ERROR(AuditOnce(b, o, nullptr, a));
  int audits = 0;
  for (int r = 0; r < o.repeats; ++r) {
    if (audits < o.audit_repeats && audits * o.repeats <= r * o.audit_repeats) {
      FCA_RETURN_IF_ERROR(AuditOnce(b, o, s, a));
      ++audits;
    }
    FCA_RETURN_IF_ERROR(ForwardRound(b, r, s));
  }
  for (; audits < o.audit_repeats; ++audits) FCA_RETURN_IF_ERROR(AuditOnce(b, o, s, a));
  return absl::OkStatus();
}

void Summarize(const Samples& s, DtypeResult* r) {
  ForwardTimes& f = r->fwd;
  for (int k = 0; k < kKinds; ++k) {
    f.median[k] = Median(s.forward[k]);
    f.spread[k] = RelativeHalfIqr(s.forward[k]);
  }
  AuditTimes& a = r->audit;
  a.wall = Median(s.audit_wall);
  a.forward_ratio = Median(s.audit_ratio);
  a.expected_ratio =
      a.wall / (a.live_forwards * f.median[kGateLive] + a.replay_forwards * f.median[kGateReplay]);
}

absl::StatusOr<DtypeResult> BenchDtype(const std::string& root, const std::string& dtype,
                                       const BenchOptions& o) {
  ComputeOptions compute;
  FCA_ASSIGN_OR_RETURN(compute.dtype, ParseComputeDTypeFlag(dtype));
  Bench b;
  FCA_ASSIGN_OR_RETURN(b.gate, LoadModel(root + "/featuregate", "featuregate", compute));
  FCA_ASSIGN_OR_RETURN(b.dense, LoadModel(root + "/dense", "dense", compute));
  b.ids = at::randint(0, 256, {o.batch, o.window}, at::kLong);
  FCA_RETURN_IF_ERROR(b.gate->Forward(b.ids, CoefficientMode::kLiveRecord, &b.recorded).status());
  b.audit = MakeAuditRequest(b.gate.get(), o);
  DtypeResult r;
  r.dtype = dtype;
  r.gate_params = b.gate->info().num_parameters;
  r.dense_params = b.dense->info().num_parameters;
  Samples s;
  FCA_RETURN_IF_ERROR(Sample(b, o, &s, &r.audit));
  Summarize(s, &r);
  return r;
}

// ---- Output ----------------------------------------------------------------

struct Row {
  std::string metric;
  std::vector<std::string> cells;  // one per dtype
  std::string target;
};

std::string TokensPerSecond(const BenchOptions& o, const ForwardTimes& f, Kind k) {
  return absl::StrFormat("%.0f (+-%.0f%%)", o.batch * o.window / f.median[k], 100 * f.spread[k]);
}

std::string Verdict(double value, double bound, bool at_least) {
  const bool ok = at_least ? value >= bound : value <= bound;
  return absl::StrFormat("%.3f %s", value, ok ? "ok" : "MISS");
}

std::vector<Row> BuildRows(const std::vector<DtypeResult>& results, const BenchOptions& o) {
  std::vector<Row> rows = {
      {"dense LIVE tokens/s", {}, ""},
      {"featuregate LIVE tokens/s", {}, ""},
      {"featuregate REPLAY tokens/s", {}, ""},
      {"REPLAY / LIVE speed", {}, ">= 1.000"},
      {"LIVE / dense time (slowdown+1)", {}, ""},
      {"audit wall s (median)", {}, ""},
      {"audited tokens/s (eval tokens)", {}, ""},
      {"audit forwards LIVE + REPLAY", {}, ""},
      {"audit max |REPLAY-LIVE| logit", {}, ""},
      {"(a) wall x threads / forward_seconds", {}, "<= 1.150"},
      {"(b) wall / (n x standalone)", {}, "<= 1.150"},
  };
  for (const DtypeResult& r : results) {
    const ForwardTimes& f = r.fwd;
    const AuditTimes& a = r.audit;
    std::vector<std::string> c = {
        TokensPerSecond(o, f, kDenseLive),
        TokensPerSecond(o, f, kGateLive),
        TokensPerSecond(o, f, kGateReplay),
        Verdict(f.median[kGateLive] / f.median[kGateReplay], kTargetReplayOverLive, true),
        absl::StrFormat("%.3f", f.median[kGateLive] / f.median[kDenseLive]),
        absl::StrFormat("%.3f", a.wall),
        absl::StrFormat("%.0f", a.eval_tokens / a.wall),
        absl::StrFormat("%d + %d", a.live_forwards, a.replay_forwards),
        absl::StrFormat("%.3g", a.replay_max_abs_diff),
        Verdict(a.forward_ratio, kTargetAuditRatio, false),
        Verdict(a.expected_ratio, kTargetAuditRatio, false),
    };
    for (size_t i = 0; i < rows.size(); ++i) rows[i].cells.push_back(c[i]);
  }
  return rows;
}

void PrintTable(const std::vector<DtypeResult>& results, const BenchOptions& o) {
  std::printf(
      "fca_engine_bench  torch %s  threads %d  T=%lld batch=%lld  repeats %d "
      "(warmup %d)  audits %d\n",
      TorchVersion().c_str(), o.threads, static_cast<long long>(o.window),
      static_cast<long long>(o.batch), o.repeats, o.warmup, o.audit_repeats);
  if (!results.empty()) {
    std::printf("parameters: featuregate %lld, dense twin %lld\n",
                static_cast<long long>(results[0].gate_params),
                static_cast<long long>(results[0].dense_params));
  }
  std::printf("audit: %lld eval + %lld calib windows, all interventions\n\n",
              static_cast<long long>(o.eval_windows), static_cast<long long>(o.calib_windows));
  std::printf("%-32s", "metric");
  for (const DtypeResult& r : results) std::printf(" %18s", r.dtype.c_str());
  std::printf("  %s\n", "target");
  for (const Row& row : BuildRows(results, o)) {
    std::printf("%-32s", row.metric.c_str());
    for (const std::string& c : row.cells) std::printf(" %18s", c.c_str());
    std::printf("  %s\n", row.target.c_str());
  }
  std::printf(
      "\ntokens/s: median (+- half interquartile range). (b) counts LIVE-record "
      "forwards at the standalone LIVE time.\n");
}

json::Value ResultJson(const DtypeResult& r, const BenchOptions& o) {
  const double tokens = static_cast<double>(o.batch * o.window);
  const ForwardTimes& f = r.fwd;
  const AuditTimes& a = r.audit;
  json::Value v = json::Value::MakeObject();
  auto num = [&v](const char* key, double x) { v.Set(key, json::Value::Number(x)); };
  v.Set("dtype", json::Value::String(r.dtype));
  v.Set("featuregate_parameters", json::Value::Int(r.gate_params));
  v.Set("dense_parameters", json::Value::Int(r.dense_params));
  num("dense_live_tokens_per_s", tokens / f.median[kDenseLive]);
  num("featuregate_live_tokens_per_s", tokens / f.median[kGateLive]);
  num("featuregate_replay_tokens_per_s", tokens / f.median[kGateReplay]);
  num("replay_over_live_speed", f.median[kGateLive] / f.median[kGateReplay]);
  num("audit_wall_seconds", a.wall);
  num("audited_tokens_per_s", a.eval_tokens / a.wall);
  v.Set("audit_live_forwards", json::Value::Int(a.live_forwards));
  v.Set("audit_replay_forwards", json::Value::Int(a.replay_forwards));
  num("audit_ratio_forward_seconds", a.forward_ratio);
  num("audit_ratio_standalone", a.expected_ratio);
  return v;
}

absl::Status WriteJson(const std::vector<DtypeResult>& results, const BenchOptions& o) {
  json::Value root = json::Value::MakeObject();
  root.Set("torch_version", json::Value::String(TorchVersion()));
  root.Set("threads", json::Value::Int(o.threads));
  root.Set("repeats", json::Value::Int(o.repeats));
  root.Set("window_length", json::Value::Int(o.window));
  root.Set("batch_size", json::Value::Int(o.batch));
  json::Array arr;
  for (const DtypeResult& r : results) arr.push_back(ResultJson(r, o));
  root.Set("results", json::Value::MakeArray(std::move(arr)));
  std::ofstream out(o.json_path, std::ios::trunc);
  out << json::Write(root, /*pretty=*/true) << "\n";
  if (!out.good()) return absl::InternalError("cannot write " + o.json_path);
  return absl::OkStatus();
}

// ---- Flags and main -------------------------------------------------------

absl::Status ParseIntFlag(const std::string& value, const std::string& name, int min, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s needs an integer >= %d, got '%s'", name, min, value));
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchOptions> ParseFlags(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    const std::string& key = kv[0];
    const std::string value = kv.size() > 1 ? kv[1] : "";
    if (key == "--repeats") {
      FCA_RETURN_IF_ERROR(ParseIntFlag(value, "repeats", 1, &o.repeats));
    } else if (key == "--warmup") {
      FCA_RETURN_IF_ERROR(ParseIntFlag(value, "warmup", 0, &o.warmup));
    } else if (key == "--threads") {
      FCA_RETURN_IF_ERROR(ParseIntFlag(value, "threads", 1, &o.threads));
    } else if (key == "--audit_repeats") {
      FCA_RETURN_IF_ERROR(ParseIntFlag(value, "audit_repeats", 1, &o.audit_repeats));
    } else if (key == "--dtypes" && !value.empty()) {
      o.dtypes = absl::StrSplit(value, ',');
    } else if (key == "--json" && !value.empty()) {
      o.json_path = value;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown flag '%s'; flags: --repeats=N --warmup=N --threads=N --audit_repeats=N "
          "--dtypes=float32,bfloat16 --json=FILE",
          argv[i]));
    }
  }
  return o;
}

absl::Status Run(const BenchOptions& o) {
  ConfigureRuntime({o.threads});
  at::manual_seed(0);
  std::string root = (std::filesystem::temp_directory_path() / "fca_bench_XXXXXX").string();
  if (mkdtemp(root.data()) == nullptr) return absl::InternalError("cannot create temp dir");
  std::vector<DtypeResult> results;
  absl::Status status = WriteModels(root);
  for (size_t i = 0; status.ok() && i < o.dtypes.size(); ++i) {
    absl::StatusOr<DtypeResult> r = BenchDtype(root, o.dtypes[i], o);
    if (r.ok()) results.push_back(*std::move(r));
    status = r.status();
  }
  std::filesystem::remove_all(root);
  FCA_RETURN_IF_ERROR(status);
  PrintTable(results, o);
  return o.json_path.empty() ? absl::OkStatus() : WriteJson(results, o);
}

}  // namespace
}  // namespace fca::engine

int main(int argc, char** argv) {
  absl::StatusOr<fca::engine::BenchOptions> options = fca::engine::ParseFlags(argc, argv);
  absl::Status status = options.ok() ? fca::engine::Run(*options) : options.status();
  if (!status.ok()) {
    std::fprintf(stderr, "fca_engine_bench: %s\n", status.ToString().c_str());
    return options.ok() ? 1 : 2;
  }
  return 0;
}
