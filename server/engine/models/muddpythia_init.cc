// Random MUDDPythia checkpoints (see muddpythia_init.h).
#include "server/engine/models/muddpythia_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cfenv>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "server/engine/models/muddpythia_model.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {
namespace {

constexpr double kStd = 0.02;

// The value pattern of one reference tensor, from its name.
at::Tensor RandomTensor(const WeightSpec& spec, at::Generator& gen) {
  const std::string& n = spec.name;
  const bool norm = absl::StrContains(n, "norm");  // LayerNorms and QK norms
  if (norm && absl::EndsWith(n, ".weight")) return at::ones(spec.shape);
  if (absl::EndsWith(n, ".bias")) return at::zeros(spec.shape);
  at::Tensor t = at::normal(0.0, kStd, spec.shape, gen);
  if (absl::StartsWith(n, "dense_bs.")) t.select(1, spec.shape[1] - 1).add_(1.0);
  return t;
}

TensorData ToData(const std::string& name, const at::Tensor& t, DType dtype) {
  const at::Tensor c = t.to(dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat).contiguous();
  return TensorData{name, dtype, c.sizes().vec(),
                    std::string(static_cast<const char*>(c.data_ptr()), c.nbytes())};
}

}  // namespace

std::string MuddPythiaConfigJson(const MuddPythiaSizes& s) {
  json::Value v = json::Value::MakeObject();
  auto i = [](int64_t x) { return json::Value::Int(x); };
  auto b = [](bool x) { return json::Value::Bool(x); };
  json::Value arch = json::Value::MakeArray();
  arch.mutable_array().push_back(json::Value::String("MUDDPythia"));
  v.Set("architectures", std::move(arch));
  v.Set("model_type", json::Value::String("muddpythia"));
  v.Set("vocab_size", i(s.vocab_size));
  v.Set("dim", i(s.dim));
  v.Set("n_layer", i(s.n_layer));
  v.Set("n_head", i(s.n_head));
  v.Set("n_local_heads", i(s.n_head));
  v.Set("head_dim", i(s.dim / s.n_head));
  v.Set("intermediate_size", i(s.intermediate_size));
  v.Set("block_size", i(s.block_size));
  v.Set("rotary_pct", json::Value::Number(0.25));
  v.Set("rope_base", i(10000));
  v.Set("norm_eps", json::Value::Number(1e-5));
  v.Set("bos_token_id", i(0));
  v.Set("eos_token_id", i(0));
  v.Set("dense", b(true));
  v.Set("dynamic_dense", b(true));
  v.Set("dense_type", json::Value::String("qkvr"));
  v.Set("sepln", b(true));
  v.Set("expand_last", b(true));
  v.Set("round64", b(true));
  v.Set("stack_hidden", b(false));
  v.Set("use_layer_cache", b(true));
  v.Set("use_qk_norm", b(true));
  v.Set("use_parallel_residual", b(true));
  v.Set("use_linear_bias", b(true));
  v.Set("tie_word_embeddings", b(false));
  v.Set("is_training", b(false));
  v.Set("torch_dtype", json::Value::String("bfloat16"));
  return json::Write(v, /*pretty=*/true) + "\n";
}

std::vector<int64_t> MuddPythiaFfnWidths(const MuddPythiaSizes& s) {
  std::vector<int64_t> widths;
  const int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);  // nearbyint then rounds halves to even, as Python's round
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const double x = static_cast<double>(s.intermediate_size) *
                     (static_cast<double>(l) / static_cast<double>(s.n_layer - 1) + 0.5) / 128.0;
    widths.push_back(static_cast<int64_t>(std::nearbyint(x)) * 128);
  }
  std::fesetround(saved);
  return widths;
}

absl::Status WriteRandomMuddPythiaDir(const std::string& dir, const MuddPythiaSizes& sizes,
                                      uint64_t seed, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError("a random MUDDPythia is written in F32 or BF16");
  }
  const std::string config_text = MuddPythiaConfigJson(sizes);
  FCA_ASSIGN_OR_RETURN(MuddPythiaConfig config, ParseMuddPythiaConfig(config_text));
  const std::vector<WeightSpec> specs = MuddPythiaWeightSpecs(config, MuddPythiaFfnWidths(sizes));
  FCA_ASSIGN_OR_RETURN(
      std::vector<TensorData> tensors,
      GuardTorch("initialising weights", [&]() -> absl::StatusOr<std::vector<TensorData>> {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
        std::vector<TensorData> out;
        for (const WeightSpec& spec : specs) {
          out.push_back(ToData(spec.name, RandomTensor(spec, gen), dtype));
        }
        return out;
      }));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError("cannot create model folder: " + ec.message());
  std::ofstream cfg(dir + "/config.json", std::ios::trunc);
  cfg << config_text;
  cfg.close();
  if (!cfg) return absl::InternalError("cannot write config.json in " + dir);
  return WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace fca::engine
