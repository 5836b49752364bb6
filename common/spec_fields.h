// Every field of fca.v1.AuditSpec (proto/fca/v1/audit_service.proto) once:
// its `fca audit` flag, its default, its range, the server's limit and the
// engine option it becomes.
//
// Everything that defaults or bounds a spec field reads this table: the
// server's NormalizeSpec and its SpecLimits, ToEngineOptions, the engine's
// AuditOptions and their check, fca-local-audit's flags and the CLI's flags
// and help. tests/core/spec_fields_test.cc walks the proto's descriptor and
// fails for a field this table, the CLI or the engine does not know. Plain
// constants (no proto, no torch) so the CLI and the engine can include it.
#ifndef FCA_COMMON_SPEC_FIELDS_H_
#define FCA_COMMON_SPEC_FIELDS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/vocabulary.h"

namespace fca::spec_fields {

struct SpecField {
  const char* name;  // the AuditSpec field
  const char* flag;  // fca audit's flag that sets it
  // The engine::AuditOptions member it becomes (the key of the report's
  // "options" object), or nullptr with `not_engine` saying why.
  const char* engine = nullptr;
  const char* not_engine = nullptr;
  // What it is, for the CLI's help; "{range}" stands for ServerRangeText,
  // "{scopes}" for the scope names.
  const char* help = "";
  // The default the server applies where the spec leaves a number 0, and
  // the engine option's default. `default_text` shows it in help texts
  // where it is no plain number ("{}" stands for default_value).
  double default_value = 0;
  const char* default_text = nullptr;
  // The range the engine accepts (counts and sizes for repeated and text
  // fields), and the server's default limit where it allows less.
  double min = 0, max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;
  double server_max = 0;  // 0: as `max`

  constexpr SpecField Engine(const char* member) const {
    SpecField f = *this;
    f.engine = member;
    return f;
  }
  constexpr SpecField NotEngine(const char* why) const {
    SpecField f = *this;
    f.not_engine = why;
    return f;
  }
  constexpr SpecField Help(const char* text) const {
    SpecField f = *this;
    f.help = text;
    return f;
  }
  constexpr SpecField Default(double value, const char* text = nullptr) const {
    SpecField f = *this;
    f.default_value = value;
    f.default_text = text;
    return f;
  }
  constexpr SpecField DefaultText(const char* text) const {
    SpecField f = *this;
    f.default_text = text;
    return f;
  }
  constexpr SpecField Range(double lo, double hi, bool lo_open = false,
                            bool hi_open = false) const {
    SpecField f = *this;
    f.min = lo;
    f.max = hi;
    f.min_open = lo_open;
    f.max_open = hi_open;
    return f;
  }
  constexpr SpecField ServerMax(double limit) const {
    SpecField f = *this;
    f.server_max = limit;
    return f;
  }

  // The server's upper bound: server_max, else max.
  constexpr double ServerLimit() const { return server_max != 0 ? server_max : max; }
  template <typename T>
  constexpr T Default() const {
    return static_cast<T>(default_value);
  }
};

constexpr SpecField Field(const char* name, const char* flag) { return SpecField{name, flag}; }

// In the proto's field order.
inline constexpr SpecField kModels =
    Field("models", "models")
        .NotEngine("the models the request audits, loaded by the server (AuditRequest::models)")
        .Help("models, comma-separated")
        .Range(1, std::numeric_limits<double>::infinity())
        .ServerMax(16);
inline constexpr SpecField kDenseTwin =
    Field("dense_twin", "dense_twin")
        .NotEngine("a model loaded by the server (AuditRequest::dense_twin)")
        .Help("dense twin model");
inline constexpr SpecField kEvalDataset =
    Field("eval_dataset", "eval")
        .NotEngine("a stored dataset the server reads (AuditRequest::eval)")
        .Help("evaluation dataset (name or sha256:HEX)");
inline constexpr SpecField kCalibDataset =
    Field("calib_dataset", "calib")
        .NotEngine("a stored dataset the server reads (AuditRequest::calib)")
        .Help("calibration dataset");
inline constexpr SpecField kInterventions = Field("interventions", "interventions")
                                                .Engine("interventions")
                                                .Help("interventions, comma-separated")
                                                .DefaultText("all");
inline constexpr SpecField kWindowLength = Field("window_length", "window")
                                               .Engine("window_length")
                                               .Help("tokens per window")
                                               .Default(128)
                                               .Range(2, 1 << 20)
                                               .ServerMax(4096);
// 0 (the engine's default): every complete window; the server's default is
// its limit, SpecLimits::max_windows.
inline constexpr SpecField kMaxEvalWindows =
    Field("max_eval_windows", "max_eval_windows")
        .Engine("max_eval_windows")
        .Help("eval windows")
        .DefaultText("all, at most the server's max_windows")
        .Range(1, 1 << 20)
        .ServerMax(4096);
inline constexpr SpecField kMaxCalibWindows =
    Field("max_calib_windows", "max_calib_windows")
        .Engine("max_calib_windows")
        .Help("calibration windows")
        .DefaultText("all, at most the server's max_windows")
        .Range(1, 1 << 20)
        .ServerMax(4096);
inline constexpr SpecField kBatchSize = Field("batch_size", "batch")
                                            .Engine("batch_size")
                                            .Help("windows per forward pass")
                                            .Default(8)
                                            .Range(1, 4096)
                                            .ServerMax(256);
inline constexpr SpecField kSeed =
    Field("seed", "seed").Engine("seed").Help("seed").Default(0, "{}");
inline constexpr SpecField kPerSiteShuffle = Field("per_site_shuffle", "per_site_shuffle")
                                                 .Engine("per_site_shuffle")
                                                 .Help("one token permutation per site");
inline constexpr SpecField kBootstrapResamples = Field("bootstrap_resamples", "bootstrap")
                                                     .Engine("bootstrap_resamples")
                                                     .Help("bootstrap resamples")
                                                     .Default(1000)
                                                     .Range(1, 1000000)
                                                     .ServerMax(100000);
inline constexpr SpecField kCiLevel = Field("ci_level", "ci_level")
                                          .Engine("ci_level")
                                          .Help("confidence level in {range}")
                                          .Default(0.95)
                                          .Range(0, 1, true, true);
inline constexpr SpecField kAllowOverlap = Field("allow_overlap", "allow_overlap")
                                               .Engine("allow_overlap")
                                               .Help("allow eval/calib windows to overlap");
inline constexpr SpecField kTimingRepeats =
    Field("timing_repeats", "timing_repeats")
        .Engine("timing_repeats")
        .Help("timed (model, dense twin) pairs per model, at least")
        .Default(7)
        .Range(0, 1000)
        .ServerMax(100);
// Bytes of printable UTF-8.
inline constexpr SpecField kLabel = Field("label", "label")
                                        .NotEngine("free text for listings; the audit ignores it")
                                        .Help("free text shown in listings")
                                        .Range(0, 256);
// The server's default is max(default, timing_repeats) and its minimum
// timing_repeats.
inline constexpr SpecField kTimingMaxRepeats =
    Field("timing_max_repeats", "timing_max_repeats")
        .Engine("timing_max_repeats")
        .Help("timed pairs per model, at most (adaptive stop)")
        .Default(200, "max({}, timing_repeats)")
        .Range(0, 100000)
        .ServerMax(2000);
// The engine takes 0 (the minimum repeats only); the server does not.
inline constexpr SpecField kTimingBudgetSeconds =
    Field("timing_budget_seconds", "timing_budget_seconds")
        .Engine("timing_budget_seconds")
        .Help("wall time the adaptive timing may take per model")
        .Default(60)
        .Range(0, std::numeric_limits<double>::infinity(), true)
        .ServerMax(3600);
inline constexpr SpecField kPerLayerInterventions =
    Field("per_layer_interventions", "per_layer")
        .Engine("per_layer_interventions")
        .Help(
            "interventions to replay one group of sites at a time, comma-separated "
            "(one replay per group each)")
        .DefaultText("none");
// An enum (ScopeId) from the server's check to the engine; the proto keeps
// its name. default_value is the ScopeId.
inline constexpr SpecField kPerLayerScope = Field("per_layer_scope", "per_layer_scope")
                                                .Engine("per_layer_scope")
                                                .Help("per_layer groups: {scopes}")
                                                .Default(static_cast<double>(ScopeId::kLayer));
inline constexpr SpecField kFidelityCheckEvery =
    Field("fidelity_check_every", "fidelity_check_every")
        .Engine("fidelity_check_every")
        .Help("replay fidelity checked on the first and every k-th evaluation batch; 1 checks all")
        .Default(8)
        .Range(1, 1000000);
// A name from RetentionBaselineNames(); the default is the first.
inline constexpr SpecField kRetentionBaseline =
    Field("retention_baseline", "retention_baseline")
        .Engine("retention_baseline")
        .Help("the baseline of retention_pct: global_mean or neutral")
        .DefaultText(kGlobalMean);
// 0: round(N^(1/3)) (engine::AutoBlockLength).
inline constexpr SpecField kBootstrapBlockLength =
    Field("bootstrap_block_length", "bootstrap_block_length")
        .Engine("bootstrap_block_length")
        .Help("circular block bootstrap block length in windows; 0 = round(N^(1/3))")
        .DefaultText("round(N^(1/3))")
        .Range(0, 100000);
// The minimum count of static_token and static_token_position (fca.md
// "Token-keyed profiles"): a cell seen n < m times in calibration is shrunk
// towards its prior with weight n / (n + m).
inline constexpr SpecField kStaticTokenMinCount =
    Field("static_token_min_count", "static_token_min_count")
        .Engine("static_token_min_count")
        .Help(
            "calibration positions below which a static_token(_position) mean is shrunk towards "
            "its prior (an id: the site mean; a pair: its id's value)")
        .Default(5)
        .Range(1, 1000000);
// Calibration resampling (fca.md "Calibration uncertainty"): 0 is off;
// each resample costs one replay over E per calibration-dependent
// intervention, hence the server's lower limit.
inline constexpr SpecField kCalibResamples =
    Field("calib_resamples", "calib_resamples")
        .Engine("calib_resamples")
        .Help(
            "resamples of the calibration windows on which the static profiles are re-estimated "
            "and replayed (penalty_calib rows); each costs one replay per calibration-dependent "
            "intervention; 0 = off")
        .Default(0)
        .Range(0, 1000)
        .ServerMax(100);
// Bytes of printable UTF-8, as kLabel. Empty: a dense twin that does not
// match the models is refused (fca.md "Execution").
inline constexpr SpecField kDenseTwinMismatch =
    Field("dense_twin_mismatch", "dense_twin_mismatch")
        .Engine("dense_twin_mismatch")
        .Help(
            "why the dense twin may differ from the models in architecture or FLOPs (printed in "
            "the report); empty: a mismatched twin is refused")
        .Range(0, 256);

// Every field, in the proto's order.
const std::vector<const SpecField*>& SpecFields();
// nullptr for a name that is no field.
const SpecField* FindSpecField(const std::string& name);

constexpr ScopeId DefaultScope() { return static_cast<ScopeId>(kPerLayerScope.default_value); }

// The default as help texts show it: "128", "all", "layer", "max(200,
// timing_repeats)"; "" for a field without one.
std::string DefaultText(const SpecField& field);
// Whole numbers as integers ("1000000", not "1e+06"), others as %g.
std::string Number(double value);
// Whether `value` lies in [lo, hi] with the field's open ends.
bool InRange(const SpecField& field, double value, double lo, double hi);
// "[1, 1000000]", "(0, 1)", "(0, 3600]": [lo, hi] with the field's open ends.
std::string RangeText(const SpecField& field, double lo, double hi);
// RangeText of the field's min and the server's default limit.
std::string ServerRangeText(const SpecField& field);
// The CLI's help of the field's flag: "audit: <help> [<default>]".
std::string FlagHelp(const SpecField& field);
// What `fca audit --help` says of the field: its help, the range the
// server accepts by default and the default: "tokens per window; range [2,
// 4096]; default 128".
std::string FieldHelp(const SpecField& field);

}  // namespace fca::spec_fields

#endif  // FCA_COMMON_SPEC_FIELDS_H_
