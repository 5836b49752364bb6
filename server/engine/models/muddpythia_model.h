// The `muddpythia` family: MUDDPythia (Caiyun-AI/MUDDFormer), a Pythia-style
// decoder whose layers are joined by multiway dynamic dense (MUDD)
// connections. After every layer i a controller reads that layer's output and
// produces, per token, the weights A_i[c] (c = q, k, v, r) with which the
// hidden list [embedding, out_0, ..., out_i] is mixed into the four input
// streams of layer i + 1 (one stream, into the final norm, after the last
// layer). Those weights are the coefficient sites: "q.i", "k.i", "v.i", "r.i"
// with d_s = i + 2 channels, and "out.<last>" for the last layer (the stream
// into the final norm: a family of its own, not pooled with r).
//
// The forward pass reproduces the reference PyTorch eager full-sequence
// forward op by op (design note muddpythia.md, section 2). There is no KV
// cache. Torch-free header.
#ifndef FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_MODEL_H_
#define FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_MODEL_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/transformer_model.h"  // WeightSpec

namespace fca::engine {

// The sizes of a MUDDPythia config.json (Hugging Face keys). Only the
// MUDDPythia-1.4B switch combination is implemented, so the switches are not
// stored: ParseMuddPythiaConfig refuses every other combination.
struct MuddPythiaConfig {
  int64_t dim = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;  // n_local_heads must equal it (no grouped-query attention)
  int64_t vocab_size = 0;
  // Nominal only: the FFN width of each layer is read from the checkpoint.
  int64_t intermediate_size = 0;
  int64_t block_size = 0;  // longest sequence the rope table covers
  double rotary_pct = 0;
  double rope_base = 0;
  double norm_eps = 0;

  int64_t head_dim() const { return dim / n_head; }
  // rotary_pct * head_dim leading dims of each head are rotated.
  int64_t rotary_dims() const;
  // C_i: streams leaving the MUDD step after `layer` (4, or 1 after the last).
  int64_t streams(int64_t layer) const { return layer == n_layer - 1 ? 1 : 4; }
  // L_i: length of the hidden list mixed after `layer`.
  int64_t channels(int64_t layer) const { return layer + 2; }
  // K_i: rows of dynamic_dense.<layer>.w1 (round64 of C_i * L_i, times 4
  // for the last layer because of expand_last).
  int64_t controller_width(int64_t layer) const;
};

// Parses and validates a config.json. INVALID_ARGUMENT starting with
// "config.json:" and naming the key for a missing or ill-typed key, an
// out-of-range size, or a switch combination other than the 1.4B's (dense,
// dynamic_dense, dense_type "qkvr", sepln, expand_last, round64, use_qk_norm,
// use_parallel_residual, use_linear_bias, untied embeddings, stack_hidden
// false or absent; n_local_heads == n_head; dim % n_head == 0).
[[nodiscard]] absl::StatusOr<MuddPythiaConfig> ParseMuddPythiaConfig(std::string_view json_text);

// Every tensor of the reference state dict, in state-dict order, given the
// FFN width of each layer (a layer past the end of `ffn_widths` gets width 0).
// A checkpoint must hold exactly these.
std::vector<WeightSpec> MuddPythiaWeightSpecs(const MuddPythiaConfig& config,
                                              const std::vector<int64_t>& ffn_widths);

// Sets the fields of `info` that follow from `config` (family, vocab_size,
// max_seq_len = block_size, num_layers) and returns the coefficient sites in
// sites() order (q.i, k.i, v.i, r.i per layer, out.<last> for the last one).
// CreateMuddPythiaModel builds its model from the same.
std::vector<CoefficientSite> DescribeMuddPythia(const MuddPythiaConfig& config, ModelInfo* info);

// Builds a model from a parsed config and a checkpoint. The tensors must be
// exactly the reference state dict (F32 or BF16; the FFN width of each layer
// is taken from layers.<l>.feed_forward.w1.weight and may be 0); every other
// shape follows from the config. INVALID_ARGUMENT naming the first missing,
// extra, mistyped or misshapen tensor (with both shapes), or for a compute
// dtype other than float32 / bfloat16. Weights are copied to the compute
// device and dtype; `weights` need not outlive the model.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ControlledModel>> CreateMuddPythiaModel(
    const MuddPythiaConfig& config, const TensorSource& weights, ModelInfo info);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_MODEL_H_
