#include "bench/soak_stats.h"

#include <algorithm>
#include <cmath>

namespace fca::soak {
namespace {

constexpr size_t kMessagesKept = 3;

}  // namespace

const char* OpName(int op) {
  static const char* kNames[kNumOps] = {
      "ListModels", "Tokenize", "UploadDataset", "ListDatasets", "SubmitAudit",       "WatchJob",
      "GetJob",     "ListJobs", "CancelJob",     "QueryResults", "ExportCoefficients"};
  return op >= 0 && op < kNumOps ? kNames[op] : "?";
}

bool IsServerStream(int op) { return op == kWatchJob || op == kExportCoefficients; }

void Recorder::Add(const Sample& s, const std::string& code, const std::string& message) {
  samples.push_back(s);
  ++codes[{s.op, s.outcome, code}];
  if (s.outcome != kError) return;
  std::vector<std::string>& kept = messages[{s.op, code}];
  const std::string m = message.substr(0, 300);
  if (kept.size() < kMessagesKept && std::find(kept.begin(), kept.end(), m) == kept.end()) {
    kept.push_back(m);
  }
}

void Recorder::Merge(const Recorder& other) {
  samples.insert(samples.end(), other.samples.begin(), other.samples.end());
  for (const auto& [key, n] : other.codes) codes[key] += n;
  for (const auto& [key, list] : other.messages) {
    std::vector<std::string>& kept = messages[key];
    for (const std::string& m : list) {
      if (kept.size() < kMessagesKept && std::find(kept.begin(), kept.end(), m) == kept.end()) {
        kept.push_back(m);
      }
    }
  }
}

Latency Percentiles(std::vector<float>* values) {
  Latency l;
  l.n = static_cast<int64_t>(values->size());
  if (values->empty()) return l;
  std::sort(values->begin(), values->end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * values->size()));
    return (*values)[std::min(values->size() - 1, i == 0 ? 0 : i - 1)];
  };
  l.p50 = rank(0.50);
  l.p99 = rank(0.99);
  l.max = values->back();
  return l;
}

std::vector<OpSummary> SummarizeOps(const Recorder& all) {
  std::vector<OpSummary> out(kNumOps);
  std::vector<std::vector<float>> total(kNumOps), first(kNumOps);
  for (int op = 0; op < kNumOps; ++op) {
    out[op].name = OpName(op);
    out[op].stream = IsServerStream(op);
  }
  for (const Sample& s : all.samples) {
    if (s.outcome == kDropped || s.outcome == kCut) {
      if (s.outcome == kDropped && s.first_ms >= 0) first[s.op].push_back(s.first_ms);
      continue;
    }
    total[s.op].push_back(s.total_ms);
    if (s.first_ms >= 0) first[s.op].push_back(s.first_ms);
  }
  for (const auto& [key, n] : all.codes) {
    const auto& [op, outcome, code] = key;
    OpSummary& o = out[op];
    o.calls += n;
    switch (outcome) {
      case kOk:
        o.ok += n;
        break;
      case kExpected:
        o.expected += n;
        o.expected_by_code[code] += n;
        break;
      case kError:
        o.errors += n;
        o.errors_by_code[code] += n;
        break;
      case kDropped:
        o.dropped += n;
        break;
      case kCut:
        o.cut += n;
        break;
    }
  }
  for (const auto& [key, list] : all.messages) out[key.first].error_messages[key.second] = list;
  for (int op = 0; op < kNumOps; ++op) {
    out[op].total = Percentiles(&total[op]);
    out[op].first = Percentiles(&first[op]);
  }
  return out;
}

std::vector<Bucket> Buckets(const Recorder& all, const std::vector<ResourceSample>& resources,
                            double duration_s, double width_s) {
  const int n = std::max(1, static_cast<int>(std::ceil(duration_s / width_s)));
  std::vector<Bucket> out(n);
  std::vector<std::vector<float>> unary(n);
  std::vector<std::vector<std::vector<float>>> per_op(n, std::vector<std::vector<float>>(kNumOps));
  for (int i = 0; i < n; ++i) {
    out[i].t0_s = i * width_s;
    out[i].t1_s = std::min(duration_s, (i + 1) * width_s);
  }
  auto index = [&](double t) { return std::clamp(static_cast<int>(t / width_s), 0, n - 1); };
  for (const Sample& s : all.samples) {
    Bucket& b = out[index(s.t_s)];
    ++b.calls;
    if (s.outcome == kError) ++b.errors;
    if (s.outcome == kOk && !IsServerStream(s.op) && s.op != kUploadDataset) {
      unary[index(s.t_s)].push_back(s.total_ms);
    }
    if (s.outcome != kDropped && s.outcome != kCut)
      per_op[index(s.t_s)][s.op].push_back(s.total_ms);
  }
  for (const ResourceSample& r : resources) {
    if (r.t_s < 0 || r.t_s > duration_s) continue;
    Bucket& b = out[index(r.t_s)];
    b.rss_max_kb = std::max(b.rss_max_kb, r.rss_kb);
    b.threads_max = std::max(b.threads_max, r.threads);
    b.fds_max = std::max(b.fds_max, r.fds);
  }
  for (int i = 0; i < n; ++i) {
    out[i].unary_ok = Percentiles(&unary[i]);
    for (int op = 0; op < kNumOps; ++op) out[i].per_op.push_back(Percentiles(&per_op[i][op]));
  }
  return out;
}

}  // namespace fca::soak
