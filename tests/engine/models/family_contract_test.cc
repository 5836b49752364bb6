// The contract every model family keeps, run over one table of families
// (kFamilies, one row each, a small model per row): record then replay is
// bitwise LIVE; neutral coefficients are what docs/fca.md and docs/moe.md
// say; the sites are those the config describes and the registry declares;
// the counters follow the docs' formulas; a bad config is refused naming
// its key; a window's float32 logits are the same alone and in a batch.
// A new family adds its row here (docs/developing.md, "A model family").
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/json.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/model_families.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/transformer_model.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::LoadFolder;
using testing::MaxDiff;
using testing::TempDir;
using testing::TestCompute;

constexpr int64_t kBatch = 2, kLength = 8, kTokens = kBatch * kLength;

// The counters a LIVE forward of [kBatch, kLength] ids must report.
struct Counts {
  int64_t blocks_executed = 0, blocks_total = 0;
  double flops = 0;
  double parameters_read = 0;  // 0: the family does not count them
};

struct FamilyRow {
  std::string family;
  std::function<std::string()> folder;     // a small model of the family
  std::vector<std::string> site_families;  // as the model declares them, in order
  size_t num_sites;
  NeutralKind neutral;
  bool routes;
  // Tensors that zeroed remove the controller's dynamic part (null: none,
  // or not safetensors).
  std::function<bool(const std::string&)> controller_out;
  std::string bad_key;  // set to -1 in config.json: refused naming it
  std::function<Counts(const ControlledModel&)> live_counts;
  bool batch_bitwise_on_cpu;  // a window's results do not depend on its batch, to the bit
};

// gtest names a row by its family.
void PrintTo(const FamilyRow& row, std::ostream* os) { *os << row.family; }

// The attention FLOPs of a [kBatch, kLength] forward with `width` = heads * head_dim:
// scores and probs @ v, 2 per multiply-add.
double AttentionFlops(double width) { return 2.0 * 2.0 * kBatch * kLength * kLength * width; }

std::string WrittenTransformer(const std::string& family) {
  static std::map<std::string, std::string>* dirs = new std::map<std::string, std::string>();
  auto it = dirs->find(family);
  if (it != dirs->end()) return it->second;
  const std::string dir = TempDir("contract_" + family);
  InitOptions init;
  init.seed = 7;
  init.controller_out_std = 0.5;  // gates that vary by token, never exactly 0
  EXPECT_TRUE(WriteRandomTransformerModelDir(dir, testing::TinyConfig(family), init).ok());
  return (*dirs)[family] = dir;
}

// TinyConfig: d_model 32, 2 layers of 2 heads, d_ff 64, vocab 256; featuregate
// G = 4 groups, controller width 16. Per layer: qkv and out (4 d^2), fc1 and
// fc2 (2 d d_ff), attention; the controller d cw + cw 2G; then the head.
Counts TransformerCounts(bool gated) {
  const double d = 32, ff = 64, cw = 16, G = 4, V = 256, L = 2;
  double flops = L * (2.0 * kTokens * (4 * d * d + 2 * d * ff) + AttentionFlops(d));
  if (gated) flops += L * 2.0 * kTokens * (d * cw + cw * 2 * G);
  flops += 2.0 * kTokens * d * V;
  return {static_cast<int64_t>(L * kTokens), static_cast<int64_t>(L * kTokens), flops, 0};
}

// tests/data/muddpythia-tiny-fp32: dim 64, 4 layers of 4 heads, vocab 512,
// FFN widths 0, 128, 128, 256 (the checkpoint's), controller width 64 after
// every layer (round64), C = 4 streams of L = l + 2 channels, 1 after the last.
Counts MuddPythiaCounts() {
  const double D = 64, V = 512, K = 64;
  const double ffn[] = {0, 128, 128, 256};
  double flops = 2.0 * kTokens * D * V;
  for (int l = 0; l < 4; ++l) {
    const double C = l == 3 ? 1 : 4;
    flops += 2.0 * kTokens * 4 * D * D + AttentionFlops(D) + 2.0 * kTokens * 2 * D * ffn[l];
    flops += 2.0 * kTokens * (D * K + K * C * (l + 2));
  }
  return {4 * kTokens, 4 * kTokens, flops, 0};
}

// docs/moe.md "Execution counters": a block is one expert (plus qwen's shared
// expert); FLOPs of q, k, v, o, attention, the router, the k experts a token
// chose (3 matmuls hidden x width each), the shared expert and its gate, and
// the head; a token reads all parameters but the E - k experts it skipped.
// The tiny folders: hidden 16, 2 layers, vocab 256, expert width 8.
Counts MoeCounts(const ControlledModel& model, double kv_width, double E, double k,
                 double shared_width) {
  const double d = 16, L = 2, V = 256, I = 8, shared = shared_width > 0 ? 1 : 0;
  double per_layer = 2.0 * kTokens * (2 * d * d + 2 * d * kv_width) + AttentionFlops(d);
  per_layer += 2.0 * kTokens * d * E + k * 2.0 * kTokens * 3 * d * I;
  per_layer += shared * (2.0 * kTokens * 3 * d * shared_width + 2.0 * kTokens * d);
  const double expert_parameters = 3 * d * I;
  const double active =
      static_cast<double>(model.info().num_parameters) - L * (E - k) * expert_parameters;
  return {static_cast<int64_t>(L * (k + shared) * kTokens),
          static_cast<int64_t>(L * (E + shared) * kTokens), L * per_layer + 2.0 * kTokens * d * V,
          kTokens * active};
}

bool EndsWith(const std::string& name, const char* suffix) { return absl::EndsWith(name, suffix); }

const std::vector<FamilyRow>& Families() {
  static const std::vector<FamilyRow>* rows = new std::vector<FamilyRow>{
      {"dense",
       [] { return WrittenTransformer("dense"); },
       {},
       0,
       NeutralKind::kNoSites,
       false,
       nullptr,
       "n_layers",
       [](const ControlledModel&) { return TransformerCounts(false); },
       true},
      {"featuregate",
       [] { return WrittenTransformer("featuregate"); },
       {"attn_gate", "mlp_gate"},
       4,
       NeutralKind::kControllerRemoved,
       false,
       [](const std::string& n) { return absl::StrContains(n, ".ctrl.fc2."); },
       "n_groups",
       [](const ControlledModel&) { return TransformerCounts(true); },
       true},
      {"muddpythia",
       [] { return std::string(FCA_TEST_DATA_DIR "/muddpythia-tiny-fp32"); },
       {"q", "k", "v", "r", "out"},
       13,
       NeutralKind::kControllerRemoved,
       false,
       [](const std::string& n) {
         return absl::StartsWith(n, "dynamic_dense.") && EndsWith(n, ".w2.weight");
       },
       "n_layer",
       [](const ControlledModel&) { return MuddPythiaCounts(); },
       true},
      {"olmoe",
       [] { return std::string(FCA_TEST_DATA_DIR "/olmoe-tiny"); },
       {"router"},
       2,
       NeutralKind::kZeroLogits,
       true,
       [](const std::string& n) { return EndsWith(n, ".gate.weight"); },
       "num_experts",
       [](const ControlledModel& m) { return MoeCounts(m, 16, 8, 2, 0); },
       false},
      {"qwen2_moe",
       [] { return std::string(FCA_TEST_DATA_DIR "/qwen2-moe-tiny"); },
       {"router", "shared_gate"},
       4,
       NeutralKind::kZeroLogits,
       true,
       [](const std::string& n) {
         return EndsWith(n, ".gate.weight") || EndsWith(n, "shared_expert_gate.weight");
       },
       "num_experts_per_tok",
       [](const ControlledModel& m) { return MoeCounts(m, 8, 6, 2, 12); },
       false},
      {"mixtral",
       [] { return std::string(FCA_TEST_DATA_DIR "/mixtral-tiny"); },
       {"router"},
       2,
       NeutralKind::kZeroLogits,
       true,
       [](const std::string& n) { return EndsWith(n, ".gate.weight"); },
       "num_local_experts",
       [](const ControlledModel& m) { return MoeCounts(m, 8, 4, 2, 0); },
       false},
      // tests/data/torchscript/modules.py TinyGate: count() reports 2 blocks
      // and 200 FLOPs per token in LIVE; 2 layers, so 2 blocks present.
      {"torchscript",
       [] { return std::string(FCA_TEST_DATA_DIR "/torchscript/tiny-gate"); },
       {"gate"},
       2,
       NeutralKind::kModule,
       false,
       nullptr,
       "max_seq_len",
       [](const ControlledModel&) {
         return Counts{2 * kTokens, 2 * kTokens, 200.0 * kTokens, 0};
       },
       true},
  };
  return *rows;
}

at::Tensor RandomWindows(int64_t B, uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(0, 256, {B, kLength}, at::kLong);
}

bool Bitwise(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         at::equal(a.cpu(), b.cpu());
}

// NeutralCoefficients broadcast to every token of [B, kLength] ids, as a replay
// takes them.
std::vector<at::Tensor> Broadcast(const std::vector<at::Tensor>& neutral, int64_t B) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& n : neutral) out.push_back(n.expand({B, kLength, n.size(0)}).contiguous());
  return out;
}

// A copy of the safetensors folder `dir` with the tensors `zero` picks set to 0.
std::string ZeroedCopy(const std::string& dir,
                       const std::function<bool(const std::string&)>& zero) {
  const std::string out = TempDir("contract_zeroed");
  auto src = TensorSource::OpenDir(dir);
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return out;
  std::vector<TensorData> tensors;
  int zeroed = 0;
  for (const std::string& name : (*src)->Names()) {
    auto view = (*src)->Get(name);
    EXPECT_TRUE(view.ok()) << view.status();
    if (!view.ok()) return out;
    TensorData t{name, view->dtype, view->shape,
                 std::string(reinterpret_cast<const char*>(view->data), view->num_bytes)};
    if (zero(name)) {
      std::memset(t.bytes.data(), 0, t.bytes.size());
      ++zeroed;
    }
    tensors.push_back(std::move(t));
  }
  EXPECT_GT(zeroed, 0) << "no tensor of " << dir << " is the controller's output";
  EXPECT_TRUE(WriteSafetensors(out + "/model.safetensors", tensors).ok());
  std::filesystem::copy_file(dir + "/config.json", out + "/config.json");
  return out;
}

class FamilyContractTest : public ::testing::TestWithParam<FamilyRow> {
 protected:
  void SetUp() override {
    dir_ = GetParam().folder();
    model_ = LoadFolder(dir_, "contract");
    ASSERT_NE(model_, nullptr);
  }

  std::string dir_;
  std::unique_ptr<ControlledModel> model_;
};

TEST_P(FamilyContractTest, RecordThenReplayIsBitwiseLive) {
  const at::Tensor ids = RandomWindows(kBatch, 1);
  auto live = model_->Forward(ids, CoefficientMode::kLive, nullptr);
  ASSERT_TRUE(live.ok()) << live.status();
  std::vector<at::Tensor> recorded;
  auto record = model_->Forward(ids, CoefficientMode::kLiveRecord, &recorded);
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(recorded.size(), model_->sites().size());
  for (size_t s = 0; s < recorded.size(); ++s) {
    EXPECT_EQ(recorded[s].sizes(), at::IntArrayRef({kBatch, kLength, model_->sites()[s].channels}))
        << s;
  }
  auto replay = model_->Forward(ids, CoefficientMode::kReplay, &recorded);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(Bitwise(*record, *live));
  EXPECT_TRUE(Bitwise(*replay, *live));
  // Another input's coefficients change a controlled model's logits: the
  // replay above did use what it was given.
  if (recorded.empty()) return;
  std::vector<at::Tensor> other;
  ASSERT_TRUE(model_->Forward(RandomWindows(kBatch, 2), CoefficientMode::kLiveRecord, &other).ok());
  auto swapped = model_->Forward(ids, CoefficientMode::kReplay, &other);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_FALSE(Bitwise(*swapped, *live));
}

TEST_P(FamilyContractTest, NeutralCoefficientsAreWhatTheDocsSay) {
  const FamilyRow& row = GetParam();
  auto neutral = model_->NeutralCoefficients();
  ASSERT_TRUE(neutral.ok()) << neutral.status();
  ASSERT_EQ(neutral->size(), model_->sites().size());
  for (size_t s = 0; s < neutral->size(); ++s) {
    EXPECT_EQ((*neutral)[s].sizes(), at::IntArrayRef({model_->sites()[s].channels})) << s;
  }
  switch (row.neutral) {
    case NeutralKind::kNoSites:
      EXPECT_TRUE(neutral->empty());
      return;
    case NeutralKind::kModule:  // TinyGate's neutral(): every gate 1
      for (const at::Tensor& n : *neutral) EXPECT_TRUE(at::equal(n.cpu(), at::ones_like(n.cpu())));
      return;
    case NeutralKind::kZeroLogits: {
      // Router probabilities 1/E, a shared gate sigmoid(0); the top-k of
      // uniform probabilities takes experts 0..k-1 (ties to the lower index).
      const std::vector<int64_t> k = model_->RoutedExperts();
      auto chosen = model_->ChosenExperts(Broadcast(*neutral, kBatch));
      ASSERT_TRUE(chosen.ok()) << chosen.status();
      for (size_t s = 0; s < neutral->size(); ++s) {
        const at::Tensor n = (*neutral)[s].cpu();
        const bool router = model_->sites()[s].family == "router";
        EXPECT_TRUE(at::equal(n, at::full_like(n, router ? 1.0 / n.size(0) : 0.5))) << s;
        if (!router) continue;
        EXPECT_TRUE(at::equal((*chosen)[s].cpu(),
                              at::arange(k[s], at::kLong).expand({kBatch, kLength, k[s]})))
            << s;
      }
      break;
    }
    case NeutralKind::kControllerRemoved:
      break;
  }
  // The controller's output zeroed, LIVE records the neutral coefficients
  // at every token, and replaying them is that LIVE, bit for bit.
  auto plain = LoadFolder(ZeroedCopy(dir_, row.controller_out), "contract");
  ASSERT_NE(plain, nullptr);
  const at::Tensor ids = RandomWindows(kBatch, 3);
  std::vector<at::Tensor> recorded;
  auto live = plain->Forward(ids, CoefficientMode::kLiveRecord, &recorded);
  ASSERT_TRUE(live.ok()) << live.status();
  std::vector<at::Tensor> replayed = Broadcast(*neutral, kBatch);
  ASSERT_EQ(recorded.size(), replayed.size());
  for (size_t s = 0; s < recorded.size(); ++s) {
    EXPECT_TRUE(Bitwise(recorded[s], replayed[s])) << model_->sites()[s].name;
  }
  auto replay = model_->Forward(ids, CoefficientMode::kReplay, &replayed);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(Bitwise(*replay, *live));
}

TEST_P(FamilyContractTest, SitesAreWhatTheConfigDescribesAndTheRegistryDeclares) {
  const FamilyRow& row = GetParam();
  auto family = FindModelFamily(row.family);
  ASSERT_TRUE(family.ok()) << family.status();
  const FamilyCapabilities& caps = (*family)->capabilities;
  EXPECT_EQ(caps.routes, row.routes);
  EXPECT_EQ(caps.neutral, row.neutral);
  EXPECT_EQ(model_->info().family, row.family);
  std::vector<std::string> families;
  for (const CoefficientSite& s : model_->sites()) {
    if (std::find(families.begin(), families.end(), s.family) == families.end()) {
      families.push_back(s.family);
    }
  }
  EXPECT_EQ(model_->sites().size(), row.num_sites);
  EXPECT_EQ(families, row.site_families);
  if (!caps.sites_from_config) {
    EXPECT_EQ(families, caps.site_families);
  }
  // Routing: k at each router site, 0 elsewhere; nothing without routers.
  const std::vector<int64_t> k = model_->RoutedExperts();
  EXPECT_EQ(!k.empty(), row.routes);
  for (size_t s = 0; s < k.size(); ++s) {
    EXPECT_EQ(k[s] > 0, model_->sites()[s].family == "router") << s;
  }
  // DescribeModel, from config.json alone, says the same.
  auto d = DescribeModel(dir_, "contract", TestCompute());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.family, model_->info().family);
  EXPECT_EQ(d->info.vocab_size, model_->info().vocab_size);
  EXPECT_EQ(d->info.max_seq_len, model_->info().max_seq_len);
  EXPECT_EQ(d->info.num_layers, model_->info().num_layers);
  ASSERT_EQ(d->sites.size(), model_->sites().size());
  for (size_t s = 0; s < d->sites.size(); ++s) {
    const CoefficientSite &a = d->sites[s], &b = model_->sites()[s];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.channels, b.channels);
  }
}

TEST_P(FamilyContractTest, CountersFollowTheDocsFormulas) {
  const Counts want = GetParam().live_counts(*model_);
  model_->ResetCounters();
  ASSERT_TRUE(model_->Forward(RandomWindows(kBatch, 4), CoefficientMode::kLive, nullptr).ok());
  const ExecutionCounters c = model_->counters();
  EXPECT_EQ(c.tokens, kTokens);
  EXPECT_EQ(c.blocks_executed, want.blocks_executed);
  EXPECT_EQ(c.blocks_total, want.blocks_total);
  EXPECT_DOUBLE_EQ(c.flops, want.flops);
  EXPECT_DOUBLE_EQ(c.parameters_read, want.parameters_read);
  model_->ResetCounters();
  EXPECT_EQ(model_->counters().tokens, 0);
}

TEST_P(FamilyContractTest, ABadConfigIsRefusedNamingTheKey) {
  const FamilyRow& row = GetParam();
  const std::string dir = TempDir("contract_bad");
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (entry.is_regular_file()) {
      std::filesystem::copy_file(entry.path(), dir + "/" + entry.path().filename().string());
    }
  }
  auto text = ReadFile(dir + "/config.json", "config.json", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  auto doc = json::Parse(*text);
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_NE(doc->Find(row.bad_key), nullptr) << row.bad_key;
  doc->Set(row.bad_key, json::Value::Int(-1));
  std::ofstream(dir + "/config.json", std::ios::trunc) << json::Write(*doc);
  const absl::Status loaded = LoadModel(dir, "bad", TestCompute()).status();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kInvalidArgument) << loaded;
  EXPECT_TRUE(absl::StrContains(loaded.message(), "config.json:")) << loaded;
  EXPECT_TRUE(absl::StrContains(loaded.message(), row.bad_key)) << loaded;
  const absl::Status described = DescribeModel(dir, "bad", TestCompute()).status();
  EXPECT_EQ(described, loaded);
}

// Per-token NLL of the next token, [B, T - 1], in float32 on the host.
at::Tensor Nll(const at::Tensor& logits, const at::Tensor& ids) {
  const at::Tensor logp = at::log_softmax(logits.cpu().to(at::kFloat).slice(1, 0, kLength - 1), -1);
  return -logp.gather(-1, ids.cpu().slice(1, 1, kLength).unsqueeze(-1)).squeeze(-1);
}

// Whether this machine's float32 GEMM gives a row the same bits alone and
// among others: [3 * kLength, 32] x [32, 64] against its first kLength rows (the tiny
// models' shapes). OpenBLAS's generic kernels do; its AVX2 and AVX-512 ones
// round a row by where it falls in the kernel's blocks (docs/fca.md,
// "Reproducibility"), and no model can then be bitwise in its batch.
bool GemmIsBatchInvariant() {
  const at::Tensor x = at::randn({3 * kLength, 32}, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor w = at::randn({64, 32}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t b = 0; b < 3; ++b) {
    const at::Tensor rows = x.slice(0, b * kLength, (b + 1) * kLength).contiguous();
    if (!Bitwise(at::linear(rows, w), at::linear(x, w).slice(0, b * kLength, (b + 1) * kLength))) {
      return false;
    }
  }
  return true;
}

// docs/fca.md, "Cached coefficients": kernels may round differently with
// the batch size, so a window alone and in a batch agree within 1e-5 in
// float32, logits, coefficients and NLL alike; bitwise on the CPU where the
// row says the model allows it and the GEMM does (a mixture of experts
// groups the batch's tokens per expert, so an expert's GEMM has rows from
// every window).
TEST_P(FamilyContractTest, AWindowIsTheSameAloneAndInABatch) {
  const bool bitwise =
      GetParam().batch_bitwise_on_cpu && TestCompute().device == "cpu" && GemmIsBatchInvariant();
  const at::Tensor batch = RandomWindows(3, 5);
  std::vector<at::Tensor> together_coefficients;
  auto together = model_->Forward(batch, CoefficientMode::kLiveRecord, &together_coefficients);
  ASSERT_TRUE(together.ok()) << together.status();
  for (int64_t b = 0; b < 3; ++b) {
    const at::Tensor window = batch.slice(0, b, b + 1);
    std::vector<at::Tensor> coefficients;
    auto alone = model_->Forward(window, CoefficientMode::kLiveRecord, &coefficients);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const at::Tensor in_batch = together->slice(0, b, b + 1);
    EXPECT_LE(MaxDiff(*alone, in_batch), 1e-5) << "window " << b;
    EXPECT_LE(MaxDiff(Nll(*alone, window), Nll(in_batch, window)), 1e-5) << "window " << b;
    if (bitwise) {
      EXPECT_TRUE(Bitwise(*alone, in_batch.contiguous())) << "window " << b;
    }
    ASSERT_EQ(coefficients.size(), together_coefficients.size());
    for (size_t s = 0; s < coefficients.size(); ++s) {
      const at::Tensor row = together_coefficients[s].slice(0, b, b + 1);
      EXPECT_LE(MaxDiff(coefficients[s], row), 1e-5) << "window " << b << ", site " << s;
      if (bitwise) {
        EXPECT_TRUE(Bitwise(coefficients[s], row.contiguous())) << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, FamilyContractTest, ::testing::ValuesIn(Families()),
                         [](const auto& info) { return info.param.family; });

// Every registered family has its row, and every row its registration.
TEST(FamilyRegistryTest, EveryFamilyHasAContractRow) {
  std::set<std::string> registered, rows;
  for (const ModelFamily& f : ModelFamilies()) registered.insert(f.name);
  for (const FamilyRow& r : Families()) rows.insert(r.family);
  EXPECT_EQ(registered, rows);
}

TEST(FamilyRegistryTest, AnUnknownFamilyIsRefusedListingTheKnownOnes) {
  auto family = FindModelFamily("llama");
  EXPECT_EQ(family.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(family.status().message(),
            "config.json: model_type 'llama' is not supported (known: dense, featuregate, "
            "muddpythia, olmoe, qwen2_moe, mixtral, torchscript)");
}

}  // namespace
}  // namespace fca::engine
