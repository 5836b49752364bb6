// The model folders the service benchmarks audit (fca_service_bench,
// fca_workers_bench).
#ifndef FCA_BENCH_BENCH_MODELS_H_
#define FCA_BENCH_BENCH_MODELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/engine/models/transformer_model.h"

namespace fca::bench {

// A small random FeatureGate model at `dir`: 2 layers, 2 heads, G = 4, a
// controller of width 16 with input-dependent gates, windows up to 64
// tokens; `d_model` and `d_ff` set its size (what a forward costs).
inline absl::Status WriteSmallModel(const std::string& dir, int64_t d_model, int64_t d_ff) {
  engine::TransformerConfig c;
  c.family = "featuregate";
  c.d_model = d_model;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_groups = 4;
  c.d_ff = d_ff;
  c.controller_width = 16;
  c.max_seq_len = 64;
  engine::InitOptions init;
  init.seed = 1;
  init.controller_out_std = 1.0;
  return engine::WriteRandomTransformerModelDir(dir, c, init);
}

}  // namespace fca::bench

#endif  // FCA_BENCH_BENCH_MODELS_H_
