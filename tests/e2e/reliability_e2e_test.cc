// Issue 9, the process half of the fault-injection suite: the real
// fca-server killed with SIGKILL at random points of a short job's life
// (upload, submit, run, end), 20 times; a second server on the same
// database. After each restart the job must end SUCCEEDED with every row
// once, and the database must pass integrity_check.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/json.h"
#include "common/random.h"
#include "storage/store.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class ReliabilityE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "fca_rel_" + std::to_string(getpid()));
    fs::create_directories(*root_ + "/models");
    fs::create_directories(*root_ + "/data");
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
             {"fg", "--controller_out_std=1.0"}, {"dense", "--family=dense"}}) {
      // Wide enough that the job runs for a while (~1-2 s) between kills.
      CommandResult r =
          e2e::Run({FCA_LOCAL_AUDIT_BIN, "init", "--out=" + *root_ + "/models/" + name,
                    "--d_model=128", "--n_layers=2", "--n_heads=4", "--n_groups=4", "--d_ff=512",
                    "--controller_width=16", "--max_seq_len=64", "--seed=1", flags});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    std::ofstream(*root_ + "/data/eval.txt") << RandomWords(32 * 96, 1);
    std::ofstream(*root_ + "/data/calib.txt") << RandomWords(32 * 48, 2);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }

  std::string Db(int run) const { return *root_ + "/run" + std::to_string(run) + ".sqlite"; }

  std::vector<std::string> ServerArgs(const std::string& db) const {
    return {"--models=" + *root_ + "/models", "--db=" + db, "--threads=1"};
  }

  CommandResult Cli(const ServerProcess& server, std::vector<std::string> args) const {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server.address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv, {}, 120);
  }

  // Uploads calib and submits the job, as a user would; fails quietly when
  // the server is killed meanwhile.
  void UploadAndSubmit(const ServerProcess& server) const {
    if (Cli(server, {"datasets", "upload", "--name=calib", *root_ + "/data/calib.txt"}).exit_code !=
        0) {
      return;
    }
    Cli(server,
        {"audit", "--detach", "--models=fg", "--dense_twin=dense", "--eval=eval", "--calib=calib",
         "--window=32", "--batch=4", "--bootstrap=400", "--timing_repeats=3", "--seed=3"});
  }

  // After a restart: whatever the kill interrupted is redone, then the job
  // is watched to its end. Returns the number of stored rows (-1 on error).
  int64_t FinishAfterRestart(const ServerProcess& server) const {
    if (Cli(server, {"jobs", "show", "1"}).exit_code != 0) UploadAndSubmit(server);
    CommandResult watch = Cli(server, {"watch", "1"});
    EXPECT_EQ(watch.exit_code, 0) << watch.err;
    CommandResult results = Cli(server, {"results", "--job=1", "--format=json"});
    auto rows = json::Parse(results.out);
    if (!rows.ok() || !rows->is_array()) return -1;
    std::set<std::string> keys;
    for (const json::Value& row : rows->as_array()) {
      std::string key;
      for (const char* field : {"model", "intervention", "metric"}) {
        const json::Value* v = row.Find(field);
        key += (v != nullptr && v->is_string() ? v->as_string() : "?") + "/";
      }
      EXPECT_TRUE(keys.insert(key).second) << "row twice: " << key;
    }
    return static_cast<int64_t>(rows->as_array().size());
  }

  void WaitUntilRunning(const ServerProcess& server) const {
    for (int polls = 0; polls < 3000; ++polls) {
      const std::string out = Cli(server, {"jobs", "show", "1"}).out;
      if (out.find("RUNNING") != std::string::npos || out.find("SUCCEEDED") != std::string::npos) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  static void ExpectIntact(const std::string& db) {
    storage::StoreOptions options;
    options.path = db;
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    auto integrity = (*store)->IntegrityCheck();
    ASSERT_TRUE(integrity.ok()) << integrity.status();
    EXPECT_EQ(*integrity, "ok");
    auto running = (*store)->CountJobs(std::nullopt,
                                       {storage::JobState::kRunning, storage::JobState::kQueued});
    ASSERT_TRUE(running.ok());
    EXPECT_EQ(*running, 0);
  }

  static std::string* root_;
};

std::string* ReliabilityE2ETest::root_ = nullptr;

TEST_F(ReliabilityE2ETest, KillMinus9AtRandomPointsTwentyTimes) {
  // A clean run: the reference row count and how long a job's life takes.
  int64_t clean_rows = 0;
  double life_s = 0, run_s = 0;
  {
    auto server = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(0)));
    ASSERT_NE(server, nullptr);
    ASSERT_EQ(
        Cli(*server, {"datasets", "upload", "--name=eval", *root_ + "/data/eval.txt"}).exit_code,
        0);
    // The job's life: from the calib upload to the job's end; and its run.
    const auto start = Clock::now();
    std::thread user([&] { UploadAndSubmit(*server); });
    WaitUntilRunning(*server);
    const auto running = Clock::now();
    user.join();
    EXPECT_EQ(Cli(*server, {"watch", "1"}).exit_code, 0);
    life_s = std::chrono::duration<double>(Clock::now() - start).count();
    run_s = std::chrono::duration<double>(Clock::now() - running).count();
    clean_rows = FinishAfterRestart(*server);
    server->Signal(SIGTERM);
    EXPECT_EQ(server->Wait(20), 0);
  }
  ASSERT_GT(clean_rows, 20);
  Rng rng(20261202);
  int succeeded = 0;
  std::map<std::string, int> landed;
  for (int run = 1; run <= 20; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    auto server = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(run)));
    ASSERT_NE(server, nullptr);
    ASSERT_EQ(
        Cli(*server, {"datasets", "upload", "--name=eval", *root_ + "/data/eval.txt"}).exit_code,
        0);
    // Odd runs: anywhere in the job's life; even runs: once it runs.
    const bool while_running = run % 2 == 0;
    const double kill_after_s =
        static_cast<double>(rng.Uniform(1000)) / 1000 * (while_running ? run_s : life_s);
    std::thread user([&] { UploadAndSubmit(*server); });
    if (while_running) WaitUntilRunning(*server);
    std::this_thread::sleep_for(std::chrono::duration<double>(kill_after_s));
    server->Signal(SIGKILL);
    server->Wait(10);
    user.join();
    auto restarted = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(run)));
    ASSERT_NE(restarted, nullptr);
    // Where the kill landed, as the restarted server finds the job.
    const std::string before = Cli(*restarted, {"jobs", "show", "1"}).out;
    const bool had_job = before.find("state:") != std::string::npos;
    // The restarted server may already have claimed the job once more.
    const size_t at = before.find("attempts:");
    const int attempts = at == std::string::npos ? 0 : std::atoi(before.c_str() + at + 9);
    const bool requeued = before.find("QUEUED") != std::string::npos;
    const bool ran_before = attempts >= 2 || (attempts == 1 && requeued);
    ++landed[!had_job                                        ? "before the job was stored"
             : before.find("SUCCEEDED") != std::string::npos ? "after the job ended"
             : ran_before                                    ? "while the job ran"
                                                             : "while the job was queued"];
    const int64_t rows = FinishAfterRestart(*restarted);
    std::printf("  run %d: killed %.2f s %s; on restart: attempts %d%s\n", run, kill_after_s,
                while_running ? "after RUNNING was seen" : "after the upload began", attempts,
                requeued ? ", queued again" : "");
    EXPECT_EQ(rows, clean_rows) << "killed after " << kill_after_s << " s";
    CommandResult show = Cli(*restarted, {"jobs", "show", "1"});
    if (show.out.find("SUCCEEDED") != std::string::npos) ++succeeded;
    restarted->Signal(SIGTERM);
    EXPECT_EQ(restarted->Wait(20), 0);
    ExpectIntact(Db(run));
  }
  EXPECT_EQ(succeeded, 20);
  std::printf(
      "kill -9 runs: 20, jobs succeeded after restart: %d, rows per job: %lld, "
      "job life %.2f s, of which running %.2f s\n",
      succeeded, static_cast<long long>(clean_rows), life_s, run_s);
  for (const auto& [where, count] : landed) std::printf("  killed %s: %d\n", where.c_str(), count);
}

TEST_F(ReliabilityE2ETest, ASecondServerOnTheSameDatabaseRefusesToStart) {
  auto first = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(100)));
  ASSERT_NE(first, nullptr);
  std::vector<std::string> argv = {FCA_SERVER_BIN, "--listen=127.0.0.1:0"};
  for (const std::string& arg : ServerArgs(Db(100))) argv.push_back(arg);
  CommandResult second = e2e::Run(argv, {}, 30);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("another fca-server"), std::string::npos) << second.err;
  // The first one still serves.
  EXPECT_EQ(Cli(*first, {"models"}).exit_code, 0);
  first->Signal(SIGTERM);
  EXPECT_EQ(first->Wait(20), 0);
  // Once it is gone, a new server starts on the file.
  auto third = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(100)));
  ASSERT_NE(third, nullptr);
}

TEST_F(ReliabilityE2ETest, OwnersDeleteJobsAndDatasetsThroughTheCli) {
  auto server = ServerProcess::Start(FCA_SERVER_BIN, ServerArgs(Db(200)));
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(
      Cli(*server, {"datasets", "upload", "--name=eval", *root_ + "/data/eval.txt"}).exit_code, 0);
  UploadAndSubmit(*server);
  // (Refusals while the job is queued or running: core's ReliabilityTest.)
  EXPECT_EQ(Cli(*server, {"watch", "1"}).exit_code, 0);
  CommandResult del = Cli(*server, {"jobs", "delete", "1"});
  EXPECT_EQ(del.exit_code, 0) << del.err;
  EXPECT_NE(Cli(*server, {"jobs", "show", "1"}).exit_code, 0);
  CommandResult freed = Cli(*server, {"datasets", "delete", "calib"});
  EXPECT_EQ(freed.exit_code, 0) << freed.err;
  EXPECT_NE(freed.out.find("bytes freed"), std::string::npos) << freed.out;
  CommandResult list = Cli(*server, {"datasets", "list"});
  EXPECT_EQ(list.out.find("calib"), std::string::npos) << list.out;
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
  ExpectIntact(Db(200));
}

}  // namespace
}  // namespace fca::e2e
