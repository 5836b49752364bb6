// Random MUDDPythia checkpoints with the reference's tensor names, shapes and
// config.json: weights cannot be downloaded here, so tests and the scale
// benchmark (a full-size 1.4B checkpoint) are built from these. Torch-free
// header.
#ifndef FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_INIT_H_
#define FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_INIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/io/safetensors.h"

namespace fca::engine {

// The sizes a config.json states; every switch is the 1.4B's.
struct MuddPythiaSizes {
  int64_t dim = 2048;
  int64_t n_layer = 24;
  int64_t n_head = 16;
  int64_t vocab_size = 50432;
  int64_t intermediate_size = 8192;
  int64_t block_size = 2048;
};

// config.json text with the official keys and switches (dense, dynamic_dense,
// dense_type "qkvr", sepln, expand_last, round64, QK norm, parallel residual,
// linear biases, untied embeddings, rotary_pct 0.25, rope_base 10000).
std::string MuddPythiaConfigJson(const MuddPythiaSizes& sizes);

// The FFN width of each layer by the reference formula
// round(intermediate_size * (l / (n_layer - 1) + 0.5) / 128) * 128, with
// Python's round-half-to-even (so it may be 0).
std::vector<int64_t> MuddPythiaFfnWidths(const MuddPythiaSizes& sizes);

// Writes `dir`/config.json and `dir`/model.safetensors with weights drawn
// from `seed` in `dtype` (kF32 or kBF16): matrices N(0, 0.02), LayerNorm
// gains 1 and biases 0, QK-norm gains 1, controller W2 N(0, 0.02) and
// dense_bs the identity-to-newest pattern (last column 1) plus N(0, 0.02), so
// the coefficients vary by token around the reference's starting point.
[[nodiscard]] absl::Status WriteRandomMuddPythiaDir(const std::string& dir,
                                                    const MuddPythiaSizes& sizes, uint64_t seed,
                                                    DType dtype);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_MODELS_MUDDPYTHIA_INIT_H_
