// Crash consistency: a writer process is SIGKILLed inside a transaction (and
// after one), then the file is reopened and checked.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

constexpr int kRowsPerJob = 20;

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// One job with kRowsPerJob results and as many events, written by the
// caller's transaction.
absl::Status WriteJob(Store& store, const std::string& owner) {
  FCA_ASSIGN_OR_RETURN(const JobRecord job, store.CreateJob(owner, "{}"));
  std::vector<ResultRow> rows;
  for (int i = 0; i < kRowsPerJob; ++i) {
    ResultRow row;
    row.model = "m";
    row.intervention = absl::StrCat("iv", i);
    row.metric = "nll";
    row.value = i;
    row.n = 8;
    rows.push_back(row);
  }
  FCA_RETURN_IF_ERROR(store.InsertResults(job.id, rows).status());
  for (int i = 0; i < kRowsPerJob; ++i) {
    FCA_RETURN_IF_ERROR(store.AppendJobEvent(job.id, "progress").status());
  }
  return absl::OkStatus();
}

// Forks a child that opens the store at `path` and runs `body`, which must
// write one byte to `ready_fd` when the parent may kill it and then never
// return. Returns the child's pid and the read end of the pipe.
struct Child {
  pid_t pid = -1;
  int ready_fd = -1;
};

Child Spawn(const std::string& path, const std::function<void(Store&, int ready_fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    StoreOptions options;
    options.path = path;
    auto store = Store::Open(options);
    if (!store.ok()) ::_exit(2);
    body(**store, fds[1]);
    ::_exit(3);  // body failed before signalling
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

void Signal(int fd) {
  const char byte = 'x';
  (void)!::write(fd, &byte, 1);
}

[[noreturn]] void BlockForever() {
  while (true) ::pause();
}

// Waits for the child's byte (false when it exited without sending one),
// then SIGKILLs and reaps it.
bool KillWhenReady(const Child& child, int64_t* wal_bytes_at_kill, const std::string& path,
                   int extra_delay_ms = 0) {
  char byte = 0;
  const bool ready = ::read(child.ready_fd, &byte, 1) == 1;
  ::close(child.ready_fd);
  if (extra_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(extra_delay_ms));
  }
  if (wal_bytes_at_kill != nullptr) *wal_bytes_at_kill = FileSize(path + "-wal");
  ::kill(child.pid, SIGKILL);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  return ready && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A committed baseline the crash must not disturb.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Open());
    ASSERT_OK(store->Transaction([&] { return WriteJob(*store, "baseline"); }));
  }

  absl::StatusOr<std::unique_ptr<Store>> Open() {
    StoreOptions options;
    options.path = tmp_.path();
    return Store::Open(options);
  }

  // Integrity, and every job whole: all its results and events, or no job.
  void ExpectConsistent(Store& store) {
    ASSERT_OK_AND_ASSIGN(const std::string report, store.IntegrityCheck());
    EXPECT_EQ(report, "ok");
    std::string token;
    do {
      ASSERT_OK_AND_ASSIGN(const JobPage page, store.ListJobs({}, 100, token));
      for (const JobRecord& job : page.jobs) {
        ResultFilter filter;
        filter.job_id = job.id;
        ASSERT_OK_AND_ASSIGN(const ResultPage results, store.QueryResults(filter, 1000, ""));
        EXPECT_EQ(results.rows.size(), static_cast<size_t>(kRowsPerJob)) << "job " << job.id;
        ASSERT_OK_AND_ASSIGN(const auto events, store.ListJobEvents(job.id, 0, 1000));
        EXPECT_EQ(events.size(), static_cast<size_t>(kRowsPerJob)) << "job " << job.id;
      }
      token = page.next_page_token;
    } while (!token.empty());
  }

  testing_util::TempDbPath tmp_;
};

TEST_F(CrashTest, KilledInsideTransactionLeavesNoTrace) {
  const Child child = Spawn(tmp_.path(), [](Store& store, int ready_fd) {
    const absl::Status status = store.Transaction([&]() -> absl::Status {
      FCA_RETURN_IF_ERROR(WriteJob(store, "crashed"));
      // Large enough to spill uncommitted pages into the -wal file, so the
      // crash leaves a torn transaction on disk for recovery to discard.
      FCA_RETURN_IF_ERROR(
          store.PutDataset("big", "text", "crashed", std::string(8 << 20, 'z')).status());
      FCA_RETURN_IF_ERROR(store.PutCoefficients({"u", "w", "h", "float32", "cpu"}, "meta",
                                                std::string(4 << 20, 'c')));
      Signal(ready_fd);
      BlockForever();
    });
    (void)status;  // only reached on failure: the parent sees no signal
  });
  ASSERT_GT(child.pid, 0);
  int64_t wal_bytes = 0;
  ASSERT_TRUE(KillWhenReady(child, &wal_bytes, tmp_.path()));
  EXPECT_GT(wal_bytes, int64_t{4} << 20) << "uncommitted pages reached the WAL";

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Open());
  ExpectConsistent(*store);
  ASSERT_OK_AND_ASSIGN(const int64_t crashed, store->CountJobs(std::string("crashed"), {}));
  EXPECT_EQ(crashed, 0);
  ASSERT_OK_AND_ASSIGN(const int64_t baseline, store->CountJobs(std::string("baseline"), {}));
  EXPECT_EQ(baseline, 1);
  ASSERT_OK_AND_ASSIGN(const ResultPage results, store->QueryResults({}, 0, ""));
  EXPECT_EQ(results.rows.size(), static_cast<size_t>(kRowsPerJob));
  EXPECT_CODE(store->FindDataset("big", "crashed"), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const int64_t cache_bytes, store->CoefficientCacheBytes());
  EXPECT_EQ(cache_bytes, 0);
  // The store takes writes again.
  ASSERT_OK(store->Transaction([&] { return WriteJob(*store, "after"); }));
  ExpectConsistent(*store);
}

TEST_F(CrashTest, KilledAfterCommitKeepsEverything) {
  const Child child = Spawn(tmp_.path(), [](Store& store, int ready_fd) {
    if (!store.Transaction([&] { return WriteJob(store, "committed"); }).ok()) {
      return;
    }
    Signal(ready_fd);
    BlockForever();
  });
  ASSERT_GT(child.pid, 0);
  ASSERT_TRUE(KillWhenReady(child, nullptr, tmp_.path()));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Open());
  ExpectConsistent(*store);
  ASSERT_OK_AND_ASSIGN(const int64_t committed, store->CountJobs(std::string("committed"), {}));
  EXPECT_EQ(committed, 1);
}

TEST_F(CrashTest, KillsAtRandomMomentsNeverLeaveHalfJobs) {
  Rng rng(20240611);
  int64_t total_jobs = 1;  // the baseline
  for (int round = 0; round < 6; ++round) {
    const Child child = Spawn(tmp_.path(), [](Store& store, int ready_fd) {
      bool signalled = false;
      while (true) {
        if (!store.Transaction([&] { return WriteJob(store, "loop"); }).ok()) {
          return;
        }
        if (!signalled) Signal(ready_fd);
        signalled = true;
      }
    });
    ASSERT_GT(child.pid, 0);
    const int delay_ms = static_cast<int>(rng.Uniform(40));
    ASSERT_TRUE(KillWhenReady(child, nullptr, tmp_.path(), delay_ms));

    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Open());
    ExpectConsistent(*store);
    ASSERT_OK_AND_ASSIGN(const int64_t jobs, store->CountJobs(std::nullopt, {}));
    EXPECT_GT(jobs, total_jobs) << "round " << round;  // at least one commit
    total_jobs = jobs;
  }
}

}  // namespace
}  // namespace fca::storage
