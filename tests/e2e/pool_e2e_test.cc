// End to end (issue 38): two bundled seeds audited one job each, pooled with
// `fca pool`, give the across-model rows of the job that audited both
// (docs/fca.md "Pooling jobs"), through the real fca-server and CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

using Across = std::map<std::pair<std::string, std::string>, const json::Value*>;

// A report message's across-model summaries by (intervention, metric).
Across AcrossOf(const json::Value& report) {
  Across out;
  const json::Value* metrics = report.Find("metrics");
  if (metrics == nullptr) return out;
  for (const json::Value& m : metrics->as_array()) {
    out[{StringField(m, "intervention"), StringField(m, "metric")}] = m.Find("across_models");
  }
  return out;
}

double Number(const json::Value& v, const char* key) {
  const json::Value* x = v.Find(key);
  return x == nullptr ? -1e300 : x->as_double();
}

class PoolE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_pool_e2e_" + std::to_string(getpid());
    fs::create_directories(root_);
    server_ = StartServer(FCA_SERVER_BIN, {"--models=" + std::string(FCA_SOURCE_DIR) + "/models",
                                           "--db=" + root_ + "/fca.sqlite", "--threads=1"});
    ASSERT_NE(server_, nullptr);
    WriteFile(root_ + "/eval.txt", RandomWords(32 * 40, 21));
    WriteFile(root_ + "/calib.txt", RandomWords(32 * 30, 22));
    for (const char* name : {"eval", "calib"}) {
      CommandResult r =
          Cli({"datasets", "upload", std::string("--name=") + name, root_ + "/" + name + ".txt"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(root_);
  }

  CommandResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  // Audits `models` (one job) and waits for it to succeed.
  void Audit(const std::string& models) {
    CommandResult r =
        Cli({"audit", "--models=" + models, "--eval=eval", "--calib=calib", "--window=32",
             "--max_eval_windows=8", "--max_calib_windows=8", "--batch=4", "--bootstrap=100",
             "--timing_repeats=0", "--seed=5", "--interventions=correct,cross_input,global_mean"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
  }

  json::Value Saved(const std::string& file) {
    auto v = json::Parse(ReadFileOrEmpty(root_ + "/" + file));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : json::Value::MakeObject();
  }

  std::string root_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(PoolE2ETest, TwoSeedJobsPoolToTheJobOfBoth) {
  Audit("featuregate-s1");                 // job 1
  Audit("featuregate-s2");                 // job 2
  Audit("featuregate-s1,featuregate-s2");  // job 3
  CommandResult pooled = Cli({"pool", "1", "2", "--save_json=" + root_ + "/pool.json"});
  ASSERT_EQ(pooled.exit_code, 0) << pooled.err;
  EXPECT_NE(pooled.out.find("featuregate-s2 (job 2)"), std::string::npos) << pooled.out;
  EXPECT_NE(pooled.out.find("mean ± sd (min..max)"), std::string::npos) << pooled.out;
  CommandResult single = Cli({"report", "3", "--save_json=" + root_ + "/report.json"});
  ASSERT_EQ(single.exit_code, 0) << single.err;

  const json::Value pool = Saved("pool.json");
  const json::Value* report = pool.Find("report");
  ASSERT_NE(report, nullptr);
  const Across pooled_rows = AcrossOf(*report);
  const json::Value single_report = Saved("report.json");  // the map points into it
  const Across single_rows = AcrossOf(single_report);
  int compared = 0;
  for (const char* intervention : {"correct", "cross_input", "global_mean"}) {
    for (const char* metric : {"nll", "penalty"}) {
      auto s = single_rows.find({intervention, metric});
      if (s == single_rows.end()) continue;
      auto p = pooled_rows.find({intervention, metric});
      ASSERT_NE(p, pooled_rows.end()) << intervention << " " << metric;
      for (const char* field : {"mean", "sd", "ci_low", "ci_high"}) {
        // Both printed from doubles: equal to rounding.
        EXPECT_NEAR(Number(*p->second, field), Number(*s->second, field), 1e-9)
            << intervention << " " << metric << " " << field;
      }
      EXPECT_EQ(StringField(*p->second, "n"), "2");
      ++compared;
    }
  }
  EXPECT_EQ(compared, 5);  // three NLLs, two penalties (correct has none)

  // featuregate-s1 in jobs 1 and 3: it would count twice (8: failed precondition).
  CommandResult twice = Cli({"pool", "1", "3"});
  EXPECT_EQ(twice.exit_code, 8) << twice.err;
  EXPECT_NE(twice.err.find("featuregate-s1"), std::string::npos) << twice.err;
  EXPECT_EQ(Cli({"pool", "1", "1"}).exit_code, 3);  // named twice: invalid argument
  EXPECT_EQ(Cli({"pool", "1"}).exit_code, 2);       // usage
}

}  // namespace
}  // namespace fca::e2e
