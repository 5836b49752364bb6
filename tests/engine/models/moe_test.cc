// The olmoe and qwen2_moe families against the reference vectors of
// tests/reference/moe_reference.py (tests/data/{olmoe,qwen2-moe}-tiny): logits
// and router probabilities in float32 and bfloat16, replay of the recording,
// the top-k tie rule, and expert skipping in the counters (folders at load:
// moe_folder_test).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>  // at::GradMode: not in ATen.h from libtorch 2.x
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/file.h"
#include "common/json.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/moe_init.h"
#include "server/engine/models/moe_model.h"
#include "server/engine/models/moe_net.h"
#include "server/engine/models/safetensors_model.h"
#include "server/engine/models/torch_util.h"
#include "tests/engine/models/moe_families.h"
#include "tests/testing/test_models.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using testing::MaxDiff;

using ::fca::test_util::Contains;

using testing::TempDir;

using testing::Family;
using testing::kMixtral;
using testing::kOlmoe;
using testing::kQwen;

void Report(const std::string& what, double value) {
  std::printf("[ measured ] %s: %.3g\n", what.c_str(), value);
}

// Both compare on the host: the model's tensors may be on the test device.
bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         at::equal(a.cpu(), b.cpu());
}

// The reference vectors of the libtorch line the engine runs on, whose
// CPU kernels round bfloat16 otherwise than 1.13's: Debian's python3-torch
// 1.13 wrote expected.safetensors, a 2.x torch expected-torch2.safetensors
// (2.6 and 2.14 write the same bytes; tests/reference/moe_reference.py).
std::string ReferenceFile() {
  return TorchMajorVersion() < 2 ? "expected.safetensors" : "expected-torch2.safetensors";
}

// A family's reference vectors as CPU tensors by name.
at::Tensor Expected(const Family& f, const std::string& name) {
  auto src = TensorSource::OpenFile(f.dir + "/" + ReferenceFile());
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return at::Tensor();
  auto v = (*src)->Get(name);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok()) return at::Tensor();
  const at::ScalarType type = v->dtype == DType::kI64 ? at::kLong : at::kFloat;
  at::Tensor t = at::empty(v->shape, at::TensorOptions().dtype(type));
  if (v->num_bytes > 0) std::memcpy(t.data_ptr(), v->data, v->num_bytes);
  return t;
}

// A bfloat16 result against the reference: its bits on the CPU, where the
// reference ran; on another device (other GEMM and softmax orders) within
// 2^-7 of max(|want|, 1), the rounding step of bfloat16, as the device check
// allows (fca.md, "Numerics").
bool MatchesBf16(const at::Tensor& got, const at::Tensor& want) {
  if (got.device().is_cpu()) return BitwiseEqual(got.to(at::kFloat), want);
  const at::Tensor g = got.cpu().to(at::kFloat);
  return g.sizes() == want.sizes() &&
         ((g - want).abs() <= want.abs().clamp_min(1) / 128).all().item<bool>();
}

std::unique_ptr<ControlledModel> Load(const std::string& dir, const std::string& dtype) {
  ComputeOptions compute = testing::TestCompute();
  const std::optional<ComputeDType> parsed = ParseComputeDType(dtype);
  EXPECT_TRUE(parsed.has_value()) << dtype;
  compute.dtype = parsed.value_or(ComputeDType::kFloat32);
  auto model = LoadModel(dir, "tiny", compute);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// --- parity with the reference ---

class MoeReferenceTest : public ::testing::TestWithParam<std::tuple<Family, std::string>> {};

TEST_P(MoeReferenceTest, LogitsAndRouterMatchTheReference) {
  const auto& [f, dtype] = GetParam();
  auto model = Load(f.dir, dtype);
  ASSERT_NE(model, nullptr);
  const at::Tensor ids = Expected(f, "input_ids");
  std::vector<at::Tensor> coeff;
  auto logits = model->Forward(ids, CoefficientMode::kLiveRecord, &coeff);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const at::Tensor want = Expected(f, dtype + ".logits");
  const bool bf16 = dtype == "bfloat16";
  EXPECT_EQ(logits->scalar_type(), bf16 ? at::kBFloat16 : at::kFloat);
  const double diff = MaxDiff(*logits, want);
  Report(absl::StrCat(f.dir.substr(f.dir.rfind('/') + 1), " ", dtype, " logits, max |diff|"), diff);
  // Replay against LIVE (below) stays bitwise on any device.
  if (bf16) {
    EXPECT_TRUE(MatchesBf16(*logits, want)) << "max |diff| " << diff;
  } else {
    EXPECT_LE(diff, 1e-5);
  }
  ASSERT_EQ(coeff.size(), model->sites().size());
  size_t s = 0;
  for (int64_t l = 0; l < f.layers; ++l) {
    const at::Tensor& probs = coeff[s++];
    EXPECT_EQ(probs.scalar_type(), at::kFloat) << "router probabilities are kept in float32";
    const at::Tensor want_probs = Expected(f, absl::StrCat(dtype, ".router.", l));
    if (bf16) {
      EXPECT_TRUE(MatchesBf16(probs, want_probs)) << "layer " << l;
    } else {
      EXPECT_LE(MaxDiff(probs, want_probs), 1e-5) << "layer " << l;
    }
    // The chosen experts: the reference's, ties to the lower index.
    const at::Tensor chosen = std::get<1>(at::sort(probs, /*stable=*/true, -1, /*descending=*/true))
                                  .slice(-1, 0, f.top_k);
    EXPECT_TRUE(at::equal(chosen.cpu(), Expected(f, absl::StrCat(dtype, ".experts.", l))));
    if (f.shared) {
      const at::Tensor& gate = coeff[s++];
      EXPECT_EQ(model->sites()[s - 1].name, absl::StrCat("shared_gate.", l));
      const at::Tensor want_gate = Expected(f, absl::StrCat(dtype, ".shared_gate.", l));
      if (bf16) {
        EXPECT_TRUE(MatchesBf16(gate, want_gate)) << "layer " << l;
      } else {
        EXPECT_LE(MaxDiff(gate, want_gate), 1e-6) << "layer " << l;
      }
    }
  }
  // ChosenExperts (what topk_agreement compares) is the same top-k, each
  // set in increasing expert index; nothing at the shared gates.
  auto sets = model->ChosenExperts(coeff);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_EQ(sets->size(), coeff.size());
  s = 0;
  for (int64_t l = 0; l < f.layers; ++l) {
    const at::Tensor want = std::get<0>(at::sort(Expected(f, absl::StrCat(dtype, ".experts.", l))));
    EXPECT_TRUE(at::equal((*sets)[s++].cpu(), want)) << "layer " << l;
    if (f.shared) {
      EXPECT_FALSE((*sets)[s++].defined());
    }
  }
  EXPECT_EQ(model->RoutedExperts().size(), coeff.size());
}

// REPLAY of LIVE's own recording reproduces LIVE bit for bit: the router is
// skipped and the recorded probabilities go through the same top-k,
// renormalisation and cast.
TEST_P(MoeReferenceTest, ReplayOfTheRecordingIsLiveBitwise) {
  const auto& [f, dtype] = GetParam();
  auto model = Load(f.dir, dtype);
  ASSERT_NE(model, nullptr);
  const at::Tensor ids = Expected(f, "input_ids");
  std::vector<at::Tensor> coeff;
  auto live = model->Forward(ids, CoefficientMode::kLiveRecord, &coeff);
  ASSERT_TRUE(live.ok()) << live.status();
  auto replay = model->Forward(ids, CoefficientMode::kReplay, &coeff);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(BitwiseEqual(*live, *replay));
  // Record-only gives the same coefficients without the logits.
  std::vector<at::Tensor> only;
  auto none = model->Forward(ids, CoefficientMode::kRecordOnly, &only);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->defined());
  ASSERT_EQ(only.size(), coeff.size());
  for (size_t s = 0; s < coeff.size(); ++s) EXPECT_TRUE(BitwiseEqual(only[s], coeff[s])) << s;
}

// Only the k chosen experts run: blocks counted per (token, layer) are k of E
// (plus the shared expert, which always runs).
TEST_P(MoeReferenceTest, CountersCountTheRoutedExpertsOnly) {
  const auto& [f, dtype] = GetParam();
  auto model = Load(f.dir, dtype);
  ASSERT_NE(model, nullptr);
  const at::Tensor ids = Expected(f, "input_ids");
  const int64_t n = ids.numel();
  ASSERT_TRUE(model->Forward(ids, CoefficientMode::kLive, nullptr).ok());
  const ExecutionCounters c = model->counters();
  const int64_t extra = f.shared ? 1 : 0;
  EXPECT_EQ(c.tokens, n);
  EXPECT_EQ(c.blocks_executed, n * f.layers * (f.top_k + extra));
  EXPECT_EQ(c.blocks_total, n * f.layers * (f.experts + extra));
  EXPECT_GT(c.flops, 0);
  // Per layer, the k assignments of every token, split over the experts.
  ASSERT_EQ(c.experts_per_layer, f.experts);
  ASSERT_EQ(c.expert_tokens.size(), static_cast<size_t>(f.layers * f.experts));
  for (int64_t l = 0; l < f.layers; ++l) {
    int64_t sum = 0, used = 0;
    for (int64_t e = 0; e < f.experts; ++e) {
      sum += c.expert_tokens[l * f.experts + e];
      used += c.expert_tokens[l * f.experts + e] > 0;
    }
    EXPECT_EQ(sum, n * f.top_k) << "layer " << l;
    EXPECT_GT(used, f.top_k) << "the random router spreads tokens over experts";
  }
  // Active parameters: all but the (E - k) experts a token skips per layer,
  // each of 3 * hidden (16) * width (8) parameters.
  const double expert = 3 * 16 * 8;
  EXPECT_DOUBLE_EQ(c.parameters_read / n, static_cast<double>(model->info().num_parameters) -
                                              f.layers * (f.experts - f.top_k) * expert);
}

// A family's checkpoint as a MoeNet in `dtype` on the test device.
std::unique_ptr<MoeNet> Net(const Family& f, at::ScalarType dtype) {
  auto config = ParseMoeConfig(ReadFileOrEmpty(f.dir + "/config.json"));
  EXPECT_TRUE(config.ok()) << config.status();
  auto src = TensorSource::OpenDir(f.dir);
  EXPECT_TRUE(src.ok()) << src.status();
  if (!config.ok() || !src.ok()) return nullptr;
  std::vector<at::Tensor> weights;
  for (const WeightSpec& spec : MoeWeightSpecs(*config)) {
    auto v = (*src)->Get(spec.name);
    EXPECT_TRUE(v.ok() && v->dtype == DType::kF32) << spec.name;
    if (!v.ok() || v->dtype != DType::kF32) return nullptr;
    at::Tensor t = at::empty(v->shape, at::TensorOptions().dtype(at::kFloat));
    std::memcpy(t.data_ptr(), v->data, v->num_bytes);
    weights.push_back(t.to(testing::TestCompute().device, dtype));
  }
  auto net = MoeNet::Create(*config, std::move(weights));
  EXPECT_TRUE(net.ok()) << net.status();
  return net.ok() ? std::move(*net) : nullptr;
}

// On the CPU the forward's routing, rotary embedding and weighted combine run
// as loops over the host's memory outside autograd, and as torch kernels under
// it (and on other devices). Both round alike: the logits and the recorded
// router probabilities are bitwise the same either way.
TEST_P(MoeReferenceTest, HostLoopsRoundAsTheTorchKernels) {
  const auto& [f, dtype] = GetParam();
  const std::unique_ptr<MoeNet> net = Net(f, dtype == "bfloat16" ? at::kBFloat16 : at::kFloat);
  ASSERT_NE(net, nullptr);
  const at::Tensor ids = Expected(f, "input_ids").to(testing::TestCompute().device);
  std::vector<at::Tensor> loops, kernels;
  absl::StatusOr<at::Tensor> a, b;
  {
    at::NoGradGuard no_grad;
    a = net->Forward(ids, CoefficientMode::kLiveRecord, &loops, nullptr);
  }
  b = net->Forward(ids, CoefficientMode::kLiveRecord, &kernels, nullptr);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_TRUE(BitwiseEqual(*a, b->detach()));
  ASSERT_EQ(loops.size(), kernels.size());
  for (size_t i = 0; i < loops.size(); ++i) {
    EXPECT_TRUE(BitwiseEqual(loops[i], kernels[i].detach())) << "site " << i;
  }
}

// An olmoe config of width 96, 2 layers and 3 heads (head width 32, as
// olmoe-s1) with `experts` experts of `width`, the top `k` per token.
MoeConfig SmallOlmoe(int64_t experts, int64_t k, int64_t width, int64_t max_len) {
  auto config = ParseMoeConfig(absl::StrFormat(
      R"({"model_type": "olmoe", "vocab_size": 256, "hidden_size": 96,
      "intermediate_size": %d, "num_hidden_layers": 2, "num_attention_heads": 3,
      "num_key_value_heads": 3, "max_position_embeddings": %d, "num_experts": %d,
      "num_experts_per_tok": %d, "norm_topk_prob": false, "rope_theta": 10000.0,
      "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": false,
      "tie_word_embeddings": false})",
      width, max_len, experts, k));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.value_or(MoeConfig{});
}

// Random weights of `config` (std 0.3, from `gen`) in `dtype` on the test
// device.
std::vector<at::Tensor> RandomWeights(const MoeConfig& config, at::ScalarType dtype,
                                      at::Generator& gen) {
  std::vector<at::Tensor> w;
  for (const WeightSpec& spec : MoeWeightSpecs(config)) {
    w.push_back((at::randn(spec.shape, gen) * 0.3).to(testing::TestCompute().device, dtype));
  }
  return w;
}

absl::StatusOr<std::unique_ptr<MoeNet>> RandomNet(const MoeConfig& config, at::ScalarType dtype,
                                                  at::Generator& gen) {
  return MoeNet::Create(config, RandomWeights(config, dtype, gen));
}

// The same values (a bfloat16 -> float conversion is exact).
bool SameValues(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.to(at::kFloat), b.to(at::kFloat));
}

// The same with the CPU's attention by blocks of query rows (attention.h),
// on an olmoe of head width 32 (as olmoe-s1) at lengths around and between
// the blocks, one window (the plain form) and several, LIVE and REPLAY; and
// with the projections in HostGemmLayout, as a loaded model has them
// (host_gemm.h; float32 on the CPU where the kernel runs).
TEST(MoeTest, TheInferenceForwardHasTheBitsOfTheAutogradForward) {
  const MoeConfig config = SmallOlmoe(/*experts=*/8, /*k=*/2, /*width=*/64, /*max_len=*/160);
  const auto bits = SameValues;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    std::vector<at::Tensor> weights = RandomWeights(config, dtype, gen);
    auto net = MoeNet::Create(config, weights);
    ASSERT_TRUE(net.ok()) << net.status();
    auto stored = WithHostGemmLayout(MoeWeightSpecs(config), weights);
    ASSERT_TRUE(stored.ok()) << stored.status();
    auto host_net = MoeNet::Create(config, *std::move(stored));
    ASSERT_TRUE(host_net.ok()) << host_net.status();
    for (const auto& [B, T] : std::vector<std::pair<int64_t, int64_t>>{
             {3, 17}, {3, 64}, {3, 100}, {3, 160}, {1, 100}, {8, 128}}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " B=" << B << " T=" << T);
      const at::Tensor ids =
          at::randint(0, 256, {B, T}, gen, at::kLong).to(testing::TestCompute().device);
      const auto run = [&](const MoeNet& on, bool autograd, CoefficientMode mode,
                           std::vector<at::Tensor>* coeff) {
        at::AutoGradMode grad(autograd);
        absl::StatusOr<at::Tensor> logits = on.Forward(ids, mode, coeff, nullptr);
        EXPECT_TRUE(logits.ok()) << logits.status();
        return logits.ok() ? logits->detach() : at::Tensor();
      };
      std::vector<at::Tensor> rec_autograd, rec, rec_host;
      const at::Tensor live = run(**net, true, CoefficientMode::kLiveRecord, &rec_autograd);
      EXPECT_TRUE(bits(live, run(**net, false, CoefficientMode::kLiveRecord, &rec)));
      EXPECT_TRUE(bits(live, run(**host_net, false, CoefficientMode::kLiveRecord, &rec_host)));
      ASSERT_EQ(rec.size(), rec_autograd.size());
      ASSERT_EQ(rec_host.size(), rec_autograd.size());
      for (size_t i = 0; i < rec.size(); ++i) {
        EXPECT_TRUE(bits(rec_autograd[i].detach(), rec[i])) << i;
        EXPECT_TRUE(bits(rec_autograd[i].detach(), rec_host[i])) << i;
      }
      // Another window's routing, so that the replay differs from LIVE.
      std::vector<at::Tensor> routes;
      for (const at::Tensor& r : rec) routes.push_back(r.flip(0));
      std::vector<at::Tensor> routes_autograd = routes, routes_host = routes;
      const at::Tensor replay = run(**net, true, CoefficientMode::kReplay, &routes_autograd);
      EXPECT_TRUE(bits(replay, run(**net, false, CoefficientMode::kReplay, &routes)));
      EXPECT_TRUE(bits(replay, run(**host_net, false, CoefficientMode::kReplay, &routes_host)));
    }
  }
}

// An olmoe layer of one expert (a matched dense twin, fca.md "A matched
// twin") runs outside autograd as that expert's dense MLP: no router, no
// gather, no combine, and a model of it has no coefficient sites. Its logits and recorded weights
// (all 1) are bitwise the routed path's (autograd keeps it), LIVE and REPLAY, with replayed weights
// other than 1 too; the FLOPs are the routed path's less the routers' (2 D per token and layer),
// and on the CPU its time is the MLP part's.
TEST(MoeTest, AOneExpertLayerRunsAsItsDenseMlp) {
  const MoeConfig config = SmallOlmoe(/*experts=*/1, /*k=*/1, /*width=*/128, /*max_len=*/64);
  // A model of it has no controller: nothing to record or replay.
  ModelInfo info;
  EXPECT_TRUE(config.is_dense());
  EXPECT_TRUE(DescribeMoe(config, &info).empty());
  const auto bits = SameValues;
  const int64_t B = 3, T = 40, layers = 2, D = 96;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    auto net = RandomNet(config, dtype, gen);
    ASSERT_TRUE(net.ok()) << net.status();
    const at::Tensor ids =
        at::randint(0, 256, {B, T}, gen, at::kLong).to(testing::TestCompute().device);
    const auto run = [&](bool autograd, CoefficientMode mode, std::vector<at::Tensor>* coeff,
                         ExecutionCounters* counters) {
      at::AutoGradMode grad(autograd);
      absl::StatusOr<at::Tensor> logits = (*net)->Forward(ids, mode, coeff, counters);
      EXPECT_TRUE(logits.ok()) << logits.status();
      return logits.ok() ? logits->detach() : at::Tensor();
    };
    std::vector<at::Tensor> routed_rec, dense_rec;
    ExecutionCounters routed, dense;
    const at::Tensor live = run(false, CoefficientMode::kLiveRecord, &dense_rec, &dense);
    EXPECT_TRUE(bits(run(true, CoefficientMode::kLiveRecord, &routed_rec, &routed), live));
    ASSERT_EQ(dense_rec.size(), static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      EXPECT_TRUE(bits(routed_rec[l].detach(), dense_rec[l])) << l;
      EXPECT_TRUE(at::equal(dense_rec[l].cpu(), at::ones({B, T, 1}))) << l;
    }
    EXPECT_TRUE(bits(run(false, CoefficientMode::kReplay, &dense_rec, nullptr), live));
    // Replayed weights of 0.5 scale each token's expert output by 0.5.
    std::vector<at::Tensor> halves;
    for (const at::Tensor& r : dense_rec) halves.push_back(r * 0.5);
    std::vector<at::Tensor> halves_autograd = halves;
    const at::Tensor halved = run(false, CoefficientMode::kReplay, &halves, nullptr);
    EXPECT_TRUE(bits(run(true, CoefficientMode::kReplay, &halves_autograd, nullptr), halved));
    EXPECT_FALSE(bits(halved, live));

    EXPECT_EQ(dense.blocks_executed, B * T * layers);
    EXPECT_EQ(dense.blocks_total, B * T * layers);
    EXPECT_EQ(dense.expert_tokens, routed.expert_tokens);
    EXPECT_DOUBLE_EQ(dense.parameters_read, routed.parameters_read);
    EXPECT_DOUBLE_EQ(routed.flops - dense.flops, 2.0 * B * T * D * layers);
    if (ids.is_cpu()) {
      EXPECT_GT(dense.seconds.mlp, 0);
      EXPECT_EQ(dense.seconds.experts, 0);
      EXPECT_EQ(dense.seconds.dispatch, 0);
      EXPECT_EQ(dense.seconds.router, 0);
      EXPECT_GT(routed.seconds.experts, 0);
      EXPECT_EQ(routed.seconds.mlp, 0);
    }
  }
}

// RouterTopK's choice is the stable descending sort's: the k largest, ties
// to the lower expert index, for every k, on rows full of ties.
TEST(MoeTest, RouterTopKIsTheStableDescendingSort) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t E = 8;
  // Values from {0, 0.25, 0.5, 0.75}: most rows hold ties.
  const at::Tensor probs = at::randint(0, 4, {500, E}, gen, at::kFloat) / 4;
  for (int64_t k = 1; k <= E; ++k) {
    const auto sorted = at::sort(probs, /*stable=*/true, -1, /*descending=*/true);
    const auto [values, experts] = RouterTopK(probs, k);
    EXPECT_TRUE(at::equal(experts, std::get<1>(sorted).slice(-1, 0, k))) << "k " << k;
    EXPECT_TRUE(BitwiseEqual(values, std::get<0>(sorted).slice(-1, 0, k))) << "k " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MoeReferenceTest,
                         ::testing::Combine(::testing::Values(kOlmoe, kQwen, kMixtral),
                                            ::testing::Values("float32", "bfloat16")),
                         [](const auto& info) {
                           const Family& f = std::get<0>(info.param);
                           const std::string dir = f.dir.substr(f.dir.rfind('/') + 1);
                           return absl::StrCat(dir.substr(0, dir.find('-')), "_",
                                               std::get<1>(info.param));
                         });

// Equal probabilities go to the lower expert index: replaying uniform
// probabilities equals replaying probabilities where experts 0..k-1 keep 1/E
// and the others are a little lower; the neutral coefficients are uniform.
TEST(MoeTest, TiesGoToTheLowerExpertIndex) {
  auto model = Load(kOlmoe.dir, "float32");
  ASSERT_NE(model, nullptr);
  const at::Tensor ids = Expected(kOlmoe, "input_ids");
  const int64_t B = ids.size(0), T = ids.size(1), E = kOlmoe.experts;
  auto neutral = model->NeutralCoefficients();
  ASSERT_TRUE(neutral.ok()) << neutral.status();
  std::vector<at::Tensor> uniform, lower;
  for (const at::Tensor& n : *neutral) {
    EXPECT_TRUE(at::allclose(n.cpu(), at::full({E}, 1.0 / E)));
    uniform.push_back(n.expand({B, T, E}).contiguous());
    at::Tensor p = n.clone();
    p.slice(0, kOlmoe.top_k) -= 1e-3;
    lower.push_back(p.expand({B, T, E}).contiguous());
  }
  auto a = model->Forward(ids, CoefficientMode::kReplay, &uniform);
  auto b = model->Forward(ids, CoefficientMode::kReplay, &lower);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(BitwiseEqual(*a, *b));
  // Whereas favouring the last experts changes the output.
  std::vector<at::Tensor> upper;
  for (const at::Tensor& n : *neutral) {
    at::Tensor p = n.clone();
    p.slice(0, 0, E - kOlmoe.top_k) -= 1e-3;
    upper.push_back(p.expand({B, T, E}).contiguous());
  }
  auto c = model->Forward(ids, CoefficientMode::kReplay, &upper);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(at::equal(*a, *c));
}

}  // namespace
}  // namespace fca::engine
