// storage/backup.h: an online copy of a live database is one snapshot,
// whole and checked, and a failed or refused copy leaves nothing behind.
#include "storage/backup.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using testing_util::TempDbPath;

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

class BackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options;
    options.path = source_.path();
    options.chunk_bytes = 4096;  // many pages per dataset
    auto store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    for (int i = 0; i < kDatasets; ++i) ASSERT_OK(AddDataset(i));
  }
  void TearDown() override {
    for (const char* suffix : {"", ".partial"}) std::remove((dest_ + suffix).c_str());
  }

  absl::Status AddDataset(int i) {
    return store_->PutDataset(absl::StrCat("d", i), "text", "alice", Content(i)).status();
  }
  static std::string Content(int i) { return std::string(20000, static_cast<char>('a' + i % 26)); }

  // The datasets of the copy at dest_, by name, with their bytes checked.
  std::vector<std::string> CopiedNames() {
    StoreOptions options;
    options.path = dest_;
    auto copy = Store::Open(options);
    EXPECT_TRUE(copy.ok()) << copy.status();
    if (!copy.ok()) return {};
    auto integrity = (*copy)->IntegrityCheck();
    EXPECT_TRUE(integrity.ok() && *integrity == "ok") << integrity.status();
    auto datasets = (*copy)->ListDatasets(std::nullopt);
    EXPECT_TRUE(datasets.ok()) << datasets.status();
    std::vector<std::string> names;
    for (const DatasetRecord& d : *datasets) {
      auto bytes = (*copy)->ReadDatasetBytes(d.id);
      EXPECT_TRUE(bytes.ok()) << bytes.status();
      if (bytes.ok()) {
        EXPECT_EQ(*bytes, Content(std::stoi(d.name.substr(1)))) << d.name;
      }
      names.push_back(d.name);
    }
    return names;
  }

  static constexpr int kDatasets = 12;
  TempDbPath source_;
  std::string dest_ = absl::StrCat(::testing::TempDir(), "/fca_backup_test_", getpid(), ".db");
  std::unique_ptr<Store> store_;
};

TEST_F(BackupTest, CopiesEveryCommittedRowAndPassesItsCheck) {
  auto summary = BackupDatabase(source_.path(), dest_);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->bytes % summary->pages, 0) << "the copy is whole pages";
  EXPECT_GT(summary->bytes, int64_t{kDatasets} * 20000);
  EXPECT_EQ(CopiedNames().size(), static_cast<size_t>(kDatasets));
  EXPECT_FALSE(Exists(dest_ + ".partial"));
  EXPECT_FALSE(Exists(dest_ + "-wal")) << "the copy is one file";
}

// A commit between every two steps of the copy: the copy is still the
// snapshot taken before its first step, and it ends (SQLite would restart
// a copy whose source changed under it, forever, without the snapshot).
TEST_F(BackupTest, IsOneSnapshotWhileTheStoreCommitsBetweenSteps) {
  BackupOptions options;
  options.pages_per_step = 1;
  int steps = 0;
  int64_t pages = 0;
  options.progress = [&](int64_t done, int64_t total) {
    ++steps;
    pages = total;
    EXPECT_LE(done, total);
    EXPECT_TRUE(AddDataset(kDatasets + steps).ok());
    return steps < 100000;  // a restarting copy would never end
  };
  auto summary = BackupDatabase(source_.path(), dest_, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(steps, pages) << "one step per page, none repeated";
  const std::vector<std::string> names = CopiedNames();
  EXPECT_EQ(names.size(), static_cast<size_t>(kDatasets)) << "only what was committed before";
  auto live = store_->ListDatasets(std::nullopt);
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->size(), static_cast<size_t>(kDatasets + steps)) << "the writer was not blocked";
}

TEST_F(BackupTest, NeverOverwritesAFile) {
  FILE* f = std::fopen(dest_.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("precious", f);
  std::fclose(f);
  EXPECT_CODE(BackupDatabase(source_.path(), dest_), absl::StatusCode::kAlreadyExists);
  FILE* g = std::fopen(dest_.c_str(), "r");
  ASSERT_NE(g, nullptr);
  char buf[16] = {};
  EXPECT_EQ(std::fread(buf, 1, sizeof buf, g), 8u);
  std::fclose(g);
  EXPECT_EQ(std::string(buf), "precious");
}

TEST_F(BackupTest, AStoppedCopyLeavesNothing) {
  BackupOptions options;
  options.pages_per_step = 2;
  options.progress = [](int64_t done, int64_t) { return done < 4; };
  EXPECT_CODE(BackupDatabase(source_.path(), dest_, options), absl::StatusCode::kCancelled);
  EXPECT_FALSE(Exists(dest_));
  EXPECT_FALSE(Exists(dest_ + ".partial"));
}

TEST_F(BackupTest, RefusesWhatIsNotADatabaseFile) {
  EXPECT_CODE(BackupDatabase(":memory:", dest_), absl::StatusCode::kInvalidArgument);
  EXPECT_CODE(BackupDatabase("", dest_), absl::StatusCode::kInvalidArgument);
  EXPECT_CODE(BackupDatabase(source_.path(), ""), absl::StatusCode::kInvalidArgument);
  const std::string missing = dest_ + ".missing";
  EXPECT_CODE(BackupDatabase(missing, dest_), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Exists(missing)) << "the source is never created";
  EXPECT_FALSE(Exists(dest_));
}

}  // namespace
}  // namespace fca::storage
