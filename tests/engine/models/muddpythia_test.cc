// Long file: each check against the reference vectors of the official forward.
// The muddpythia family against the reference vectors in
// tests/data/muddpythia-tiny-fp32 (outputs of the official PyTorch forward on
// one [2, 16] batch), coefficient record and replay, sharded and bf16
// checkpoints, malformed folders, and tokenizer.json in model folders.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file.h"
#include "common/json.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/muddpythia_model.h"
#include "server/engine/models/transformer_model.h"
#include "tests/testing/test_models.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using testing::LoadStatus;
using testing::MaxDiff;

using ::fca::test_util::WriteFile;

using ::fca::test_util::Contains;

using testing::TempDir;

const char kTinyDir[] = FCA_TEST_DATA_DIR "/muddpythia-tiny-fp32";
const char kTokenizerJson[] = FCA_TEST_DATA_DIR "/tokenizer/tokenizer.json";
constexpr int64_t kLayers = 4, kDim = 64, kHeads = 4, kVocab = 512;
constexpr int64_t kBatch = 2, kLength = 16;
constexpr int64_t kFfnWidths[kLayers] = {0, 128, 128, 256};  // from the checkpoint
constexpr int64_t kSites = 3 * 4 + 1;

// absl::string_view is not std::string_view in Debian's Abseil build.
std::string TinyConfigText() { return ReadFileOrEmpty(std::string(kTinyDir) + "/config.json"); }

void Report(const char* what, double value) { std::printf("[ measured ] %s: %.3g\n", what, value); }

// On the host: the model's tensors may be on the test device.
// --- the reference outputs ---

// A CPU copy of an F32 or I64 safetensors view.
at::Tensor ToTensor(const TensorView& v) {
  EXPECT_TRUE(v.dtype == DType::kF32 || v.dtype == DType::kI64) << v.name;
  const at::ScalarType type = v.dtype == DType::kI64 ? at::kLong : at::kFloat;
  at::Tensor t = at::empty(v.shape, at::TensorOptions().dtype(type));
  if (v.num_bytes > 0) std::memcpy(t.data_ptr(), v.data, v.num_bytes);
  return t;
}

struct Reference {
  at::Tensor ids;                 // [2, 16] int64
  at::Tensor logits;              // [2, 16, 512]
  at::Tensor nll;                 // [2, 15]
  std::vector<at::Tensor> sites;  // coeff.i split by stream, in site order: [2, 16, i + 2]
};

Reference LoadReference() {
  Reference r;
  auto src = TensorSource::OpenFile(std::string(kTinyDir) + "/expected.safetensors");
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return r;
  auto get = [&](const std::string& name) {
    auto view = (*src)->Get(name);
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? ToTensor(*view) : at::Tensor();
  };
  r.ids = get("input_ids");
  r.logits = get("logits");
  r.nll = get("nll");
  for (int64_t i = 0; i < kLayers; ++i) {
    const at::Tensor coeff = get(absl::StrCat("coeff.", i));  // [C, B, T, L]
    for (int64_t c = 0; c < coeff.size(0); ++c) r.sites.push_back(coeff[c]);
  }
  return r;
}

// nll[b, t] = logsumexp(logits[b, t]) - logits[b, t, ids[b, t + 1]], in fp32.
at::Tensor TokenNll(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t T = ids.size(1);
  const at::Tensor l = logits.to(at::kFloat).slice(1, 0, T - 1);
  const at::Tensor target = ids.slice(1, 1, T).unsqueeze(-1).to(l.device());
  return at::logsumexp(l, -1) - l.gather(-1, target).squeeze(-1);
}

std::unique_ptr<ControlledModel> Load(const std::string& dir,
                                      ComputeDType dtype = ComputeDType::kFloat32) {
  ComputeOptions compute = testing::TestCompute();
  compute.dtype = dtype;
  auto model = LoadModel(dir, "tiny", compute);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

absl::StatusOr<at::Tensor> Live(ControlledModel& m, const at::Tensor& ids) {
  return m.Forward(ids, CoefficientMode::kLive, nullptr);
}

// --- modified copies of the tiny checkpoint ---

std::vector<TensorData> TinyTensors() {
  std::vector<TensorData> out;
  auto src = TensorSource::OpenDir(kTinyDir);
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return out;
  for (const std::string& name : (*src)->Names()) {
    auto v = (*src)->Get(name);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) continue;
    std::string bytes;
    if (v->num_bytes > 0) bytes.assign(reinterpret_cast<const char*>(v->data), v->num_bytes);
    out.push_back({name, v->dtype, v->shape, std::move(bytes)});
  }
  return out;
}

TensorData* Find(std::vector<TensorData>* w, const std::string& name) {
  for (TensorData& t : *w) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

void Remove(std::vector<TensorData>* w, const std::string& name) {
  const size_t before = w->size();
  w->erase(
      std::remove_if(w->begin(), w->end(), [&](const TensorData& t) { return t.name == name; }),
      w->end());
  EXPECT_EQ(w->size(), before - 1) << name;
}

// Gives an F32 tensor a new shape (zero values).
void Reshape(std::vector<TensorData>* w, const std::string& name, std::vector<int64_t> shape) {
  TensorData* t = Find(w, name);
  if (t == nullptr) return;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t->shape = std::move(shape);
  t->bytes.assign(n * sizeof(float), '\0');
}

// Writes a model folder: config.json text and a single model.safetensors.
std::string WriteModelDir(const std::vector<TensorData>& weights,
                          const std::string& config = TinyConfigText()) {
  const std::string dir = TempDir("mudd");
  WriteFile(dir + "/config.json", config);
  absl::Status st = WriteSafetensors(dir + "/model.safetensors", weights);
  EXPECT_TRUE(st.ok()) << st;
  return dir;
}

// The tiny config.json after `edit`.
std::string EditedConfig(const std::function<void(json::Value*)>& edit) {
  auto doc = json::Parse(TinyConfigText());
  EXPECT_TRUE(doc.ok()) << doc.status();
  if (!doc.ok()) return "";
  edit(&*doc);
  return json::Write(*doc, /*pretty=*/true);
}

void RemoveKey(json::Value* doc, const std::string& key) {
  json::Object& o = doc->mutable_object();
  o.erase(std::remove_if(o.begin(), o.end(), [&](const auto& kv) { return kv.first == key; }),
          o.end());
}

// --- parity with the reference ---

TEST(MuddPythiaTest, LogitsMatchReference) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  auto logits = Live(*model, ref.ids);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->sizes().vec(), (std::vector<int64_t>{kBatch, kLength, kVocab}));
  EXPECT_EQ(logits->scalar_type(), at::kFloat);
  const double diff = MaxDiff(*logits, ref.logits);
  Report("fp32 logits vs reference, max |diff|", diff);
  EXPECT_LE(diff, 1e-4);
}

TEST(MuddPythiaTest, RecordedCoefficientsMatchReference) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(model->Forward(ref.ids, CoefficientMode::kLiveRecord, &rec).ok());
  ASSERT_EQ(rec.size(), static_cast<size_t>(kSites));
  ASSERT_EQ(ref.sites.size(), static_cast<size_t>(kSites));
  double worst = 0;
  for (size_t s = 0; s < rec.size(); ++s) {
    const CoefficientSite& site = model->sites()[s];
    EXPECT_EQ(rec[s].sizes().vec(), (std::vector<int64_t>{kBatch, kLength, site.channels}));
    EXPECT_EQ(rec[s].scalar_type(), at::kFloat);
    const double diff = MaxDiff(rec[s], ref.sites[s]);
    EXPECT_LE(diff, 1e-5) << site.name;
    worst = std::max(worst, diff);
  }
  Report("fp32 coefficients vs reference, max |diff|", worst);
  // Coefficients only (calibration): the same tensors, no logits.
  std::vector<at::Tensor> only;
  auto none = model->Forward(ref.ids, CoefficientMode::kRecordOnly, &only);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->defined());
  ASSERT_EQ(only.size(), rec.size());
  for (size_t s = 0; s < rec.size(); ++s) EXPECT_TRUE(only[s].equal(rec[s])) << s;
}

TEST(MuddPythiaTest, PerTokenNllMatchesReference) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  auto logits = Live(*model, ref.ids);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const at::Tensor nll = TokenNll(*logits, ref.ids);
  ASSERT_EQ(nll.sizes().vec(), ref.nll.sizes().vec());
  const double diff = MaxDiff(nll, ref.nll);
  Report("fp32 per-token NLL vs reference, max |diff|", diff);
  EXPECT_LE(diff, 1e-5);
  EXPECT_NEAR(nll.mean().item<double>(), 6.65505, 1e-4);  // the README's mean
}

TEST(MuddPythiaTest, Bfloat16ComputeStaysCloseToReference) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir, ComputeDType::kBFloat16);
  ASSERT_NE(model, nullptr);
  auto logits = Live(*model, ref.ids);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->scalar_type(), at::kBFloat16);
  const double logit_diff = MaxDiff(*logits, ref.logits);
  const double nll_diff = MaxDiff(TokenNll(*logits, ref.ids), ref.nll);
  Report("bf16 logits vs fp32 reference, max |diff|", logit_diff);
  Report("bf16 per-token NLL vs fp32 reference, max |diff|", nll_diff);
  EXPECT_LE(logit_diff, 0.1);
  EXPECT_LE(nll_diff, 0.1);
}

TEST(MuddPythiaTest, ShardedCheckpointGivesBitwiseIdenticalResults) {
  const std::string sharded = std::string(kTinyDir) + "/sharded";
  ASSERT_TRUE(std::filesystem::exists(sharded + "/model.safetensors.index.json"));
  ASSERT_FALSE(std::filesystem::exists(sharded + "/model.safetensors"));
  const Reference ref = LoadReference();
  auto single = Load(kTinyDir);
  auto split = Load(sharded);
  ASSERT_NE(single, nullptr);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->info().num_parameters, single->info().num_parameters);
  std::vector<at::Tensor> a, b;
  auto la = single->Forward(ref.ids, CoefficientMode::kLiveRecord, &a);
  auto lb = split->Forward(ref.ids, CoefficientMode::kLiveRecord, &b);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_TRUE(at::equal(*la, *lb));
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) EXPECT_TRUE(at::equal(a[s], b[s])) << s;
}

// --- record and replay ---

TEST(MuddPythiaTest, ReplayOfRecordedCoefficientsIsBitwise) {
  const Reference ref = LoadReference();
  for (const ComputeDType dtype : {ComputeDType::kFloat32, ComputeDType::kBFloat16}) {
    SCOPED_TRACE(ComputeDTypeName(dtype));
    auto model = Load(kTinyDir, dtype);
    ASSERT_NE(model, nullptr);
    std::vector<at::Tensor> rec;
    auto live = model->Forward(ref.ids, CoefficientMode::kLiveRecord, &rec);
    ASSERT_TRUE(live.ok()) << live.status();
    ASSERT_EQ(rec.size(), static_cast<size_t>(kSites));
    EXPECT_EQ(rec[0].scalar_type(), live->scalar_type());
    auto replay = model->Forward(ref.ids, CoefficientMode::kReplay, &rec);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_TRUE(at::equal(*live, *replay)) << MaxDiff(*live, *replay);
  }
}

TEST(MuddPythiaTest, ReplayOfReferenceCoefficientsReproducesReferenceLogits) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  std::vector<at::Tensor> coeff = ref.sites;
  auto logits = model->Forward(ref.ids, CoefficientMode::kReplay, &coeff);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const double diff = MaxDiff(*logits, ref.logits);
  Report("fp32 logits replaying reference coefficients, max |diff|", diff);
  EXPECT_LE(diff, 1e-4);
}

TEST(MuddPythiaTest, ReplayOfTheOtherRowsCoefficientsChangesLogits) {
  const Reference ref = LoadReference();
  ASSERT_FALSE(at::equal(ref.ids[0], ref.ids[1]));
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  std::vector<at::Tensor> rec;
  auto live = model->Forward(ref.ids, CoefficientMode::kLiveRecord, &rec);
  ASSERT_TRUE(live.ok());
  std::vector<at::Tensor> swapped;
  for (const at::Tensor& a : rec) swapped.push_back(a.flip({0}));
  auto replay = model->Forward(ref.ids, CoefficientMode::kReplay, &swapped);
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (int64_t b = 0; b < kBatch; ++b) {
    const double diff = MaxDiff((*live)[b], (*replay)[b]);
    EXPECT_GT(diff, 0.05) << "row " << b;
  }
}

TEST(MuddPythiaTest, ReplayRejectsBadCoefficients) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(model->Forward(ref.ids, CoefficientMode::kLiveRecord, &rec).ok());
  EXPECT_EQ(model->Forward(ref.ids, CoefficientMode::kReplay, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(ref.ids, CoefficientMode::kLiveRecord, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  struct Case {
    size_t site;
    at::Tensor value;
    std::string name;
  } cases[] = {
      {0, at::zeros({kBatch, kLength, 3}), "q.0"},                // one channel too many
      {5, at::zeros({kBatch, kLength}), "k.1"},                   // missing the channel dim
      {12, at::zeros({1, kLength, 5}), "out.3"},                  // wrong batch
      {12, at::zeros({kBatch, kLength, 5}, at::kLong), "out.3"},  // not floating point
      {7, at::Tensor(), "r.1"},                                   // undefined
  };
  for (const Case& c : cases) {
    std::vector<at::Tensor> bad = rec;
    bad[c.site] = c.value;
    absl::Status st = model->Forward(ref.ids, CoefficientMode::kReplay, &bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << st;
    EXPECT_TRUE(Contains(st.message(), c.name)) << st;
  }
  std::vector<at::Tensor> few(rec.begin(), rec.end() - 1);
  EXPECT_EQ(model->Forward(ref.ids, CoefficientMode::kReplay, &few).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MuddPythiaTest, RejectsBadIds) {
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  const at::Tensor bad[] = {
      at::full({1, 4}, kVocab, at::kLong),  // outside the vocabulary
      at::full({1, 4}, -1, at::kLong),
      at::zeros({1, 2049}, at::kLong),  // longer than block_size
      at::zeros({4}, at::kLong),
      at::zeros({1, 4}, at::kInt),
      at::zeros({0, 4}, at::kLong),
  };
  for (const at::Tensor& ids : bad) {
    EXPECT_EQ(Live(*model, ids).status().code(), absl::StatusCode::kInvalidArgument) << ids.sizes();
  }
}

// --- sites, info, counters ---

// The controller removed: each site's neutral coefficients are its row of
// the checkpoint's dense_bs.<layer> (stream c of layer i: dense_bs.i[c]).
TEST(MuddPythiaTest, NeutralCoefficientsAreTheStaticDenseBs) {
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  auto neutral = model->NeutralCoefficients();
  ASSERT_TRUE(neutral.ok()) << neutral.status();
  ASSERT_EQ(neutral->size(), model->sites().size());
  auto src = TensorSource::OpenFile(std::string(kTinyDir) + "/model.safetensors");
  ASSERT_TRUE(src.ok()) << src.status();
  size_t s = 0;
  for (int64_t i = 0; i < kLayers; ++i) {
    auto view = (*src)->Get(absl::StrCat("dense_bs.", i));
    ASSERT_TRUE(view.ok()) << view.status();
    const at::Tensor bs = ToTensor(*view);  // [C, L]
    for (int64_t c = 0; c < bs.size(0); ++c, ++s) {
      EXPECT_TRUE(at::equal((*neutral)[s].cpu().to(at::kFloat), bs[c].to(at::kFloat)))
          << model->sites()[s].name;
    }
  }
}

TEST(MuddPythiaTest, SitesAndInfo) {
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  const std::vector<std::string> names = {"q.0", "k.0", "v.0", "r.0", "q.1", "k.1",  "v.1",
                                          "r.1", "q.2", "k.2", "v.2", "r.2", "out.3"};
  const std::vector<CoefficientSite>& sites = model->sites();
  ASSERT_EQ(sites.size(), names.size());
  for (size_t s = 0; s < sites.size(); ++s) {
    const int64_t layer = s < 12 ? static_cast<int64_t>(s / 4) : 3;
    EXPECT_EQ(sites[s].name, names[s]);
    EXPECT_EQ(sites[s].family, names[s].substr(0, names[s].find('.')));
    EXPECT_EQ(sites[s].layer, layer) << names[s];
    EXPECT_EQ(sites[s].channels, layer + 2) << names[s];
  }
  const ModelInfo& info = model->info();
  EXPECT_EQ(info.name, "tiny");
  EXPECT_EQ(info.family, "muddpythia");
  EXPECT_EQ(info.vocab_size, kVocab);
  EXPECT_EQ(info.max_seq_len, 2048);
  EXPECT_EQ(info.num_layers, kLayers);
  EXPECT_EQ(info.num_parameters, 219497);  // the README's count
  EXPECT_EQ(info.weights_sha256.size(), 64u);
  EXPECT_EQ(model->tokenizer().name(), "byte");
}

TEST(MuddPythiaConfigTest, ControllerWidthsFollowRound64AndExpandLast) {
  auto tiny = ParseMuddPythiaConfig(TinyConfigText());
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->head_dim(), 16);
  EXPECT_EQ(tiny->rotary_dims(), 4);
  for (int64_t i = 0; i < kLayers; ++i) {
    EXPECT_EQ(tiny->controller_width(i), 64) << i;
    EXPECT_EQ(tiny->streams(i), i == kLayers - 1 ? 1 : 4) << i;
    EXPECT_EQ(tiny->channels(i), i + 2) << i;
  }
  // The 1.4B model's table (muddpythia.md 2.5): a raw 64 rounds up to 128, and
  // the last layer's 25 is expanded to 100 before rounding.
  MuddPythiaConfig big = *tiny;
  big.n_layer = 24;
  EXPECT_EQ(big.controller_width(0), 64);
  EXPECT_EQ(big.controller_width(13), 64);   // raw 60
  EXPECT_EQ(big.controller_width(14), 128);  // raw 64
  EXPECT_EQ(big.controller_width(22), 128);  // raw 96
  EXPECT_EQ(big.controller_width(23), 128);  // raw 25 * 4
}

TEST(MuddPythiaTest, CountersCountEveryBlockAndTheControllerOnlyWhenItRuns) {
  const Reference ref = LoadReference();
  auto model = Load(kTinyDir);
  ASSERT_NE(model, nullptr);
  const int64_t N = kBatch * kLength;
  const double D = kDim, hd = kDim / kHeads;
  double base = 2 * N * D * kVocab;  // output head
  double controller = 0;
  for (int64_t l = 0; l < kLayers; ++l) {
    base += 4 * 2 * N * D * D;                                   // wq, wk, wv, wo
    base += 2 * 2.0 * kBatch * kHeads * kLength * kLength * hd;  // scores, probs @ v
    base += 2 * 2 * N * D * kFfnWidths[l];                       // w1, w2
    const double C = l == kLayers - 1 ? 1 : 4, K = 64;
    controller += 2 * N * (D * K + K * C * (l + 2));
  }
  std::vector<at::Tensor> rec;
  ASSERT_TRUE(model->Forward(ref.ids, CoefficientMode::kLiveRecord, &rec).ok());
  ExecutionCounters c = model->counters();
  EXPECT_EQ(c.tokens, N);
  EXPECT_EQ(c.blocks_executed, kLayers * N);
  EXPECT_EQ(c.blocks_total, kLayers * N);
  EXPECT_DOUBLE_EQ(c.flops, base + controller);
  model->ResetCounters();
  ASSERT_TRUE(model->Forward(ref.ids, CoefficientMode::kReplay, &rec).ok());
  c = model->counters();
  EXPECT_EQ(c.blocks_executed, kLayers * N);
  EXPECT_EQ(c.blocks_total, kLayers * N);
  EXPECT_DOUBLE_EQ(c.flops, base);
  ASSERT_TRUE(Live(*model, ref.ids).ok());
  EXPECT_EQ(model->counters().tokens, 2 * N);
}

// --- checkpoints ---

TEST(MuddPythiaCheckpointTest, ZeroWidthFfnLoadsAndRuns) {
  // The reference's layer-0 FFN already has width 0 (Python rounds 0.5 to 0).
  auto src = TensorSource::OpenDir(kTinyDir);
  ASSERT_TRUE(src.ok());
  auto w1 = (*src)->Get("layers.0.feed_forward.w1.weight");
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{0, kDim}));
  // Emptying layer 2's FFN as well still loads, runs, and changes the output.
  std::vector<TensorData> w = TinyTensors();
  Reshape(&w, "layers.2.feed_forward.w1.weight", {0, kDim});
  Reshape(&w, "layers.2.feed_forward.w1.bias", {0});
  Reshape(&w, "layers.2.feed_forward.w2.weight", {kDim, 0});
  auto narrow = Load(WriteModelDir(w));
  auto full = Load(kTinyDir);
  ASSERT_NE(narrow, nullptr);
  ASSERT_NE(full, nullptr);
  const Reference ref = LoadReference();
  auto a = Live(*full, ref.ids);
  auto b = Live(*narrow, ref.ids);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_TRUE(at::isfinite(*b).all().item<bool>());
  EXPECT_GT(MaxDiff(*a, *b), 1e-3);
  EXPECT_DOUBLE_EQ(full->counters().flops - narrow->counters().flops,
                   2.0 * 2 * kBatch * kLength * kDim * 128);
  EXPECT_EQ(full->info().num_parameters - narrow->info().num_parameters, 2 * 128 * kDim + 128);
}

TEST(MuddPythiaCheckpointTest, Bfloat16WeightsLoad) {
  std::vector<TensorData> w = TinyTensors();
  for (TensorData& t : w) {
    at::Tensor f32 = at::empty(t.shape, at::kFloat);
    if (!t.bytes.empty()) std::memcpy(f32.data_ptr(), t.bytes.data(), t.bytes.size());
    const at::Tensor bf16 = f32.to(at::kBFloat16).contiguous();
    t.dtype = DType::kBF16;
    t.bytes.assign(static_cast<const char*>(bf16.data_ptr()), bf16.nbytes());
  }
  const std::string dir = WriteModelDir(w);
  const Reference ref = LoadReference();
  // bf16 compute: the bf16 file holds exactly what the fp32 file rounds to.
  auto from_bf16 = Load(dir, ComputeDType::kBFloat16);
  auto from_f32 = Load(kTinyDir, ComputeDType::kBFloat16);
  ASSERT_NE(from_bf16, nullptr);
  ASSERT_NE(from_f32, nullptr);
  auto a = Live(*from_bf16, ref.ids);
  auto b = Live(*from_f32, ref.ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, *b));
  // fp32 compute over bf16 weights: close to the reference, not equal.
  auto upcast = Load(dir, ComputeDType::kFloat32);
  ASSERT_NE(upcast, nullptr);
  auto c = Live(*upcast, ref.ids);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->scalar_type(), at::kFloat);
  EXPECT_LE(MaxDiff(*c, ref.logits), 0.1);
  EXPECT_GT(MaxDiff(*c, ref.logits), 0.0);
}

TEST(MuddPythiaCheckpointTest, OtherWeightDtypesAreRefused) {
  std::vector<TensorData> w = TinyTensors();
  TensorData* t = Find(&w, "layers.1.ffn_norm.bias");
  ASSERT_NE(t, nullptr);
  t->dtype = DType::kF16;
  t->bytes.resize(t->bytes.size() / 2);
  absl::Status st = LoadStatus(WriteModelDir(w));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), "layers.1.ffn_norm.bias"));
  ComputeOptions half;
  half.dtype = ComputeDType::kFloat16;
  EXPECT_EQ(LoadModel(kTinyDir, "m", half).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MuddPythiaCheckpointTest, WrongShapesAreInvalidArgumentNamingBothShapes) {
  struct Case {
    std::string tensor;
    std::vector<int64_t> shape;
    std::string got, want;
  } cases[] = {
      {"dynamic_dense.1.w1.weight", {128, kDim}, "[128, 64]", "[64, 64]"},
      {"dynamic_dense.3.w2.weight", {20, 64}, "[20, 64]", "[5, 64]"},
      {"dense_bs.2", {4, 5}, "[4, 5]", "[4, 4]"},
      {"dense_bs.3", {4, 5}, "[4, 5]", "[1, 5]"},
      {"layers.1.attention.q_norm.weight", {kDim}, "[64]", "[16]"},
      {"layers.1.feed_forward.w2.weight", {kDim, 64}, "[64, 64]", "[64, 128]"},
      {"layers.3.feed_forward.w1.bias", {128}, "[128]", "[256]"},
      {"layers.2.feed_forward.w1.weight", {128, 32}, "[128, 32]", "64"},
      {"output.weight", {256, kDim}, "[256, 64]", "[512, 64]"},
      {"layers.2.attention.wk.weight", {kDim, 32}, "[64, 32]", "[64, 64]"},
  };
  for (const Case& c : cases) {
    std::vector<TensorData> w = TinyTensors();
    Reshape(&w, c.tensor, c.shape);
    absl::Status st = LoadStatus(WriteModelDir(w));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.tensor << ": " << st;
    EXPECT_TRUE(Contains(st.message(), c.tensor));
    EXPECT_TRUE(Contains(st.message(), c.got));
    EXPECT_TRUE(Contains(st.message(), c.want));
  }
}

TEST(MuddPythiaCheckpointTest, MissingAndExtraTensorsAreInvalidArgument) {
  for (const std::string name :
       {"layers.2.attention.k_norm.weight", "dense_bs.0", "dynamic_dense.3.w1.weight",
        "layers.3.feed_forward.w1.weight", "layers.1.attention_norms.2.bias", "norm.weight"}) {
    std::vector<TensorData> w = TinyTensors();
    Remove(&w, name);
    absl::Status st = LoadStatus(WriteModelDir(w));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name << ": " << st;
    EXPECT_TRUE(Contains(st.message(), name));
  }
  // Layer 0 has one attention norm, not three.
  std::vector<TensorData> w = TinyTensors();
  w.push_back({"layers.0.attention_norms.0.weight",
               DType::kF32,
               {kDim},
               std::string(kDim * sizeof(float), '\0')});
  absl::Status st = LoadStatus(WriteModelDir(w));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), "layers.0.attention_norms.0.weight"));
  // A deeper config over this checkpoint: layer 4 is missing.
  st = LoadStatus(WriteModelDir(
      TinyTensors(), EditedConfig([](json::Value* d) { d->Set("n_layer", json::Value::Int(5)); })));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), "layers.4."));
}

// --- config.json ---

TEST(MuddPythiaConfigTest, UnsupportedOrMalformedConfigsAreInvalidArgument) {
  const std::string dir = WriteModelDir(TinyTensors());
  ASSERT_TRUE(LoadStatus(dir).ok());
  struct Case {
    std::string key;
    json::Value value;  // null: remove the key
  } cases[] = {
      {"dense", json::Value::Bool(false)},
      {"dynamic_dense", json::Value::Bool(false)},
      {"dense_type", json::Value::String("l")},
      {"sepln", json::Value::Bool(false)},
      {"expand_last", json::Value::Bool(false)},
      {"round64", json::Value::Bool(false)},
      {"use_qk_norm", json::Value::Bool(false)},
      {"use_parallel_residual", json::Value::Bool(false)},
      {"use_linear_bias", json::Value::Bool(false)},
      {"stack_hidden", json::Value::Bool(true)},
      {"tie_word_embeddings", json::Value::Bool(true)},
      {"n_local_heads", json::Value::Int(2)},
      {"n_head", json::Value::Int(3)},  // 64 % 3 != 0
      {"n_layer", json::Value::Int(1)},
      {"dim", json::Value::String("64")},  // ill-typed
      {"round64", json::Value::String("true")},
      {"rotary_pct", json::Value::Number(0.3)},  // 4.8 dims
      {"norm_eps", json::Value::Number(0)},
      {"vocab_size", json::Value::Int(-5)},
      {"round64", json::Value()},  // missing keys
      {"dim", json::Value()},
      {"norm_eps", json::Value()},
      {"dense_type", json::Value()},
      {"use_qk_norm", json::Value()},
      {"tie_word_embeddings", json::Value()},
  };
  for (const Case& c : cases) {
    WriteFile(dir + "/config.json", EditedConfig([&](json::Value* d) {
                if (c.value.is_null()) {
                  RemoveKey(d, c.key);
                } else {
                  d->Set(c.key, c.value);
                }
              }));
    absl::Status st = LoadStatus(dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.key << ": " << st;
    EXPECT_TRUE(Contains(st.message(), c.key)) << st;
  }
  // The official config class defaults stack_hidden to false and published
  // copies of the 1.4B config omit it: absent is accepted.
  WriteFile(dir + "/config.json",
            EditedConfig([](json::Value* d) { RemoveKey(d, "stack_hidden"); }));
  EXPECT_TRUE(LoadStatus(dir).ok()) << LoadStatus(dir);
  WriteFile(dir + "/config.json", EditedConfig([](json::Value* d) {
              d->Set("model_type", json::Value::String("mudd"));
            }));
  absl::Status st = LoadStatus(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "muddpythia")) << st;  // listed among the known families
}

// --- tokenizer.json in a model folder ---

void CopyTokenizer(const std::string& dir) {
  std::filesystem::copy_file(kTokenizerJson, dir + "/tokenizer.json");
}

// The tiny model with its embedding and head padded to `rows` with zero rows,
// as Pythia pads 50277 tokenizer ids to a 50432-row embedding.
std::string PaddedTinyDir(int64_t rows) {
  std::vector<TensorData> w = TinyTensors();
  for (const char* name : {"tok_embeddings.weight", "output.weight"}) {
    TensorData* t = Find(&w, name);
    if (t == nullptr) continue;
    t->shape = {rows, kDim};
    t->bytes.resize(rows * kDim * sizeof(float), '\0');
  }
  return WriteModelDir(
      w, EditedConfig([&](json::Value* d) { d->Set("vocab_size", json::Value::Int(rows)); }));
}

TEST(ModelFolderTokenizerTest, TokenizerJsonGivesTheBpeTokenizer) {
  const std::string dir = PaddedTinyDir(50432);
  CopyTokenizer(dir);
  auto model = Load(dir);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->tokenizer().name(), "bpe");
  EXPECT_EQ(model->tokenizer().vocab_size(), 50277);
  EXPECT_EQ(model->info().vocab_size, 50432);
  EXPECT_EQ(model->sites().size(), static_cast<size_t>(kSites));
  auto ids = model->tokenizer().Encode("Hello world, this is MUDDPythia.");
  ASSERT_TRUE(ids.ok()) << ids.status();
  const at::Tensor batch =
      at::tensor(std::vector<int64_t>(ids->begin(), ids->end()), at::kLong).unsqueeze(0);
  auto logits = Live(*model, batch);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(2), 50432);
  // The padding changes nothing for ids the tiny model knows.
  const Reference ref = LoadReference();
  auto padded = Live(*model, ref.ids);
  ASSERT_TRUE(padded.ok());
  EXPECT_LE(MaxDiff(padded->slice(2, 0, kVocab), ref.logits), 1e-4);
  EXPECT_EQ(padded->slice(2, kVocab).abs().max().item<float>(), 0.0f);
}

TEST(ModelFolderTokenizerTest, EveryFamilyUsesTheFoldersTokenizer) {
  TransformerConfig config = testing::TinyConfig("dense");
  config.vocab_size = 50304;
  auto weights = InitTransformerWeights(config, InitOptions{});
  ASSERT_TRUE(weights.ok());
  const std::string dir = TempDir("dense_bpe");
  ASSERT_TRUE(WriteTransformerModelDir(dir, config, *weights).ok());
  auto plain = Load(dir);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->tokenizer().name(), "byte");
  CopyTokenizer(dir);
  auto with_bpe = Load(dir);
  ASSERT_NE(with_bpe, nullptr);
  EXPECT_EQ(with_bpe->tokenizer().name(), "bpe");
  EXPECT_EQ(with_bpe->info().family, "dense");
}

TEST(ModelFolderTokenizerTest, TokenizerLargerThanTheVocabularyOrMalformedIsRefused) {
  const std::string dir = WriteModelDir(TinyTensors());
  CopyTokenizer(dir);  // 50277 ids for a 512-row embedding
  absl::Status st = LoadStatus(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), "tokenizer.json")) << st;
  WriteFile(dir + "/tokenizer.json", "{");
  st = LoadStatus(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), "tokenizer.json")) << st;
}

}  // namespace
}  // namespace fca::engine
