// Issue 9, the process half of the fault-injection suite: the real
// fca-server killed with SIGKILL at random points of a short job's life
// (upload, submit, run, end), 20 times; a second server on the same
// database. After each restart the job must end SUCCEEDED with every row
// once, and the database must pass integrity_check. Issue 23: the same with
// jobs in three projects whose members cross them, checked after each
// restart as those users through the CLI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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
    auto server = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(0)));
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
    auto server = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(run)));
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
    auto restarted = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(run)));
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

// Three projects and three users crossing them: user k writes in
// kProjects[k], reads kProjects[(k + 1) % 3] and is no member of
// kProjects[(k + 2) % 3].
constexpr const char* kProjects[] = {"lab", "alpha", "beta"};
constexpr char kAdminKey[] = "admin-key-0123456789";
constexpr int kExitNotFound = 4;  // client/exit_codes.h

std::string UserKey(int k) { return "user" + std::to_string(k) + "-key-0123456789"; }

// The rows of a `jobs list` table: job id -> its PROJECT column, each id
// counted in `*times`.
std::map<int64_t, std::string> ListedJobs(const std::string& table, std::map<int64_t, int>* times) {
  std::map<int64_t, std::string> jobs;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    const std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t id = 0;
    if (cells.size() < 5 || !absl::SimpleAtoi(cells[0], &id)) continue;
    jobs[id] = cells[4];
    ++(*times)[id];
  }
  return jobs;
}

class ProjectsKillTest : public ReliabilityE2ETest {
 protected:
  std::vector<std::string> Args(const std::string& db) const {
    std::vector<std::string> args = ServerArgs(db);
    args.push_back("--api_keys=" + *root_ + "/keys");
    // Every kill may land in a job's run: the attempt cap (tested above and
    // in core) must not end a job here.
    args.push_back("--max_attempts=50");
    return args;
  }
  CommandResult As(const ServerProcess& server, const std::string& key,
                   std::vector<std::string> args) const {
    args.insert(args.begin(), "--token=" + key);
    return Cli(server, args);
  }

  // Each user sees the jobs of the projects they belong to, in their own
  // project, each listed once, and learns nothing of the third: NOT_FOUND.
  // `full`: also every job and its results shown (or not) one by one, and
  // the datasets; else (quick, while jobs run) one job of the third.
  void ExpectVisibility(const ServerProcess& server, const std::map<int64_t, int>& jobs,
                        bool full) const {
    for (int k = 0; k < 3; ++k) {
      SCOPED_TRACE("user" + std::to_string(k));
      const std::string key = UserKey(k);
      bool probed = false;
      for (const auto& [id, project] : jobs) {
        if (!full && (probed || project != (k + 2) % 3)) continue;
        probed = true;
        CommandResult show = As(server, key, {"jobs", "show", std::to_string(id)});
        if (project == (k + 2) % 3) {
          EXPECT_EQ(show.exit_code, kExitNotFound) << "job " << id << ": " << show.out;
          EXPECT_EQ(show.out.find(kProjects[project]), std::string::npos);
          CommandResult rows = As(server, key, {"results", "--job=" + std::to_string(id)});
          EXPECT_EQ(rows.exit_code, kExitNotFound) << "results of job " << id;
        } else {
          EXPECT_EQ(show.exit_code, 0) << "job " << id << ": " << show.err;
          EXPECT_NE(show.out.find(std::string("project:          ") + kProjects[project]),
                    std::string::npos)
              << show.out;
        }
      }
      for (int p = 0; p < 3; ++p) {
        const std::string in = std::string("--project=") + kProjects[p];
        CommandResult list = As(server, key, {"jobs", "list", in});
        if (p == (k + 2) % 3) {
          EXPECT_EQ(list.exit_code, kExitNotFound) << kProjects[p];
          EXPECT_EQ(As(server, key, {"datasets", "list", in}).exit_code, kExitNotFound)
              << kProjects[p];
          continue;
        }
        ASSERT_EQ(list.exit_code, 0) << list.err;
        std::map<int64_t, int> times;
        const std::map<int64_t, std::string> listed = ListedJobs(list.out, &times);
        std::set<int64_t> want;
        for (const auto& [id, project] : jobs) {
          if (project == p) want.insert(id);
        }
        std::set<int64_t> got;
        for (const auto& [id, where] : listed) {
          got.insert(id);
          EXPECT_EQ(where, kProjects[p]) << "job " << id;
          EXPECT_EQ(times[id], 1) << "job " << id << " listed twice";
        }
        EXPECT_EQ(got, want) << kProjects[p] << ":\n" << list.out;
        if (!full) continue;
        CommandResult sets = As(server, key, {"datasets", "list", in});
        ASSERT_EQ(sets.exit_code, 0) << sets.err;
        for (const char* name : {" eval ", " calib "}) {
          size_t count = 0;
          for (size_t at = sets.out.find(name); at != std::string::npos;
               at = sets.out.find(name, at + 1)) {
            ++count;
          }
          EXPECT_EQ(count, 1u) << kProjects[p] << name << ":\n" << sets.out;
        }
      }
      // Their personal listing holds none of it.
      CommandResult own = As(server, key, {"jobs", "list"});
      std::map<int64_t, int> times;
      EXPECT_TRUE(ListedJobs(own.out, &times).empty()) << own.out;
    }
  }
};

TEST_F(ProjectsKillTest, KillMinus9WithJobsInThreeProjectsCrossedByTheirMembers) {
  std::string keys = std::string(kAdminKey) + " root admin\n";
  for (int k = 0; k < 3; ++k) keys += UserKey(k) + " user" + std::to_string(k) + " user\n";
  WriteFile(*root_ + "/keys", keys);
  ASSERT_EQ(chmod((*root_ + "/keys").c_str(), 0600), 0);
  const std::string db = *root_ + "/projects.sqlite";
  auto server = e2e::StartServer(FCA_SERVER_BIN, Args(db));
  ASSERT_NE(server, nullptr);
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(As(*server, kAdminKey, {"projects", "create", kProjects[p]}).exit_code, 0);
  }
  for (int k = 0; k < 3; ++k) {
    const std::string user = "user" + std::to_string(k);
    CommandResult w =
        As(*server, kAdminKey, {"projects", "add-member", kProjects[k], user, "--role=writer"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    CommandResult r = As(*server, kAdminKey,
                         {"projects", "add-member", kProjects[(k + 1) % 3], user, "--role=reader"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Each writer uploads and submits three jobs in their project (the
  // existing test's spec: 1-2 s each here, run one after another).
  std::map<int64_t, int> jobs;  // id -> project
  for (int k = 0; k < 3; ++k) {
    const std::string key = UserKey(k), project = std::string("--project=") + kProjects[k];
    for (const char* name : {"eval", "calib"}) {
      CommandResult up = As(*server, key,
                            {"datasets", "upload", std::string("--name=") + name, project,
                             *root_ + "/data/" + name + ".txt"});
      ASSERT_EQ(up.exit_code, 0) << up.err;
    }
    for (int n = 0; n < 3; ++n) {
      CommandResult sub =
          As(*server, key,
             {"audit", "--detach", "--models=fg", "--eval=eval", "--calib=calib", "--window=32",
              "--batch=4", "--bootstrap=400", "--timing_repeats=3", "--seed=3", project});
      ASSERT_EQ(sub.exit_code, 0) << sub.err;
      jobs[std::stoll(sub.out.substr(0, sub.out.find('\n')))] = k;
    }
  }
  ASSERT_EQ(jobs.size(), 9u);

  // Kills at random points while the jobs run one after another; after
  // each restart the quick check (the full one would outlast the jobs).
  Rng rng(20261204);
  std::map<std::string, int> states_at_restart;
  for (int kill = 1; kill <= 6; ++kill) {
    SCOPED_TRACE("kill " + std::to_string(kill));
    std::this_thread::sleep_for(std::chrono::milliseconds(rng.Uniform(1000)));
    server->Signal(SIGKILL);
    server->Wait(10);
    server = e2e::StartServer(FCA_SERVER_BIN, Args(db));
    ASSERT_NE(server, nullptr);
    CommandResult all = As(*server, kAdminKey, {"jobs", "list"});
    for (const char* state : {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED"}) {
      for (size_t at = all.out.find(state); at != std::string::npos;
           at = all.out.find(state, at + 1)) {
        ++states_at_restart[state];
      }
    }
    ExpectVisibility(*server, jobs, /*full=*/kill == 6);
  }
  // At least one kill landed before the jobs had all ended.
  EXPECT_GT(states_at_restart["QUEUED"] + states_at_restart["RUNNING"], 0);

  // Every job ends SUCCEEDED in its own project with its rows once each,
  // as many as the others (one spec).
  std::set<int64_t> row_counts;
  for (const auto& [id, project] : jobs) {
    const std::string key = UserKey(project);
    CommandResult watch = As(*server, key, {"watch", std::to_string(id)});
    EXPECT_EQ(watch.exit_code, 0) << "job " << id << ": " << watch.err;
    CommandResult show = As(*server, key, {"jobs", "show", std::to_string(id)});
    EXPECT_NE(show.out.find("SUCCEEDED"), std::string::npos) << show.out;
    CommandResult results =
        As(*server, key, {"results", "--job=" + std::to_string(id), "--format=json"});
    auto rows = json::Parse(results.out);
    ASSERT_TRUE(rows.ok() && rows->is_array()) << results.out << results.err;
    std::set<std::string> seen;
    for (const json::Value& row : rows->as_array()) {
      std::string k;
      for (const char* field : {"job_id", "model", "intervention", "metric"}) {
        const json::Value* v = row.Find(field);
        std::string cell = v == nullptr ? "?" : json::Write(*v);
        cell.erase(std::remove(cell.begin(), cell.end(), '"'), cell.end());
        k += cell + "/";
      }
      EXPECT_TRUE(seen.insert(k).second) << "row twice: " << k;
      EXPECT_EQ(k.rfind(std::to_string(id) + "/", 0), 0u) << "a row of another job: " << k;
    }
    row_counts.insert(rows->as_array().size());
  }
  ASSERT_EQ(row_counts.size(), 1u) << "the jobs of one spec stored different row counts";
  EXPECT_GT(*row_counts.begin(), 20);
  ExpectVisibility(*server, jobs, /*full=*/true);
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
  ExpectIntact(db);
  std::printf(
      "kill -9 with three projects: 6 kills, 9 jobs SUCCEEDED, %lld rows each; states "
      "seen at the restarts:",
      static_cast<long long>(*row_counts.begin()));
  for (const auto& [state, n] : states_at_restart) std::printf(" %s %d", state.c_str(), n);
  std::printf("\n");
}

TEST_F(ReliabilityE2ETest, ASecondServerOnTheSameDatabaseRefusesToStart) {
  auto first = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(100)));
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
  auto third = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(100)));
  ASSERT_NE(third, nullptr);
}

TEST_F(ReliabilityE2ETest, OwnersDeleteJobsAndDatasetsThroughTheCli) {
  auto server = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(Db(200)));
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
