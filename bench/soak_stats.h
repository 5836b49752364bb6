// fca_soak_bench: per-call records of the client threads and what is made
// of them (per-RPC counts by outcome and status code, latency percentiles,
// figures per time bucket).
#ifndef FCA_BENCH_SOAK_STATS_H_
#define FCA_BENCH_SOAK_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fca::soak {

enum Op : uint8_t {
  kListModels,
  kTokenize,
  kUploadDataset,
  kListDatasets,
  kSubmitAudit,
  kWatchJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kQueryResults,
  kExportCoefficients,
  kNumOps
};
const char* OpName(int op);
// Server streams: their first message has a latency of its own.
bool IsServerStream(int op);

enum Outcome : uint8_t {
  kOk,        // OK status and a response that passed the checks
  kExpected,  // a refusal the API documents for what was asked (by code)
  kError,     // anything else, including BAD_RESPONSE (a check failed)
  kDropped,   // the client cancelled a stream on purpose (WatchJob dropped early)
  kCut,       // still running when the soak ended; cancelled by the bench
};

// One finished call.
struct Sample {
  float t_s = 0;        // completion, seconds since the load started
  float total_ms = 0;   // call start -> final status
  float first_ms = -1;  // server streams: call start -> first message; -1 none
  uint8_t op = 0;
  uint8_t outcome = 0;
};

// What one client thread saw. Not thread-safe: one per thread.
struct Recorder {
  std::vector<Sample> samples;
  // (op, outcome, status code name) -> calls
  std::map<std::tuple<int, int, std::string>, int64_t> codes;
  // (op, code name) -> the first few distinct messages of errors
  std::map<std::pair<int, std::string>, std::vector<std::string>> messages;

  void Add(const Sample& s, const std::string& code, const std::string& message);
  void Merge(const Recorder& other);
};

struct Latency {
  int64_t n = 0;
  double p50 = 0, p99 = 0, max = 0;
};
// Nearest-rank percentiles; `values` is sorted in place.
Latency Percentiles(std::vector<float>* values);

struct OpSummary {
  std::string name;
  bool stream = false;
  int64_t calls = 0, ok = 0, expected = 0, errors = 0, dropped = 0, cut = 0;
  std::map<std::string, int64_t> expected_by_code, errors_by_code;
  std::map<std::string, std::vector<std::string>> error_messages;
  Latency total;  // ok + expected + error calls (dropped and cut excluded)
  Latency first;  // server streams: time to the first message
};
std::vector<OpSummary> SummarizeOps(const Recorder& all);

// One row of the time series.
struct Bucket {
  double t0_s = 0, t1_s = 0;
  int64_t calls = 0, errors = 0;
  Latency unary_ok;             // unary calls that succeeded
  std::vector<Latency> per_op;  // [kNumOps]: finished calls (dropped and cut excluded)
  int64_t rss_max_kb = 0, threads_max = 0, fds_max = 0;
};
struct ResourceSample {
  double t_s = 0;  // seconds since the load started (negative before)
  int64_t rss_kb = 0, hwm_kb = 0, threads = 0, fds = -1;
};
std::vector<Bucket> Buckets(const Recorder& all, const std::vector<ResourceSample>& resources,
                            double duration_s, double width_s);

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_STATS_H_
