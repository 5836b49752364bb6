// The audit's types (fca.md): the options and request of an audit and the
// report it returns, and the coefficient cache's interface. RunAudit, which
// takes and returns them, is auditor.h's; the audit's own parts include
// this header. Torch-free; plain structs.
#ifndef FCA_SERVER_ENGINE_AUDIT_AUDIT_TYPES_H_
#define FCA_SERVER_ENGINE_AUDIT_AUDIT_TYPES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/spec_fields.h"
#include "common/vocabulary.h"
#include "server/engine/audit/provenance.h"
#include "server/engine/audit/statistics.h"
#include "server/engine/audit/windows.h"
#include "server/engine/models/controlled_model.h"

namespace fca::engine {

// Interventions and scopes (InterventionId, ScopeId, their names) are
// common/vocabulary.h's.

// The options of the AuditSpec fields take their defaults and ranges from
// common/spec_fields.h; the others are the engine's own.
struct AuditOptions {
  // Interventions to replay besides `correct` (always run). Empty: all.
  // Retention needs global_mean plus the profile.
  std::vector<InterventionId> interventions;
  int64_t window_length = spec_fields::kWindowLength.Default<int64_t>();  // T
  int64_t max_eval_windows = 0;  // 0 = every complete window
  int64_t max_calib_windows = 0;
  int64_t batch_size = spec_fields::kBatchSize.Default<int64_t>();  // windows per forward pass
  uint64_t seed = 0;              // derangement, permutations, bootstrap
  bool per_site_shuffle = false;  // token_shuffle: independent sigma per site
  int bootstrap_resamples = spec_fields::kBootstrapResamples.Default<int>();
  double ci_level = spec_fields::kCiLevel.Default<double>();
  bool allow_overlap = false;  // allow E and C to share windows
  // Replay-fidelity gate: max |logit(REPLAY(A(x))) - logit(LIVE)|, checked
  // on the first evaluation batch and every fidelity_check_every-th after it
  // (1: every batch). On the other batches NLL(correct) is the LIVE NLL,
  // which the checked batches show the replay reproduces: one forward
  // instead of two.
  double fidelity_tolerance = 1e-5;
  int fidelity_check_every = spec_fields::kFidelityCheckEvery.Default<int>();
  // Retention is undefined when |NLL(global_mean) - NLL(correct)| is below
  // this (nats/token): a ratio of noise is not a number worth printing.
  double retention_min_gap = 1e-5;
  // The baseline B of `retention_pct` (fca.md "Gap retention"): global_mean
  // or neutral. retention_vs.<B> rows are written against every baseline
  // that ran.
  InterventionId retention_baseline = InterventionId::kGlobalMean;
  // Moving-block bootstrap (fca.md "Correlated windows"): block length in
  // windows; 0: AutoBlockLength(N).
  int64_t bootstrap_block_length = 0;
  // static_token and static_token_position (fca.md "Token-keyed profiles"):
  // a cell seen n < m times in C is shrunk towards its prior with weight
  // n / (n + m).
  int64_t static_token_min_count = spec_fields::kStaticTokenMinCount.Default<int64_t>();
  // Calibration resampling (fca.md "Calibration uncertainty"): the profiles
  // of the interventions that read C re-estimated on this many circular block
  // resamples of C's windows, each replayed over E (one replay per resample
  // and intervention); 0: off.
  int calib_resamples = spec_fields::kCalibResamples.Default<int>();
  // Execution timing (fca.md "Execution"): two independent blocks of pairs
  // (model, dense twin) run back to back in alternating order; per block at
  // least `timing_repeats` pairs, then more until the slowdown's CI
  // half-width is <= timing_resolution (the rule never looks at where the
  // CI lies), at most max(timing_repeats, timing_max_repeats / 2) pairs and,
  // past the minimum, about timing_budget_seconds / 2 of wall time. Without
  // a twin: timing_repeats model forwards. 0 repeats: no timing.
  int timing_repeats = spec_fields::kTimingRepeats.Default<int>();
  int timing_max_repeats = spec_fields::kTimingMaxRepeats.Default<int>();
  double timing_budget_seconds = spec_fields::kTimingBudgetSeconds.Default<double>();
  double timing_resolution = 0.01;  // slowdown units: 0.01 = one percent
  int timing_warmup = 2;            // untimed pairs first
  // Why the dense twin may differ from the models (fca.md "Execution",
  // matched dense twin); empty: a twin that does not match is refused.
  std::string dense_twin_mismatch;
  // Per-group dependence (fca.md "Per-group dependence"): for each named
  // intervention I (not `correct`) and each group g of sites (a layer's
  // sites, one site or one family, by per_layer_scope), one more replay with
  // I's coefficients at g's sites and `correct` elsewhere. Empty: none (each
  // costs one replay pass per group).
  std::vector<InterventionId> per_layer_interventions;
  ScopeId per_layer_scope = spec_fields::DefaultScope();
};

// Progress of a running audit; `fraction` is over the whole job.
struct AuditProgress {
  // "windowing", "live", "calibration", "replay:<name>", "statistics",
  // "timing", "done" (progress_weights.h weighs them in `fraction`)
  std::string phase;
  std::string model;
  int64_t model_index = 0;
  int64_t model_count = 0;
  int64_t windows_done = 0;  // within this phase
  int64_t windows_total = 0;
  double fraction = 0;  // [0, 1]
  // Seconds the phase has left where it knows better than `fraction` does
  // (timing: its pace and its budget, TimingSecondsLeft); 0 = unknown.
  double phase_seconds_left = 0;
  // Model forwards of this model's audit so far (its dense twin's included),
  // as ModelReport's totals: a monitor counts the growth between reports.
  int64_t forward_tokens = 0;
  double forward_seconds = 0;
};

// One number of a report; the flat form stored and queried by the service.
//   intervention: an intervention name, or "variation" / "execution" /
//   "replay" for model-level metrics. metric: the stored name of the row's
//   typed key (common/result_key.h: StoredMetricName), "nll", "penalty",
//   "eta2.attn_gate", ...; report_rows.cc writes rows by their keys.
struct ResultRow {
  std::string model;
  std::string intervention;
  std::string metric;
  double value = 0;
  bool defined = true;  // false: undefined (e.g. retention with ~0 gap)
  std::optional<double> ci_low, ci_high;
  int64_t n = 0;  // units behind the value (sequences, tokens, models)
};

// What the penalty's per-window differences say beyond the i.i.d. CI
// (fca.md "Correlated windows").
struct PenaltyDependence {
  Interval block_ci;           // circular block bootstrap
  std::optional<double> lag1;  // lag-1 autocorrelation of the differences
  double p_value = 1;          // bootstrap p of penalty = 0, on block_ci's resamples
  double p_holm = 1;           // Holm-adjusted over the model's whole-model penalties
};

// Mixture of experts (fca.md "Routing agreement"): how often the experts
// chosen under an intervention are LIVE's, counted over (token, router layer).
struct LayerTopkAgreement {
  int64_t layer = 0;
  double fraction = 0;    // of the layer's tokens whose chosen set is LIVE's
  int64_t positions = 0;  // tokens counted at the layer
  double overlap = 0;     // mean over the layer's tokens of |S ∩ S_live| / k
};
struct TopkAgreement {
  double fraction = 0;                     // over every (token, router layer)
  int64_t positions = 0;                   // (token, router layer) pairs counted
  std::vector<LayerTopkAgreement> layers;  // ascending layer
  double overlap = 0;                      // mean |S ∩ S_live| / k, same pairs
};

// The penalty of an intervention estimated on C with calibration
// uncertainty (fca.md "Calibration uncertainty").
struct CalibratedPenalty {
  Interval ci;            // CalibratedBootstrapCI over the replicates
  double sd = 0;          // sample sd of the replicates' penalties
  int64_t resamples = 0;  // calibration resamples (replicates)
};

struct InterventionResult {
  std::string name;
  double nll = 0;  // nats/token over all predicted positions
  std::vector<double> nll_per_sequence;
  double penalty = 0;   // NLL(I) - NLL(correct)
  Interval penalty_ci;  // paired bootstrap
  PenaltyDependence windows;
  std::optional<CalibratedPenalty> calib;       // with calib_resamples, where C is read
  std::optional<TopkAgreement> topk_agreement;  // models with routers only
};

// The share of coefficient variance a key explains (fca.md "Lookup
// tables"): eta2 = 1 - ss_within_key / ss_within_site. In-sample: over the
// positions whose key (token id, or (token id, position)) occurs at least
// twice on E, around each key's means on E. Out-of-sample (the *_oos
// shares): over E's scored positions, around the value C's table
// (static_token / static_token_position) substitutes; can be negative.
struct KeyedShare {
  std::optional<double> eta2;  // undefined without variance
  int64_t positions = 0;       // positions used
  double ss_within_site = 0;   // around the per-channel means of those positions
  double ss_within_key = 0;    // around each key's per-channel means (oos: C's table)
};

struct FamilyVariation {
  std::string family;
  int64_t sites = 0;
  int64_t count = 0;                  // scalars in the family on E
  std::optional<double> eta2;         // undefined when total variance is 0
  double total_variance = 0;          // SS_total / count (around m_f)
  double within_site_variance = 0;    // SS_within / count (around mu_{s,c})
  double between_input_variance = 0;  // part of within-site: sequence means
  double within_input_variance = 0;   // part of within-site: tokens
  // 1 - SS around the per-site mean mu_s / SS_total: "layer identity" with
  // one mean per site (eta2 uses one per site and channel).
  std::optional<double> eta2_layer;
  // Every site's coefficients lie on the simplex (routers): eta2_layer is
  // then 0 by construction and reported as not applicable (undefined).
  bool simplex = false;
  // Lookup-table diagnostics, pooled over the family's sites.
  KeyedShare token, token_position;
  KeyedShare token_oos, token_position_oos;  // C's tables on E
};

// One group's replay in the per-group dependence audit.
struct GroupDependence {
  std::string intervention;      // I
  std::string scope;             // kScopeLayer / kScopeSite / kScopeFamily
  std::string group;             // "3", "attn_gate.3", "attn_gate"
  std::optional<int64_t> layer;  // scope layer: the group's number
  double nll = 0;
  double penalty = 0;   // NLL(I at g, correct elsewhere) - NLL(correct)
  Interval penalty_ci;  // paired bootstrap, as for `penalty`
  // Per window, for the additivity CI's resamples.
  std::vector<double> nll_per_sequence;
};

// The additivity check of one intervention's per-group replays (fca.md
// "Per-group dependence"): do the groups' penalties add up to the joint one?
struct GroupAdditivity {
  std::string intervention;
  int64_t groups = 0;
  double penalty_sum = 0;         // sum over groups of penalty(I at g)
  std::optional<double> ratio;    // penalty_sum / penalty(I); undefined unless its block CI > 0
  std::optional<Interval> ci;     // EstimateAdditivity's; undefined with > 5% dropped
  int64_t dropped_resamples = 0;  // resamples whose joint penalty mean was <= 0
};

// Gap retention of one static profile P against one baseline B (fca.md
// "Gap retention").
struct RetentionResult {
  std::string profile;   // P
  std::string baseline;  // B: global_mean or neutral
  RetentionEstimate estimate;
};

// Evaluation positions whose token id never occurs in the calibration set
// (static_token falls back to mu_s there).
struct TokenCoverage {
  int64_t unseen_positions = 0;  // scored positions of E (0..T-2 of each window)
  int64_t unseen_ids = 0;        // distinct ids among them
};

// The cells of a token-keyed table (fca.md "Token-keyed profiles"): the
// distinct token ids (static_token) or (token id, position) pairs
// (static_token_position) of the calibration set, and how many of them
// occur fewer than static_token_min_count times (shrunk towards the prior).
struct TokenCells {
  int64_t cells = 0;
  int64_t shrunk = 0;
};

struct SiteVariation {
  std::string site, family;
  int64_t layer = 0;
  double mean = 0;      // over sequences, positions, channels
  double variance = 0;  // around mu_{s,c}, per scalar
  KeyedShare token, token_position;
  KeyedShare token_oos, token_position_oos;  // C's tables on E
  // token_position.eta2 >= 1 - 1e-9: on E the site is a table of (token,
  // position); undefined with token_position.eta2.
  std::optional<bool> lookup_table;
};

struct ExecutionResult {
  std::string model;
  int64_t parameters = 0;                            // the model's (tensor elements of its weights)
  double blocks_per_token = 0;                       // counted
  double blocks_executed_fraction = 0;               // executed / present
  double flops_per_token = 0;                        // counted matmul FLOPs, LIVE pass
  double replay_flops_per_token = 0;                 // the same under REPLAY (no controller)
  std::optional<double> dense_flops_per_token;       // the twin's, on the same batch
  std::optional<double> flops_overhead;              // F_model / F_dense - 1
  double latency_us_per_token = 0;                   // median of timed LIVE forwards
  std::optional<double> dense_latency_us_per_token;  // the twin's, this model's pairs
  // Geometric mean over the timed pairs of t_model / t_dense, minus 1, with
  // its bootstrap CI over pairs and the verdict: +1 slower (CI above 0), -1
  // faster (CI below 0), 0 no detectable difference (CI contains 0).
  std::optional<double> slowdown;
  std::optional<Interval> slowdown_ci;
  // The verdict needs the two independent timing blocks to agree: +1 or -1
  // when both blocks' CIs say so, else 0.
  std::optional<int> slowdown_verdict;
  std::optional<SlowdownEstimate> first_block, second_block;
  int64_t timing_repeats = 0;  // timed pairs, both blocks (model forwards without a twin)
  // A mixture of experts' parts, means over the timing's LIVE forwards, on
  // the CPU (fca.md "Execution": how the slowdown splits), and the twin's
  // MLP branches over the same pairs.
  std::optional<double> router_us_per_token, dispatch_us_per_token, experts_us_per_token;
  std::optional<double> dense_mlp_us_per_token;
  // Parameters read per token, LIVE; when the model counts them.
  std::optional<double> active_parameters;
  // Mixture-of-experts models: the routing of each layer in the LIVE pass,
  // over every token of E (MeasureRouting, routing.h).
  struct ExpertLoad {
    int64_t layer = 0;
    double experts_per_token = 0;  // routed experts run per token
    std::vector<double> share;     // of the layer's (token, expert) assignments, per expert
    double entropy = 0;            // -sum share ln share (nats)
    int64_t tokens = 0;            // tokens counted
  };
  std::vector<ExpertLoad> expert_load;  // one per layer; empty for other families
  // Over the same tokens (fca.md "Routing statistics"): per router layer,
  // the fraction of tokens whose top-k holds both experts of a pair.
  struct ExpertPair {
    int64_t layer = 0, expert = 0, partner = 0;  // expert < partner
    double fraction = 0;
    int64_t tokens = 0;
  };
  std::vector<ExpertPair> coactivation;
  // The most frequent token ids' most chosen experts per router layer.
  struct TokenExpertShare {
    int64_t layer = 0, token = 0, expert = 0;
    double share = 0;       // of the token's (token, expert) assignments at the layer
    int64_t positions = 0;  // the token's positions
  };
  std::vector<TokenExpertShare> token_experts;
};

struct ModelReport {
  ModelInfo model;
  int64_t eval_windows = 0, calib_windows = 0, window_length = 0;
  std::vector<std::string> eval_window_hashes, calib_window_hashes;
  std::vector<CoefficientSite> sites;
  double live_nll = 0;                 // NLL of the LIVE pass on E (see below)
  int64_t bootstrap_block_length = 1;  // of the circular block CIs
  // Windows whose coefficients came from the cache; their LIVE pass was
  // skipped and live_nll counts their `correct` replay (equal within the
  // fidelity tolerance).
  int64_t cached_eval_windows = 0, cached_calib_windows = 0;
  double replay_max_abs_diff = 0;  // fidelity: correct replay vs LIVE logits
  // Largest |cached - fresh| coefficient seen where the cache was checked
  // against a fresh recording (0 when the cache was not used).
  double cache_max_abs_diff = 0;
  std::vector<InterventionResult> interventions;  // `correct` first
  // Every static profile that ran against every baseline that ran;
  // `retention_pct` rows are those against retention_baseline.
  std::vector<RetentionResult> retention;
  std::string retention_baseline = kGlobalMean;
  // The entry for (profile, baseline); nullptr when either did not run
  // (report_rows.cc).
  const RetentionResult* FindRetention(const std::string& profile,
                                       const std::string& baseline) const;
  // Routers audited in reduced precision with a float32 reference: how
  // often the experts chosen from this audit's LIVE recording of E equal
  // those chosen from the float32 recording (fca.md "Routing flip rate");
  // the flip rate is 1 - fraction.
  std::optional<TopkAgreement> float32_agreement;
  std::optional<TokenCoverage> static_token_coverage;     // when static_token ran
  std::optional<TokenCells> static_token_cells;           // when static_token ran
  std::optional<TokenCells> static_token_position_cells;  // when static_token_position ran
  std::vector<GroupDependence> dependence;                // per-group replays
  std::vector<GroupAdditivity> additivity;                // per intervention in `dependence`
  // Evaluation windows whose replay was compared with a LIVE pass (the
  // fidelity gate): the first batch, cached or not, and every
  // fidelity_check_every-th batch recorded LIVE.
  int64_t fidelity_checked_windows = 0;
  std::vector<FamilyVariation> variation;
  std::vector<SiteVariation> site_variation;
  ExecutionResult execution;
  double seconds = 0;  // wall time of this model's audit
  // Wall time and counted matmul FLOPs of its LIVE and REPLAY passes (the
  // execution timing excluded): what the audit's throughput is measured on.
  double pass_seconds = 0;
  double pass_flops = 0;
  double forward_seconds = 0;  // of which inside model forwards
  int64_t forward_tokens = 0;  // tokens through those forwards (twin's included)
  // Thread-seconds spent reading the coefficient cache (lookups and
  // decoding, hits and misses) and writing it.
  double cache_read_seconds = 0, cache_write_seconds = 0;
};

struct AggregateRow {
  std::string intervention, metric;
  Summary summary;        // across models (defined values only)
  int64_t undefined = 0;  // models for which the value is undefined
};

struct AuditReport {
  std::vector<ModelReport> models;
  std::optional<ExecutionResult> dense_twin;
  std::vector<AggregateRow> aggregate;
  // Provenance (fca.md "Reproducibility").
  AuditOptions options;
  std::string eval_dataset_sha256, calib_dataset_sha256;
  RuntimeProvenance runtime;  // engine and torch versions, host, device, threads
};

// What identifies one window's recorded coefficients in a CoefficientCache.
struct CoefficientCacheKey {
  std::string weights_sha256;
  std::string window_hash;
  std::string dtype;   // compute dtype
  std::string device;  // compute device: kernels differ across devices
};

// Where recorded coefficients of single windows are kept between audits.
// The value is the window's coefficients, site after site in sites() order,
// each [T, d_s] row-major in the compute dtype. An entry recorded in one
// batch layout is used in any other: kernels may round differently with the
// batch size, so the auditor compares the entries of each model's first
// batch with a fresh recording within the fidelity tolerance, and ignores
// the cache for that model when they disagree. Implementations must be
// thread-compatible with the auditing thread; errors are theirs to log (a
// failed Put only costs a future cache miss).
class CoefficientCache {
 public:
  virtual ~CoefficientCache() = default;
  virtual std::optional<std::string> Get(const CoefficientCacheKey& key) = 0;
  virtual void Put(const CoefficientCacheKey& key, const std::string& bytes) = 0;
};

struct AuditRequest {
  std::vector<ControlledModel*> models;   // not owned; one family
  ControlledModel* dense_twin = nullptr;  // optional, not owned
  // Optional, not owned, parallel to `models` (empty: none; a nullptr entry:
  // none for that model): the same weights loaded in float32, for the
  // routing flip rate of a model with routers audited in bfloat16 or float16
  // (fca.md "Routing flip rate"): one more pass over E, coefficients only.
  std::vector<ControlledModel*> float32_references;
  Dataset eval, calib;
  AuditOptions options;
  // Called from the auditing thread after each batch and phase.
  std::function<void(const AuditProgress&)> on_progress;
  // Called once per finished model, before the next one starts.
  std::function<void(const ModelReport&)> on_model_done;
  // Checked between batches; when it becomes true the audit stops with
  // CANCELLED.
  const std::atomic<bool>* cancelled = nullptr;
  // Optional: windows found here skip their LIVE pass (the first evaluation
  // batch always runs LIVE, to check replay fidelity and that the cache
  // matches a fresh recording; when it does not, the model's audit runs
  // without the cache and rewrites its entries); recorded windows are
  // stored here.
  CoefficientCache* cache = nullptr;
  // Human-readable notes worth showing a user (cache use, for one); called
  // from the auditing thread.
  std::function<void(const std::string&)> on_note;
  // Batches run at once, each forward on one thread; 0: AuditThreads()
  // (engine::ConfigureRuntime). Results do not depend on it.
  int threads = 0;
};

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_AUDIT_TYPES_H_
