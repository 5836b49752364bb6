// The olmoe, qwen2_moe and mixtral families (docs/moe.md) through the real server and
// CLI: the tiny Hugging Face folders of tests/data audited with every
// intervention, their routing rows, and a broken folder listed apart as
// unavailable while the server keeps serving.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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

class MoeE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "fca_moe_e2e_" + std::to_string(getpid()));
    const fs::path models = fs::path(*root_) / "models";
    fs::create_directories(models);
    const fs::path data = FCA_TEST_DATA_DIR;
    for (const char* name : {"olmoe-tiny", "qwen2-moe-tiny", "mixtral-tiny"}) {
      fs::create_directories(models / name);
      for (const char* file : {"config.json", "model.safetensors"}) {
        fs::copy(data / name / file, models / name / file);
      }
    }
    // A folder whose config asks for more experts per token than it has.
    fs::create_directories(models / "topk-too-large");
    fs::copy(data / "olmoe-tiny" / "model.safetensors", models / "topk-too-large");
    std::string config = ReadFileOrEmpty((data / "olmoe-tiny" / "config.json").string());
    const std::string key = "\"num_experts_per_tok\": 2";
    config.replace(config.find(key), key.size(), "\"num_experts_per_tok\": 9");
    std::ofstream(models / "topk-too-large" / "config.json") << config;
    for (const char* name : {"eval", "calib"}) {
      std::ofstream(fs::path(*root_) / (std::string(name) + ".txt"))
          << RandomWords(name[0] == 'e' ? 2048 : 4096, name[0] == 'e' ? 31 : 32);
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

  static std::string* root_;
  static ServerProcess* server_;
};

std::string* MoeE2ETest::root_ = nullptr;
ServerProcess* MoeE2ETest::server_ = nullptr;

TEST_F(MoeE2ETest, ListsBothFamiliesAndTheBrokenFolderApart) {
  CommandResult r = Fca({"models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name :
       {"olmoe-tiny", "qwen2-moe-tiny", "mixtral-tiny", "olmoe", "qwen2_moe", "mixtral"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
  }
  // Not in the models table: under "Unavailable", with the reason.
  const size_t unavailable = r.out.find("\nUnavailable");
  ASSERT_NE(unavailable, std::string::npos) << r.out;
  EXPECT_GT(r.out.find("topk-too-large: "), unavailable) << r.out;
  EXPECT_GT(r.out.find("num_experts_per_tok"), unavailable) << r.out;
  CommandResult submit = Fca({"audit", "--detach", "--models=topk-too-large", "--eval=eval",
                              "--calib=calib", "--window=32"});
  EXPECT_NE(submit.exit_code, 0) << submit.out;
  EXPECT_NE((submit.out + submit.err).find("num_experts_per_tok"), std::string::npos)
      << submit.out << submit.err;
  EXPECT_EQ(Fca({"models"}).exit_code, 0);
}

TEST_F(MoeE2ETest, EveryFamilyAuditsWithEveryIntervention) {
  for (const char* model : {"olmoe-tiny", "qwen2-moe-tiny", "mixtral-tiny"}) {
    SCOPED_TRACE(model);
    CommandResult submit =
        Fca({"audit", "--detach", std::string("--models=") + model, "--eval=eval", "--calib=calib",
             "--window=32", "--timing_repeats=0", "--fidelity_check_every=1",
             "--interventions=cross_input,token_shuffle,static_layer,static_layer_position,"
             "global_mean,static_token,neutral"});
    ASSERT_EQ(submit.exit_code, 0) << submit.err;
    const int job = std::stoi(submit.out);
    CommandResult watch = Fca({"watch", std::to_string(job)});
    ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
    std::map<std::string, double> n = Numbers(job);
    for (const char* i : {"cross_input", "token_shuffle", "static_layer", "static_layer_position",
                          "global_mean", "static_token", "neutral"}) {
      EXPECT_EQ(n.count(std::string(i) + "/penalty"), 1u) << i;
    }
    EXPECT_EQ(n.count("variation/eta2.router"), 1u);
    EXPECT_EQ(n.count("variation/site_mean.router.1"), 1u);
    // Replay of the recording is LIVE bit for bit.
    EXPECT_EQ(n["replay/max_abs_logit_diff"], 0.0);
    const bool qwen = std::string(model) == "qwen2-moe-tiny";
    const bool mixtral = std::string(model) == "mixtral-tiny";
    if (qwen) {
      EXPECT_EQ(n.count("variation/eta2.shared_gate"), 1u);
    }
    // Top-2 of 8 experts (olmoe), of 6 plus the shared expert (qwen2_moe), of 4
    // (mixtral), in each of 2 layers.
    const int experts = qwen ? 6 : mixtral ? 4 : 8;
    EXPECT_DOUBLE_EQ(n["execution/blocks_executed_fraction"],
                     qwen ? 3.0 / 7.0 : 2.0 / static_cast<double>(experts));
    EXPECT_DOUBLE_EQ(n["execution/blocks_per_token"], qwen ? 6.0 : 4.0);
    // The routing rows: k experts per token and layer, shares summing to 1,
    // their entropy within (0, ln E], and fewer active parameters than in all.
    for (int l = 0; l < 2; ++l) {
      const std::string layer = std::to_string(l);
      EXPECT_DOUBLE_EQ(n["execution/experts_per_token." + layer], 2.0);
      double sum = 0;
      for (int e = 0; e < experts; ++e) {
        sum += n["execution/expert_share." + layer + "." + std::to_string(e)];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      const double entropy = n["execution/expert_load_entropy." + layer];
      EXPECT_GT(entropy, 0.0);
      EXPECT_LE(entropy, std::log(experts) + 1e-12);
      // Co-activation over the same tokens (fca.md "Routing statistics"):
      // with k = 2 each token holds one pair, so a layer's pairs sum to 1,
      // and the pairs holding expert e add up to the tokens choosing e,
      // k * share_e (each with k - 1 = 1 partner).
      double pairs = 0;
      for (int e = 0; e < experts; ++e) {
        double with_e = 0;
        for (int f = 0; f < experts; ++f) {
          if (f == e) continue;
          const std::string pair =
              std::to_string(std::min(e, f)) + "." + std::to_string(std::max(e, f));
          with_e += n["execution/expert_coactivation." + layer + "." + pair];
          if (e < f) pairs += n["execution/expert_coactivation." + layer + "." + pair];
        }
        EXPECT_NEAR(with_e, 2 * n["execution/expert_share." + layer + "." + std::to_string(e)],
                    1e-12);
      }
      EXPECT_NEAR(pairs, 1.0, 1e-12);
    }
    // A keyed metric by its name alone: every pair of both layers.
    CommandResult pairs = Fca({"results", "--job=" + std::to_string(job),
                               "--metric=expert_coactivation", "--format=csv"});
    ASSERT_EQ(pairs.exit_code, 0) << pairs.err;
    EXPECT_EQ(std::count(pairs.out.begin(), pairs.out.end(), '\n'),
              1 + 2 * experts * (experts - 1) / 2)
        << pairs.out;  // the header, then one line per pair
                       // Every expert LIVE chose is kept under correct.
    EXPECT_EQ(n["correct/topk_overlap"], 1.0);
    EXPECT_GE(n["neutral/topk_overlap"], n["neutral/topk_agreement"]);
    EXPECT_GT(n["execution/active_parameters"], 0.0);
    EXPECT_LT(n["execution/active_parameters"], n["execution/parameters"]);
    const std::string html = *root_ + "/" + model + ".html";
    CommandResult report = Fca({"report", std::to_string(job), "--save_html=" + html});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    EXPECT_NE(report.out.find("router"), std::string::npos) << report.out;
  }
}

}  // namespace
}  // namespace fca::e2e
