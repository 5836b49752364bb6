// The `torchscript` family (docs/torchscript.md): a lab's own module behind
// the ControlledModel contract. The module's code is the lab's, so nothing it
// throws may leave here, and what it returns is checked before use.
#include "server/engine/models/torchscript_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

// One method of the contract: its argument types after `self`, its return
// type (TorchScript annotations), and how docs/torchscript.md writes it.
struct MethodContract {
  const char* name;
  std::vector<std::string> args;
  std::string returns;
  const char* usage;
};

const MethodContract kLive{"live",
                           {"Tensor"},
                           "Tuple[Tensor, List[Tensor]]",
                           "live(ids: Tensor) -> Tuple[Tensor, List[Tensor]]"};
const MethodContract kReplay{"replay",
                             {"Tensor", "List[Tensor]"},
                             "Tensor",
                             "replay(ids: Tensor, coefficients: List[Tensor]) -> Tensor"};
const MethodContract kRecord{
    "record", {"Tensor"}, "List[Tensor]", "record(ids: Tensor) -> List[Tensor]"};
const MethodContract kNeutral{"neutral", {}, "List[Tensor]", "neutral() -> List[Tensor]"};
const MethodContract kCount{
    "count",
    {"Tensor", "List[Tensor]", "str"},
    "Tuple[int, float]",
    "count(ids: Tensor, coefficients: List[Tensor], mode: str) -> Tuple[int, float]"};

absl::Status InvalidModule(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model.pt: ", what));
}

std::string Signature(const c10::FunctionSchema& schema) {
  std::vector<std::string> args;
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    const c10::Argument& a = schema.arguments()[i];
    args.push_back(absl::StrCat(a.name(), ": ", a.type()->annotation_str()));
  }
  std::vector<std::string> returns;
  for (const c10::Argument& r : schema.returns()) returns.push_back(r.type()->annotation_str());
  return absl::StrFormat("%s(%s) -> %s", schema.name(), absl::StrJoin(args, ", "),
                         absl::StrJoin(returns, ", "));
}

bool Matches(const c10::FunctionSchema& schema, const MethodContract& c) {
  if (schema.arguments().size() != c.args.size() + 1 || schema.returns().size() != 1) return false;
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (schema.arguments()[i + 1].type()->annotation_str() != c.args[i]) return false;
  }
  return schema.returns()[0].type()->annotation_str() == c.returns;
}

// Whether the module exports method `c` with the contract's signature;
// INVALID_ARGUMENT when it exports one of another signature, or none and
// the method is `required`.
absl::StatusOr<bool> HasMethod(const torch::jit::Module& module, const MethodContract& c,
                               bool required) {
  const auto method = module.find_method(c.name);
  if (!method) {
    if (!required) return false;
    return InvalidModule(absl::StrFormat(
        "the module has no method %s (export it with @torch.jit.export; docs/torchscript.md)",
        c.usage));
  }
  const c10::FunctionSchema& schema = method->function().getSchema();
  if (!Matches(schema, c)) {
    return InvalidModule(absl::StrFormat("method %s does not have the contract's signature %s",
                                         Signature(schema), c.usage));
  }
  return true;
}

// What a module's exception says: TorchScript puts the Python exception
// ("builtins.RuntimeError: ...") on the last line, after the serialized
// code's traceback, which names the interpreter's files and not the lab's.
std::string ModuleErrorText(const char* what) {
  std::string last;
  for (absl::string_view line : absl::StrSplit(what, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) last = std::string(line);
  }
  constexpr size_t kMaxBytes = 400;
  if (last.size() > kMaxBytes) last = last.substr(0, kMaxBytes) + "...";
  return last.empty() ? "an exception without a message" : last;
}

// Deterministic, uneven over channels and tokens (the golden-ratio
// sequence): a shift that a softmax or a renormalization cannot cancel.
at::Tensor Perturbed(const at::Tensor& c) {
  const at::Tensor r = at::arange(c.numel(), c.options().dtype(at::kDouble))
                           .mul(0.6180339887498949)
                           .frac()
                           .view(c.sizes());
  return (c.to(at::kDouble) + 0.5 + r).to(c.scalar_type());
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

struct Methods {
  bool record = false;
  bool neutral = false;
  bool count = false;
};

class TorchScriptModel : public ControlledModel {
 public:
  TorchScriptModel(torch::jit::Module module, TorchScriptConfig config, ModelInfo info,
                   Methods methods, at::ScalarType dtype, c10::Device device)
      : module_(std::move(module)),
        config_(std::move(config)),
        info_(std::move(info)),
        methods_(methods),
        dtype_(dtype),
        device_(device) {}

  const ModelInfo& info() const override { return info_; }
  const std::vector<CoefficientSite>& sites() const override { return config_.sites; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }

  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, CoefficientMode mode,
                                     std::vector<at::Tensor>* coefficients) override {
    FCA_RETURN_IF_ERROR(CheckForwardInputs(ids, mode, coefficients, info_, sites(),
                                           config_.max_seq_len, config_.vocab_size));
    // The module's own exceptions are caught by Call; this catches ours
    // (moving and converting tensors).
    return GuardTorch(absl::StrCat("model '", info_.name, "'"),
                      [&] { return CheckedForward(ids, mode, coefficients); });
  }

  absl::StatusOr<std::vector<at::Tensor>> NeutralCoefficients() const override {
    if (!methods_.neutral) return std::vector<at::Tensor>();
    return GuardTorch(absl::StrCat("model '", info_.name, "'"), [&] { return CheckedNeutral(); });
  }

  ExecutionCounters counters() const override { return counters_.Get(); }
  void ResetCounters() override { counters_.Reset(); }

  // The load-time checks of CreateTorchScriptModel's contract, on a probe.
  absl::Status Probe() {
    c10::InferenceMode guard;
    const int64_t B = 2, T = std::min<int64_t>(8, config_.max_seq_len);
    const at::Tensor ids = at::arange(B * T, at::TensorOptions().dtype(at::kLong))
                               .mul(37)
                               .add(11)
                               .remainder(config_.vocab_size)
                               .view({B, T})
                               .to(device_);
    // Live checks the logits' shape; whether replay() reproduces them is
    // the audit's fidelity gate, on the audited windows.
    std::vector<at::Tensor> live;
    FCA_RETURN_IF_ERROR(Live(ids, &live).status());
    FCA_ASSIGN_OR_RETURN(const at::Tensor replayed, Replay(ids, live));
    if (methods_.record) FCA_RETURN_IF_ERROR(RecordAgreesWithLive(ids, live));
    FCA_RETURN_IF_ERROR(NeutralCoefficients().status());
    FCA_RETURN_IF_ERROR(Count(ids, live, "live"));
    for (size_t s = 0; s < live.size(); ++s) {
      FCA_RETURN_IF_ERROR(ReplayDependsOnSite(ids, live, replayed, s));
    }
    counters_.Reset();
    return absl::OkStatus();
  }

 private:
  // neutral()'s tensors, checked: one [channels] per site, in the compute
  // dtype and on the compute device.
  absl::StatusOr<std::vector<at::Tensor>> CheckedNeutral() const {
    c10::InferenceMode guard;
    FCA_ASSIGN_OR_RETURN(c10::IValue out, Call(kNeutral, {}));
    std::vector<at::Tensor> neutral = out.toTensorVector();
    if (neutral.size() != sites().size()) {
      return Broken(kNeutral, absl::StrFormat("returned %d tensors for %d coefficient sites",
                                              neutral.size(), sites().size()));
    }
    for (size_t s = 0; s < neutral.size(); ++s) {
      const CoefficientSite& site = sites()[s];
      if (!neutral[s].defined() || !neutral[s].is_floating_point() ||
          neutral[s].numel() != site.channels) {
        return Broken(kNeutral,
                      absl::StrFormat("tensor %d (site %s) must hold %d floating-point values", s,
                                      site.name, site.channels));
      }
      neutral[s] = neutral[s].reshape({site.channels}).to(device_, dtype_).contiguous();
    }
    return neutral;
  }

  // Forward after its input checks.
  absl::StatusOr<at::Tensor> CheckedForward(const at::Tensor& ids, CoefficientMode mode,
                                            std::vector<at::Tensor>* coefficients) {
    c10::InferenceMode guard;
    const at::Tensor on_device = ids.to(device_);
    if (mode == CoefficientMode::kReplay) {
      std::vector<at::Tensor> given;
      for (const at::Tensor& c : *coefficients) given.push_back(c.to(device_, dtype_));
      FCA_ASSIGN_OR_RETURN(at::Tensor logits, Replay(on_device, given));
      FCA_RETURN_IF_ERROR(Count(on_device, given, "replay"));
      return logits;
    }
    std::vector<at::Tensor> recorded;
    at::Tensor logits;
    const bool record_only = mode == CoefficientMode::kRecordOnly && methods_.record;
    if (record_only) {
      FCA_ASSIGN_OR_RETURN(recorded, Record(on_device));
    } else {
      FCA_ASSIGN_OR_RETURN(logits, Live(on_device, &recorded));
    }
    FCA_RETURN_IF_ERROR(Count(on_device, recorded, record_only ? "record" : "live"));
    if (Records(mode)) {
      for (at::Tensor& c : recorded) coefficients->push_back(std::move(c));
    }
    if (mode == CoefficientMode::kRecordOnly) return at::Tensor();
    return logits;
  }

  // Runs a method of the module; what its code throws becomes
  // ModuleFailure's status.
  absl::StatusOr<c10::IValue> Call(const MethodContract& c, std::vector<c10::IValue> args) const {
    try {
      return module_.get_method(c.name)(std::move(args));
    } catch (const std::exception& e) {
      return ModuleFailure(info_.name, c.name, e);
    }
  }

  absl::Status Broken(const MethodContract& c, absl::string_view what) const {
    return absl::FailedPreconditionError(
        absl::StrFormat("model '%s': %s() %s (the contract is %s; docs/torchscript.md)", info_.name,
                        c.name, what, c.usage));
  }

  // Logits of `method` for ids [B, T]: [B, T, vocab_size], floating point,
  // in the compute dtype.
  absl::StatusOr<at::Tensor> CheckedLogits(const c10::IValue& out, const at::Tensor& ids,
                                           const MethodContract& c) const {
    const at::Tensor logits = out.toTensor();
    const std::vector<int64_t> want = {ids.size(0), ids.size(1), config_.vocab_size};
    if (!logits.defined() || !logits.is_floating_point() || logits.sizes().vec() != want) {
      return Broken(c, absl::StrFormat("returned logits of shape [%s]; expected floating point "
                                       "[%s] (batch, tokens, vocab_size)",
                                       logits.defined() ? absl::StrJoin(logits.sizes(), ", ") : "",
                                       absl::StrJoin(want, ", ")));
    }
    return logits.to(dtype_);
  }

  // One [B, T, channels] floating-point tensor per site, in the compute dtype.
  absl::StatusOr<std::vector<at::Tensor>> CheckedCoefficients(std::vector<at::Tensor> list,
                                                              const at::Tensor& ids,
                                                              const MethodContract& c) const {
    if (list.size() != sites().size()) {
      return Broken(c, absl::StrFormat("returned %d coefficient tensors; config.json declares "
                                       "%d sites",
                                       list.size(), sites().size()));
    }
    for (size_t s = 0; s < list.size(); ++s) {
      const CoefficientSite& site = sites()[s];
      const std::vector<int64_t> want = {ids.size(0), ids.size(1), site.channels};
      if (!list[s].defined() || !list[s].is_floating_point() || list[s].sizes().vec() != want) {
        return Broken(
            c, absl::StrFormat("returned coefficients of shape [%s] for site %d (%s); config.json "
                               "implies floating point [%s]",
                               list[s].defined() ? absl::StrJoin(list[s].sizes(), ", ") : "", s,
                               site.name, absl::StrJoin(want, ", ")));
      }
      list[s] = list[s].to(dtype_).contiguous();
    }
    return list;
  }

  absl::StatusOr<at::Tensor> Live(const at::Tensor& ids, std::vector<at::Tensor>* coefficients) {
    FCA_ASSIGN_OR_RETURN(c10::IValue out, Call(kLive, {ids}));
    const auto elements = out.toTuple()->elements();
    FCA_ASSIGN_OR_RETURN(*coefficients,
                         CheckedCoefficients(elements[1].toTensorVector(), ids, kLive));
    return CheckedLogits(elements[0], ids, kLive);
  }

  absl::StatusOr<std::vector<at::Tensor>> Record(const at::Tensor& ids) {
    FCA_ASSIGN_OR_RETURN(c10::IValue out, Call(kRecord, {ids}));
    return CheckedCoefficients(out.toTensorVector(), ids, kRecord);
  }

  absl::StatusOr<at::Tensor> Replay(const at::Tensor& ids,
                                    const std::vector<at::Tensor>& coefficients) {
    FCA_ASSIGN_OR_RETURN(c10::IValue out,
                         Call(kReplay, {ids, c10::List<at::Tensor>(coefficients)}));
    return CheckedLogits(out, ids, kReplay);
  }

  // Adds one call's work: count()'s figures when the module has it, else
  // every block counted as run and no FLOPs (fca cannot see inside).
  absl::Status Count(const at::Tensor& ids, const std::vector<at::Tensor>& coefficients,
                     const char* mode) {
    const int64_t tokens = ids.size(0) * ids.size(1);
    ExecutionCounters c;
    c.tokens = tokens;
    c.blocks_total = config_.blocks_per_token * tokens;
    c.blocks_executed = c.blocks_total;
    if (methods_.count) {
      FCA_ASSIGN_OR_RETURN(c10::IValue out, Call(kCount, {ids, c10::List<at::Tensor>(coefficients),
                                                          std::string(mode)}));
      const auto elements = out.toTuple()->elements();
      c.blocks_executed = elements[0].toInt();
      c.flops = elements[1].toDouble();
      if (c.blocks_executed < 0 || c.blocks_executed > c.blocks_total || !(c.flops >= 0)) {
        return Broken(kCount,
                      absl::StrFormat("returned (%d, %g) for %d tokens; blocks must be in [0, %d] "
                                      "(blocks_per_token x tokens) and FLOPs >= 0",
                                      c.blocks_executed, c.flops, tokens, c.blocks_total));
      }
    }
    counters_.Add(c);
    return absl::OkStatus();
  }

  absl::Status RecordAgreesWithLive(const at::Tensor& ids, const std::vector<at::Tensor>& live) {
    FCA_ASSIGN_OR_RETURN(const std::vector<at::Tensor> recorded, Record(ids));
    for (size_t s = 0; s < live.size(); ++s) {
      const double diff = MaxAbsDiff(recorded[s], live[s]);
      if (!(diff <= 1e-5)) {
        return InvalidModule(absl::StrFormat(
            "record() and live() disagree on the coefficients of site %s by up to %g (at most "
            "1e-5 allowed): calibration would record other coefficients than the audit replays",
            sites()[s].name, diff));
      }
    }
    return absl::OkStatus();
  }

  // A replay must use its coefficients: changing one site's must change the
  // logits. A replay that recomputes its controller fails here.
  absl::Status ReplayDependsOnSite(const at::Tensor& ids, const std::vector<at::Tensor>& live,
                                   const at::Tensor& replayed, size_t s) {
    std::vector<at::Tensor> changed = live;
    changed[s] = Perturbed(live[s]);
    FCA_ASSIGN_OR_RETURN(const at::Tensor other, Replay(ids, changed));
    const double diff = MaxAbsDiff(other, replayed);
    if (diff > 0) return absl::OkStatus();
    return InvalidModule(absl::StrFormat(
        "replay() ignores the coefficients of site %s: replaying them shifted by 0.5 to 1.5 "
        "changed no logit (max |difference| = %g). replay() must use the coefficients it is "
        "given and not run the controller (docs/torchscript.md)",
        sites()[s].name, diff));
  }

  // Methods are const and torch::jit::Method runs concurrently on one
  // module (each call has its own interpreter stack); the module is not
  // changed after loading.
  torch::jit::Module module_;
  TorchScriptConfig config_;
  ModelInfo info_;
  Methods methods_;
  at::ScalarType dtype_;
  c10::Device device_;
  ByteTokenizer tokenizer_;  // LoadModel puts the folder's tokenizer.json in front
  SharedCounters counters_;
};

absl::StatusOr<torch::jit::Module> LoadModule(const std::string& path, const c10::Device& device) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError("model folder has no readable model.pt");
  }
  KeepTorchScriptUnfused();
  try {
    return torch::jit::load(path, device);
  } catch (const std::exception& e) {
    // Weights that do not fit the device are the device's state, not the file's.
    if (IsOutOfMemory(e)) return TorchFailure("loading model.pt", e);
    return InvalidModule(absl::StrFormat(
        "not a TorchScript module saved by torch.jit.save (torch.jit.script(model).save(path)): "
        "%s",
        ModuleErrorText(e.what())));
  }
}

// Floating-point parameters and buffers to the compute dtype (as the native
// families convert their weights); counts the parameters.
absl::StatusOr<int64_t> ConvertFloatingTensors(torch::jit::Module& module, at::ScalarType dtype) {
  try {
    int64_t parameters = 0;
    for (at::Tensor t : module.parameters()) {
      parameters += t.numel();
      if (t.is_floating_point()) t.set_data(t.to(dtype));
    }
    for (at::Tensor t : module.buffers()) {
      if (t.is_floating_point()) t.set_data(t.to(dtype));
    }
    return parameters;
  } catch (const std::exception& e) {
    if (IsOutOfMemory(e)) return TorchFailure("converting model.pt's tensors", e);
    return InvalidModule(absl::StrCat("cannot convert its tensors to the compute dtype: ",
                                      ModuleErrorText(e.what())));
  }
}

absl::StatusOr<Methods> CheckMethods(const torch::jit::Module& module) {
  FCA_RETURN_IF_ERROR(HasMethod(module, kLive, true).status());
  FCA_RETURN_IF_ERROR(HasMethod(module, kReplay, true).status());
  Methods m;
  FCA_ASSIGN_OR_RETURN(m.record, HasMethod(module, kRecord, false));
  FCA_ASSIGN_OR_RETURN(m.neutral, HasMethod(module, kNeutral, false));
  FCA_ASSIGN_OR_RETURN(m.count, HasMethod(module, kCount, false));
  return m;
}

}  // namespace

absl::Status ModuleFailure(const std::string& model, const std::string& method,
                           const std::exception& e) {
  if (IsOutOfMemory(e)) {
    return TorchFailure(absl::StrFormat("model '%s': its TorchScript %s()", model, method), e);
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "model '%s': its TorchScript %s() failed: %s", model, method, ModuleErrorText(e.what())));
}

absl::StatusOr<std::unique_ptr<ControlledModel>> CreateTorchScriptModel(
    const std::string& path, const TorchScriptConfig& config, ModelInfo info) {
  FCA_RETURN_IF_ERROR(ValidateCompute(info.compute));
  const at::ScalarType dtype = ScalarTypeOf(info.compute.dtype);
  const c10::Device device(info.compute.device);
  DescribeTorchScript(config, &info);
  FCA_ASSIGN_OR_RETURN(torch::jit::Module module, LoadModule(path, device));
  FCA_ASSIGN_OR_RETURN(const Methods methods, CheckMethods(module));
  module.eval();
  FCA_ASSIGN_OR_RETURN(info.num_parameters, ConvertFloatingTensors(module, dtype));
  auto model = std::make_unique<TorchScriptModel>(std::move(module), config, std::move(info),
                                                  methods, dtype, device);
  // A module that breaks the contract on the probe is refused as invalid,
  // whatever the code of the failure while running it; a device out of
  // memory stays RESOURCE_EXHAUSTED (another worker may load it).
  const absl::Status probe = GuardTorch("model.pt", [&] { return model->Probe(); });
  if (absl::IsResourceExhausted(probe)) return probe;
  if (!probe.ok()) return absl::InvalidArgumentError(probe.message());
  return std::unique_ptr<ControlledModel>(std::move(model));
}

}  // namespace fca::engine
