// The torchscript family (docs/torchscript.md): the contract checks on the
// modules of tests/data/torchscript (made by make_modules.py there), the
// method each mode runs, and the featuregate-s1 module of examples/ audited
// against the native family.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "absl/strings/str_join.h"
#include "common/file.h"
#include "server/engine/audit/auditor.h"
#include "server/engine/audit/report_rows.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "server/engine/models/torchscript_config.h"
#include "server/engine/models/torchscript_model.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

const std::string kModules = std::string(FCA_TEST_DATA_DIR) + "/torchscript/";

absl::StatusOr<std::unique_ptr<ControlledModel>> LoadModule(const std::string& name) {
  return LoadModel(kModules + name, name, testing::TestCompute());
}

at::Tensor CountingIds(int64_t B, int64_t T) {
  return at::arange(B * T, at::kLong).remainder(256).view({B, T});
}

TEST(TorchScriptModelTest, AModuleThatKeepsTheContractLoadsAndRunsEachMethod) {
  auto model = LoadModule("tiny-gate");
  ASSERT_TRUE(model.ok()) << model.status();
  ControlledModel& m = **model;
  EXPECT_EQ(m.info().family, "torchscript");
  EXPECT_EQ(m.info().vocab_size, 256);
  EXPECT_EQ(m.info().num_layers, 2);
  // 256x16 embedding, two blocks of (16x4 + 4) + (16x16 + 16), 16x256 head.
  EXPECT_EQ(m.info().num_parameters, 4096 + 2 * (68 + 272) + 4096);
  EXPECT_EQ(m.info().weights_sha256.size(), 64u);
  ASSERT_EQ(m.sites().size(), 2u);
  EXPECT_EQ(m.sites()[1].name, "gate.1");
  EXPECT_EQ(m.sites()[1].channels, 4);

  const at::Tensor ids = CountingIds(3, 20);
  std::vector<at::Tensor> coefficients;
  auto live = m.Forward(ids, CoefficientMode::kLiveRecord, &coefficients);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->sizes().vec(), (std::vector<int64_t>{3, 20, 256}));
  ASSERT_EQ(coefficients.size(), 2u);
  EXPECT_EQ(coefficients[0].sizes().vec(), (std::vector<int64_t>{3, 20, 4}));
  // The counters are count()'s: per token 2 blocks and 200 FLOPs for live.
  EXPECT_EQ(m.counters().blocks_executed, 2 * 60);
  EXPECT_EQ(m.counters().blocks_total, 2 * 60);  // num_layers x tokens
  EXPECT_DOUBLE_EQ(m.counters().flops, 200.0 * 60);

  m.ResetCounters();
  auto replay = m.Forward(ids, CoefficientMode::kReplay, &coefficients);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(at::equal(*replay, *live));
  EXPECT_DOUBLE_EQ(m.counters().flops, 300.0 * 60);

  m.ResetCounters();
  std::vector<at::Tensor> recorded;
  auto record = m.Forward(ids, CoefficientMode::kRecordOnly, &recorded);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_FALSE(record->defined());
  ASSERT_EQ(recorded.size(), 2u);
  EXPECT_TRUE(at::equal(recorded[1], coefficients[1]));
  EXPECT_DOUBLE_EQ(m.counters().flops, 100.0 * 60);  // record() ran, not live()
  EXPECT_EQ(m.counters().blocks_executed, 60);

  auto neutral = m.NeutralCoefficients();
  ASSERT_TRUE(neutral.ok()) << neutral.status();
  ASSERT_EQ(neutral->size(), 2u);
  EXPECT_TRUE(at::equal((*neutral)[0].cpu(), at::ones({4})));
}

// The same window gives the same bits on every call, the first ones (which
// the profiling executor runs as they are) and the later ones (which it runs
// optimised; libtorch 2.x would fuse their elementwise ops unless fca turns
// the fuser off, KeepTorchScriptUnfused).
TEST(TorchScriptModelTest, EveryCallGivesTheSameBits) {
  auto model = LoadModule("tiny-gate");
  ASSERT_TRUE(model.ok()) << model.status();
  const at::Tensor ids = CountingIds(2, 16);
  std::vector<at::Tensor> coefficients;
  auto first = (*model)->Forward(ids, CoefficientMode::kLiveRecord, &coefficients);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int call = 2; call <= 6; ++call) {
    auto live = (*model)->Forward(ids, CoefficientMode::kLive, nullptr);
    ASSERT_TRUE(live.ok()) << live.status();
    EXPECT_TRUE(at::equal(*live, *first)) << "live, call " << call;
    std::vector<at::Tensor> replayed = coefficients;
    auto replay = (*model)->Forward(ids, CoefficientMode::kReplay, &replayed);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_TRUE(at::equal(*replay, *first)) << "replay, call " << call;
  }
}

TEST(TorchScriptModelTest, BfloatComputeConvertsTheModule) {
  ComputeOptions bf16 = testing::TestCompute();
  bf16.dtype = ComputeDType::kBFloat16;
  auto model = LoadModel(kModules + "tiny-gate", "tiny-gate", bf16);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<at::Tensor> coefficients;
  auto live = (*model)->Forward(CountingIds(2, 8), CoefficientMode::kLiveRecord, &coefficients);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->scalar_type(), at::kBFloat16);
  EXPECT_EQ(coefficients[0].scalar_type(), at::kBFloat16);
}

TEST(TorchScriptModelTest, ForwardRefusesBadInputsLikeEveryFamily) {
  auto model = LoadModule("tiny-gate");
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<at::Tensor> none;
  EXPECT_EQ((*model)->Forward(CountingIds(1, 65), CoefficientMode::kLive, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);  // longer than max_seq_len
  EXPECT_EQ((*model)
                ->Forward(CountingIds(1, 8).add(256), CoefficientMode::kLive, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // ids >= vocab_size
  EXPECT_EQ((*model)->Forward(CountingIds(1, 8), CoefficientMode::kReplay, &none).status().code(),
            absl::StatusCode::kInvalidArgument);  // no coefficients
}

// Each broken module of tests/data/torchscript, the code and what the
// message must name.
TEST(TorchScriptModelTest, ModulesThatBreakTheContractAreRefusedSayingWhy) {
  const std::vector<std::tuple<std::string, absl::StatusCode, std::string>> cases = {
      {"no-replay", absl::StatusCode::kInvalidArgument, "has no method replay(ids: Tensor"},
      {"wrong-signature", absl::StatusCode::kInvalidArgument,
       "method live(ids: Tensor, scale: float) -> Tuple[Tensor, List[Tensor]] does not have"},
      {"too-few-coefficients", absl::StatusCode::kInvalidArgument,
       "live() returned 1 coefficient tensors; config.json declares 2 sites"},
      {"wrong-channels", absl::StatusCode::kInvalidArgument,
       "shape [2, 8, 3] for site 0 (gate.0); config.json implies floating point [2, 8, 4]"},
      {"replay-recomputes", absl::StatusCode::kInvalidArgument,
       "replay() ignores the coefficients of site gate.0"},
      {"record-disagrees", absl::StatusCode::kInvalidArgument,
       "record() and live() disagree on the coefficients of site gate.0"},
      {"throws", absl::StatusCode::kInvalidArgument, "live() failed: "},
      {"not-torchscript", absl::StatusCode::kInvalidArgument,
       "not a TorchScript module saved by torch.jit.save"},
      {"garbage", absl::StatusCode::kInvalidArgument,
       "not a TorchScript module saved by torch.jit.save"},
  };
  for (const auto& [name, code, text] : cases) {
    auto model = LoadModule(name);
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_EQ(model.status().code(), code) << name << ": " << model.status();
    EXPECT_NE(model.status().message().find(text), std::string::npos)
        << name << ": " << model.status();
  }
  // The module's own message, without the interpreter's traceback.
  auto thrown = LoadModule("throws");
  EXPECT_NE(thrown.status().message().find("this module always fails"), std::string::npos)
      << thrown.status();
  EXPECT_EQ(thrown.status().message().find("code/__torch__"), std::string::npos) << thrown.status();
}

TEST(TorchScriptModelTest, AModuleThatThrowsLaterIsFailedPreconditionNamingTheModel) {
  auto model = LoadModule("throws-on-long-windows");
  ASSERT_TRUE(model.ok()) << model.status();  // the probe is 8 tokens long
  auto out = (*model)->Forward(CountingIds(2, 16), CoefficientMode::kLive, nullptr);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_NE(out.status().message().find(
                "model 'throws-on-long-windows': its TorchScript live() failed: "),
            std::string::npos)
      << out.status();
  EXPECT_NE(out.status().message().find("windows longer than 8 tokens are not supported"),
            std::string::npos)
      << out.status();
  // Still usable afterwards.
  EXPECT_TRUE((*model)->Forward(CountingIds(2, 8), CoefficientMode::kLive, nullptr).ok());
}

// A module's exception: out of memory (the interpreter passes torch's on as
// text) is the device's state, RESOURCE_EXHAUSTED, so the worker refuses the
// task and keeps serving; anything else is the module's failure.
TEST(TorchScriptModelTest, AModuleOutOfMemoryIsResourceExhausted) {
  ::testing::internal::CaptureStderr();
  const absl::Status oom = ModuleFailure(
      "m", "live",
      std::runtime_error("The following operation failed in the TorchScript interpreter.\n"
                         "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"));
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
  EXPECT_EQ(oom.message(), "model 'm': its TorchScript live() ran out of memory");
  const absl::Status other =
      ModuleFailure("m", "replay", std::runtime_error("RuntimeError: this module always fails"));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_EQ(other.message(),
            "model 'm': its TorchScript replay() failed: RuntimeError: this module always fails");
}

TEST(TorchScriptModelTest, DescribeReadsTheConfigAndTheFileSize) {
  auto d = DescribeModel(kModules + "tiny-gate", "tiny-gate", ComputeOptions{});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->info.family, "torchscript");
  EXPECT_EQ(d->sites.size(), 2u);
  EXPECT_GT(d->weight_file_bytes, 0);
  EXPECT_EQ(d->info.num_parameters, d->weight_file_bytes / 4);  // float32 saved
  EXPECT_EQ(DescribeModel(kModules + "no-such-folder", "x", ComputeOptions{}).status().code(),
            absl::StatusCode::kNotFound);
}

Dataset Text(const std::string& name, std::string text) {
  Dataset d;
  d.name = name;
  d.text = std::move(text);
  return d;
}

// Text of `n` bytes that repeats every 26 bytes.
std::string SmallIdText(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += static_cast<char>(1 + (i * 7) % 26);
  return text;
}

// Replay that does not reproduce LIVE passes the load (it uses its
// coefficients) and is refused by the audit's fidelity gate, with the
// measured difference.
TEST(TorchScriptModelTest, AnUnfaithfulReplayIsRefusedByTheFidelityGate) {
  auto model = LoadModule("unfaithful");
  ASSERT_TRUE(model.ok()) << model.status();
  AuditRequest req;
  req.models = {model->get()};
  const std::string text = SmallIdText(400);
  req.eval = Text("e", text.substr(0, 200));
  req.calib = Text("c", text.substr(200));
  req.options.window_length = 16;
  req.options.allow_overlap = true;  // the text repeats every 26 bytes
  auto report = RunAudit(req);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_NE(report.status().message().find("0.001"), std::string::npos) << report.status();
}

TEST(TorchScriptModelTest, WithoutTheOptionalMethods) {
  auto model = LoadModule("no-optional-methods");
  ASSERT_TRUE(model.ok()) << model.status();
  ControlledModel& m = **model;
  // No record(): calibration records with live(). No count(): every block
  // counted as run, no FLOPs.
  std::vector<at::Tensor> recorded;
  auto record = m.Forward(CountingIds(2, 10), CoefficientMode::kRecordOnly, &recorded);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(recorded.size(), 2u);
  EXPECT_EQ(m.counters().blocks_executed, 2 * 20);
  EXPECT_EQ(m.counters().flops, 0);
  // No neutral(): an audit naming it fails before any pass; the default
  // list (every intervention that applies) leaves it out with a note; a
  // list without it runs.
  auto neutral = m.NeutralCoefficients();
  ASSERT_TRUE(neutral.ok());
  EXPECT_TRUE(neutral->empty());
  AuditRequest req;
  req.models = {&m};
  const std::string text = SmallIdText(400);
  req.eval = Text("e", text.substr(0, 200));
  req.calib = Text("c", text.substr(200));
  req.options.window_length = 16;
  req.options.allow_overlap = true;
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& note) { notes.push_back(note); };
  auto all = RunAudit(req);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->models.size(), 1u);
  std::set<std::string> ran;
  for (const InterventionResult& r : all->models[0].interventions) ran.insert(r.name);
  EXPECT_EQ(ran.count("neutral"), 0u);
  EXPECT_EQ(ran.count("random_route"), 0u);  // no routers either
  EXPECT_EQ(ran.count("cross_input"), 1u);
  EXPECT_EQ(ran.count("static_layer"), 1u);
  const std::string joined = absl::StrJoin(notes, "\n");
  EXPECT_NE(joined.find("skipped neutral (the model has no neutral coefficients"),
            std::string::npos)
      << joined;
  // random_route is a mixture-of-experts intervention: left out silently.
  EXPECT_EQ(joined.find("random_route"), std::string::npos) << joined;
  req.options.interventions = {InterventionId::kCrossInput, InterventionId::kNeutral};
  auto refused = RunAudit(req);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("has no neutral coefficients"), std::string::npos);
  req.options.interventions = {InterventionId::kCrossInput, InterventionId::kGlobalMean,
                               InterventionId::kStaticLayer};
  auto report = RunAudit(req);
  ASSERT_TRUE(report.ok()) << report.status();
}

// --- featuregate-s1 in TorchScript against the native family

TEST(TorchScriptConfigTest, BadConfigsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model_type":"dense"})", "is not torchscript"},
      {R"({"model_type":"torchscript","vocab_size":0})", "vocab_size"},
      {R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":1,
           "dtype":"int8","sites":[]})",
       "'dtype'"},
      {R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":1,
           "dtype":"float32","sites":[]})",
       "'sites' must be a non-empty array"},
      {R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":1,
           "dtype":"float32","sites":[{"name":"a","family":"f","layer":1,"channels":2}]})",
       "sites[0]: field 'layer' is 1"},
      {R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":1,
           "dtype":"float32","sites":[{"name":"a","family":"f","layer":0,"channels":2},
                                      {"name":"a","family":"f","layer":0,"channels":2}]})",
       "'a' appears twice"},
      {R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":1,
           "dtype":"float32","sites":[{"name":"a b","family":"f","layer":0,"channels":2}]})",
       "printable ASCII"},
  };
  for (const auto& [text, what] : cases) {
    auto c = ParseTorchScriptConfig(text);
    ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(what), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().rfind("config.json: ", 0), 0u) << c.status();
  }
  auto ok = ParseTorchScriptConfig(
      R"({"model_type":"torchscript","vocab_size":8,"max_seq_len":8,"num_layers":2,
          "dtype":"bfloat16","sites":[{"name":"r.1","family":"r","layer":1,"channels":3}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->blocks_per_token, 2);  // num_layers by default
  EXPECT_EQ(ok->sites[0].channels, 3);
}

// The audit's numbers of one model, by (intervention, metric), without the
// execution audit's timings (the FLOPs and block counts stay in).
std::map<std::string, double> Numbers(const ModelReport& report) {
  std::map<std::string, double> out;
  for (const ResultRow& row : ResultRows(report)) {
    if (row.defined) out[row.intervention + "/" + row.metric] = row.value;
  }
  return out;
}

TEST(TorchScriptModelTest, FeatureGateS1InTorchScriptGivesTheNativeAuditsNumbers) {
  const std::string native_dir = std::string(FCA_MODELS_DIR) + "/featuregate-s1";
  const std::string ts_dir = std::string(FCA_EXAMPLES_DIR) + "/models/featuregate-s1-ts";
  auto native = LoadModel(native_dir, "featuregate-s1", testing::TestCompute());
  auto ts = LoadModel(ts_dir, "featuregate-s1", testing::TestCompute());
  ASSERT_TRUE(native.ok()) << native.status();
  ASSERT_TRUE(ts.ok()) << ts.status();
  EXPECT_EQ((*ts)->sites().size(), (*native)->sites().size());

  absl::StatusOr<std::string> eval =
      ReadFile(std::string(FCA_TEST_DATA_DIR) + "/../../README.md", "README.md", 1 << 20);
  ASSERT_TRUE(eval.ok()) << eval.status();
  AuditRequest req;
  req.eval = Text("e", eval->substr(0, 24 * 64));
  req.calib = Text("c", eval->substr(24 * 64, 40 * 64));
  req.options.window_length = 64;
  req.options.fidelity_check_every = 1;
  req.options.allow_overlap = true;  // prose may repeat a window; both audits see the same
  std::map<std::string, double> numbers[2];
  ControlledModel* models[2] = {native->get(), ts->get()};
  for (int i = 0; i < 2; ++i) {
    req.models = {models[i]};
    auto report = RunAudit(req);
    ASSERT_TRUE(report.ok()) << report.status();
    numbers[i] = Numbers(report->models[0]);
  }
  ASSERT_EQ(numbers[0].size(), numbers[1].size());
  int compared = 0;
  for (const auto& [key, value] : numbers[0]) {
    ASSERT_EQ(numbers[1].count(key), 1u) << key;
    if (key.rfind("execution/", 0) == 0 && key.find("flops") == std::string::npos &&
        key.find("blocks") == std::string::npos) {
      continue;  // timings
    }
    EXPECT_NEAR(numbers[1][key], value, 1e-6 * std::max(1.0, std::abs(value))) << key;
    ++compared;
  }
  EXPECT_GT(compared, 40);
  EXPECT_GT(numbers[0]["correct/nll"], 0.5);
}

}  // namespace
}  // namespace fca::engine
