// Mixture-of-experts folders at load: a folder written from a tiny's tensors
// is that model, and folders with a missing, extra or misshapen tensor or a
// bad config.json are refused naming the tensor or the key.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/file.h"
#include "common/json.h"
#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/moe_config.h"
#include "server/engine/models/moe_init.h"
#include "server/engine/models/moe_net.h"
#include "tests/engine/models/moe_families.h"
#include "tests/testing/test_models.h"
#include "tests/testing/test_util.h"

namespace fca::engine {
namespace {

using ::fca::test_util::Contains;
using testing::Family;
using testing::kMixtral;
using testing::kOlmoe;
using testing::kQwen;
using testing::TempDir;

std::vector<TensorData> Tensors(const Family& f) {
  std::vector<TensorData> out;
  auto src = TensorSource::OpenDir(f.dir);
  EXPECT_TRUE(src.ok()) << src.status();
  if (!src.ok()) return out;
  for (const std::string& name : (*src)->Names()) {
    auto v = (*src)->Get(name);
    if (!v.ok()) continue;
    std::string bytes(reinterpret_cast<const char*>(v->data), v->num_bytes);
    out.push_back({name, v->dtype, v->shape, std::move(bytes)});
  }
  return out;
}

std::string ConfigText(const Family& f) { return ReadFileOrEmpty(f.dir + "/config.json"); }

std::string EditedConfig(const Family& f, const std::function<void(json::Value*)>& edit) {
  auto doc = json::Parse(ConfigText(f));
  EXPECT_TRUE(doc.ok()) << doc.status();
  if (!doc.ok()) return "";
  edit(&*doc);
  return json::Write(*doc, /*pretty=*/true);
}

absl::Status LoadStatus(const std::vector<TensorData>& weights, const std::string& config) {
  const std::string dir = TempDir("moe");
  std::ofstream(dir + "/config.json", std::ios::binary | std::ios::trunc) << config;
  absl::Status st = WriteSafetensors(dir + "/model.safetensors", weights);
  EXPECT_TRUE(st.ok()) << st;
  return LoadModel(dir, "m", testing::TestCompute()).status();
}

void ExpectRefused(const absl::Status& st, absl::string_view names) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st.message(), names));
}

TEST(MoeFolderTest, AMissingMixtralExpertIsRefusedNamingTheTensor) {
  std::vector<TensorData> w = Tensors(kMixtral);
  const std::string name = "model.layers.0.block_sparse_moe.experts.3.w3.weight";
  w.erase(std::remove_if(w.begin(), w.end(), [&](const TensorData& t) { return t.name == name; }),
          w.end());
  ExpectRefused(LoadStatus(w, ConfigText(kMixtral)), name);
}

TEST(MoeFolderTest, AMissingExpertIsRefusedNamingTheTensor) {
  std::vector<TensorData> w = Tensors(kOlmoe);
  const std::string name = "model.layers.1.mlp.experts.5.up_proj.weight";
  w.erase(std::remove_if(w.begin(), w.end(), [&](const TensorData& t) { return t.name == name; }),
          w.end());
  ExpectRefused(LoadStatus(w, ConfigText(kOlmoe)), name);
}

TEST(MoeFolderTest, ARouterOfTheWrongShapeIsRefusedNamingTheTensor) {
  std::vector<TensorData> w = Tensors(kQwen);
  for (TensorData& t : w) {
    if (t.name != "model.layers.0.mlp.gate.weight") continue;
    t.shape = {kQwen.experts + 1, 16};
    t.bytes.assign((kQwen.experts + 1) * 16 * sizeof(float), '\0');
  }
  ExpectRefused(LoadStatus(w, ConfigText(kQwen)), "model.layers.0.mlp.gate.weight");
}

TEST(MoeFolderTest, AnExtraExpertIsRefusedNamingTheTensor) {
  std::vector<TensorData> w = Tensors(kOlmoe);
  TensorData extra = w.front();
  for (const TensorData& t : w) {
    if (t.name == "model.layers.0.mlp.experts.0.gate_proj.weight") extra = t;
  }
  extra.name = "model.layers.0.mlp.experts.8.gate_proj.weight";
  w.push_back(extra);
  ExpectRefused(LoadStatus(w, ConfigText(kOlmoe)), extra.name);
}

// What fca-train writes: MoeConfigToJson reads back to the same config, and a
// folder written by WriteMoeModelDir from a tiny's tensors is that model
// (LIVE logits bitwise equal).
TEST(MoeFolderTest, AWrittenFolderIsTheModelItWasWrittenFrom) {
  for (const Family& f : {kOlmoe, kQwen, kMixtral}) {
    SCOPED_TRACE(f.dir);
    auto config = ParseMoeConfig(ReadFileOrEmpty(f.dir + "/config.json"));
    ASSERT_TRUE(config.ok()) << config.status();
    const std::string written = json::Write(MoeConfigToJson(*config));
    auto again = ParseMoeConfig(written);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(json::Write(MoeConfigToJson(*again)), written);

    auto src = TensorSource::OpenFile(f.dir + "/model.safetensors");
    ASSERT_TRUE(src.ok()) << src.status();
    std::vector<TensorData> tensors;
    for (const WeightSpec& spec : MoeWeightSpecs(*config)) {
      auto v = (*src)->Get(spec.name);
      ASSERT_TRUE(v.ok()) << spec.name;
      tensors.push_back(
          TensorData{spec.name, v->dtype, v->shape,
                     std::string(reinterpret_cast<const char*>(v->data), v->num_bytes)});
    }
    const std::string dir = TempDir("written_moe") + "/model";
    ASSERT_TRUE(WriteMoeModelDir(dir, *config, tensors).ok());
    auto original = testing::LoadFolder(f.dir, "tiny");
    auto copy = testing::LoadFolder(dir, "tiny");
    ASSERT_TRUE(original && copy);
    const at::Tensor ids = at::arange(0, 40, at::kLong).remainder(config->vocab_size).view({2, 20});
    auto a = original->Forward(ids, CoefficientMode::kLive, nullptr);
    auto b = copy->Forward(ids, CoefficientMode::kLive, nullptr);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(at::equal(a->cpu(), b->cpu()));
  }
}

TEST(MoeFolderTest, BadConfigsAreRefusedNamingTheKey) {
  struct Case {
    const Family* family;
    std::function<void(json::Value*)> edit;
    const char* names;
  };
  const std::vector<Case> cases = {
      {&kOlmoe, [](json::Value* d) { d->Set("num_experts_per_tok", json::Value::Int(9)); },
       "num_experts_per_tok 9 is larger than num_experts 8"},
      {&kOlmoe, [](json::Value* d) { d->Set("hidden_act", json::Value::String("gelu")); },
       "'hidden_act'"},
      {&kQwen, [](json::Value* d) { d->Set("num_key_value_heads", json::Value::Int(3)); },
       "num_attention_heads 4 is not divisible by num_key_value_heads 3"},
      {&kOlmoe, [](json::Value* d) { d->Set("num_attention_heads", json::Value::Int(3)); },
       "hidden_size 16 is not divisible by num_attention_heads 3"},
      {&kOlmoe, [](json::Value* d) { d->Set("model_type", json::Value::String("deepseek_v3")); },
       "model_type 'deepseek_v3' is not supported"},
      {&kQwen, [](json::Value* d) { d->Set("decoder_sparse_step", json::Value::Int(2)); },
       "'decoder_sparse_step'"},
      {&kQwen,
       [](json::Value* d) {
         d->Set("rope_scaling", json::Value::MakeObject({{"type", json::Value::String("yarn")}}));
       },
       "'rope_scaling'"},
      {&kOlmoe, [](json::Value* d) { d->Set("num_experts", json::Value::String("8")); },
       "num_experts"},
      {&kMixtral, [](json::Value* d) { d->Set("num_experts_per_tok", json::Value::Int(5)); },
       "num_experts_per_tok 5 is larger than num_local_experts 4"},
      {&kMixtral, [](json::Value* d) { d->Set("sliding_window", json::Value::Int(32)); },
       "'sliding_window'"},
  };
  for (const Case& c : cases) {
    const absl::Status st = LoadStatus(Tensors(*c.family), EditedConfig(*c.family, c.edit));
    ExpectRefused(st, c.names);
    EXPECT_TRUE(Contains(st.message(), "config.json")) << st;
  }
}

}  // namespace
}  // namespace fca::engine
