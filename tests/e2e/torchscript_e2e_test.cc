// The torchscript family through the real server and CLI (docs/torchscript.md):
// featuregate-s1 exported to TorchScript gives the native family's numbers,
// the mixture-of-experts example audits end to end, and broken modules fail
// their jobs with a clear message while the server keeps serving.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

class TorchScriptE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "fca_ts_e2e_" + std::to_string(getpid()));
    const fs::path models = fs::path(*root_) / "models";
    fs::create_directories(models);
    const fs::path source = FCA_SOURCE_DIR;
    fs::copy(source / "models" / "featuregate-s1", models / "featuregate-s1");
    for (const char* name : {"featuregate-s1-ts", "moe-tiny"}) {
      fs::copy(source / "examples" / "models" / name, models / name);
    }
    for (const char* name : {"replay-recomputes", "throws-on-long-windows", "garbage"}) {
      fs::copy(source / "tests" / "data" / "torchscript" / name, models / name);
    }
    for (const char* name : {"eval", "calib"}) {
      std::ofstream(fs::path(*root_) / (std::string(name) + ".txt"))
          << RandomWords(name[0] == 'e' ? 2048 : 4096, name[0] == 'e' ? 21 : 22);
    }
    server_ = e2e::StartServer(FCA_SERVER_BIN,
                               {"--models=" + models.string(), "--db=" + *root_ + "/fca.sqlite"})
                  .release();
    if (server_ == nullptr) return;
    for (const char* name : {"eval", "calib"}) {
      CommandResult r =
          Fca({"datasets", "upload", std::string("--name=") + name, *root_ + "/" + name + ".txt"});
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
  }

  static void TearDownTestSuite() {
    delete server_;
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
  }

  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static CommandResult Fca(std::vector<std::string> args) {
    args.insert(args.begin(), FCA_CLI_BIN);
    return e2e::Run(args, {"FCA_SERVER=" + server_->address()}, 300);
  }

  // `fca audit --detach` of `model` (64-token windows unless `extra` says).
  static std::vector<std::string> Audit(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> args = {"audit",       "--detach",      "--models=" + model,
                                     "--eval=eval", "--calib=calib", "--timing_repeats=0"};
    if (extra.empty() || extra[0].rfind("--window=", 0) != 0) args.push_back("--window=64");
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Submits, then watches; the job id and the watch's result.
  static std::pair<int, CommandResult> SubmitAndWatch(std::vector<std::string> args) {
    CommandResult submit = Fca(args);
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    if (submit.exit_code != 0) return {-1, submit};
    const int job = std::stoi(submit.out);
    return {job, Fca({"watch", std::to_string(job)})};
  }

  // (intervention/metric) -> value of one job's defined rows.
  static std::map<std::string, double> Numbers(int job) {
    CommandResult r = Fca({"results", "--job=" + std::to_string(job), "--format=json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, double> out;
    auto rows = json::Parse(r.out);
    EXPECT_TRUE(rows.ok()) << r.out;
    if (!rows.ok()) return out;
    for (const json::Value& row : rows->as_array()) {
      const json::Value* value = row.Find("value");
      if (value == nullptr || !value->is_number()) continue;
      out[row.Find("intervention")->as_string() + "/" + row.Find("metric")->as_string()] =
          value->as_double();
    }
    return out;
  }

  static void ExpectServing() {
    CommandResult r = Fca({"models"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }

  static std::string* root_;
  static ServerProcess* server_;
};

std::string* TorchScriptE2ETest::root_ = nullptr;
ServerProcess* TorchScriptE2ETest::server_ = nullptr;

TEST_F(TorchScriptE2ETest, ListsTheTorchScriptModels) {
  CommandResult r = Fca({"models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"featuregate-s1-ts", "moe-tiny", "torchscript"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
  }
}

TEST_F(TorchScriptE2ETest, FeatureGateS1InTorchScriptGivesTheNativeNumbers) {
  std::map<std::string, double> numbers[2];
  const char* models[2] = {"featuregate-s1", "featuregate-s1-ts"};
  for (int i = 0; i < 2; ++i) {
    auto [job, watch] = SubmitAndWatch(Audit(models[i], {"--fidelity_check_every=1"}));
    ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
    numbers[i] = Numbers(job);
  }
  int compared = 0;
  for (const auto& [key, value] : numbers[0]) {
    const bool science =
        key.rfind("execution/", 0) != 0 && key.find("seconds") == std::string::npos;
    if (!science) continue;
    ASSERT_EQ(numbers[1].count(key), 1u) << key;
    EXPECT_NEAR(numbers[1][key], value, 1e-6 * std::max(1.0, std::abs(value))) << key;
    ++compared;
  }
  EXPECT_GT(compared, 40);
  for (const char* key : {"correct/nll", "cross_input/penalty", "global_mean/penalty"}) {
    EXPECT_EQ(numbers[0].count(key), 1u) << key;
  }
  EXPECT_EQ(numbers[1]["execution/flops_per_token"], numbers[0]["execution/flops_per_token"]);
}

TEST_F(TorchScriptE2ETest, TheMixtureOfExpertsExampleAuditsEndToEnd) {
  auto [job, watch] = SubmitAndWatch(Audit("moe-tiny", {}));
  ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  std::map<std::string, double> n = Numbers(job);
  for (const char* i : {"cross_input", "token_shuffle", "static_layer", "static_layer_position",
                        "global_mean", "static_token", "neutral"}) {
    EXPECT_EQ(n.count(std::string(i) + "/penalty"), 1u) << i;
  }
  EXPECT_EQ(n.count("variation/eta2.router"), 1u);
  // Replay fidelity held (the job would have failed), and top-2 of 4
  // experts run per token and layer.
  EXPECT_LE(n["replay/max_abs_logit_diff"], 1e-5);
  EXPECT_EQ(n["execution/blocks_executed_fraction"], 0.5);
  const std::string html = *root_ + "/moe.html";
  CommandResult report = Fca({"report", std::to_string(job), "--save_html=" + html});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("moe-tiny"), std::string::npos);
  EXPECT_NE(report.out.find("router"), std::string::npos) << report.out;
  const std::string page = ReadFileOrEmpty(html);
  EXPECT_NE(page.find("<html"), std::string::npos);
  EXPECT_NE(page.find("moe-tiny"), std::string::npos);
}

TEST_F(TorchScriptE2ETest, BrokenModulesFailTheirJobsAndTheServerKeepsServing) {
  struct Case {
    std::string model;
    std::string message;
  } cases[] = {
      {"replay-recomputes", "replay() ignores the coefficients of site gate.0"},
      {"throws-on-long-windows", "windows longer than 8 tokens are not supported"},
      {"garbage", "not a TorchScript module"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    // 16 tokens: throws-on-long-windows passed its 8-token probe at load.
    // (Words repeat in 16-byte windows; no profile is compared here.)
    auto [job, watch] = SubmitAndWatch(Audit(c.model, {"--window=16", "--allow_overlap"}));
    EXPECT_NE(watch.exit_code, 0) << watch.out;
    CommandResult show = Fca({"jobs", "show", std::to_string(job)});
    EXPECT_NE((watch.out + watch.err + show.out).find(c.message), std::string::npos)
        << watch.out << watch.err << show.out;
    EXPECT_EQ((watch.out + watch.err + show.out).find("code/__torch__"), std::string::npos);
    ExpectServing();
  }
  auto [job, watch] = SubmitAndWatch(Audit("moe-tiny", {"--interventions=cross_input"}));
  EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
}

}  // namespace
}  // namespace fca::e2e
