// The trainer (fca-train) and the corpus split: learning, determinism, the
// written folder against the log, a frozen controller, bad options; the
// same for the olmoe mixture of experts and its load-balancing loss.
#include "server/tools/train/trainer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/file.h"
#include "common/json.h"
#include "common/random.h"
#include "common/sha256.h"
#include "server/engine/audit/windows.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/moe_init.h"
#include "server/engine/models/moe_net.h"
#include "server/engine/models/transformer_model.h"
#include "server/tools/train/corpus_split.h"
#include "tests/testing/test_models.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using ::fca::test_util::WriteFile;

using testing::TempDir;
using testing::TinyConfig;

// Sentences from a small set in a seeded random order: easy to learn, and the
// evaluation text (another seed) is new text from the same distribution.
std::string RepetitiveText(size_t length, uint64_t seed) {
  const char* sentences[] = {"the cat sat on the mat. ", "a dog ran in the fog. ",
                             "my hat is red. "};
  Rng rng(seed);
  std::string s;
  while (s.size() < length) s += sentences[rng.Uniform(3)];
  return s.substr(0, length);
}

TrainOptions Options(const std::string& tag) {
  TrainOptions o;
  o.train_text = RepetitiveText(20000, 1);
  o.eval_text = RepetitiveText(2048, 2);
  o.window_length = 32;
  o.batch_size = 8;
  o.steps = 100;
  o.warmup_steps = 10;
  o.learning_rate = 1e-2;
  o.min_learning_rate = 1e-3;
  o.log_interval = 10;
  o.eval_interval = 50;
  o.storage_dtype = "float32";
  o.out_dir = TempDir(tag) + "/model";
  return o;
}

TrainReport Train(const TrainOptions& o, const std::string& family = "featuregate") {
  auto r = TrainModel(o, TinyConfig(family), nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : TrainReport();
}

// Mean NLL (fca.md) of a loaded model over the consecutive windows of `text`.
double LoadedModelNll(const std::string& dir, const std::string& text, int64_t T) {
  auto model = LoadModel(dir, "trained", ComputeOptions{});
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return -1;
  auto stream = (*model)->tokenizer().Encode(text);
  auto windows = MakeWindows(*stream, T, 0, "eval");
  EXPECT_TRUE(windows.ok());
  at::Tensor ids =
      at::from_blob(windows->ids.data(), {windows->count(), T}, at::kInt).to(at::kLong);
  auto logits = (*model)->Forward(ids, CoefficientMode::kLive, nullptr);
  EXPECT_TRUE(logits.ok()) << logits.status();
  at::Tensor lp = at::log_softmax(logits->slice(1, 0, T - 1).to(at::kFloat), -1);
  at::Tensor nll = -lp.gather(-1, ids.slice(1, 1, T).unsqueeze(-1)).squeeze(-1);
  return nll.to(at::kDouble).mean().item<double>();
}

TEST(TrainerTest, LossFallsClearlyOnRepetitiveText) {
  for (const std::string dtype : {"float32", "bfloat16"}) {
    TrainOptions o = Options("learn");
    o.compute_dtype = dtype;
    int calls = 0;
    auto r = TrainModel(o, TinyConfig("featuregate"),
                        [&](const TrainProgress& p) { EXPECT_EQ(p.step, ++calls); });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(calls, 100);
    ASSERT_EQ(r->log.size(), 10u);
    EXPECT_GT(r->log.front().train_loss, 4.0) << dtype;  // uniform: log 256 = 5.55
    EXPECT_LT(r->log.back().train_loss, 1.0) << dtype;
    EXPECT_LT(r->final_eval_nll, 1.0) << dtype;
    ASSERT_TRUE(r->log[4].eval_loss.has_value());
    ASSERT_TRUE(r->log[9].eval_loss.has_value());
    EXPECT_EQ(r->tokens_seen, 100 * 8 * 32);
  }
}

TEST(TrainerTest, SameSeedGivesIdenticalWeights) {
  TrainOptions o = Options("seed");
  const TrainReport a = Train(o);
  o.out_dir = TempDir("seed_again") + "/model";
  const TrainReport b = Train(o);
  o.out_dir = TempDir("seed_other") + "/model";
  o.seed = 2;
  const TrainReport c = Train(o);
  EXPECT_EQ(a.weights_sha256.size(), 64u);
  EXPECT_EQ(a.weights_sha256, b.weights_sha256);
  EXPECT_EQ(a.final_eval_nll, b.final_eval_nll);
  EXPECT_NE(a.weights_sha256, c.weights_sha256);
}

TEST(TrainerTest, WrittenFolderLoadsAndMatchesTheLoggedEvalNll) {
  TrainOptions o = Options("folder");
  const TrainReport r = Train(o, "dense");
  const double nll = LoadedModelNll(o.out_dir, o.eval_text, o.window_length);
  EXPECT_NEAR(nll, r.final_eval_nll, 1e-4);
  EXPECT_EQ(r.final_eval_windows, 2048 / 32);

  auto log = json::Parse(ReadFileOrEmpty(o.out_dir + "/training_log.json"));
  ASSERT_TRUE(log.ok()) << log.status();
  const json::Value* result = log->Find("result");
  ASSERT_NE(result, nullptr);
  auto logged = json::GetDouble(*result, "final_eval_nll_nats_per_byte");
  ASSERT_TRUE(logged.ok());
  EXPECT_NEAR(*logged, nll, 1e-4);
  ASSERT_NE(log->Find("steps"), nullptr);
  EXPECT_EQ(log->Find("steps")->as_array().size(), 10u);
  EXPECT_NE(log->Find("hyperparameters")->Find("learning_rate"), nullptr);

  // bfloat16 storage: the loader accepts it, and the log states the NLL of
  // the rounded weights.
  o.storage_dtype = "bfloat16";
  o.out_dir = TempDir("folder_bf16") + "/model";
  const TrainReport rb = Train(o, "dense");
  auto file = SafetensorsFile::Open(o.out_dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Get("lm_head.weight")->dtype, DType::kBF16);
  EXPECT_NEAR(LoadedModelNll(o.out_dir, o.eval_text, o.window_length), rb.final_eval_nll, 1e-4);
}

TEST(TrainerTest, FrozenControllerKeepsItsInitialWeights) {
  TrainOptions o = Options("frozen");
  o.steps = 20;
  o.freeze_controller = true;
  Train(o);
  InitOptions init;
  init.seed = o.seed;
  init.init_std = o.init_std;
  auto initial = InitTransformerWeights(TinyConfig("featuregate"), init);
  ASSERT_TRUE(initial.ok());
  auto trained = TensorSource::OpenDir(o.out_dir);
  ASSERT_TRUE(trained.ok()) << trained.status();
  int controller = 0, changed = 0;
  for (const TensorData& t : *initial) {
    auto view = (*trained)->Get(t.name);
    ASSERT_TRUE(view.ok());
    const bool same =
        std::string(reinterpret_cast<const char*>(view->data), view->num_bytes) == t.bytes;
    if (t.name.find(".ctrl.") != std::string::npos) {
      ++controller;
      EXPECT_TRUE(same) << t.name;
    } else {
      changed += !same;
    }
  }
  EXPECT_EQ(controller, 2 * 6);
  EXPECT_GT(changed, 20);
}

TEST(TrainerTest, BadOptionsAreInvalidArgument) {
  TrainOptions o = Options("bad");
  o.window_length = 65;  // TinyConfig's max_seq_len is 64
  EXPECT_EQ(TrainModel(o, TinyConfig("dense"), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options("bad");
  o.compute_dtype = "float16";
  EXPECT_EQ(TrainModel(o, TinyConfig("dense"), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options("bad");
  o.eval_text = "short";
  auto st = TrainModel(o, TinyConfig("dense"), nullptr).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("evaluation text"), std::string::npos) << st;
}

// --- mixture of experts (olmoe) ---

MoeConfig TinyMoe() {
  MoeConfig c;
  c.model_type = "olmoe";
  c.vocab_size = 256;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.expert_intermediate_size = 16;
  c.rms_norm_eps = 1e-5;
  return c;
}

TrainReport TrainMoe(const TrainOptions& o) {
  auto r = TrainModel(o, TinyMoe(), nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : TrainReport();
}

// The tensors of a written folder that differ from the initial weights of
// the same seed: {routers, others}, and how many routers there are.
struct Changed {
  int routers = 0, routers_changed = 0, others_changed = 0;
};
Changed ChangedSinceInit(const TrainOptions& o) {
  InitOptions init;
  init.seed = o.seed;
  init.init_std = o.init_std;
  auto initial = InitMoeWeights(TinyMoe(), init);
  EXPECT_TRUE(initial.ok()) << initial.status();
  auto trained = TensorSource::OpenDir(o.out_dir);
  EXPECT_TRUE(trained.ok()) << trained.status();
  Changed c;
  if (!initial.ok() || !trained.ok()) return c;
  for (const TensorData& t : *initial) {
    auto view = (*trained)->Get(t.name);
    EXPECT_TRUE(view.ok()) << t.name;
    if (!view.ok()) continue;
    const bool same =
        std::string(reinterpret_cast<const char*>(view->data), view->num_bytes) == t.bytes;
    if (t.name.find(".mlp.gate.weight") != std::string::npos) {
      ++c.routers;
      c.routers_changed += !same;
    } else {
      c.others_changed += !same;
    }
  }
  return c;
}

TEST(MoeTrainerTest, LossFallsAndTheFolderLoadsAsOlmoe) {
  for (const std::string dtype : {"float32", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    TrainOptions o = Options("moe_" + dtype);
    o.compute_dtype = dtype;
    const TrainReport r = TrainMoe(o);
    ASSERT_FALSE(r.log.empty());
    EXPECT_GT(r.log.front().train_loss, 4.0);  // uniform: log 256 = 5.55
    EXPECT_LT(r.log.back().train_loss, 1.5);
    for (const TrainLogEntry& e : r.log) EXPECT_TRUE(e.aux_loss.has_value()) << e.step;

    // A Hugging Face olmoe folder: config.json parses back to the config,
    // and the server's loader gives the NLL the log states.
    auto config = ParseMoeConfig(ReadFileOrEmpty(o.out_dir + "/config.json"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(json::Write(MoeConfigToJson(*config)), json::Write(MoeConfigToJson(TinyMoe())));
    EXPECT_NEAR(LoadedModelNll(o.out_dir, o.eval_text, o.window_length), r.final_eval_nll, 1e-4);
    auto log = json::Parse(ReadFileOrEmpty(o.out_dir + "/training_log.json"));
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(log->Find("config")->Find("model_type")->as_string(), "olmoe");
    EXPECT_EQ(log->Find("hyperparameters")->Find("aux_loss_coef")->as_double(), 0.01);
    EXPECT_NE(log->Find("steps")->as_array().front().Find("aux_loss"), nullptr);

    // The routers learn: the gradient reaches them through the routing
    // weights and the load-balancing loss.
    const Changed c = ChangedSinceInit(o);
    EXPECT_EQ(c.routers, 2);
    EXPECT_EQ(c.routers_changed, 2);
    EXPECT_GT(c.others_changed, 10);
  }
}

// With the routers frozen at tiny initial weights (normal, std 1e-4) the
// router logits stay within ~1e-3 of 0 and the probabilities within 0.1% of
// 1/E, where the load-balancing loss E * sum_e f_e * P_e is sum_e f_e = k
// whatever the choices: the logged loss is k. The routers are exactly as
// initialised.
TEST(MoeTrainerTest, FrozenRoutersKeepTheirWeightsAndTheAuxLossIsK) {
  TrainOptions o = Options("moe_frozen");
  o.steps = 30;
  o.init_std = 1e-4;
  o.freeze_controller = true;
  const TrainReport r = TrainMoe(o);
  ASSERT_FALSE(r.log.empty());
  for (const TrainLogEntry& e : r.log) {
    ASSERT_TRUE(e.aux_loss.has_value());
    EXPECT_NEAR(*e.aux_loss, TinyMoe().num_experts_per_tok, 0.01) << e.step;
  }
  const Changed c = ChangedSinceInit(o);
  EXPECT_EQ(c.routers, 2);
  EXPECT_EQ(c.routers_changed, 0);
  EXPECT_GT(c.others_changed, 10);
}

TEST(MoeTrainerTest, BadConfigsAreInvalidArgumentNamingTheKey) {
  TrainOptions o = Options("moe_bad");
  MoeConfig c = TinyMoe();
  c.num_experts_per_tok = 5;  // more than the 4 experts
  auto st = TrainModel(o, c, nullptr).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_experts_per_tok"), std::string::npos) << st;
  o.window_length = 65;  // max_position_embeddings is 64
  st = TrainModel(o, TinyMoe(), nullptr).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("max_seq_len 64"), std::string::npos) << st;
  o = Options("moe_bad");
  o.aux_loss_coef = -1;
  EXPECT_EQ(TrainModel(o, TinyMoe(), nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- corpus split ---

std::string FortuneCorpus() {
  const std::string dir = TempDir("corpus");
  WriteFile(dir + "/apples", "Apples are red.\n%\nShared fortune.\n%\nAn apple a day.\n%\n");
  WriteFile(dir + "/bananas", "Bananas are yellow.\n%\n  Shared fortune.\n%\n");
  WriteFile(dir + "/cherries", "Cherries are small.\n%\nShared fortune.\n%\nPits.\n");
  WriteFile(dir + "/dates", "Dates are sweet.\n%\n");
  WriteFile(dir + "/apples.dat", "binary index");
  WriteFile(dir + "/apples.u8", "Apples are red.\n%\n");
  std::filesystem::create_directory(dir + "/off");
  WriteFile(dir + "/off/rude", "Not included.\n%\n");
  return dir;
}

TEST(CorpusSplitTest, SplitsByFileAndDropsRepeatsOfHeldOutRecords) {
  CorpusSplitOptions o;
  o.corpus_dir = FortuneCorpus();
  o.eval_files = {"bananas"};
  o.calib_files = {"cherries"};
  o.check_window = 8;
  auto s = SplitCorpus(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->files.size(), 4u);  // no .dat, .u8 or off/
  EXPECT_EQ(s->files[0].name, "apples");
  EXPECT_EQ(s->eval, "Bananas are yellow.\n%\n  Shared fortune.\n%\n");
  EXPECT_EQ(s->calib, "Cherries are small.\n%\nPits.\n%\n");
  EXPECT_EQ(s->train, "Apples are red.\n%\nAn apple a day.\n%\nDates are sweet.\n%\n");
  EXPECT_EQ(s->files[0].dropped_records, 1);
  EXPECT_EQ(s->files[2].dropped_records, 1);
  EXPECT_EQ(s->files[2].part, "calib");
  EXPECT_NE(s->rule.find("bananas"), std::string::npos);

  const std::string out = TempDir("split");
  ASSERT_TRUE(WriteCorpusSplit(*s, out).ok());
  EXPECT_EQ(ReadFileOrEmpty(out + "/calib.txt"), s->calib);
  auto again = SplitCorpus(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(json::Write(CorpusSplitToJson(*again)), json::Write(CorpusSplitToJson(*s)));
}

TEST(CorpusSplitTest, TrainingRecordsTheHashesOfTheTextsItTrainsOn) {
  CorpusSplit split;
  split.train = "training text";
  split.calib = "calibration text";
  split.eval = "evaluation text";
  TrainOptions o;
  UseCorpusSplit(split, &o);
  EXPECT_EQ(o.train_text, split.train);
  EXPECT_EQ(o.eval_text, split.eval);
  for (const auto& [part, text] :
       {std::pair<const char*, const std::string*>{"train", &split.train},
        {"calib", &split.calib},
        {"eval", &split.eval}}) {
    SCOPED_TRACE(part);
    EXPECT_EQ(o.provenance.Find(part)->Find("sha256")->as_string(), Sha256Hex(*text));
    EXPECT_EQ(o.provenance.Find(part)->Find("bytes")->as_int(), int64_t(text->size()));
  }
}

TEST(CorpusSplitTest, MissingFilesAndSharedWindowsAreRefused) {
  CorpusSplitOptions o;
  o.corpus_dir = FortuneCorpus();
  o.eval_files = {"kiwis"};
  o.calib_files = {"cherries"};
  EXPECT_EQ(SplitCorpus(o).status().code(), absl::StatusCode::kNotFound);
  o.eval_files = {"cherries"};
  EXPECT_EQ(SplitCorpus(o).status().code(), absl::StatusCode::kInvalidArgument);
  // "are " windows: a 4-byte window of the evaluation text occurs in training.
  o.eval_files = {"dates"};
  o.check_window = 4;
  auto st = SplitCorpus(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("training"), std::string::npos) << st;
}

}  // namespace
}  // namespace fca::engine

namespace fca::engine {
namespace {

// The committed models in models/ (trained by scripts/train_models.sh) give,
// through the loader the server uses, the evaluation NLL their logs state, on
// the evaluation part of today's corpus split (the same bytes they logged).
// All nine are covered here (tests/e2e/demo_test also checks the three
// FeatureGate seeds through the running server). The corpus is Debian's
// fortunes, or the folder FCA_TEST_CORPUS_DIR names: on a GPU machine, which
// has none, scripts/device/check.sh's copy from the dependency pack.
TEST(BundledModelsTest, EachReproducesItsLoggedEvaluationNll) {
  CorpusSplitOptions corpus;
  if (const char* dir = std::getenv("FCA_TEST_CORPUS_DIR")) corpus.corpus_dir = dir;
  auto split = SplitCorpus(corpus);
  ASSERT_TRUE(split.ok()) << split.status() << " (scripts/setup.sh installs fortunes)";
  for (const char* name :
       {"featuregate-s1", "featuregate-s2", "featuregate-s3", "dense", "featuregate-small",
        "dense-small", "featuregate-large", "dense-large", "olmoe-s1", "olmoe-dense"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(FCA_MODELS_DIR) + "/" + name;
    auto log = json::Parse(ReadFileOrEmpty(dir + "/training_log.json"));
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(log->Find("data")->Find("eval_sha256")->as_string(), Sha256Hex(split->eval));
    // The corpus section names the parts it was trained, evaluated and
    // calibrated on: today's split, byte for byte.
    for (const auto& [part, text] :
         {std::pair<const char*, const std::string*>{"train", &split->train},
          {"calib", &split->calib},
          {"eval", &split->eval}}) {
      SCOPED_TRACE(part);
      EXPECT_EQ(log->Find("corpus")->Find(part)->Find("sha256")->as_string(), Sha256Hex(*text));
      EXPECT_EQ(log->Find("corpus")->Find(part)->Find("bytes")->as_int(), int64_t(text->size()));
    }
    const double logged = log->Find("result")->Find("final_eval_nll_nats_per_byte")->as_double();
    EXPECT_LE(logged, 1.8);
    EXPECT_NEAR(LoadedModelNll(dir, split->eval, 128), logged, 1e-4);
  }
}

}  // namespace
}  // namespace fca::engine
