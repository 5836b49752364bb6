// Models: loading, forward modes, replay fidelity, execution counters and
// malformed model folders.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/transformer_model.h"
#include "server/engine/models/transformer_net.h"
#include "tests/testing/test_models.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using ::fca::test_util::WriteFile;

using testing::LoadStatus;
using testing::LoadWritten;
using testing::RandomModel;
using testing::TempDir;
using testing::TinyConfig;

at::Tensor RandomIds(int64_t b, int64_t t, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, 256, {b, t}, gen, at::kLong);
}

InitOptions VaryingGates(uint64_t seed = 1) {
  InitOptions init;
  init.seed = seed;
  init.controller_out_std = 1.0;
  return init;
}

TEST(ModelTest, FeatureGateSitesAndShapes) {
  auto model = RandomModel(TinyConfig("featuregate"), VaryingGates());
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->sites().size(), 4u);
  EXPECT_EQ(model->sites()[0].name, "attn_gate.0");
  EXPECT_EQ(model->sites()[3].family, "mlp_gate");
  EXPECT_EQ(model->sites()[3].layer, 1);
  EXPECT_EQ(model->sites()[3].channels, 4);
  EXPECT_EQ(model->info().weights_sha256.size(), 64u);
  std::vector<at::Tensor> rec;
  auto logits = model->Forward(RandomIds(3, 10, 0), CoefficientMode::kLiveRecord, &rec);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->sizes().vec(), (std::vector<int64_t>{3, 10, 256}));
  ASSERT_EQ(rec.size(), 4u);
  EXPECT_EQ(rec[1].sizes().vec(), (std::vector<int64_t>{3, 10, 4}));
  // Gates lie in (0, 2) and vary with the input.
  EXPECT_GT(rec[0].min().item<float>(), 0.0f);
  EXPECT_LT(rec[0].max().item<float>(), 2.0f);
  EXPECT_GT(rec[0].std().item<float>(), 1e-3f);
}

TEST(ModelTest, ZeroInitialisedControllerGivesUnitGates) {
  auto model = RandomModel(TinyConfig("featuregate"), InitOptions{});
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(model->Forward(RandomIds(2, 8, 3), CoefficientMode::kLiveRecord, &rec).ok());
  for (const at::Tensor& g : rec) EXPECT_TRUE(at::all(g == 1.0f).item<bool>());
}

TEST(ModelTest, ReplayOfRecordedCoefficientsReproducesLive) {
  for (const ComputeDType dtype : {ComputeDType::kFloat32, ComputeDType::kBFloat16}) {
    ComputeOptions compute = testing::TestCompute();
    compute.dtype = dtype;
    auto model = RandomModel(TinyConfig("featuregate"), VaryingGates(7), compute);
    at::Tensor ids = RandomIds(4, 32, 11);
    std::vector<at::Tensor> rec;
    auto live = model->Forward(ids, CoefficientMode::kLiveRecord, &rec);
    ASSERT_TRUE(live.ok());
    auto replay = model->Forward(ids, CoefficientMode::kReplay, &rec);
    ASSERT_TRUE(replay.ok());
    const double diff = (*live - *replay).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5) << ComputeDTypeName(dtype);
  }
}

// The audit's forward (outside autograd: the gated branch added in place,
// attention a block of query rows at a time) gives the bits of fca-train's
// (under autograd: the plain form), LIVE and REPLAY, in both dtypes, at
// lengths that fill whole blocks of 32 query rows or end inside one, for a
// batch of several windows and of one (which keeps the plain attention).
TEST(ModelTest, InferenceForwardHasTheBitsOfTheAutogradForward) {
  TransformerConfig c;  // featuregate
  c.d_model = 96;
  c.n_heads = 3;  // head width 32, as the bundled models
  c.n_layers = 2;
  c.d_ff = 384;
  c.max_seq_len = 160;
  const auto bits = [](const at::Tensor& a, const at::Tensor& b) {
    return at::equal(a.to(at::kFloat), b.to(at::kFloat));  // bfloat16 -> float is exact
  };
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    std::vector<at::Tensor> w;
    for (const WeightSpec& s : TransformerWeightSpecs(c)) {
      w.push_back((at::randn(s.shape, gen) * 0.3).to(dtype));
    }
    auto net = TransformerNet::Create(c, w);
    ASSERT_TRUE(net.ok()) << net.status();
    for (const auto& [B, T] : std::vector<std::pair<int64_t, int64_t>>{
             {3, 17}, {3, 64}, {3, 100}, {3, 160}, {1, 100}, {8, 128}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " B=" << B << " T=" << T);
      const at::Tensor ids = RandomIds(B, T, T);
      const auto run = [&](bool autograd, CoefficientMode mode, std::vector<at::Tensor>* coeff) {
        std::optional<c10::InferenceMode> inference;
        if (!autograd) inference.emplace();
        at::AutoGradMode grad(autograd);
        absl::StatusOr<at::Tensor> logits = (*net)->Forward(ids, mode, coeff, nullptr);
        EXPECT_TRUE(logits.ok()) << logits.status();
        return logits.ok() ? *logits : at::Tensor();
      };
      std::vector<at::Tensor> rec_autograd, rec;
      const at::Tensor live_autograd = run(true, CoefficientMode::kLiveRecord, &rec_autograd);
      const at::Tensor live = run(false, CoefficientMode::kLiveRecord, &rec);
      EXPECT_TRUE(bits(live_autograd, live));
      ASSERT_EQ(rec.size(), rec_autograd.size());
      for (size_t i = 0; i < rec.size(); ++i) EXPECT_TRUE(bits(rec_autograd[i], rec[i])) << i;
      // Another input's gates, so that the replay differs from the LIVE pass.
      std::vector<at::Tensor> gates;
      for (const at::Tensor& g : rec) gates.push_back(g.flip(0));
      std::vector<at::Tensor> gates_autograd = gates;
      EXPECT_TRUE(bits(run(true, CoefficientMode::kReplay, &gates_autograd),
                       run(false, CoefficientMode::kReplay, &gates)));
    }
  }
}

TEST(ModelTest, ReplayOfAnotherInputsCoefficientsChangesLogits) {
  auto model = RandomModel(TinyConfig("featuregate"), VaryingGates(2));
  at::Tensor x = RandomIds(1, 16, 1), y = RandomIds(1, 16, 2);
  std::vector<at::Tensor> ax, ay;
  auto live_x = model->Forward(x, CoefficientMode::kLiveRecord, &ax);
  ASSERT_TRUE(model->Forward(y, CoefficientMode::kLiveRecord, &ay).ok());
  auto replay_x_with_y = model->Forward(x, CoefficientMode::kReplay, &ay);
  ASSERT_TRUE(replay_x_with_y.ok());
  EXPECT_GT((*live_x - *replay_x_with_y).abs().max().item<double>(), 1e-3);
}

TEST(ModelTest, ReplayRejectsWrongCoefficientShapes) {
  auto model = RandomModel(TinyConfig("featuregate"), VaryingGates());
  at::Tensor ids = RandomIds(2, 8, 0);
  std::vector<at::Tensor> few = {at::ones({2, 8, 4})};
  auto r = model->Forward(ids, CoefficientMode::kReplay, &few);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<at::Tensor> bad(4, at::ones({2, 8, 3}));
  r = model->Forward(ids, CoefficientMode::kReplay, &bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("attn_gate.0"), std::string::npos) << r.status();
}

TEST(ModelTest, RejectsBadIds) {
  auto model = RandomModel(TinyConfig("dense"), InitOptions{});
  EXPECT_EQ(model->Forward(at::full({1, 4}, 256, at::kLong), CoefficientMode::kLive, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(at::zeros({1, 65}, at::kLong), CoefficientMode::kLive, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      model->Forward(at::zeros({4}, at::kLong), CoefficientMode::kLive, nullptr).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, CountersShowEveryBlockRuns) {
  auto gated = RandomModel(TinyConfig("featuregate"), VaryingGates());
  auto dense = RandomModel(TinyConfig("dense"), InitOptions{});
  EXPECT_TRUE(dense->sites().empty());
  at::Tensor ids = RandomIds(2, 16, 5);
  for (ControlledModel* m : {gated.get(), dense.get()}) {
    m->ResetCounters();
    ASSERT_TRUE(m->Forward(ids, CoefficientMode::kLive, nullptr).ok());
    const ExecutionCounters c = m->counters();
    EXPECT_EQ(c.tokens, 32);
    EXPECT_EQ(c.blocks_executed, 2 * 32);
    EXPECT_EQ(c.blocks_total, 2 * 32);
  }
  // The controller costs FLOPs in LIVE and none in REPLAY.
  gated->ResetCounters();
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(gated->Forward(ids, CoefficientMode::kLiveRecord, &rec).ok());
  const double live = gated->counters().flops;
  gated->ResetCounters();
  ASSERT_TRUE(gated->Forward(ids, CoefficientMode::kReplay, &rec).ok());
  const double replay = gated->counters().flops;
  dense->ResetCounters();
  ASSERT_TRUE(dense->Forward(ids, CoefficientMode::kLive, nullptr).ok());
  EXPECT_DOUBLE_EQ(replay, dense->counters().flops);
  // Controller per block: d_model*cw + cw*2G multiply-adds per token.
  EXPECT_DOUBLE_EQ(live - replay, 2.0 * 32 * 2 * (32 * 16 + 16 * 8));
}

// Calibration needs coefficients only: kRecordOnly gives kLiveRecord's and
// stops after the last block's controller (that block's branches and the
// output head do not run, and are not counted).
TEST(ModelTest, RecordOnlyGivesTheCoefficientsAndSkipsTheRest) {
  const TransformerConfig c = TinyConfig("featuregate");
  auto m = RandomModel(c, VaryingGates());
  const int64_t B = 2, T = 16, tokens = B * T;
  at::Tensor ids = RandomIds(B, T, 5);
  std::vector<at::Tensor> full, only;
  m->ResetCounters();
  ASSERT_TRUE(m->Forward(ids, CoefficientMode::kLiveRecord, &full).ok());
  const ExecutionCounters live = m->counters();
  m->ResetCounters();
  auto out = m->Forward(ids, CoefficientMode::kRecordOnly, &only);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->defined());
  ASSERT_EQ(only.size(), full.size());
  for (size_t s = 0; s < full.size(); ++s) EXPECT_TRUE(only[s].equal(full[s])) << s;
  const ExecutionCounters counted = m->counters();
  EXPECT_EQ(counted.tokens, tokens);
  EXPECT_EQ(counted.blocks_executed, 1 * tokens);  // block 0 of 2
  EXPECT_EQ(counted.blocks_total, 2 * tokens);
  const double d = c.d_model, ff = c.d_ff;
  const double branches = tokens * 2.0 * (4 * d * d + 2 * d * ff) + 2.0 * 2.0 * B * T * T * d;
  const double head = tokens * 2.0 * d * c.vocab_size;
  EXPECT_DOUBLE_EQ(live.flops - counted.flops, branches + head);
}

// Gates of layer 1 (attn_gate.1, mlp_gate.1) of a recording, replaced.
std::vector<at::Tensor> WithLayerOneGates(const std::vector<at::Tensor>& rec, double attn,
                                          double mlp) {
  std::vector<at::Tensor> a;
  for (const at::Tensor& t : rec) a.push_back(t.clone());
  a[2].fill_(attn);
  a[3].fill_(mlp);
  return a;
}

double ReplayedFlops(ControlledModel* m, const at::Tensor& ids, std::vector<at::Tensor> a,
                     at::Tensor* logits = nullptr) {
  m->ResetCounters();
  auto out = m->Forward(ids, CoefficientMode::kReplay, &a);
  EXPECT_TRUE(out.ok()) << out.status();
  if (logits != nullptr && out.ok()) *logits = *out;
  return m->counters().flops;
}

// fca.md "Execution": a branch whose gate is exactly 0 for every token of
// the batch is not computed, and a block with both branches skipped is not
// counted; the result is that of multiplying the branch by 0.
TEST(ModelTest, ClosedGatesSkipWorkAndTheCountersShowIt) {
  auto model = RandomModel(TinyConfig("featuregate"), VaryingGates());
  const at::Tensor one = RandomIds(1, 16, 9);
  const at::Tensor ids = at::cat({one, one});  // two identical sequences
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(model->Forward(ids, CoefficientMode::kLiveRecord, &rec).ok());
  const double open = ReplayedFlops(model.get(), ids, rec);
  EXPECT_EQ(model->counters().blocks_executed, 2 * 32);

  at::Tensor skipped;
  const double closed = ReplayedFlops(model.get(), ids, WithLayerOneGates(rec, 0, 0), &skipped);
  EXPECT_EQ(model->counters().blocks_executed, 1 * 32);
  EXPECT_EQ(model->counters().blocks_total, 2 * 32);
  // Block 1 costs qkv, out, fc1, fc2 and attention (d=32, d_ff=64, T=16).
  const double block =
      2.0 * 32 * (32 * 96 + 32 * 32 + 32 * 64 + 64 * 32) + 2.0 * 2 * 2 * 16 * 16 * 32;
  EXPECT_DOUBLE_EQ(open - closed, block);

  // One open token in the other sequence keeps both branches running: the
  // first sequence's branches are computed and multiplied by 0, with the
  // same logits as when they were skipped.
  std::vector<at::Tensor> one_open = WithLayerOneGates(rec, 0, 0);
  one_open[2][1][0].fill_(1.0);
  one_open[3][1][0].fill_(1.0);
  at::Tensor computed;
  EXPECT_DOUBLE_EQ(ReplayedFlops(model.get(), ids, one_open, &computed), open);
  EXPECT_EQ(model->counters().blocks_executed, 2 * 32);
  EXPECT_LE((computed[0] - skipped[0]).abs().max().item<double>(), 1e-6);
  EXPECT_GT((computed[1] - skipped[1]).abs().max().item<double>(), 1e-4);

  // Only the attention branch closed: the block still runs, its MLP counted.
  const double attn_closed = ReplayedFlops(model.get(), ids, WithLayerOneGates(rec, 0, 1));
  EXPECT_EQ(model->counters().blocks_executed, 2 * 32);
  EXPECT_LT(attn_closed, open);
  EXPECT_GT(attn_closed, closed);
}

TEST(ModelTest, WeightsIdentityIsContentHash) {
  auto a = RandomModel(TinyConfig("featuregate"), VaryingGates(1));
  auto b = RandomModel(TinyConfig("featuregate"), VaryingGates(1));
  auto c = RandomModel(TinyConfig("featuregate"), VaryingGates(2));
  EXPECT_EQ(a->info().weights_sha256, b->info().weights_sha256);
  EXPECT_NE(a->info().weights_sha256, c->info().weights_sha256);
}

// --- malformed model folders ---

std::string GoodModelDir(const TransformerConfig& c) {
  const std::string dir = TempDir("bad");
  auto w = InitTransformerWeights(c, InitOptions{});
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE(WriteTransformerModelDir(dir, c, *w).ok());
  return dir;
}

TEST(ModelConfigTest, MalformedConfigsAreInvalidArgument) {
  const std::string dir = GoodModelDir(TinyConfig("featuregate"));
  struct Case {
    std::string json, expect;
  } cases[] = {
      {"{", "config.json"},
      {"[1, 2]", "JSON object"},
      {R"({"d_model": 32})", "model_type"},
      {R"({"model_type": "featuregate", "d_model": 32})", "n_layers"},
      {R"({"model_type": "featuregate", "d_model": "32", "n_layers": 2, "n_heads": 2,
           "d_ff": 64, "vocab_size": 256, "max_seq_len": 64, "n_groups": 4,
           "controller_width": 16})",
       "d_model"},
      {R"({"model_type": "featuregate", "d_model": 32, "n_layers": 2, "n_heads": 3,
           "d_ff": 64, "vocab_size": 256, "max_seq_len": 64, "n_groups": 4,
           "controller_width": 16})",
       "n_heads"},
      {R"({"model_type": "featuregate", "d_model": 32, "n_layers": -1, "n_heads": 2,
           "d_ff": 64, "vocab_size": 256, "max_seq_len": 64, "n_groups": 4,
           "controller_width": 16})",
       "n_layers"},
      {R"({"model_type": "featuregate", "d_model": 32, "n_layers": 2, "n_heads": 2,
           "d_ff": 64, "vocab_size": 256, "max_seq_len": 64, "n_groups": 5,
           "controller_width": 16})",
       "n_groups"},
      {R"({"model_type": "featuregate", "d_model": 1000000000, "n_layers": 2, "n_heads": 2,
           "d_ff": 64, "vocab_size": 256, "max_seq_len": 64, "n_groups": 4,
           "controller_width": 16})",
       "d_model"},
      {R"({"model_type": "mystery"})", "mystery"},
  };
  for (const Case& c : cases) {
    WriteFile(dir + "/config.json", c.json);
    absl::Status st = LoadStatus(dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.json << " -> " << st;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.json << " -> " << st;
  }
}

TEST(ModelConfigTest, MissingFilesAreNotFound) {
  const std::string dir = TempDir("empty");
  EXPECT_EQ(LoadStatus(dir).code(), absl::StatusCode::kNotFound);
  const std::string no_weights = GoodModelDir(TinyConfig("dense"));
  std::filesystem::remove(no_weights + "/model.safetensors");
  EXPECT_EQ(LoadStatus(no_weights).code(), absl::StatusCode::kNotFound);
}

TEST(ModelConfigTest, WeightsThatDoNotMatchTheConfigAreInvalidArgument) {
  // Dense weights under a featuregate config: controller tensors missing.
  const std::string dir = GoodModelDir(TinyConfig("dense"));
  WriteFile(dir + "/config.json", json::Write(TransformerConfigToJson(TinyConfig("featuregate"))));
  absl::Status st = LoadStatus(dir);
  EXPECT_NE(st.code(), absl::StatusCode::kOk);
  EXPECT_NE(st.message().find("ctrl"), std::string::npos) << st;
  // Featuregate weights under a dense config: extra tensors.
  const std::string dir2 = GoodModelDir(TinyConfig("featuregate"));
  WriteFile(dir2 + "/config.json", json::Write(TransformerConfigToJson(TinyConfig("dense"))));
  st = LoadStatus(dir2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("ctrl"), std::string::npos) << st;
  // A wider model's config over narrower weights: shape mismatch.
  TransformerConfig wide = TinyConfig("dense");
  wide.d_ff = 128;
  const std::string dir3 = GoodModelDir(TinyConfig("dense"));
  WriteFile(dir3 + "/config.json", json::Write(TransformerConfigToJson(wide)));
  st = LoadStatus(dir3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("mlp.fc1"), std::string::npos) << st;
}

TEST(ModelConfigTest, ComputeOptionsAreValidated) {
  const std::string dir = GoodModelDir(TinyConfig("dense"));
  ComputeOptions bad;
  bad.device = "banana";
  EXPECT_EQ(LoadModel(dir, "m", bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fca::engine
