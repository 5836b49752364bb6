// server/core/backups.h: names inside --backup_dir only, scheduled names
// that sort as times, pruning that keeps the newest and touches nothing
// else, the admin-only RPC in the core, and the scheduler's thread.
#include "server/core/backups.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/service.h"
#include "storage/store.h"

namespace fca::core {
namespace {

// A folder with a live store at db and an empty backups/ beside it.
class BackupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fca_backups_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/backups";
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
    storage::StoreOptions options;
    options.path = root_ + "/fca.db";
    auto store = storage::Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ASSERT_TRUE(store_->PutDataset("d", "text", "alice", std::string(5000, 'x')).ok());
    auto backups = BackupDirectory::Open(store_->path(), dir_);
    ASSERT_TRUE(backups.ok()) << backups.status();
    backups_ = std::move(*backups);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(root_);
  }

  void Touch(const std::string& name) { std::ofstream(dir_ + "/" + name) << "x"; }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root_, dir_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<BackupDirectory> backups_;
};

TEST_F(BackupsTest, OpenNeedsAnExistingFolder) {
  EXPECT_EQ(BackupDirectory::Open(store_->path(), root_ + "/nope").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(BackupDirectory::Open(store_->path(), store_->path()).status().code(),
            absl::StatusCode::kFailedPrecondition);  // a file, not a folder
  EXPECT_EQ(BackupDirectory::Open(store_->path(), "").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(BackupsTest, WritesACheckedCopyUnderAPlainNameOnly) {
  auto written = backups_->Write("one.sqlite");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->path(), dir_ + "/one.sqlite");
  EXPECT_EQ(written->bytes(), static_cast<int64_t>(std::filesystem::file_size(written->path())));
  EXPECT_GT(written->pages(), 0);
  storage::StoreOptions options;
  options.path = written->path();
  auto copy = storage::Store::Open(options);
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto datasets = (*copy)->ListDatasets(std::nullopt);
  ASSERT_TRUE(datasets.ok());
  ASSERT_EQ(datasets->size(), 1u);
  EXPECT_EQ((*datasets)[0].name, "d");
  copy->reset();

  EXPECT_EQ(backups_->Write("one.sqlite").status().code(), absl::StatusCode::kAlreadyExists);
  // Issue 40: a newline, a leading '-' or '.', a backslash, a space, or a
  // name longer than a file system takes are refused as names, before any
  // copy (not as a storage error).
  const std::vector<std::string> bad_names = {"",
                                              ".",
                                              "..",
                                              "../escape",
                                              "a/b",
                                              "/tmp/x",
                                              std::string("a\0b", 3),
                                              "a\nb.sqlite",
                                              "-rf.sqlite",
                                              ".hidden.sqlite",
                                              "a\\b.sqlite",
                                              "a b.sqlite",
                                              std::string(129, 'x')};
  for (const std::string& bad : bad_names) {
    const absl::Status refused = backups_->Write(bad).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.message(), ::testing::HasSubstr("backup: ")) << bad;
  }
  EXPECT_TRUE(BackupDirectory::CheckName(std::string(128, 'x')).ok());
  EXPECT_TRUE(BackupDirectory::CheckName("nightly_2026-12-06.v2.sqlite").ok());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/escape"));
  EXPECT_EQ(Files(), std::vector<std::string>{"one.sqlite"});
}

TEST_F(BackupsTest, ACancelledCopyLeavesNothing) {
  storage::BackupOptions one_page_per_step;  // so that there is a step to stop after
  one_page_per_step.pages_per_step = 1;
  auto backups = BackupDirectory::Open(store_->path(), dir_, one_page_per_step);
  ASSERT_TRUE(backups.ok()) << backups.status();
  auto stopped = (*backups)->Write("stopped.sqlite", [] { return false; });
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  EXPECT_TRUE(Files().empty());
}

TEST_F(BackupsTest, ScheduledNamesCarryTheUtcTimeAndSortAsTimesDo) {
  const absl::Time t = absl::FromUnixMillis(1796373995123);  // 2026-12-04 08:46:35.123 UTC
  EXPECT_EQ(BackupDirectory::ScheduledName(t), "fca-backup-20261204T084635.123Z.sqlite");
  EXPECT_EQ(BackupDirectory::ScheduledTime(BackupDirectory::ScheduledName(t)), t);
  EXPECT_LT(BackupDirectory::ScheduledName(t), BackupDirectory::ScheduledName(t + absl::Hours(1)));
  EXPECT_LT(BackupDirectory::ScheduledName(t + absl::Seconds(9)),
            BackupDirectory::ScheduledName(t + absl::Seconds(10)));
  for (const char* other :
       {"fca-backup-20261204T084635Z.sqlite", "manual.sqlite",
        "fca-backup-20261204T084635.123Z.sqlite.partial", "fca-backup-2026-12-04.sqlite"}) {
    EXPECT_FALSE(BackupDirectory::ScheduledTime(other).has_value()) << other;
  }
}

TEST_F(BackupsTest, PruneKeepsTheNewestScheduledCopiesAndNothingElseIsTouched) {
  const absl::Time t = absl::FromUnixSeconds(1796373995);
  std::vector<std::string> scheduled;
  for (int i = 0; i < 5; ++i) {
    scheduled.push_back(BackupDirectory::ScheduledName(t + absl::Hours(i)));
  }
  // Created out of order: the names, not the file times, say which is newest.
  for (int i : {3, 0, 4, 1, 2}) Touch(scheduled[i]);
  Touch("manual.sqlite");
  Touch(scheduled[0] + ".partial");

  auto removed = backups_->Prune(2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{scheduled[0], scheduled[1], scheduled[2]}));
  EXPECT_EQ(Files(), (std::vector<std::string>{scheduled[0] + ".partial", scheduled[3],
                                               scheduled[4], "manual.sqlite"}));
  auto again = backups_->Prune(2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
}

TEST(NextBackupDueTest, APeriodAfterTheNewestOrAtOnce) {
  const absl::Time now = absl::FromUnixSeconds(1796373995);
  EXPECT_EQ(NextBackupDue(std::nullopt, absl::Hours(24), now), now);
  EXPECT_EQ(NextBackupDue(now - absl::Hours(1), absl::Hours(24), now), now + absl::Hours(23));
  EXPECT_EQ(NextBackupDue(now - absl::Hours(30), absl::Hours(24), now), now);  // overdue
}

TEST_F(BackupsTest, TheSchedulerWritesCopiesAndKeepsTheNewest) {
  {
    BackupScheduler scheduler(backups_.get(), absl::Milliseconds(20), /*keep=*/2);
    // No timing is asserted: it runs until it has written four copies.
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (scheduler.written() < 4 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_GE(scheduler.written(), 4);
  }  // stopped here
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 2u);
  for (const std::string& name : files) {
    EXPECT_TRUE(BackupDirectory::ScheduledTime(name).has_value()) << name;
  }
}

TEST_F(BackupsTest, TheRpcIsForAdminsWithABackupFolder) {
  AuditServiceCore core(store_.get(), nullptr, nullptr, nullptr, ServiceLimits());
  v1::BackupDatabaseRequest request;
  request.set_name("rpc.sqlite");
  EXPECT_EQ(core.BackupDatabase(Caller{"admin", true}, request).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no --backup_dir
  core.set_backups(backups_.get());
  EXPECT_EQ(core.BackupDatabase(Caller{"alice", false}, request).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Files().empty());
  auto written = core.BackupDatabase(Caller{"admin", true}, request);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(Files(), std::vector<std::string>{"rpc.sqlite"});
}

}  // namespace
}  // namespace fca::core
