// The README's main command, shortened, and the bundled models' training
// logs, checked through the real fca-server and fca CLI.
//
// Needs the `fortunes` package (scripts/setup.sh installs it) and the
// committed models/ folder.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "common/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

const char* const kSeeds[] = {"featuregate-s1", "featuregate-s2", "featuregate-s3"};
// The size trend's models (the demo audits each against its own twin).
const char* const kSizes[] = {"featuregate-small", "dense-small", "featuregate-large",
                              "dense-large"};
// The mixture of experts the demo audits against its one-expert dense twin.
constexpr char kMoe[] = "olmoe-s1";
constexpr char kMoeTwin[] = "olmoe-dense";
// The shortened demo's evaluation windows (FCA_DEMO_WINDOWS), of 128 bytes.
constexpr int64_t kWindows = 8, kWindowLength = 128;

fs::path ModelDir(const std::string& name) { return fs::path(FCA_SOURCE_DIR) / "models" / name; }

json::Value ParseFile(const fs::path& path) {
  auto v = json::Parse(ReadFileOrEmpty(path));
  EXPECT_TRUE(v.ok()) << path << ": " << v.status();
  return v.ok() ? *v : json::Value();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fca-demo-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The row (a Result) of (model, intervention, metric) in a GetReport
// message's JSON (report.json, or one of size_trend.json's "reports");
// nullptr when absent.
const json::Value* Row(const json::Value& report, const std::string& model,
                       const std::string& intervention, const std::string& metric) {
  const json::Value* metrics = report.Find("metrics");
  if (metrics == nullptr) return nullptr;
  for (const json::Value& m : metrics->as_array()) {
    if (m.Find("intervention")->as_string() != intervention ||
        m.Find("metric")->as_string() != metric) {
      continue;
    }
    for (const json::Value& r : m.Find("per_model")->as_array()) {
      if (r.Find("model")->as_string() == model) return &r;
    }
  }
  return nullptr;
}

// The dense twin's row of (intervention, metric).
const json::Value* TwinRow(const json::Value& report, const std::string& intervention,
                           const std::string& metric) {
  const json::Value* rows = report.Find("dense_twin_rows");
  if (rows == nullptr) return nullptr;
  for (const json::Value& r : rows->as_array()) {
    if (r.Find("intervention")->as_string() == intervention &&
        r.Find("metric")->as_string() == metric) {
      return &r;
    }
  }
  return nullptr;
}

bool Defined(const json::Value* row) {
  return row != nullptr && row->Find("defined") != nullptr && row->Find("defined")->as_bool();
}

// A defined row's value.
double Number(const json::Value* row) {
  EXPECT_TRUE(Defined(row));
  return Defined(row) ? row->Find("value")->as_double() : NAN;
}

class DemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists("/usr/share/games/fortunes/fortunes"))
        << "the fortunes corpus is missing: run scripts/setup.sh";
    for (const char* m : kSizes) {
      ASSERT_TRUE(fs::exists(fs::path(FCA_SOURCE_DIR) / "models" / m / "model.safetensors"))
          << "bundled model " << m << " is missing";
    }
    for (const char* m : kSeeds) {
      ASSERT_TRUE(fs::exists(fs::path(FCA_SOURCE_DIR) / "models" / m / "model.safetensors"))
          << "bundled model " << m << " is missing";
    }
    ASSERT_TRUE(fs::exists(ModelDir(kMoe) / "model.safetensors"))
        << "bundled model " << kMoe << " is missing";
  }
};

int64_t Binomial(int64_t n, int64_t k) {
  int64_t c = 1;
  for (int64_t i = 1; i <= k; ++i) c = c * (n - k + i) / i;
  return c;
}

// The demo's audit of the mixture of experts (moe_report.json): the routing
// rows hold what the model's shapes (its config.json and the dense twin's)
// fix, whatever its weights.
void ExpectMoeReportConsistent(const json::Value& report) {
  const json::Value config = ParseFile(ModelDir(kMoe) / "config.json");
  const json::Value twin = ParseFile(ModelDir(kMoeTwin) / "config.json");
  const int64_t layers = config.Find("num_hidden_layers")->as_int();
  const int64_t experts = config.Find("num_experts")->as_int();
  const int64_t k = config.Find("num_experts_per_tok")->as_int();
  const int64_t d = config.Find("hidden_size")->as_int();
  const int64_t width = config.Find("intermediate_size")->as_int();
  ASSERT_EQ(report.Find("models")->as_array().size(), 1u);
  ASSERT_EQ(report.Find("models")->as_array()[0].as_string(), kMoe);

  // Every intervention applies to a model with routers, each keeps some
  // share of LIVE's top-k sets, over every (window, position, router layer).
  for (const std::string& i : InterventionNames()) {
    SCOPED_TRACE(i);
    const json::Value* agreement = Row(report, kMoe, i, kTopkAgreement);
    ASSERT_NE(agreement, nullptr);
    EXPECT_GE(Number(agreement), 0.0);
    EXPECT_LE(Number(agreement), 1.0);
    EXPECT_EQ(std::stoll(agreement->Find("n")->as_string()), kWindows * kWindowLength * layers);
    for (int64_t l = 0; l < layers; ++l) {
      const double layer =
          Number(Row(report, kMoe, i, StoredMetricName(LayerKey(kLayerTopkAgreement, l))));
      EXPECT_GE(layer, 0.0) << l;
      EXPECT_LE(layer, 1.0) << l;
    }
  }
  // `correct` chooses LIVE's sets by construction; a uniform draw of k of E
  // is LIVE's set with chance 1 / C(E, k) whatever LIVE chose (sd about 0.003
  // over the 8 x 128 x 4 positions).
  EXPECT_EQ(Number(Row(report, kMoe, kCorrect, kTopkAgreement)), 1.0);
  EXPECT_NEAR(Number(Row(report, kMoe, kRandomRoute, kTopkAgreement)),
              1.0 / static_cast<double>(Binomial(experts, k)), 0.02);

  // Static routing, per layer as for the seeds: a retention and a penalty
  // per layer for each per-layer profile.
  for (const char* profile : {kStaticLayer, kStaticToken}) {
    SCOPED_TRACE(profile);
    const json::Value* ret = Row(report, kMoe, profile, kRetentionPct);
    ASSERT_NE(ret, nullptr);
    EXPECT_TRUE(!Defined(ret) || std::isfinite(ret->Find("value")->as_double()));
    for (int64_t l = 0; l < layers; ++l) {
      EXPECT_TRUE(std::isfinite(
          Number(Row(report, kMoe, profile, StoredMetricName(LayerKey(kLayerPenalty, l))))))
          << l;
    }
  }

  // Execution, LIVE: k experts run at every layer for every token, the load's
  // shares sum to 1 and its entropy is theirs.
  EXPECT_EQ(Number(Row(report, kMoe, kExecution, kBlocksExecutedFraction)),
            static_cast<double>(k) / static_cast<double>(experts));
  for (int64_t l = 0; l < layers; ++l) {
    SCOPED_TRACE(l);
    EXPECT_EQ(
        Number(Row(report, kMoe, kExecution, StoredMetricName(LayerKey(kExpertsPerToken, l)))),
        static_cast<double>(k));
    double sum = 0, entropy = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const double share =
          Number(Row(report, kMoe, kExecution, StoredMetricName(ExpertKey(kExpertShare, l, e))));
      sum += share;
      if (share > 0) entropy -= share * std::log(share);
    }
    EXPECT_NEAR(sum, 1.0, 1e-9);
    EXPECT_NEAR(
        Number(Row(report, kMoe, kExecution, StoredMetricName(LayerKey(kExpertLoadEntropy, l)))),
        entropy, 1e-9);
  }
  // Its k experts read as many MLP parameters per token as the twin's one
  // expert (SwiGLU, 3 matrices of d x width each), so per token it computes
  // the twin's FLOPs plus its routers' (d x E per layer; the twin's single
  // weight of 1 is not computed).
  EXPECT_EQ(twin.Find("num_experts")->as_int(), 1);
  EXPECT_EQ(twin.Find("hidden_size")->as_int(), d);
  EXPECT_EQ(k * width, twin.Find("intermediate_size")->as_int());
  const double flops = Number(Row(report, kMoe, kExecution, kFlopsPerToken));
  const double dense = Number(Row(report, kMoe, kExecution, kDenseFlopsPerToken));
  EXPECT_NEAR(flops - dense, 2.0 * layers * d * experts, 1e-9 * dense);
  EXPECT_EQ(Number(TwinRow(report, kExecution, kBlocksExecutedFraction)), 1.0);
  // Only the routed experts count as read: the others' parameters are not.
  EXPECT_EQ(Number(Row(report, kMoe, kExecution, kActiveParameters)),
            Number(Row(report, kMoe, kExecution, kParameters)) -
                static_cast<double>(layers * (experts - k) * 3 * d * width));
}

// "%.4f" of a defined row, as the text report prints it.
std::string Fixed4(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", v);
  return buf;
}

// The cells after the first two of every line of `section` whose first two
// cells are `key0` and `key1` (a table printed in parts repeats them).
std::vector<std::string> CellsOf(const std::string& section, const std::string& key0,
                                 const std::string& key1) {
  std::vector<std::string> out;
  std::istringstream lines(section);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string w; words >> w;) cells.push_back(w);
    if (cells.size() > 2 && cells[0] == key0 && cells[1] == key1) {
      out.insert(out.end(), cells.begin() + 2, cells.end());
    }
  }
  return out;
}

// moe_report.txt prints the routing rows of moe_report.json: per
// intervention its top-k agreement, its top-k overlap, per layer (4 layers: a
// column each) and n; per layer the experts run per token, the load's entropy, E, ln E and the
// range of the expert shares.
void ExpectRoutingPrinted(const std::string& text, const json::Value& report) {
  const json::Value config = ParseFile(ModelDir(kMoe) / "config.json");
  const int64_t layers = config.Find("num_hidden_layers")->as_int();
  const int64_t experts = config.Find("num_experts")->as_int();
  const size_t agreement_at = text.find("ROUTING AGREEMENT");
  const size_t load_at = text.find("ROUTING LOAD");
  ASSERT_NE(agreement_at, std::string::npos) << text;
  ASSERT_NE(load_at, std::string::npos) << text;
  // The load table ends where the co-activation section (or, without one,
  // the provenance) begins.
  size_t end = text.find("EXPERT CO-ACTIVATION", load_at);
  if (end == std::string::npos) end = text.find("PROVENANCE", load_at);
  const std::string agreement = text.substr(agreement_at, load_at - agreement_at);
  const std::string load = text.substr(load_at, end == std::string::npos ? end : end - load_at);
  for (const std::string& i : InterventionNames()) {
    SCOPED_TRACE(i);
    const json::Value* all = Row(report, kMoe, i, kTopkAgreement);
    ASSERT_NE(all, nullptr);
    const json::Value* overlap = Row(report, kMoe, i, kTopkOverlap);
    ASSERT_NE(overlap, nullptr);
    std::vector<std::string> expected = {Fixed4(Number(all)), Fixed4(Number(overlap))};
    for (int64_t l = 0; l < layers; ++l) {
      expected.push_back(
          Fixed4(Number(Row(report, kMoe, i, StoredMetricName(LayerKey(kLayerTopkAgreement, l))))));
    }
    expected.push_back(all->Find("n")->as_string());
    EXPECT_EQ(CellsOf(agreement, kMoe, i), expected) << agreement;
  }
  char ln_e[64];
  std::snprintf(ln_e, sizeof(ln_e), "%.4f", std::log(static_cast<double>(experts)));
  for (int64_t l = 0; l < layers; ++l) {
    SCOPED_TRACE(l);
    const std::string layer = std::to_string(l);
    double lo = 1, hi = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const double share =
          Number(Row(report, kMoe, kExecution, StoredMetricName(ExpertKey(kExpertShare, l, e))));
      lo = std::min(lo, share);
      hi = std::max(hi, share);
    }
    char per_token[64];
    std::snprintf(
        per_token, sizeof(per_token), "%.4g",
        Number(Row(report, kMoe, kExecution, StoredMetricName(LayerKey(kExpertsPerToken, l)))));
    EXPECT_EQ(CellsOf(load, kMoe, layer),
              (std::vector<std::string>{
                  per_token,
                  Fixed4(Number(Row(report, kMoe, kExecution,
                                    StoredMetricName(LayerKey(kExpertLoadEntropy, l))))),
                  std::to_string(experts), ln_e, Fixed4(lo) + ".." + Fixed4(hi)}))
        << load;
  }
}

// scripts/demo.sh with 8 windows and one timed forward: the report's numbers
// must hang together.
TEST_F(DemoTest, ShortenedDemoReportIsConsistent) {
  TempDir out;
  CommandResult r = e2e::Run(
      {"/bin/bash", std::string(FCA_SOURCE_DIR) + "/scripts/demo.sh"},
      {"FCA_DEMO_SKIP_BUILD=1", "FCA_SERVER_BIN=" FCA_SERVER_BIN, "FCA_CLI_BIN=" FCA_CLI_BIN,
       "FCA_TRAIN_BIN=" FCA_TRAIN_BIN, "FCA_DEMO_OUT=" + out.path().string(),
       "FCA_DEMO_WINDOWS=" + std::to_string(kWindows), "FCA_DEMO_TIMING=1",
       "FCA_DEMO_TIMING_BUDGET=1", "FCA_DEMO_CALIB_RESAMPLES=3"},
      600);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("FUNCTIONAL DEPENDENCE"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("mean ± sd"));

  // report.json: the GetReport message (fca's one JSON).
  const json::Value report = ParseFile(out.path() / "report.json");
  ASSERT_NE(report.Find("models"), nullptr);
  const auto& models = report.Find("models")->as_array();
  ASSERT_EQ(models.size(), 3u);
  for (const json::Value& model : models) {
    const std::string m = model.as_string();
    SCOPED_TRACE(m);
    // `correct` replays the recorded coefficients: it is the LIVE pass.
    EXPECT_NEAR(Number(Row(report, m, "correct", "nll")),
                Number(Row(report, m, "replay", "live_nll")), 1e-6);
    EXPECT_LE(Number(Row(report, m, "replay", "max_abs_logit_diff")), 1e-5);
    for (const char* profile : {"static_layer", "static_layer_position"}) {
      const json::Value* ret = Row(report, m, profile, "retention_pct");
      ASSERT_NE(ret, nullptr) << profile;
      EXPECT_TRUE(!Defined(ret) || std::isfinite(ret->Find("value")->as_double())) << profile;
    }
    for (const char* family : {"attn_gate", "mlp_gate"}) {
      const json::Value* eta = Row(report, m, "variation", std::string("eta2.") + family);
      ASSERT_NE(eta, nullptr) << family;
      // Trained gates vary: eta2 is defined for every family.
      ASSERT_TRUE(Defined(eta)) << family;
      EXPECT_GE(Number(eta), 0.0);
      EXPECT_LE(Number(eta), 1.0);
    }
    // Every block runs in a FeatureGate model: the fraction is exactly 1.
    EXPECT_EQ(Number(Row(report, m, "execution", "blocks_executed_fraction")), 1.0);
    int sites = 0;
    for (const json::Value& s : report.Find("sites")->as_array()) {
      sites += s.Find("model")->as_string() == m;
    }
    EXPECT_GT(sites, 0);
  }
  EXPECT_EQ(Number(TwinRow(report, "execution", "blocks_executed_fraction")), 1.0);

  // The calibration-uncertainty audit: penalty_calib is the full calibration
  // set's penalty (fca.md "Calibration uncertainty") over R = 3 resamples.
  const json::Value calib = ParseFile(out.path() / "calib_report.json");
  for (const json::Value& model : calib.Find("models")->as_array()) {
    const std::string m = model.as_string();
    SCOPED_TRACE(m);
    for (const char* profile : {"static_layer", "global_mean"}) {
      const json::Value* row = Row(calib, m, profile, "penalty_calib");
      ASSERT_NE(row, nullptr) << profile;
      EXPECT_EQ(Number(row), Number(Row(calib, m, profile, "penalty"))) << profile;
      EXPECT_EQ(row->Find("n")->as_string(), "3") << profile;  // int64: a JSON string
    }
  }

  const std::string html = ReadFileOrEmpty(out.path() / "report.html");
  EXPECT_THAT(html, ::testing::HasSubstr("<svg"));
  EXPECT_THAT(html, ::testing::Not(::testing::HasSubstr("<script")));

  // The size trend: three jobs compared, smallest first, each model with its
  // parameter count and its own numbers.
  auto trend = json::Parse(ReadFileOrEmpty(out.path() / "size_trend.json"));
  ASSERT_TRUE(trend.ok()) << trend.status();
  const auto& jobs = trend->Find("reports")->as_array();
  ASSERT_EQ(jobs.size(), 3u);
  std::vector<double> sizes;
  for (const json::Value& job : jobs) {
    for (const json::Value& m : job.Find("models")->as_array()) {
      sizes.push_back(Number(Row(job, m.as_string(), "execution", "parameters")));
      EXPECT_TRUE(std::isfinite(Number(Row(job, m.as_string(), "correct", "nll"))));
    }
  }
  ASSERT_EQ(sizes.size(), 5u);  // small, the three seeds, large
  EXPECT_LT(sizes.front(), sizes[1]);
  EXPECT_LT(sizes[3], sizes.back());

  // The mixture of experts, audited beside the seeds; its report prints the
  // routing rows.
  SCOPED_TRACE(kMoe);
  const json::Value moe = ParseFile(out.path() / "moe_report.json");
  ExpectMoeReportConsistent(moe);
  const std::string moe_text = ReadFileOrEmpty(out.path() / "moe_report.txt");
  EXPECT_THAT(moe_text, ::testing::HasSubstr("FUNCTIONAL DEPENDENCE"));
  ExpectRoutingPrinted(moe_text, moe);
  EXPECT_FALSE(fs::exists(out.path() / "moe_routing.txt"));
  // The seeds have no routers: their report has no routing section.
  EXPECT_THAT(ReadFileOrEmpty(out.path() / "report.txt"),
              ::testing::Not(::testing::HasSubstr("ROUTING")));
}

// The committed weights, served by fca-server, give the evaluation NLL each
// training log states (all evaluation windows, float32, as the trainer's
// final evaluation).
TEST_F(DemoTest, ServerReproducesTrainingLogNll) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  CommandResult split = e2e::Run({FCA_TRAIN_BIN, "split", "--out=" + data.string()});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  auto server =
      e2e::StartServer(FCA_SERVER_BIN, {"--models=" + std::string(FCA_SOURCE_DIR) + "/models",
                                        "--db=" + (dir.path() / "fca.sqlite").string()});
  ASSERT_NE(server, nullptr);
  const std::vector<std::string> env = {"FCA_SERVER=" + server->address()};
  auto fca = [&](std::vector<std::string> args) {
    args.insert(args.begin(), FCA_CLI_BIN);
    return e2e::Run(args, env, 600);
  };
  ASSERT_EQ(fca({"datasets", "upload", "--name=eval", (data / "eval.txt").string()}).exit_code, 0);
  ASSERT_EQ(fca({"datasets", "upload", "--name=calib", (data / "calib.txt").string()}).exit_code,
            0);
  // One job per family (a job's models share one): the seeds are job 1,
  // the mixture of experts job 2.
  const std::pair<std::string, std::string> jobs[] = {
      {"featuregate-s1,featuregate-s2,featuregate-s3", "1"}, {"olmoe-s1", "2"}};
  std::vector<std::pair<std::string, std::string>> trained;  // (model, job)
  for (const auto& [models, job] : jobs) {
    CommandResult audit =
        fca({"audit", "--models=" + models, "--eval=eval", "--calib=calib",
             "--interventions=correct", "--max_calib_windows=2", "--timing_repeats=0"});
    ASSERT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    std::stringstream names(models);
    for (std::string m; std::getline(names, m, ',');) trained.emplace_back(m, job);
  }
  for (const auto& [m, job] : trained) {
    SCOPED_TRACE(m);
    const json::Value log =
        ParseFile(fs::path(FCA_SOURCE_DIR) / "models" / m / "training_log.json");
    const json::Value* result = log.Find("result");
    ASSERT_NE(result, nullptr);
    ASSERT_NE(result->Find("final_eval_nll_nats_per_byte"), nullptr);
    ASSERT_NE(result->Find("final_eval_windows"), nullptr);
    const double logged = result->Find("final_eval_nll_nats_per_byte")->as_double();
    EXPECT_LE(logged, 1.8);  // the bar for an honestly trained model
    CommandResult q = fca({"results", "--job=" + job, "--model=" + m, "--intervention=replay",
                           "--metric=live_nll", "--format=json"});
    ASSERT_EQ(q.exit_code, 0) << q.err;
    auto rows = json::Parse(q.out);
    ASSERT_TRUE(rows.ok() && rows->as_array().size() == 1) << q.out;
    const double served = rows->as_array()[0].Find("value")->as_double();
    EXPECT_NEAR(served, logged, 1e-4);
    // Every evaluation window took part, as in the trainer's evaluation.
    EXPECT_EQ(std::stoll(rows->as_array()[0].Find("n")->as_string()),
              result->Find("final_eval_windows")->as_int());
  }
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(30), 0);
}

}  // namespace
}  // namespace fca::e2e
