#include "tests/testing/test_models.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/random.h"
#include "server/engine/models/model_loader.h"

namespace fca::engine::testing {

ComputeOptions TestCompute() {
  ComputeOptions compute;
  const char* device = std::getenv("FCA_TEST_DEVICE");
  if (device != nullptr && device[0] != '\0') compute.device = device;
  return compute;
}

std::unique_ptr<ControlledModel> LoadFolder(const std::string& dir, const std::string& name,
                                            const ComputeOptions& compute) {
  auto model = LoadModel(dir, name, compute);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

absl::Status LoadStatus(const std::string& dir) {
  return LoadModel(dir, "m", TestCompute()).status();
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.cpu().to(at::kDouble) - b.cpu().to(at::kDouble)).abs().max().item<double>();
}

std::string TempDir(const std::string& tag) {
  std::string pattern = ::testing::TempDir() + "fca_" + tag + "_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  const char* dir = mkdtemp(buf.data());
  EXPECT_NE(dir, nullptr);
  return dir ? std::string(dir) : std::string();
}

TransformerConfig TinyConfig(const std::string& family) {
  TransformerConfig c;
  c.family = family;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_groups = 4;
  c.d_ff = 64;
  c.controller_width = 16;
  c.vocab_size = 256;
  c.max_seq_len = 64;
  return c;
}

std::unique_ptr<ControlledModel> LoadWritten(const TransformerConfig& config,
                                             const std::vector<TensorData>& weights,
                                             const ComputeOptions& compute) {
  const std::string dir = TempDir("model");
  absl::Status st = WriteTransformerModelDir(dir, config, weights);
  EXPECT_TRUE(st.ok()) << st;
  auto model = LoadModel(dir, std::filesystem::path(dir).filename(), compute);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::unique_ptr<ControlledModel> RandomModel(const TransformerConfig& config,
                                             const InitOptions& init,
                                             const ComputeOptions& compute) {
  auto weights = InitTransformerWeights(config, init);
  EXPECT_TRUE(weights.ok()) << weights.status();
  return LoadWritten(config, *weights, compute);
}

void SetTensor(std::vector<TensorData>* weights, const std::string& name,
               const std::vector<float>& values) {
  for (TensorData& t : *weights) {
    if (t.name != name) continue;
    ASSERT_EQ(t.bytes.size(), values.size() * sizeof(float)) << name;
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return;
  }
  FAIL() << "no tensor " << name;
}

namespace {

// Zero-mean directions in R^8 (LayerNorm subtracts the mean).
const std::vector<float> kP = {1, -1, 0, 0, 0, 0, 0, 0};
const std::vector<float> kR = {0, 0, 0, 0, 1, -1, 0, 0};

std::vector<float> Zeros(size_t n) { return std::vector<float>(n, 0.0f); }

}  // namespace

std::unique_ptr<ControlledModel> GateDependentModel() {
  TransformerConfig c;
  c.family = "featuregate";
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 1;
  c.n_groups = 1;
  c.d_ff = 4;
  c.controller_width = 8;
  c.vocab_size = 256;
  c.max_seq_len = 64;
  InitOptions init;
  auto weights = InitTransformerWeights(c, init);
  EXPECT_TRUE(weights.ok());
  std::vector<TensorData>* w = &*weights;
  // Embedding: 'a' -> p, 'b' -> -p, everything else 0; no positions.
  std::vector<float> emb = Zeros(256 * 8);
  for (int i = 0; i < 8; ++i) {
    emb['a' * 8 + i] = kP[i];
    emb['b' * 8 + i] = -kP[i];
  }
  SetTensor(w, "tok_emb.weight", emb);
  SetTensor(w, "pos_emb.weight", Zeros(64 * 8));
  // Branches: attention silent, MLP a constant r (its bias).
  for (const char* name : {"blocks.0.attn.qkv.weight", "blocks.0.attn.out.weight",
                           "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc2.weight"}) {
    for (TensorData& t : *w) {
      if (t.name == name) t.bytes.assign(t.bytes.size(), '\0');
    }
  }
  SetTensor(w, "blocks.0.mlp.fc2.bias", kR);
  // Controller: hidden unit 0 reads p; gate logit 10*gelu(.) - 20, so the
  // MLP gate is ~2 after 'a' (LN(p).p = 4) and ~0 after 'b'. Attn gate = 1.
  std::vector<float> fc1 = Zeros(8 * 8);
  for (int i = 0; i < 8; ++i) fc1[i] = kP[i];
  SetTensor(w, "blocks.0.ctrl.fc1.weight", fc1);
  std::vector<float> fc2 = Zeros(2 * 8);
  fc2[1 * 8 + 0] = 10;
  SetTensor(w, "blocks.0.ctrl.fc2.weight", fc2);
  SetTensor(w, "blocks.0.ctrl.fc2.bias", {0, -20});
  // Head: 'a' and 'b' both read -p (likely after 'b'); 'b' also reads r
  // (likely after 'a' when the gate opened the MLP branch).
  std::vector<float> head = Zeros(256 * 8);
  for (int i = 0; i < 8; ++i) {
    head['a' * 8 + i] = -4 * kP[i];
    head['b' * 8 + i] = -4 * kP[i] + 6 * kR[i];
  }
  SetTensor(w, "lm_head.weight", head);
  return LoadWritten(c, *w);
}

std::unique_ptr<ControlledModel> LayerOneDependentModel(uint64_t seed) {
  const TransformerConfig c = TinyConfig("featuregate");
  InitOptions init;
  init.seed = seed;
  init.controller_out_std = 1.0;
  auto weights = InitTransformerWeights(c, init);
  EXPECT_TRUE(weights.ok()) << weights.status();
  const size_t gates = 2 * c.n_groups;
  SetTensor(&*weights, "blocks.0.ctrl.fc2.weight", Zeros(gates * c.controller_width));
  SetTensor(&*weights, "blocks.0.ctrl.fc2.bias", Zeros(gates));
  return LoadWritten(c, *weights);
}

std::string GateDependentText(size_t length, uint64_t seed) {
  Rng rng(seed);
  std::string s;
  while (s.size() < length) {
    if (!s.empty() && s.back() == 'a') {
      s.push_back('b');
    } else {
      s.push_back(rng.Uniform(2) ? 'a' : 'b');
    }
  }
  return s;
}

}  // namespace fca::engine::testing
