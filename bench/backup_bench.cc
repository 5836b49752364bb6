// fca_backup_bench: an online backup of a live store database
// (storage/backup.h) and what it costs the store's writers.
//
// Builds a database of about --mb MiB (datasets of distinct random bytes,
// stored through Store::PutDataset as uploads are), then, with one writer
// thread committing small transactions in a loop (Store::AppendJobEvent: one
// job event per commit, what a running job writes), measures
//   1. the writer alone for --baseline_s seconds;
//   2. the writer during BackupDatabase of the whole file;
// and prints, side by side, each phase's commits and the writer's commit
// latency (median, p99, max: the longest writer stall), and the backup's
// copy and integrity-check times.
//
// Usage: fca_backup_bench [--dir=DIR] [--mb=N] [--baseline_s=S] [--keep]
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_check.h"
#include "common/random.h"
#include "storage/backup.h"
#include "storage/store.h"

namespace fca::storage {
namespace {

using bench::Check;
using bench::Clock;
using bench::SecondsSince;

// Datasets of 16 MiB of distinct random bytes until the file holds `mb` MiB.
void Fill(Store* store, int64_t mb) {
  constexpr int64_t kDatasetBytes = 16 << 20;
  Rng rng(7);
  std::string bytes(kDatasetBytes, '\0');
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i * kDatasetBytes < (mb << 20); ++i) {
    for (size_t j = 0; j + 8 <= bytes.size(); j += 8) {
      const uint64_t word = rng.Next();
      std::memcpy(&bytes[j], &word, 8);
    }
    Check(store->PutDataset(absl::StrCat("fill", i), "tokens", "bench", bytes), "fill");
  }
  std::printf("filled %lld MiB in %.1f s\n", static_cast<long long>(mb), SecondsSince(start));
}

struct Latencies {
  std::vector<double> ms;
  double seconds = 0;
  double At(double q) const {
    if (ms.empty()) return 0;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
  }
  double Max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }
};

// One writer committing one job event per transaction until `stop`.
Latencies Write(Store* store, int64_t job_id, const std::atomic<bool>& stop) {
  Latencies out;
  const Clock::time_point start = Clock::now();
  const std::string payload(200, 'e');
  while (!stop.load()) {
    const Clock::time_point t = Clock::now();
    Check(store->AppendJobEvent(job_id, payload), "writer commit");
    out.ms.push_back(SecondsSince(t) * 1000);
  }
  out.seconds = SecondsSince(start);
  return out;
}

void Row(const char* phase, const Latencies& l) {
  std::printf("%-26s %8zu %9.0f %9.2f %9.2f %9.2f\n", phase, l.ms.size(), l.ms.size() / l.seconds,
              l.At(0.5), l.At(0.99), l.Max());
}

void Run(const std::string& dir, int64_t mb, double baseline_s) {
  StoreOptions options;
  options.path = dir + "/live.sqlite";
  std::unique_ptr<Store> store = Check(Store::Open(options), "open store");
  Fill(store.get(), mb);
  const JobRecord job = Check(store->CreateJob("bench", "{}"), "create job");

  std::atomic<bool> stop{false};
  Latencies alone;
  {
    std::thread writer([&] { alone = Write(store.get(), job.id, stop); });
    std::this_thread::sleep_for(std::chrono::duration<double>(baseline_s));
    stop = true;
    writer.join();
  }
  stop = false;
  Latencies during;
  std::thread writer([&] { during = Write(store.get(), job.id, stop); });
  const BackupSummary backup = Check(BackupDatabase(options.path, dir + "/copy.sqlite"), "backup");
  stop = true;
  writer.join();

  std::printf(
      "\nbackup of %.0f MiB (%lld pages): copy %.1f s, integrity_check %.1f s, "
      "total %.1f s\n\n",
      backup.bytes / 1048576.0, static_cast<long long>(backup.pages), backup.copy_seconds,
      backup.check_seconds, backup.copy_seconds + backup.check_seconds);
  std::printf("%-26s %8s %9s %9s %9s %9s\n", "writer commits", "commits", "per s", "p50 ms",
              "p99 ms", "max ms");
  Row("alone", alone);
  Row("during the backup", during);
  std::printf("\nlongest writer stall: %.2f ms during the backup, %.2f ms alone\n", during.Max(),
              alone.Max());
}

}  // namespace
}  // namespace fca::storage

int main(int argc, char** argv) {
  std::string dir;
  int64_t mb = 1024;
  double baseline_s = 5;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--dir=", 0) == 0) {
      dir = arg.substr(6);
    } else if (arg.rfind("--mb=", 0) == 0) {
      mb = std::atoll(arg.c_str() + 5);
    } else if (arg.rfind("--baseline_s=", 0) == 0) {
      baseline_s = std::atof(arg.c_str() + 13);
    } else if (arg == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr, "usage: %s [--dir=DIR] [--mb=N] [--baseline_s=S] [--keep]\n", argv[0]);
      return 2;
    }
  }
  if (mb < 1 || baseline_s <= 0) {
    std::fprintf(stderr, "--mb must be at least 1 and --baseline_s above 0\n");
    return 2;
  }
  bool made_dir = false;
  if (dir.empty()) {
    char templ[] = "/tmp/fca_backup_bench.XXXXXX";
    if (::mkdtemp(templ) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = templ;
    made_dir = true;
  }
  std::printf("fca_backup_bench: %lld MiB database in %s\n", static_cast<long long>(mb),
              dir.c_str());
  fca::storage::Run(dir, mb, baseline_s);
  if (made_dir && !keep) std::filesystem::remove_all(dir);
  return 0;
}
