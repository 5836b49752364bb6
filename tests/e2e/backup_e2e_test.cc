// Issue 23, online backup: the real fca-server backs up its live database
// (`fca admin backup`) while a job runs and uploads stream. The copy passes
// integrity_check, and a second fca-server started on it lists every job
// that had finished before the backup with all its result rows, and every
// upload that had finished before it. Only admins may back up, only into
// --backup_dir, never over a file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "storage/store.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kAdminKey[] = "admin-key-0123456789";
constexpr char kUserKey[] = "alice-key-0123456789";

class BackupE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_backup_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    fs::create_directories(root_ + "/data");
    fs::create_directories(root_ + "/backups");
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"fg", {"--seed=1", "--controller_out_std=1.0"}},
             {"dense", {"--family=dense", "--seed=1"}},
             // Slow enough to be running while the backup is taken.
             {"fg-wide",
              {"--seed=3", "--controller_out_std=1.0", "--d_model=256", "--d_ff=1024",
               "--n_heads=4"}}}) {
      CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, root_ + "/models/" + name, flags);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    WriteFile(root_ + "/data/eval.txt", RandomWords(16 * 40, 1));
    WriteFile(root_ + "/data/calib.txt", RandomWords(16 * 30, 2));
    WriteFile(root_ + "/data/long.txt", RandomWords(64 * 400, 3));
    // Bulk, so that the copy takes a while: many pages to read and write.
    WriteFile(root_ + "/data/bulk.txt", RandomWords(24 << 20, 4));
    WriteFile(root_ + "/data/small.txt", RandomWords(256 << 10, 5));
    WriteFile(root_ + "/keys",
              std::string(kAdminKey) + " root admin\n" + kUserKey + " alice user\n");
    ASSERT_EQ(chmod((root_ + "/keys").c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<ServerProcess> StartServer(const std::string& db,
                                             std::vector<std::string> extra) const {
    std::vector<std::string> args = {"--models=" + root_ + "/models", "--db=" + db, "--threads=1",
                                     "--api_keys=" + root_ + "/keys", "--http_listen="};
    args.insert(args.end(), extra.begin(), extra.end());
    return e2e::StartServer(FCA_SERVER_BIN, args);
  }

  static CommandResult Cli(const ServerProcess& server, std::vector<std::string> args,
                           const std::string& token = kUserKey) {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server.address(),
                                     "--token=" + token};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  std::string Upload(const ServerProcess& server, const std::string& name,
                     const std::string& file) const {
    CommandResult r =
        Cli(server, {"datasets", "upload", "--name=" + name, root_ + "/data/" + file});
    return r.exit_code == 0 ? "" : r.err;
  }

  static std::string State(const ServerProcess& server, const std::string& job) {
    const std::string out = Cli(server, {"jobs", "show", job}).out;
    const size_t at = out.find("state:");
    if (at == std::string::npos) return "";
    const size_t start = out.find_first_not_of(' ', at + 6);
    return out.substr(start, out.find_first_of(" \n", start) - start);
  }

  // The job's result rows as `fca results --format=json` prints them.
  static std::string Rows(const ServerProcess& server, const std::string& job) {
    CommandResult r = Cli(server, {"results", "--job=" + job, "--format=json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  std::string root_;
};

TEST_F(BackupE2ETest, ABackupDuringAJobAndUploadsServesEveryFinishedJob) {
  const std::string db = root_ + "/live.sqlite";
  auto live = StartServer(db, {"--backup_dir=" + root_ + "/backups"});
  ASSERT_NE(live, nullptr);
  for (const auto& [name, file] :
       std::vector<std::pair<std::string, std::string>>{{"eval", "eval.txt"},
                                                        {"calib", "calib.txt"},
                                                        {"long", "long.txt"},
                                                        {"bulk", "bulk.txt"}}) {
    ASSERT_EQ(Upload(*live, name, file), "") << name;
  }
  // Two jobs finished before the backup.
  for (const std::string seed : {"5", "6"}) {
    CommandResult job = Cli(*live, {"audit", "--models=fg", "--dense_twin=dense", "--eval=eval",
                                    "--calib=calib", "--window=16", "--batch=4", "--bootstrap=200",
                                    "--timing_repeats=0", "--seed=" + seed});
    ASSERT_EQ(job.exit_code, 0) << job.err;
  }
  const std::vector<std::string> finished = {"1", "2"};
  std::vector<std::string> rows_before;
  for (const std::string& job : finished) {
    ASSERT_EQ(State(*live, job), "SUCCEEDED");
    rows_before.push_back(Rows(*live, job));
    EXPECT_THAT(rows_before.back(), HasSubstr("\"metric\""));
  }
  // A third one runs while the backup is taken.
  CommandResult running =
      Cli(*live, {"audit", "--detach", "--models=fg-wide", "--eval=long", "--calib=calib",
                  "--window=64", "--batch=2", "--timing_repeats=0"});
  ASSERT_EQ(running.exit_code, 0) << running.err;
  ASSERT_TRUE(PollUntil([&] { return State(*live, "3") == "RUNNING"; }, 30));

  // Uploads stream from before the backup until after it; each one's end
  // is stamped, so the ones finished before the backup began are known.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::pair<std::string, Clock::time_point>> uploaded;
  std::vector<std::string> upload_errors;
  std::thread uploader([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string name = "u" + std::to_string(i);
      const std::string error = Upload(*live, name, "small.txt");
      std::lock_guard<std::mutex> lock(mu);
      if (!error.empty()) upload_errors.push_back(error);
      uploaded.emplace_back(name, Clock::now());
    }
  });
  ASSERT_TRUE(PollUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return uploaded.size() >= 2;
      },
      60));

  // Refused: a user, a path, no name.
  CommandResult by_user = Cli(*live, {"admin", "backup", "mine.sqlite"});
  EXPECT_NE(by_user.exit_code, 0);
  EXPECT_THAT(by_user.err, HasSubstr("PERMISSION_DENIED"));
  CommandResult outside = Cli(*live, {"admin", "backup", "../outside.sqlite"}, kAdminKey);
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_THAT(outside.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_FALSE(fs::exists(root_ + "/outside.sqlite"));

  const Clock::time_point backup_start = Clock::now();
  CommandResult backup = Cli(*live, {"admin", "backup", "snap.sqlite"}, kAdminKey);
  ASSERT_EQ(backup.exit_code, 0) << backup.err;
  EXPECT_THAT(backup.out, HasSubstr(root_ + "/backups/snap.sqlite"));
  EXPECT_THAT(backup.out, HasSubstr("integrity_check ok"));
  // The job was running all along, and uploads went on during the backup.
  EXPECT_EQ(State(*live, "3"), "RUNNING");
  const size_t uploads_during = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return uploaded.size();
  }();
  ASSERT_TRUE(PollUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return uploaded.size() >= uploads_during + 1;
      },
      60));
  stop = true;
  uploader.join();
  EXPECT_TRUE(upload_errors.empty()) << upload_errors.front();

  CommandResult again = Cli(*live, {"admin", "backup", "snap.sqlite"}, kAdminKey);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.err, HasSubstr("ALREADY_EXISTS"));
  EXPECT_EQ(Cli(*live, {"jobs", "cancel", "3"}).exit_code, 0);
  live->Signal(SIGTERM);
  EXPECT_EQ(live->Wait(60), 0);

  // The copy is whole...
  const std::string copy = root_ + "/backups/snap.sqlite";
  {
    storage::StoreOptions options;
    options.path = copy;
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    auto integrity = (*store)->IntegrityCheck();
    ASSERT_TRUE(integrity.ok()) << integrity.status();
    EXPECT_EQ(*integrity, "ok");
  }
  // ...and a server on it (without --backup_dir) has what was done before.
  auto restored = StartServer(copy, {"--workers=0"});
  ASSERT_NE(restored, nullptr);
  for (size_t i = 0; i < finished.size(); ++i) {
    EXPECT_EQ(State(*restored, finished[i]), "SUCCEEDED");
    EXPECT_EQ(Rows(*restored, finished[i]), rows_before[i]) << "job " << finished[i];
  }
  const std::string datasets = Cli(*restored, {"datasets", "list"}).out;
  int checked = 0;
  for (const auto& [name, done] : uploaded) {
    if (done >= backup_start) continue;
    EXPECT_THAT(datasets, HasSubstr(name + " ")) << datasets;
    ++checked;
  }
  EXPECT_GE(checked, 2);
  CommandResult off = Cli(*restored, {"admin", "backup", "x.sqlite"}, kAdminKey);
  EXPECT_NE(off.exit_code, 0);
  EXPECT_THAT(off.err, HasSubstr("FAILED_PRECONDITION"));
}

}  // namespace
}  // namespace fca::e2e
