// fca-local-audit: an engine-level audit without the service, and the
// creation of randomly initialised model folders.
//
//   fca-local-audit init --family=featuregate --seed=1 --out=DIR
//   fca-local-audit audit --models=A,B --dense_twin=D --eval=FILE --calib=FILE
//
// The service (fca-server + fca) is the normal way to audit; this tool exists
// for engine development and benchmarks (bench/audit_vs_eager.sh).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file.h"
#include "common/flags_usage.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/spec_fields.h"
#include "common/status_macros.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/audit/routing.h"
#include "server/engine/models/host_gemm.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/muddpythia_init.h"
#include "server/engine/models/torch_util.h"
#include "server/engine/models/transformer_model.h"
#include "server/tools/model_flags.h"
#include "server/tools/tool_main.h"

ABSL_FLAG(std::string, storage_dtype, "float32",
          "init: model.safetensors dtype: float32 | bfloat16");
ABSL_FLAG(uint64_t, seed, 0, "init: weight seed; audit: intervention/bootstrap seed");
ABSL_FLAG(std::string, out, "", "init: model folder to write");
ABSL_FLAG(int64_t, max_seq_len, 256, "init: maximum window length");
ABSL_FLAG(int64_t, vocab_size, 256,
          "init: embedding rows (more than 256 for a folder given a BPE tokenizer.json)");
ABSL_FLAG(double, controller_out_std, 0.0,
          "init: std of the controller output layer (0 = every gate starts at 1)");
ABSL_FLAG(std::vector<std::string>, models, {}, "audit: model folders (same family)");
ABSL_FLAG(std::string, dense_twin, "", "audit: dense twin model folder (optional)");
ABSL_FLAG(std::string, eval, "", "audit: evaluation text file");
ABSL_FLAG(std::string, calib, "", "audit: calibration text file");
ABSL_FLAG(std::vector<std::string>, interventions, {}, "audit: subset (default all)");
ABSL_FLAG(std::vector<std::string>, per_layer, {},
          "audit: interventions replayed one group of sites at a time (default none)");
// The spec fields' defaults are common/spec_fields.h's.
ABSL_FLAG(std::string, per_layer_scope, fca::ScopeName(fca::spec_fields::DefaultScope()),
          absl::StrCat("audit: per_layer groups: ", fca::ScopeNameList(" | ")));
ABSL_FLAG(int, fidelity_check_every, fca::spec_fields::kFidelityCheckEvery.Default<int>(),
          "audit: replay fidelity checked on the first and every k-th evaluation batch (1: all)");
ABSL_FLAG(std::string, retention_baseline, fca::RetentionBaselineNames()[0],
          "audit: the baseline of retention_pct: global_mean or neutral");
ABSL_FLAG(int64_t, bootstrap_block_length, 0,
          "audit: circular block bootstrap block length in windows (0 = round(N^(1/3)))");
ABSL_FLAG(int64_t, static_token_min_count,
          fca::spec_fields::kStaticTokenMinCount.Default<int64_t>(),
          "audit: calibration positions below which a static_token(_position) mean is shrunk");
ABSL_FLAG(int, calib_resamples, fca::spec_fields::kCalibResamples.Default<int>(),
          "audit: calibration resamples behind the penalty_calib rows (0 = off)");
ABSL_FLAG(std::string, dense_twin_mismatch, "",
          "audit: why the dense twin may differ from the models (empty: a mismatch is refused)");
ABSL_FLAG(int64_t, window, fca::spec_fields::kWindowLength.Default<int64_t>(),
          "audit: window length T in tokens");
ABSL_FLAG(int64_t, max_eval_windows, 64, "audit: evaluation windows (0 = all)");
ABSL_FLAG(int64_t, max_calib_windows, 64, "audit: calibration windows (0 = all)");
ABSL_FLAG(int64_t, batch, fca::spec_fields::kBatchSize.Default<int64_t>(),
          "audit: windows per forward pass");
ABSL_FLAG(int, bootstrap, fca::spec_fields::kBootstrapResamples.Default<int>(),
          "audit: bootstrap resamples");
ABSL_FLAG(int, timing_repeats, fca::spec_fields::kTimingRepeats.Default<int>(),
          "audit: timed (model, dense twin) pairs per model, at least");
ABSL_FLAG(int, timing_max_repeats, fca::spec_fields::kTimingMaxRepeats.Default<int>(),
          "audit: timed pairs per model, at most (adaptive stop)");
ABSL_FLAG(double, timing_budget_seconds, fca::spec_fields::kTimingBudgetSeconds.Default<double>(),
          "audit: wall time the timing may take per model");
ABSL_FLAG(std::string, device, "cpu", "audit: torch device");
ABSL_FLAG(std::string, dtype, "float32", "audit: float32 | bfloat16");
ABSL_FLAG(int, threads, 0, "torch threads (0 = one per core)");
ABSL_FLAG(std::string, json, "", "audit: also write the report as JSON here");

namespace fca {
namespace {

using engine::AuditReport;
using engine::ModelReport;

absl::StatusOr<engine::DType> StorageDType() {
  const std::string name = absl::GetFlag(FLAGS_storage_dtype);
  if (name == "float32") return engine::DType::kF32;
  if (name == "bfloat16") return engine::DType::kBF16;
  return absl::InvalidArgumentError("--storage_dtype must be float32 or bfloat16");
}

// init's shape where no flag says otherwise: the engine's TransformerConfig
// defaults, a small random folder.
engine::TransformerConfig InitConfig() {
  engine::TransformerConfig c = tools::ModelConfigFromFlags(engine::TransformerConfig());
  c.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  c.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  return c;
}

// A random MUDDPythia folder (the 1.4B: --d_model=2048 --n_layers=24
// --n_heads=16 --vocab_size=50432 --d_ff=8192 --max_seq_len=2048).
absl::Status InitMuddPythia(const engine::TransformerConfig& c) {
  engine::MuddPythiaSizes s;
  s.dim = c.d_model;
  s.n_layer = c.n_layers;
  s.n_head = c.n_heads;
  s.vocab_size = c.vocab_size;
  s.intermediate_size = c.d_ff;
  s.block_size = c.max_seq_len;
  FCA_ASSIGN_OR_RETURN(engine::DType dtype, StorageDType());
  return engine::WriteRandomMuddPythiaDir(absl::GetFlag(FLAGS_out), s, absl::GetFlag(FLAGS_seed),
                                          dtype);
}

absl::Status Init() {
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  const engine::TransformerConfig c = InitConfig();
  if (c.family == "muddpythia") return InitMuddPythia(c);
  if (absl::GetFlag(FLAGS_storage_dtype) != "float32") {
    return absl::InvalidArgumentError("--storage_dtype applies to muddpythia only");
  }
  engine::InitOptions init;
  init.seed = absl::GetFlag(FLAGS_seed);
  init.controller_out_std = absl::GetFlag(FLAGS_controller_out_std);
  return engine::WriteRandomTransformerModelDir(absl::GetFlag(FLAGS_out), c, init);
}

absl::StatusOr<engine::Dataset> ReadText(const std::string& path, const std::string& name) {
  engine::Dataset d;
  d.name = name;
  FCA_ASSIGN_OR_RETURN(d.text, ReadFile(path, "the " + name + " text"));
  d.sha256 = Sha256Hex(d.text);
  return d;
}

std::string BaseName(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

std::string Opt(const std::optional<double>& v, int decimals) {
  return v ? absl::StrFormat("%.*f", decimals, *v) : std::string("undefined");
}

// R(P) against each baseline that ran (fca.md "Gap retention").
std::string Retention(const ModelReport& r, const std::string& profile) {
  std::string out;
  for (const std::string& baseline : RetentionBaselineNames()) {
    const engine::RetentionResult* x = r.FindRetention(profile, baseline);
    if (x == nullptr) continue;
    const engine::RetentionEstimate& e = x->estimate;
    std::string text;
    if (!e.value) {
      text = absl::StrFormat("undefined (gap %+.4f [%+.4f, %+.4f] not above 0)", e.gap,
                             e.gap_ci.low, e.gap_ci.high);
    } else if (!e.ci) {
      text = absl::StrFormat("%.2f%% (CI undefined, %d resamples dropped)", *e.value,
                             e.dropped_resamples);
    } else {
      text = absl::StrFormat("%.2f%% [%.1f, %.1f]", *e.value, e.ci->low, e.ci->high);
    }
    absl::StrAppend(&out, out.empty() ? "" : ", ", "vs ", baseline, " ", text);
  }
  return out.empty() ? "-" : out;
}

void PrintModel(const ModelReport& r) {
  std::printf("\n== %s (%s, %lld parameters, weights %s...)\n", r.model.name.c_str(),
              r.model.family.c_str(), static_cast<long long>(r.model.num_parameters),
              r.model.weights_sha256.substr(0, 12).c_str());
  std::printf(
      "   E = %lld windows, C = %lld windows, T = %lld; replay fidelity max|dlogit| = %.2g\n",
      static_cast<long long>(r.eval_windows), static_cast<long long>(r.calib_windows),
      static_cast<long long>(r.window_length), r.replay_max_abs_diff);
  std::printf("   %-22s %10s %10s %24s\n", "intervention", "NLL", "penalty", "95% CI");
  for (const auto& i : r.interventions) {
    if (i.name == kCorrect) {
      std::printf("   %-22s %10.4f %10s %24s\n", i.name.c_str(), i.nll, "-", "-");
    } else {
      std::printf("   %-22s %10.4f %+10.4f   [%+9.4f, %+9.4f]\n", i.name.c_str(), i.nll, i.penalty,
                  i.penalty_ci.low, i.penalty_ci.high);
    }
  }
  for (const std::string& profile : StaticProfileNames()) {
    // Token-keyed profiles (fca.md "Reading the interventions in groups").
    const char* reading = FindInterventionGroup(profile)->retention_reading;
    std::printf("   gap retention of %s%s: %s\n", profile.c_str(), reading,
                Retention(r, profile).c_str());
  }
  if (r.static_token_coverage) {
    std::printf("   static_token: %lld evaluation positions (%lld ids) unseen in calibration\n",
                static_cast<long long>(r.static_token_coverage->unseen_positions),
                static_cast<long long>(r.static_token_coverage->unseen_ids));
  }
  for (const auto& [name, cells] :
       {std::make_pair(kStaticToken, r.static_token_cells),
        std::make_pair(kStaticTokenPosition, r.static_token_position_cells)}) {
    if (!cells) continue;
    std::printf("   %s: %lld of %lld calibration cells shrunk (seen < static_token_min_count)\n",
                name, static_cast<long long>(cells->shrunk), static_cast<long long>(cells->cells));
  }
  for (const auto& d : r.dependence) {
    std::printf("   %-22s %s %-12s %10.4f %+10.4f   [%+9.4f, %+9.4f]\n", d.intervention.c_str(),
                d.scope.c_str(), d.group.c_str(), d.nll, d.penalty, d.penalty_ci.low,
                d.penalty_ci.high);
  }
  for (const auto& f : r.variation) {
    std::printf(
        "   variation %-10s eta2_layer %s eta2 %s  total var %.4g = between-site %.4g + "
        "between-input "
        "%.4g + within-input %.4g\n",
        f.family.c_str(), Opt(f.eta2_layer, 4).c_str(), Opt(f.eta2, 4).c_str(), f.total_variance,
        f.total_variance - f.within_site_variance, f.between_input_variance,
        f.within_input_variance);
  }
  const auto& x = r.execution;
  std::printf(
      "   execution: %.2f blocks/token (fraction %.3f), %.3g FLOPs/token LIVE, %.3g "
      "REPLAY, %.2f us/token, slowdown vs dense %s\n",
      x.blocks_per_token, x.blocks_executed_fraction, x.flops_per_token, x.replay_flops_per_token,
      x.latency_us_per_token,
      x.slowdown ? absl::StrFormat("%+.1f%%", 100 * *x.slowdown).c_str() : "n/a");
}

void PrintAggregate(const AuditReport& report) {
  if (report.models.size() < 2) return;
  std::printf("\n== aggregate over %zu models (mean, sd, min, max)\n", report.models.size());
  for (const auto& a : report.aggregate) {
    if (a.metric.rfind("within_", 0) == 0 || a.metric.rfind("between_", 0) == 0) continue;
    std::printf("   %-22s %-28s %10.4f %9.4f %10.4f %10.4f%s\n", a.intervention.c_str(),
                a.metric.c_str(), a.summary.mean, a.summary.sd, a.summary.min, a.summary.max,
                a.undefined ? absl::StrFormat("  (%d undefined)", a.undefined).c_str() : "");
  }
}

// The audit's options; INVALID_ARGUMENT for an unknown intervention or
// scope (the engine checks the rest).
absl::StatusOr<engine::AuditOptions> OptionsFromFlags() {
  engine::AuditOptions o;
  FCA_ASSIGN_OR_RETURN(o.interventions,
                       ParseInterventionList(absl::GetFlag(FLAGS_interventions), "intervention",
                                             /*allow_correct=*/true));
  o.window_length = absl::GetFlag(FLAGS_window);
  o.max_eval_windows = absl::GetFlag(FLAGS_max_eval_windows);
  o.max_calib_windows = absl::GetFlag(FLAGS_max_calib_windows);
  o.batch_size = absl::GetFlag(FLAGS_batch);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.bootstrap_resamples = absl::GetFlag(FLAGS_bootstrap);
  o.timing_repeats = absl::GetFlag(FLAGS_timing_repeats);
  o.timing_max_repeats = absl::GetFlag(FLAGS_timing_max_repeats);
  o.timing_budget_seconds = absl::GetFlag(FLAGS_timing_budget_seconds);
  FCA_ASSIGN_OR_RETURN(o.per_layer_interventions,
                       ParseInterventionList(absl::GetFlag(FLAGS_per_layer),
                                             "per-layer intervention", /*allow_correct=*/false));
  o.fidelity_check_every = absl::GetFlag(FLAGS_fidelity_check_every);
  const std::optional<InterventionId> baseline =
      ParseIntervention(absl::GetFlag(FLAGS_retention_baseline));
  if (!baseline || !IsRetentionBaseline(*baseline)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--retention_baseline is not one of: %s", absl::StrJoin(RetentionBaselineNames(), ", ")));
  }
  o.retention_baseline = *baseline;
  o.bootstrap_block_length = absl::GetFlag(FLAGS_bootstrap_block_length);
  o.static_token_min_count = absl::GetFlag(FLAGS_static_token_min_count);
  o.calib_resamples = absl::GetFlag(FLAGS_calib_resamples);
  o.dense_twin_mismatch = absl::GetFlag(FLAGS_dense_twin_mismatch);
  const std::string scope = absl::GetFlag(FLAGS_per_layer_scope);
  const std::optional<ScopeId> scope_id = ParseScope(scope);
  if (!scope_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown per-layer scope '%s' (known: %s)", scope, ScopeNameList()));
  }
  o.per_layer_scope = *scope_id;
  return o;
}

absl::Status Audit() {
  // On stderr, for bench/audit_vs_eager.sh: its GEMM limit runs the same kernels.
  std::fprintf(stderr, "BLAS kernels: %s\n", engine::BlasKernels().c_str());
  // And whether float32 projections run the engine's own kernel, which the
  // bench's GEMM limit (at::linear) does not time.
  if (engine::HostGemmAvailable()) {
    std::fprintf(stderr, "float32 projections: host kernel, summed as OpenBLAS %s sums\n",
                 engine::HostGemmSummation());
  } else {
    std::fprintf(stderr, "float32 projections: at::linear\n");
  }
  engine::ComputeOptions compute;
  compute.device = absl::GetFlag(FLAGS_device);
  FCA_ASSIGN_OR_RETURN(compute.dtype, ParseComputeDTypeFlag(absl::GetFlag(FLAGS_dtype)));
  std::vector<std::unique_ptr<engine::ControlledModel>> owned;
  engine::AuditRequest req;
  FCA_ASSIGN_OR_RETURN(req.options, OptionsFromFlags());
  for (const std::string& dir : absl::GetFlag(FLAGS_models)) {
    FCA_ASSIGN_OR_RETURN(auto m, engine::LoadModel(dir, BaseName(dir), compute));
    req.models.push_back(m.get());
    // Routers in reduced precision: the float32 reference of the flip rate.
    req.float32_references.push_back(nullptr);
    if (engine::NeedsFloat32Reference(*m)) {
      engine::ComputeOptions float32 = compute;
      float32.dtype = ComputeDType::kFloat32;
      FCA_ASSIGN_OR_RETURN(auto ref, engine::LoadModel(dir, BaseName(dir), float32));
      req.float32_references.back() = ref.get();
      owned.push_back(std::move(ref));
    }
    owned.push_back(std::move(m));
  }
  if (!absl::GetFlag(FLAGS_dense_twin).empty()) {
    const std::string dir = absl::GetFlag(FLAGS_dense_twin);
    FCA_ASSIGN_OR_RETURN(auto m, engine::LoadModel(dir, BaseName(dir), compute));
    req.dense_twin = m.get();
    owned.push_back(std::move(m));
  }
  FCA_ASSIGN_OR_RETURN(req.eval, ReadText(absl::GetFlag(FLAGS_eval), "eval"));
  FCA_ASSIGN_OR_RETURN(req.calib, ReadText(absl::GetFlag(FLAGS_calib), "calib"));
  req.on_note = [](const std::string& note) { std::fprintf(stderr, "note: %s\n", note.c_str()); };
  std::string last_phase;
  // Each line ends with the seconds since the audit began: a phase's time is
  // its last line's less its first's (bench/audit_vs_eager.sh's breakdown).
  const absl::Time start = absl::Now();
  req.on_progress = [&](const engine::AuditProgress& p) {
    if (p.phase == last_phase && p.windows_done != p.windows_total) return;
    last_phase = p.phase;
    std::fprintf(stderr, "[%5.1f%%] %s %s %lld/%lld at %.3f s\n", 100 * p.fraction, p.model.c_str(),
                 p.phase.c_str(), static_cast<long long>(p.windows_done),
                 static_cast<long long>(p.windows_total),
                 absl::ToDoubleSeconds(absl::Now() - start));
  };
  FCA_ASSIGN_OR_RETURN(AuditReport report, engine::RunAudit(req));
  for (const ModelReport& r : report.models) PrintModel(r);
  PrintAggregate(report);
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_json), std::ios::trunc);
    out << json::Write(engine::ReportToJson(report), /*pretty=*/true) << "\n";
    if (!out.good()) return absl::InternalError("cannot write " + absl::GetFlag(FLAGS_json));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace fca

int main(int argc, char** argv) {
  // The libraries' diagnostics; this tool's own progress, notes and report
  // are its output, printed as they are.
  fca::InitServerLogging(argv[0]);
  fca::tools::ConfigureToolUsage(
      "fca-local-audit", "server/tools/local_audit_main.cc",
      absl::StrCat("fca-local-audit init|audit [flags]: engine-level audit without the server; "
                   "init's model shape where no flag sets it: ",
                   fca::tools::ModelShapeText(fca::engine::TransformerConfig())));
  fca::ExitZeroAfterHelp(argc, argv);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  fca::engine::ConfigureRuntime({absl::GetFlag(FLAGS_threads)});
  return fca::tools::RunSubcommand("fca-local-audit", args,
                                   {{"init", fca::Init}, {"audit", fca::Audit}});
}
