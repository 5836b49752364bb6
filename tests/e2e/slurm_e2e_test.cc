// Issue 10, Slurm: a real single-node Slurm cluster (slurm-wlm + munge,
// started by scripts/slurm_cluster.sh as root), fca-server --executor=slurm
// placing each task as an sbatch job that runs fca-worker --task=ID, driven
// by the real fca CLI.
//   - a three-model audit through Slurm gives, bitwise, the NLLs of the same
//     job run by the server's own worker;
//   - scancel of a running task: it is placed again and finishes, no result
//     row twice;
//   - fca jobs cancel stops the job's Slurm jobs.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "common/json.h"
#include "tests/e2e/process.h"

namespace fca {
namespace {

using e2e::CommandResult;
using e2e::RandomWords;
using e2e::ServerProcess;
using e2e::StringField;
using e2e::WriteFile;

namespace fs = std::filesystem;

std::string g_root;     // models/, data/, databases
std::string g_cluster;  // the cluster's state folder
bool g_cluster_up = false;

void InitModel(const std::string& name, const std::vector<std::string>& flags) {
  CommandResult r = e2e::InitTinyModel(FCA_LOCAL_AUDIT_BIN, g_root + "/models/" + name, flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::string Slurm() { return std::string(FCA_SOURCE_DIR) + "/scripts/slurm_cluster.sh"; }

class SlurmE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = ::testing::TempDir() + "fca_slurm_" + std::to_string(getpid());
    g_cluster = g_root + "/cluster";
    fs::create_directories(g_root + "/models");
    fs::create_directories(g_root + "/data");
    InitModel("fg-a", {"--seed=1", "--controller_out_std=1.0"});
    InitModel("fg-b", {"--seed=2", "--controller_out_std=1.0"});
    InitModel("fg-c", {"--seed=4", "--controller_out_std=1.0"});
    InitModel("dense", {"--family=dense", "--seed=1"});
    InitModel("fg-wide", {"--seed=3", "--controller_out_std=1.0", "--d_model=256", "--d_ff=1024",
                          "--n_heads=4"});
    WriteFile(g_root + "/data/eval.txt", RandomWords(16 * 40, 1));
    WriteFile(g_root + "/data/calib.txt", RandomWords(16 * 30, 2));
    WriteFile(g_root + "/data/long.txt", RandomWords(64 * 300, 3));
    // The cluster: its clients (sbatch, squeue, scancel), the server's and
    // this test's, find it through SLURM_CONF.
    CommandResult start = e2e::Run({"/bin/bash", Slurm(), "start", g_cluster}, {}, 120);
    ASSERT_EQ(start.exit_code, 0) << "cannot start the Slurm cluster (run as root, with "
                                     "scripts/slurm_cluster.sh install done): "
                                  << start.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(start.out, m, std::regex("SLURM_CONF=(\\S+)"))) << start.out;
    setenv("SLURM_CONF", m[1].str().c_str(), 1);
    g_cluster_up = true;
  }

  static void TearDownTestSuite() {
    if (g_cluster_up) e2e::Run({"/bin/bash", Slurm(), "stop", g_cluster}, {}, 120);
    fs::remove_all(g_root);
  }

  void SetUp() override {
    ASSERT_TRUE(g_cluster_up);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    db_ = g_root + "/" + info->name() + ".sqlite";
  }

  void StartServer(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--models=" + g_root + "/models", "--db=" + db_,
                                     "--threads=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = e2e::StartServer(FCA_SERVER_BIN, args);
    ASSERT_NE(server_, nullptr);
  }

  void StartSlurmServer() {
    // No --slurm_worker: the default, fca-worker beside fca-server (both in
    // build/bin), is what a source build's user runs.
    StartServer({"--workers=0", "--executor=slurm", "--lease_seconds=3",
                 "--slurm_log_dir=" + g_root + "/slurm-logs"});
  }

  CommandResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  void Upload(const std::string& name, const std::string& file) {
    CommandResult r = Cli({"datasets", "upload", "--name=" + name, g_root + "/data/" + file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  json::Value Results(const std::string& job) {
    CommandResult r = Cli({"results", "--job=" + job, "--format=json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto v = json::Parse(r.out);
    EXPECT_TRUE(v.ok()) << v.status() << r.out.substr(0, 200);
    return v.ok() ? *v : json::Value::MakeArray();
  }

  std::string Show(const std::string& job) { return Cli({"jobs", "show", job}).out; }

  std::string State(const std::string& job) {
    const std::string out = Show(job);
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("state: +(\\w+)"))) return "?";
    return m[1].str();
  }

  // Each check runs the CLI (and squeue): every 100 ms is often enough.
  bool WaitFor(const std::function<bool()>& done, int seconds) {
    return e2e::PollUntil(done, seconds, 100);
  }

  std::string db_;
  std::unique_ptr<ServerProcess> server_;
};

// (model/intervention/metric) -> value of the rows whose metric is an NLL
// or a penalty (timings differ from run to run); a row twice fails.
std::map<std::string, double> NllRows(const json::Value& rows) {
  std::map<std::string, double> out;
  std::set<std::string> keys;
  for (const json::Value& row : rows.as_array()) {
    const std::string key = StringField(row, "model") + "/" + StringField(row, "intervention") +
                            "/" + StringField(row, "metric");
    EXPECT_TRUE(keys.insert(key).second) << "row twice: " << key;
    const std::string metric = StringField(row, "metric");
    const json::Value* value = row.Find("value");
    if ((metric == "nll" || metric == "penalty") && value != nullptr && value->is_number()) {
      out[key] = value->as_double();
    }
  }
  return out;
}

// Every Slurm job id named in the job's events ("placed as Slurm job N").
std::vector<std::string> Placements(const std::string& watch_output) {
  std::vector<std::string> ids;
  std::regex placed("placed as Slurm job (\\d+)");
  for (auto it = std::sregex_iterator(watch_output.begin(), watch_output.end(), placed);
       it != std::sregex_iterator(); ++it) {
    ids.push_back((*it)[1].str());
  }
  return ids;
}

std::vector<std::string> ThreeModelAudit() {
  return {"audit",       "--models=fg-a,fg-b,fg-c", "--dense_twin=dense",
          "--eval=eval", "--calib=calib",           "--window=16",
          "--batch=4",   "--bootstrap=200",         "--timing_repeats=2",
          "--seed=5"};
}

TEST_F(SlurmE2ETest, AThreeModelAuditThroughSlurmGivesTheInProcessNumbersBitwise) {
  StartServer({"--workers=1"});
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  CommandResult local = Cli(ThreeModelAudit());
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::map<std::string, double> in_process = NllRows(Results("1"));
  server_->Signal(SIGTERM);
  server_->Wait(30);

  db_ += ".slurm";
  StartSlurmServer();
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  CommandResult slurm = Cli(ThreeModelAudit());
  ASSERT_EQ(slurm.exit_code, 0) << slurm.err << slurm.out << server_->Stderr();
  EXPECT_EQ(State("1"), "SUCCEEDED");
  const std::map<std::string, double> through_slurm = NllRows(Results("1"));
  EXPECT_GT(in_process.size(), 30u);
  EXPECT_EQ(through_slurm, in_process);  // exact doubles (JSON prints them round-trip)
  // Each model ran as a Slurm job of its own, named in the job's events.
  CommandResult watch = Cli({"watch", "1"});
  const std::vector<std::string> placed = Placements(watch.out + watch.err);
  EXPECT_EQ(std::set<std::string>(placed.begin(), placed.end()).size(), 3u)
      << watch.out << watch.err;
  EXPECT_NE(Show("1").find("[slurm job"), std::string::npos) << Show("1");
}

TEST_F(SlurmE2ETest, AScancelledTaskIsPlacedAgainAndFinishesWithoutDuplicateRows) {
  StartSlurmServer();
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  ASSERT_EQ(Cli({"audit", "--detach", "--models=fg-wide", "--eval=long", "--calib=calib",
                 "--window=64", "--batch=2", "--timing_repeats=1", "--bootstrap=100"})
                .exit_code,
            0);
  // Running on a node: the task shows its worker and its Slurm job.
  std::string slurm_id;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::smatch m;
        const std::string show = Show("1");
        if (!std::regex_search(show, m, std::regex("RUNNING .* on \\S+ +\\[slurm job (\\d+)")))
          return false;
        slurm_id = m[1].str();
        return true;
      },
      60))
      << Show("1") << server_->Stderr();
  CommandResult cancel = e2e::Run({"/usr/bin/scancel", slurm_id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  ASSERT_TRUE(WaitFor([&] { return State("1") == "SUCCEEDED"; }, 300))
      << Show("1") << server_->Stderr();
  CommandResult watch = Cli({"watch", "1"});
  const std::vector<std::string> placed = Placements(watch.out + watch.err);
  EXPECT_GE(placed.size(), 2u) << watch.out << watch.err;
  EXPECT_NE(placed.back(), slurm_id);
  EXPECT_GT(NllRows(Results("1")).size(), 5u);  // and no row twice
}

TEST_F(SlurmE2ETest, CancellingAJobStopsItsSlurmJobs) {
  StartSlurmServer();
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  ASSERT_EQ(Cli({"audit", "--detach", "--models=fg-wide,fg-a", "--eval=long", "--calib=calib",
                 "--window=64", "--batch=2", "--timing_repeats=1", "--bootstrap=100"})
                .exit_code,
            0);
  ASSERT_TRUE(
      WaitFor([&] { return Show("1").find("RUNNING   attempts") != std::string::npos; }, 60))
      << Show("1");
  ASSERT_EQ(Cli({"jobs", "cancel", "1"}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State("1") == "CANCELLED"; }, 60)) << Show("1");
  // No fca task is left pending or running in Slurm.
  ASSERT_TRUE(WaitFor(
      [&] {
        CommandResult q = e2e::Run({"/usr/bin/squeue", "-h", "--name=fca-task", "-o", "%i %T"});
        return q.exit_code == 0 && q.out.find("PENDING") == std::string::npos &&
               q.out.find("RUNNING") == std::string::npos;
      },
      60));
}

}  // namespace
}  // namespace fca
