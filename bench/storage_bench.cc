// fca_storage_bench: figures for the SQLite store.
//
//  1. QueryResults latency (median of 50 calls) for pages of 100 rows over
//     100,000 stored result rows, for each filter the dashboard uses.
//  2. Coefficient cache write / read throughput (256 entries of 1 MiB)
//     against writing / reading the same bytes to a plain file.
//
// Usage: fca_storage_bench [--dir=DIR] [--rows=N] [--keep]
// The databases live in DIR (default: a fresh directory under /tmp, removed
// afterwards); --keep leaves DIR/results.db for inspection. Durability settings: the store runs WAL
// with synchronous=NORMAL (no fsync per commit; fsync at checkpoints), so the plain-file baseline
// is shown both without fsync and with one fsync at the end, plus fsync per entry for what
// synchronous=FULL would cost.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_check.h"
#include "common/random.h"
#include "storage/store.h"

namespace fca::storage {
namespace {

using bench::Check;
using bench::Clock;
using bench::Die;
using bench::SecondsSince;

void RemoveDb(const std::string& path) {
  std::remove(path.c_str());
  std::remove((path + "-wal").c_str());
  std::remove((path + "-shm").c_str());
}

constexpr int kModels = 20;
constexpr int kModelsPerJob = 5;
constexpr int kInterventions = 10;
constexpr int kMetrics = 10;
constexpr int kDatasets = 10;

// ------------------------------------------------------------ query bench

void BenchQueries(const std::string& dir, int total_rows, bool keep) {
  const std::string path = dir + "/results.db";
  RemoveDb(path);
  int64_t now = 1'700'000'000'000'000;
  StoreOptions options;
  options.path = path;
  options.now_us = [&now] { return now; };
  std::unique_ptr<Store> store = Check(Store::Open(options), "open");

  const int rows_per_job = kModelsPerJob * kInterventions * kMetrics;
  const int jobs = std::max(1, total_rows / rows_per_job);
  Rng rng(7);
  std::vector<int64_t> job_ids;
  const Clock::time_point fill_start = Clock::now();
  for (int j = 0; j < jobs; ++j) {
    now += 60'000'000;  // a job a minute
    const JobRecord job = Check(store->CreateJob("bench", "{}"), "create job");
    job_ids.push_back(job.id);
    std::vector<ResultRow> rows;
    rows.reserve(rows_per_job);
    const int first_model = static_cast<int>(rng.Uniform(kModels));
    for (int m = 0; m < kModelsPerJob; ++m) {
      for (int i = 0; i < kInterventions; ++i) {
        for (int k = 0; k < kMetrics; ++k) {
          ResultRow row;
          row.model = absl::StrCat("model-", (first_model + m) % kModels);
          row.weights_sha256 = absl::StrCat("weights-", row.model);
          row.dataset_sha256 = absl::StrCat("dataset-", j % kDatasets);
          row.intervention = absl::StrCat("intervention-", i);
          row.metric = absl::StrCat("metric-", k);
          row.value = static_cast<double>(rng.Uniform(1000)) / 7.0;
          row.ci_low = row.value - 1;
          row.ci_high = row.value + 1;
          row.n = 512;
          rows.push_back(std::move(row));
        }
      }
    }
    Check(store->InsertResults(job.id, rows), "insert results");
  }
  const double fill_s = SecondsSince(fill_start);
  const int64_t stored = static_cast<int64_t>(jobs) * rows_per_job;
  std::printf(
      "results: %lld rows in %d jobs inserted in %.2f s (%.0f rows/s, "
      "one transaction per job)\n",
      static_cast<long long>(stored), jobs, fill_s, stored / fill_s);

  const int64_t first_time = 1'700'000'000'000'000 + 60'000'000;
  const int64_t last_time = now;
  struct Query {
    const char* name;
    std::function<ResultFilter(int)> filter;  // run index -> filter
    bool deep = false;                        // start from a middle page
  };
  const std::vector<Query> queries = {
      {"no filter", [](int) { return ResultFilter{}; }},
      {"model",
       [](int r) {
         ResultFilter f;
         f.model = absl::StrCat("model-", r % kModels);
         return f;
       }},
      {"model+intervention+metric",
       [](int r) {
         ResultFilter f;
         f.model = absl::StrCat("model-", r % kModels);
         f.intervention = absl::StrCat("intervention-", r % kInterventions);
         f.metric = absl::StrCat("metric-", (r / 3) % kMetrics);
         return f;
       }},
      {"metric",
       [](int r) {
         ResultFilter f;
         f.metric = absl::StrCat("metric-", r % kMetrics);
         return f;
       }},
      {"intervention+metric",
       [](int r) {
         ResultFilter f;
         f.intervention = absl::StrCat("intervention-", r % kInterventions);
         f.metric = absl::StrCat("metric-", (r / 3) % kMetrics);
         return f;
       }},
      {"intervention",
       [](int r) {
         ResultFilter f;
         f.intervention = absl::StrCat("intervention-", r % kInterventions);
         return f;
       }},
      {"dataset",
       [](int r) {
         ResultFilter f;
         f.dataset_sha256 = absl::StrCat("dataset-", r % kDatasets);
         return f;
       }},
      {"job",
       [&job_ids](int r) {
         ResultFilter f;
         f.job_id = job_ids[(r * 37) % job_ids.size()];
         return f;
       }},
      {"time range (10% window)",
       [&](int r) {
         ResultFilter f;
         const int64_t span = last_time - first_time;
         f.created_after_us = first_time + span * (r % 9) / 10;
         f.created_before_us = *f.created_after_us + span / 10;
         return f;
       }},
      {"model+metric+time range",
       [&](int r) {
         ResultFilter f;
         const int64_t span = last_time - first_time;
         f.model = absl::StrCat("model-", r % kModels);
         f.metric = absl::StrCat("metric-", r % kMetrics);
         f.created_after_us = first_time + span / 4;
         f.created_before_us = first_time + span * 3 / 4;
         return f;
       }},
      {"model, page 50 (deep token)",
       [](int r) {
         ResultFilter f;
         f.model = absl::StrCat("model-", r % kModels);
         return f;
       },
       true},
  };

  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      const Clock::time_point start = Clock::now();
      Check(store->Optimize(), "optimize");
      std::printf("\nOptimize() (PRAGMA optimize -> ANALYZE) took %.1f ms\n",
                  SecondsSince(start) * 1e3);
    }
    std::printf(
        "\nQueryResults, page_size 100, median of 50 calls (file, warm), "
        "%s:\n",
        pass == 0 ? "before ANALYZE" : "after Optimize()");
    std::printf("  %-30s %10s %10s %8s\n", "filter", "median_us", "p90_us", "rows");
    for (const Query& query : queries) {
      std::vector<double> micros;
      size_t rows = 0;
      for (int r = 0; r < 50; ++r) {
        const ResultFilter filter = query.filter(r);
        std::string token;
        if (query.deep) {  // walk to page 50 first (not timed)
          for (int p = 0; p < 49; ++p) {
            const ResultPage page = Check(store->QueryResults(filter, 100, token), "query");
            token = page.next_page_token;
            if (token.empty()) break;
          }
        }
        const Clock::time_point start = Clock::now();
        const ResultPage page = Check(store->QueryResults(filter, 100, token), "query");
        micros.push_back(SecondsSince(start) * 1e6);
        rows += page.rows.size();
      }
      std::sort(micros.begin(), micros.end());
      std::printf("  %-30s %10.0f %10.0f %8.1f\n", query.name, micros[25], micros[45], rows / 50.0);
    }
  }
  store.reset();
  if (!keep) RemoveDb(path);
}

// ------------------------------------------------------------ cache bench

struct Throughput {
  double write_mbps;
  double read_mbps;
};

Throughput BenchCacheOnce(const std::string& dir, int entries, int64_t bytes, int64_t budget,
                          int64_t chunk_bytes) {
  const std::string path = dir + "/cache.db";
  RemoveDb(path);
  StoreOptions options;
  options.path = path;
  options.coeff_cache_budget_bytes = budget;
  options.chunk_bytes = chunk_bytes;
  std::unique_ptr<Store> store = Check(Store::Open(options), "open");
  std::string blob(static_cast<size_t>(bytes), '\0');
  Rng rng(11);
  for (size_t i = 0; i < blob.size(); i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(&blob[i], &v, std::min<size_t>(8, blob.size() - i));
  }
  auto key = [](int i) {
    CoefficientKey k;
    k.project = "bench";
    k.weights_sha256 = absl::StrCat("weights-", i);
    k.window_hash = "window";
    k.dtype = "float32";
    k.device = "cpu";
    return k;
  };
  const Clock::time_point write_start = Clock::now();
  for (int i = 0; i < entries; ++i) {
    blob[0] = static_cast<char>(i);
    Check(store->PutCoefficients(key(i), "meta", blob), "put");
  }
  const double write_s = SecondsSince(write_start);
  const double mib = static_cast<double>(entries) * bytes / (1 << 20);
  Throughput t{mib / write_s, 0};
  if (budget >= entries * (bytes + 4)) {
    const Clock::time_point read_start = Clock::now();
    for (int i = 0; i < entries; ++i) {
      const auto entry = Check(store->GetCoefficients(key(i)), "get");
      if (!entry.has_value() || entry->blob.size() != blob.size()) {
        Die(absl::InternalError("missing entry"), "get");
      }
    }
    t.read_mbps = mib / SecondsSince(read_start);
  }
  store.reset();
  RemoveDb(path);
  return t;
}

Throughput BenchPlainFile(const std::string& dir, int entries, int64_t bytes,
                          int fsync_mode /* 0 none, 1 at end, 2 per entry */) {
  const std::string path = dir + "/plain.bin";
  std::string blob(static_cast<size_t>(bytes), 'p');
  const Clock::time_point write_start = Clock::now();
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) Die(absl::InternalError("open"), "plain file");
  for (int i = 0; i < entries; ++i) {
    blob[0] = static_cast<char>(i);
    if (::write(fd, blob.data(), blob.size()) != static_cast<ssize_t>(bytes)) {
      Die(absl::InternalError("write"), "plain file");
    }
    if (fsync_mode == 2) ::fsync(fd);
  }
  if (fsync_mode == 1) ::fsync(fd);
  ::close(fd);
  const double mib = static_cast<double>(entries) * bytes / (1 << 20);
  Throughput t{mib / SecondsSince(write_start), 0};
  const Clock::time_point read_start = Clock::now();
  const int rfd = ::open(path.c_str(), O_RDONLY);
  for (int i = 0; i < entries; ++i) {
    std::string out(static_cast<size_t>(bytes), '\0');
    if (::read(rfd, out.data(), out.size()) != static_cast<ssize_t>(bytes)) {
      Die(absl::InternalError("read"), "plain file");
    }
  }
  ::close(rfd);
  t.read_mbps = mib / SecondsSince(read_start);
  std::remove(path.c_str());
  return t;
}

void BenchCache(const std::string& dir) {
  constexpr int kEntries = 256;
  constexpr int64_t kBytes = int64_t{1} << 20;
  std::printf(
      "\nCoefficient cache, %d entries of 1 MiB (MB/s = MiB/s; "
      "best of 3; reads hit the OS page cache):\n",
      kEntries);
  std::printf("  %-52s %9s %9s\n", "", "write", "read");
  auto best = [&](const std::function<Throughput()>& run) {
    Throughput b{0, 0};
    for (int i = 0; i < 3; ++i) {
      const Throughput t = run();
      b.write_mbps = std::max(b.write_mbps, t.write_mbps);
      b.read_mbps = std::max(b.read_mbps, t.read_mbps);
    }
    return b;
  };
  auto row = [](const char* name, Throughput t) {
    if (t.read_mbps > 0) {
      std::printf("  %-52s %9.0f %9.0f\n", name, t.write_mbps, t.read_mbps);
    } else {
      std::printf("  %-52s %9.0f %9s\n", name, t.write_mbps, "-");
    }
  };
  row("store, chunk 1 MiB, budget 1 GiB (no eviction)", best([&] {
        return BenchCacheOnce(dir, kEntries, kBytes, int64_t{1} << 30, int64_t{1} << 20);
      }));
  row("store, chunk 256 KiB, budget 1 GiB", best([&] {
        return BenchCacheOnce(dir, kEntries, kBytes, int64_t{1} << 30, int64_t{256} << 10);
      }));
  row("store, chunk 1 MiB, budget 64 MiB (evicts on every put)", best([&] {
        return BenchCacheOnce(dir, kEntries, kBytes, int64_t{64} << 20, int64_t{1} << 20);
      }));
  row("plain file, write() only, no fsync",
      best([&] { return BenchPlainFile(dir, kEntries, kBytes, 0); }));
  row("plain file, one fsync at the end (~ WAL+NORMAL)",
      best([&] { return BenchPlainFile(dir, kEntries, kBytes, 1); }));
  row("plain file, fsync per entry (~ synchronous=FULL)",
      best([&] { return BenchPlainFile(dir, kEntries, kBytes, 2); }));
}

}  // namespace
}  // namespace fca::storage

int main(int argc, char** argv) {
  std::string dir;
  int rows = 100000;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--dir=", 0) == 0) {
      dir = arg.substr(6);
    } else if (arg.rfind("--rows=", 0) == 0) {
      rows = std::atoi(arg.c_str() + 7);
    } else if (arg == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr, "usage: %s [--dir=DIR] [--rows=N] [--keep]\n", argv[0]);
      return 2;
    }
  }
  bool made_dir = false;
  if (dir.empty()) {
    char templ[] = "/tmp/fca_storage_bench.XXXXXX";
    if (::mkdtemp(templ) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = templ;
    made_dir = true;
  }
  std::printf("fca_storage_bench: database directory %s\n", dir.c_str());
  fca::storage::BenchQueries(dir, rows, keep);
  fca::storage::BenchCache(dir);
  if (made_dir && !keep) ::rmdir(dir.c_str());
  return 0;
}
