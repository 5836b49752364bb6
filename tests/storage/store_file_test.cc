// The database file under faults (issue 22): deleted or replaced under a
// running store, opened a second time through another name, and a full
// disk (a real, small tmpfs mounted for the test).
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"
#include "tests/testing/log_lines.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;
using testing_util::TempDbPath;

constexpr char kDeleted[] = "was deleted while the server ran";

std::unique_ptr<Store> OpenOrDie(const StoreOptions& options) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// The file's name (messages name the canonical path, the folder resolved).
std::string Name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

void Contains(const absl::Status& status, const std::string& text) {
  EXPECT_TRUE(absl::StrContains(status.message(), text)) << status << " lacks '" << text << "'";
}

class StoreFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.path = tmp_.path();
    store_ = OpenOrDie(options_);
    ASSERT_NE(store_, nullptr);
    ASSERT_OK(store_->CreateJob("ann", "{}"));  // the -wal exists from here
  }

  TempDbPath tmp_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFileTest, ADeletedDatabaseRefusesWritesNamingTheFileAndLogsOnce) {
  fca::testing::LogLines log({kDeleted});
  ASSERT_OK(store_->CheckFile());
  ASSERT_EQ(unlink(tmp_.path().c_str()), 0);
  ASSERT_EQ(unlink((tmp_.path() + "-wal").c_str()), 0);
  const absl::Status check = store_->CheckFile();
  EXPECT_EQ(check.code(), StatusCode::kUnavailable) << check;
  Contains(check, Name(tmp_.path()));
  Contains(check, "deleted");
  for (int i = 0; i < 3; ++i) {
    const absl::Status write = store_->CreateJob("ann", "{}").status();
    EXPECT_EQ(write.code(), StatusCode::kUnavailable) << write;
    Contains(write, Name(tmp_.path()));
  }
  // A write that is one statement (no transaction of its own) as well.
  Contains(store_->AddApiKey("ann", "user", "0123456789abcdef0123"), "deleted");
  // Reads still answer from the open file.
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->GetJob(1));
  EXPECT_EQ(job.owner, "ann");
  EXPECT_EQ(log.count(kDeleted), 1);
}

TEST_F(StoreFileTest, AReplacedDatabaseRefusesWrites) {
  TempDbPath other;
  {
    StoreOptions options;
    options.path = other.path();
    ASSERT_NE(OpenOrDie(options), nullptr);
  }
  ASSERT_EQ(rename(other.path().c_str(), tmp_.path().c_str()), 0);
  const absl::Status write = store_->CreateJob("ann", "{}").status();
  EXPECT_EQ(write.code(), StatusCode::kUnavailable) << write;
  Contains(write, "replaced");
  Contains(store_->CheckFile(), "replaced");
}

TEST_F(StoreFileTest, ADeletedWriteAheadLogIsNoticed) {
  ASSERT_EQ(unlink((tmp_.path() + "-wal").c_str()), 0);
  const absl::Status write = store_->CreateJob("ann", "{}").status();
  EXPECT_EQ(write.code(), StatusCode::kUnavailable) << write;
  Contains(write, Name(tmp_.path()) + "-wal");
}

TEST_F(StoreFileTest, TheWatchThreadLogsALossNobodyAskedAbout) {
  store_.reset();
  options_.file_check_interval_ms = 10;
  fca::testing::LogLines log({kDeleted});
  store_ = OpenOrDie(options_);
  ASSERT_EQ(unlink(tmp_.path().c_str()), 0);
  EXPECT_TRUE(log.AwaitOne(kDeleted));
  EXPECT_EQ(store_->CheckFile().code(), StatusCode::kUnavailable);
  EXPECT_EQ(log.count(kDeleted), 1);
}

TEST_F(StoreFileTest, AnExclusiveStoreIsLockedUnderEveryNameOfItsFile) {
  store_.reset();
  options_.exclusive = true;
  store_ = OpenOrDie(options_);
  const std::string link = tmp_.path() + ".link";
  ASSERT_EQ(symlink(tmp_.path().c_str(), link.c_str()), 0);
  StoreOptions through_link = options_;
  through_link.path = link;
  const absl::Status second = Store::Open(through_link).status();
  unlink(link.c_str());
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second;
  Contains(second, "another fca-server");
  // A relative name of the same file.
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string folder = tmp_.path().substr(0, tmp_.path().rfind('/'));
  ASSERT_EQ(chdir(folder.c_str()), 0);
  StoreOptions relative = options_;
  relative.path = "./" + tmp_.path().substr(folder.size() + 1);
  const absl::Status third = Store::Open(relative).status();
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(third.code(), StatusCode::kFailedPrecondition) << third;
  // A hard link: another name, the same inode.
  const std::string hard = tmp_.path() + ".hard";
  ASSERT_EQ(::link(tmp_.path().c_str(), hard.c_str()), 0);
  StoreOptions through_hard_link = options_;
  through_hard_link.path = hard;
  const absl::Status fourth = Store::Open(through_hard_link).status();
  unlink(hard.c_str());
  EXPECT_EQ(fourth.code(), StatusCode::kFailedPrecondition) << fourth;
  Contains(fourth, "another fca-server");
}

// ------------------------------------------------------------ full disk

// A tmpfs of `megabytes` mounted on a fresh folder for the test's life.
class SmallDisk {
 public:
  explicit SmallDisk(int megabytes) {
    std::string pattern = ::testing::TempDir() + "/fca_small_disk_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    const std::string size = absl::StrCat("size=", megabytes, "m,mode=0700");
    mounted_ = mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  int64_t FreeBytes() const {
    struct statvfs info {};
    if (statvfs(dir_.c_str(), &info) != 0) return -1;
    return static_cast<int64_t>(info.f_bavail) * static_cast<int64_t>(info.f_frsize);
  }

 private:
  std::string dir_;
  std::string error_;
  bool mounted_ = false;
};

constexpr int64_t kMiB = int64_t{1} << 20;

// Fills the store with 1 MiB datasets until the disk is full; their ids.
std::vector<int64_t> FillUp(Store& store) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    std::string bytes(kMiB, static_cast<char>('a' + i % 26));
    bytes[0] = static_cast<char>(i);
    bytes[1] = static_cast<char>(i / 256);
    absl::StatusOr<DatasetRecord> put =
        store.PutDataset(absl::StrCat("d", i), "text", "ann", bytes);
    if (!put.ok()) {
      EXPECT_EQ(put.status().code(), StatusCode::kResourceExhausted) << put.status();
      break;
    }
    ids.push_back(put->id);
  }
  return ids;
}

TEST(StoreFullDiskTest, DeletesWorkOnAFullDiskThroughTheReserve) {
  SmallDisk disk(64);
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a small tmpfs to fill (" << disk.error()
                 << "); this test needs root (CAP_SYS_ADMIN)";
  }
  StoreOptions options;
  options.path = disk.dir() + "/fca.db";
  options.chunk_bytes = kMiB;
  options.disk_reserve_bytes = 24 * kMiB;
  std::unique_ptr<Store> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  // A job running when the disk fills up.
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store->CreateJob("ann", "{}", {"m"}));
  ClaimRequest claim;
  claim.worker = "w";
  claim.lease_us = 60'000'000;
  ASSERT_OK_AND_ASSIGN(const std::optional<TaskClaim> task, store->ClaimTask(claim));
  ASSERT_TRUE(task.has_value());
  const std::vector<int64_t> ids = FillUp(*store);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_LT(disk.FreeBytes(), kMiB);
  EXPECT_CODE(store->PutDataset("more", "text", "ann", std::string(kMiB, 'm')),
              StatusCode::kResourceExhausted);
  // Full: deleting a dataset is not refused, and then the job's end fits.
  ASSERT_OK_AND_ASSIGN(const int64_t freed, store->DeleteDataset(ids[0]));
  EXPECT_EQ(freed, kMiB);
  ASSERT_OK(store->FinishTask(task->task.id, task->task.lease_seq, JobState::kSucceeded, ""));
  ASSERT_OK(store->SettleJob(job.id, nullptr));
  ASSERT_OK(store->DeleteJob(job.id));
  // The reserve is taken again, and the file system got room back.
  struct stat reserve {};
  ASSERT_EQ(stat((options.path + ".reserve").c_str(), &reserve), 0);
  EXPECT_GE(reserve.st_blocks * 512, options.disk_reserve_bytes);
  EXPECT_GE(disk.FreeBytes(), 2 * kMiB);
  ASSERT_OK(store->PutDataset("after", "text", "ann", std::string(kMiB, 'z')).status());
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

// Issue 40: a restart on a full disk (the server killed, the disk filled up
// meanwhile). SQLite cannot even read a database in WAL mode without room
// for its -shm index: without a reserve the open fails and says the disk is
// full; with one, the reserve is given back, the store opens and reads.
TEST(StoreFullDiskTest, ARestartOnAFullDiskUsesTheReserveAndSaysSo) {
  SmallDisk disk(32);
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a small tmpfs to fill (" << disk.error()
                 << "); this test needs root (CAP_SYS_ADMIN)";
  }
  StoreOptions options;
  options.path = disk.dir() + "/fca.db";
  options.disk_reserve_bytes = 8 * kMiB;
  int64_t dataset_id = 0;
  {
    std::unique_ptr<Store> store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(const DatasetRecord put,
                         store->PutDataset("d", "text", "ann", std::string(kMiB, 'd')));
    dataset_id = put.id;
  }
  {  // Everything else takes the disk.
    std::ofstream filler(disk.dir() + "/filler", std::ios::binary);
    const std::string page(4096, 'f');
    while (filler.write(page.data(), static_cast<std::streamsize>(page.size())).flush()) {
    }
  }
  ASSERT_LT(disk.FreeBytes(), 4096);
  StoreOptions no_reserve = options;
  no_reserve.disk_reserve_bytes = 0;
  absl::StatusOr<std::unique_ptr<Store>> refused = Store::Open(no_reserve);
  EXPECT_CODE(refused, StatusCode::kResourceExhausted);
  Contains(refused.status(), "the disk holding the database is full");

  fca::testing::LogLines log({"released the disk reserve"});
  std::unique_ptr<Store> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(log.count("released the disk reserve"), 1);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord read, store->GetDataset(dataset_id));
  EXPECT_EQ(read.name, "d");
  // Room made by a delete is the reserve's again.
  ASSERT_OK(store->DeleteDataset(dataset_id));
  ASSERT_EQ(unlink((disk.dir() + "/filler").c_str()), 0);
  ASSERT_OK(store->PutDataset("after", "text", "ann", std::string(kMiB, 'a')).status());
}

}  // namespace
}  // namespace fca::storage
