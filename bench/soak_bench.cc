// fca_soak_bench: a soak test of the real fca-server process.
//
// Starts `fca-server` on 127.0.0.1:0 with a fresh SQLite file and a model
// folder of tiny models written by `fca-local-audit init` (two FeatureGate
// models and a dense twin), then runs --clients threads for --duration_s
// seconds. Each thread has its own channel and loops over a weighted random
// mix of every RPC of fca.v1.AuditService through the generated stubs; small
// audits are submitted throughout, so jobs run during the whole soak. Every
// call has a deadline. A sampler reads /proc/PID/status (VmRSS, VmHWM,
// Threads) and /proc/PID/fd every --sample_ms. At the end the server gets
// SIGTERM, and the SQLite file is checked with `PRAGMA integrity_check`.
//
// Outcome of a call: ok; an expected refusal (a code the API documents for
// what was asked: RESOURCE_EXHAUSTED for the per-user queue limit or an
// oversized Tokenize, NOT_FOUND for unknown ids/models/uncached windows,
// FAILED_PRECONDITION for cancelling a finished job); dropped (a WatchJob the
// client cancelled on purpose); cut (still running when the soak ended); or
// an error: any other code, or BAD_RESPONSE when the response breaks what the
// API promises (e.g. watch seqs not consecutive, a re-upload not reported as
// deduplicated, the cached window of a succeeded job not exportable).
//
// Exit code: 0 when there was no error, no crash, a clean SIGTERM exit and an
// intact database; 1 otherwise; 2 when the soak could not be set up.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/soak_process.h"
#include "bench/soak_stats.h"
#include "common/file.h"
#include "common/json.h"
#include "common/random.h"
#include "common/sha256.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

ABSL_FLAG(std::string, server, FCA_SERVER_BIN, "fca-server binary");
ABSL_FLAG(std::string, local_audit, FCA_LOCAL_AUDIT_BIN,
          "fca-local-audit binary (writes the tiny model folders)");
ABSL_FLAG(std::string, sqlite3, "/usr/bin/sqlite3", "sqlite3 CLI for the integrity check");
ABSL_FLAG(int, clients, 50, "client threads, one channel (connection) each");
ABSL_FLAG(int, duration_s, 600, "seconds of load");
ABSL_FLAG(std::string, json, "", "also write the figures as JSON to this file");
ABSL_FLAG(uint64_t, seed, 1, "seed of the clients' random choices");
ABSL_FLAG(int, think_ms, 0, "mean pause between a client's calls, ms (0: closed loop)");
ABSL_FLAG(int, sample_ms, 500, "period of the /proc/PID/status sampler, ms");
ABSL_FLAG(int, bucket_s, 0, "width of the time-series rows, s (0: about 20 rows, >= 10 s)");
ABSL_FLAG(int64_t, medium_upload_budget_mb, 1024,
          "medium uploads (256 KiB - 3 MiB) stop after this many MiB; later uploads are small");
ABSL_FLAG(std::vector<std::string>, mix, {},
          "change the weights of the RPC mix, e.g. UploadDataset=0,GetJob=20 (defaults: "
          "ListModels 5, Tokenize 8, UploadDataset 6, ListDatasets 5, SubmitAudit 12, WatchJob "
          "10, GetJob 12, ListJobs 10, CancelJob 3, QueryResults 14, ExportCoefficients 10)");
ABSL_FLAG(int, server_threads, 0, "fca-server --threads (torch threads; 0: its default)");
ABSL_FLAG(std::vector<std::string>, server_args, {},
          "extra fca-server flags, comma-separated (e.g. --max_queued_jobs=4)");
ABSL_FLAG(std::string, work_dir, "",
          "folder for models, database and server logs (default: a new /tmp/fca_soak_XXXXXX)");
ABSL_FLAG(std::string, db, "",
          "start from this existing database file instead of a fresh one (it is written to: "
          "pass a copy; an aged database from an earlier soak's work folder shows how the "
          "server does on accumulated state)");
ABSL_FLAG(bool, keep, false, "keep the work folder (it is always kept after a failure)");

namespace fca::soak {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using grpc::StatusCode;

constexpr int64_t kMiB = 1 << 20;
constexpr int kUnaryDeadlineS = 30;
constexpr int kUploadDeadlineS = 120;
constexpr int kWatchDeadlineS = 300;
constexpr int kExportDeadlineS = 60;
// The tiny models: 2 layers x (attn_gate, mlp_gate) sites of G = 4 channels.
const char* const kGateModels[] = {"fg-a", "fg-b"};
const char* const kDenseModel = "dense";
constexpr int64_t kMaxSeqLen = 64;
const char* const kInterventions[] = {"correct",      "cross_input",           "token_shuffle",
                                      "static_layer", "static_layer_position", "global_mean"};
const char* const kResultInterventions[] = {"correct",   "cross_input", "global_mean", "replay",
                                            "variation", "execution",   "static_layer"};
const char* const kMetrics[] = {"nll",      "penalty",  "retention_pct",   "eta2.attn_gate",
                                "live_nll", "slowdown", "blocks_per_token"};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string CodeName(StatusCode c) {
  switch (c) {
    case StatusCode::OK:
      return "OK";
    case StatusCode::CANCELLED:
      return "CANCELLED";
    case StatusCode::UNKNOWN:
      return "UNKNOWN";
    case StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case StatusCode::ABORTED:
      return "ABORTED";
    case StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case StatusCode::INTERNAL:
      return "INTERNAL";
    case StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "CODE_" + std::to_string(static_cast<int>(c));
  }
}

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// Random lowercase letters and spaces: 27^16 possible 16-byte windows, so two
// seeds share no window and no dataset overlaps another by chance.
std::string Letters(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s(n, ' ');
  for (size_t i = 0; i < n; ++i) {
    const uint64_t c = rng.Uniform(27);
    s[i] = c == 26 ? ' ' : static_cast<char>('a' + c);
  }
  return s;
}

// Pre-tokenized ids < 256 (the byte vocabulary), little-endian int32.
std::string TokenBytes(size_t n_ids, uint64_t seed) {
  Rng rng(seed);
  std::string s(n_ids * 4, '\0');
  for (size_t i = 0; i < n_ids; ++i) s[4 * i] = static_cast<char>(rng.Uniform(256));
  return s;
}

std::string WindowHash(const std::vector<int32_t>& ids, size_t begin, size_t length) {
  Sha256 h;
  for (size_t i = begin; i < begin + length; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    const uint8_t le[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                           static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    h.Update(le, 4);
  }
  return h.FinishHex();
}

int64_t ToMicros(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}
void SetMicros(int64_t us, google::protobuf::Timestamp* t) {
  t->set_seconds(us / 1000000);
  t->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}
int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  // One connection per client thread, as 50 separate users would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// What every client thread shares.
struct Shared {
  std::string address;
  Clock::time_point start, end;
  std::atomic<bool> stop{false};
  std::string eval_text, calib_text, eval_sha;  // datasets "eval" and "calib"
  std::map<std::string, std::string> weights;   // model -> weights_sha256
  int64_t coeff_bytes_per_token = 0;            // of a gate model, float32
  int64_t medium_budget_bytes = 0;
  std::atomic<int64_t> medium_bytes{0};
  int64_t max_tokenize_bytes = kMiB;
  int think_ms = 0;
  int weights_of_ops[kNumOps] = {5, 8, 6, 5, 12, 10, 12, 10, 3, 14, 10};
  std::string run_tag;        // makes dataset names unique across runs on one database
  uint64_t content_salt = 0;  // with --db: new bytes are new to the old database too
  std::atomic<int64_t> max_job_id{0};
  std::atomic<int64_t> submitted{0}, cancels_accepted{0}, watched_to_end{0};
};

struct DatasetInfo {
  std::string name, sha;
  bool tokens = false;
  uint64_t seed = 0;
  size_t size = 0;  // bytes
  std::string Bytes() const { return tokens ? TokenBytes(size / 4, seed) : Letters(size, seed); }
};

struct JobInfo {
  int64_t id = 0;
  std::vector<std::string> models;
  int64_t window = 0, eval_windows = 0;
  int dataset = -1;  // index into the client's datasets; -1: the shared "eval"
  v1::JobState state = v1::JOB_STATE_QUEUED;
  int64_t last_seq = 0;
  std::vector<std::string> hashes;  // eval window hashes, once computed
};

class Client;

// One RPC in flight: its context (deadline set), start time, and the
// registration that lets the bench cancel it when the soak ends.
class Call {
 public:
  Call(Client* client, int op, int deadline_s);
  ~Call();
  void FirstMessage() {
    if (first_ms < 0) first_ms = static_cast<float>(MsSince(t0));
  }
  grpc::ClientContext ctx;
  const int op;
  const Clock::time_point t0;
  float first_ms = -1;
  bool dropped = false;          // cancelled by the client on purpose
  std::atomic<bool> cut{false};  // cancelled by the bench at the end

 private:
  Client* client_;
};

class Client {
 public:
  Client(int index, Shared* shared, uint64_t seed)
      : index_(index),
        shared_(shared),
        rng_(seed),
        stub_(v1::AuditService::NewStub(NewChannel(shared->address))) {}

  void Run() {
    const int* kWeights = shared_->weights_of_ops;
    int total = 0;
    for (int op = 0; op < kNumOps; ++op) total += kWeights[op];
    while (!Done()) {
      int pick = static_cast<int>(rng_.Uniform(total)), op = 0;
      while (pick >= kWeights[op]) pick -= kWeights[op++];
      switch (op) {
        case kListModels:
          ListModels();
          break;
        case kTokenize:
          Tokenize();
          break;
        case kUploadDataset:
          Upload();
          break;
        case kListDatasets:
          ListDatasets();
          break;
        case kSubmitAudit:
          Submit();
          break;
        case kWatchJob:
          Watch(PickJob(/*prefer_running=*/true));
          break;
        case kGetJob:
          GetJob();
          break;
        case kListJobs:
          ListJobs();
          break;
        case kCancelJob:
          Cancel();
          break;
        case kQueryResults:
          QueryResults();
          break;
        case kExportCoefficients:
          Export();
          break;
      }
      if (shared_->think_ms > 0 && !Done()) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(rng_.Uniform(2 * shared_->think_ms + 1)));
      }
    }
  }

  // Cancels the call in flight, if any (the soak is over). Thread-safe.
  void CutActive() {
    std::lock_guard<std::mutex> lock(active_mu_);
    if (active_ != nullptr) {
      active_->cut = true;
      active_->ctx.TryCancel();
    }
  }

  void Register(Call* call) {
    std::lock_guard<std::mutex> lock(active_mu_);
    active_ = call;
  }
  void Unregister() {
    std::lock_guard<std::mutex> lock(active_mu_);
    active_ = nullptr;
  }

  Recorder recorder;

 private:
  std::string WeightsOf(const std::string& model) const {
    auto it = shared_->weights.find(model);
    return it == shared_->weights.end() ? "" : it->second;
  }
  bool Done() const { return shared_->stop.load() || Clock::now() >= shared_->end; }
  bool Chance(double p) { return rng_.Uniform(1000000) < static_cast<uint64_t>(p * 1e6); }
  template <typename T>
  const T& PickOf(const std::vector<T>& v) {
    return v[rng_.Uniform(v.size())];
  }

  // Records a finished call. `bad` is why a response broke the API's
  // promises (empty when it did not); `expected` lists the refusals the API
  // documents for what was asked.
  void Finish(Call& call, const grpc::Status& st, const std::string& bad,
              std::initializer_list<StatusCode> expected) {
    Sample s;
    s.t_s = static_cast<float>(SecondsBetween(shared_->start, Clock::now()));
    s.total_ms = static_cast<float>(MsSince(call.t0));
    s.first_ms = call.first_ms;
    s.op = static_cast<uint8_t>(call.op);
    std::string code = CodeName(st.error_code()), message = st.error_message();
    if (call.cut && (st.error_code() == StatusCode::CANCELLED || st.ok())) {
      s.outcome = kCut;
    } else if (!bad.empty()) {
      s.outcome = kError;
      code = "BAD_RESPONSE";
      message = bad;
    } else if (call.dropped && (st.error_code() == StatusCode::CANCELLED || st.ok())) {
      s.outcome = kDropped;
    } else if (st.ok()) {
      s.outcome = kOk;
    } else if (std::find(expected.begin(), expected.end(), st.error_code()) != expected.end()) {
      s.outcome = kExpected;
    } else {
      s.outcome = kError;
    }
    recorder.Add(s, code, message);
  }

  // --- ListModels: the three tiny models, sorted, with their sites.
  void ListModels() {
    Call call(this, kListModels, kUnaryDeadlineS);
    v1::ListModelsResponse resp;
    const grpc::Status st = stub_->ListModels(&call.ctx, v1::ListModelsRequest(), &resp);
    std::string bad;
    if (st.ok()) {
      std::vector<std::string> names;
      for (const v1::Model& m : resp.models()) {
        names.push_back(m.name());
        auto w = shared_->weights.find(m.name());
        if (w == shared_->weights.end() || w->second != m.weights_sha256()) {
          bad = "model " + m.name() + " is new or its weights hash changed";
        }
      }
      if (names != std::vector<std::string>{"dense", "fg-a", "fg-b"}) {
        bad = "ListModels returned [" + absl::StrJoin(names, ",") + "]";
      }
    }
    Finish(call, st, bad, {});
  }

  // --- Tokenize: random text with a byte tokenizer gives back the bytes.
  void Tokenize() {
    v1::TokenizeRequest req;
    const bool unknown_model = Chance(0.03), oversized = !unknown_model && Chance(0.02);
    req.set_model(unknown_model ? "no-such-model" : PickModel(/*dense_too=*/true));
    // Log-uniform-ish sizes from a few bytes to 64 KiB.
    const size_t size = oversized ? shared_->max_tokenize_bytes + 1 + rng_.Uniform(1024)
                                  : 1 + rng_.Uniform(size_t{1} << (4 + rng_.Uniform(13)));
    req.set_text(Letters(size, rng_.Next()));
    TokenizeCall(req, unknown_model || oversized, nullptr);
  }

  // One Tokenize call; the ids go to `*ids` when asked for. A refusal is
  // expected when `refusal_expected` (unknown model, text over the limit).
  bool TokenizeCall(const v1::TokenizeRequest& req, bool refusal_expected,
                    std::vector<int32_t>* ids) {
    Call call(this, kTokenize, kUnaryDeadlineS);
    v1::TokenizeResponse resp;
    const grpc::Status st = stub_->Tokenize(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok()) {
      if (refusal_expected) {
        bad = absl::StrFormat("Tokenize of %d bytes with model '%s' was not refused",
                              req.text().size(), req.model());
      } else if (resp.tokenizer() != "byte" || resp.vocab_size() != 256 ||
                 resp.ids_size() != static_cast<int>(req.text().size())) {
        bad = absl::StrFormat("Tokenize: tokenizer %s, vocab %d, %d ids for %d bytes",
                              resp.tokenizer(), resp.vocab_size(), resp.ids_size(),
                              req.text().size());
      } else {
        for (int i = 0; i < resp.ids_size() && bad.empty(); ++i) {
          if (resp.ids(i) != static_cast<uint8_t>(req.text()[i])) {
            bad = absl::StrFormat("Tokenize: id %d is %d, byte is %d", i, resp.ids(i),
                                  static_cast<uint8_t>(req.text()[i]));
          }
        }
      }
    }
    std::initializer_list<StatusCode> expected = {StatusCode::NOT_FOUND,
                                                  StatusCode::RESOURCE_EXHAUSTED};
    Finish(call, st, bad, refusal_expected ? expected : std::initializer_list<StatusCode>{});
    if (st.ok() && bad.empty() && ids != nullptr) ids->assign(resp.ids().begin(), resp.ids().end());
    return st.ok() && bad.empty();
  }

  std::string PickModel(bool dense_too) {
    const uint64_t n = dense_too ? 3 : 2;
    const uint64_t i = rng_.Uniform(n);
    return i == 2 ? kDenseModel : kGateModels[i];
  }

  // --- UploadDataset: small and medium uploads, chunked at <= 1 MiB, and
  // re-uploads of earlier bytes under new names (reported as deduplicated).
  void Upload() {
    DatasetInfo d;
    d.name = absl::StrFormat("%s-c%d-%d", shared_->run_tag, index_, next_dataset_++);
    bool reupload = false;
    if (!datasets_.empty() && Chance(0.12)) {
      const DatasetInfo& old = PickOf(datasets_);
      d.seed = old.seed;
      d.size = old.size;
      d.tokens = old.tokens;
      reupload = true;
    } else {
      d.seed = rng_.Next() ^ shared_->content_salt;
      d.tokens = Chance(0.1);
      if (Chance(0.08) && shared_->medium_bytes.load() < shared_->medium_budget_bytes) {
        d.size = 256 * 1024 + rng_.Uniform(3 * kMiB - 256 * 1024);
        shared_->medium_bytes += static_cast<int64_t>(d.size);
      } else {
        d.size = 2048 + rng_.Uniform(14 * 1024);
      }
      if (d.tokens) d.size -= d.size % 4;
    }
    const std::string bytes = d.Bytes();
    d.sha = Sha256Hex(bytes);
    // Chunks of 64 KiB .. 1 MiB; large uploads usually in whole MiB.
    const size_t chunk = Chance(0.5) ? kMiB : 64 * 1024 + rng_.Uniform(kMiB - 64 * 1024 + 1);

    Call call(this, kUploadDataset, kUploadDeadlineS);
    v1::UploadDatasetResponse resp;
    auto writer = stub_->UploadDataset(&call.ctx, &resp);
    v1::UploadDatasetRequest header;
    header.mutable_header()->set_name(d.name);
    header.mutable_header()->set_kind(d.tokens ? v1::DATASET_KIND_TOKENS_INT32
                                               : v1::DATASET_KIND_TEXT);
    header.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    if (Chance(0.5)) header.mutable_header()->set_sha256(d.sha);
    bool open = writer->Write(header);
    for (size_t off = 0; open && off < bytes.size(); off += chunk) {
      v1::UploadDatasetRequest part;
      part.set_chunk(bytes.substr(off, chunk));
      open = writer->Write(part);
    }
    if (open) writer->WritesDone();
    const grpc::Status st = writer->Finish();
    std::string bad;
    if (st.ok()) {
      const v1::Dataset& got = resp.dataset();
      if (got.name() != d.name || got.sha256() != d.sha ||
          got.size_bytes() != static_cast<int64_t>(bytes.size())) {
        bad = absl::StrFormat("UploadDataset %s: got name %s sha %s size %d", d.name, got.name(),
                              got.sha256().substr(0, 12), got.size_bytes());
      } else if (reupload && !resp.deduplicated()) {
        bad = "re-upload of stored bytes as " + d.name + " not reported as deduplicated";
      } else if (!reupload && resp.deduplicated()) {
        bad = "fresh random bytes of " + d.name + " reported as deduplicated";
      }
    }
    Finish(call, st, bad, {});
    if (st.ok() && bad.empty()) {
      datasets_.push_back(d);
      last_dataset_ = d.name;
    }
  }

  // --- ListDatasets: newest first, and what this client uploaded is there.
  void ListDatasets() {
    Call call(this, kListDatasets, kUnaryDeadlineS);
    v1::ListDatasetsResponse resp;
    const grpc::Status st = stub_->ListDatasets(&call.ctx, v1::ListDatasetsRequest(), &resp);
    std::string bad;
    if (st.ok()) {
      bool found = last_dataset_.empty();
      for (int i = 0; i < resp.datasets_size(); ++i) {
        if (i > 0 && resp.datasets(i).id() >= resp.datasets(i - 1).id()) {
          bad = "ListDatasets is not newest first";
        }
        found = found || resp.datasets(i).name() == last_dataset_;
      }
      if (!found) bad = "ListDatasets misses " + last_dataset_;
    }
    Finish(call, st, bad, {});
  }

  // --- SubmitAudit: a small audit; RESOURCE_EXHAUSTED at the queue limit.
  void Submit() {
    JobInfo job;
    v1::SubmitAuditRequest req;
    v1::AuditSpec* spec = req.mutable_spec();
    const uint64_t which = rng_.Uniform(3);
    if (which != 1) job.models.push_back("fg-a");
    if (which != 0) job.models.push_back("fg-b");
    for (const std::string& m : job.models) spec->add_models(m);
    if (Chance(0.5)) spec->set_dense_twin(kDenseModel);
    job.window = Chance(0.7) ? 16 : 32;
    job.eval_windows = 2 + rng_.Uniform(7);
    // Own datasets large enough for the windows asked for.
    std::vector<int> usable;
    for (size_t i = 0; i < datasets_.size(); ++i) {
      const int64_t ids = datasets_[i].tokens ? datasets_[i].size / 4 : datasets_[i].size;
      if (ids >= job.window * job.eval_windows && datasets_[i].size < 64 * 1024) {
        usable.push_back(static_cast<int>(i));
      }
    }
    const uint64_t eval_choice = rng_.Uniform(100);
    if (eval_choice < 15 && !usable.empty()) {
      job.dataset = PickOf(usable);
      spec->set_eval_dataset(datasets_[job.dataset].name);
    } else if (eval_choice < 25) {
      spec->set_eval_dataset("sha256:" + shared_->eval_sha);
    } else {
      spec->set_eval_dataset("eval");
    }
    spec->set_calib_dataset("calib");
    if (Chance(0.6)) {
      std::vector<int> order = {0, 1, 2, 3, 4, 5};
      for (int i = 5; i > 0; --i) std::swap(order[i], order[rng_.Uniform(i + 1)]);
      const int n = 1 + static_cast<int>(rng_.Uniform(3));
      for (int i = 0; i < n; ++i) spec->add_interventions(kInterventions[order[i]]);
    }
    spec->set_window_length(job.window);
    spec->set_max_eval_windows(job.eval_windows);
    spec->set_max_calib_windows(2 + rng_.Uniform(7));
    spec->set_batch_size(4);
    spec->set_seed(rng_.Uniform(1000));
    spec->set_per_site_shuffle(Chance(0.3));
    spec->set_bootstrap_resamples(50 + rng_.Uniform(151));
    spec->set_timing_repeats(static_cast<int32_t>(rng_.Uniform(2)));
    spec->set_label(absl::StrFormat("soak client %d", index_));

    Call call(this, kSubmitAudit, kUnaryDeadlineS);
    v1::SubmitAuditResponse resp;
    const grpc::Status st = stub_->SubmitAudit(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok() && (resp.job().id() <= 0 || resp.job().state() != v1::JOB_STATE_QUEUED ||
                    resp.job().spec().models_size() != spec->models_size())) {
      bad = absl::StrFormat("SubmitAudit returned job %d in state %s", resp.job().id(),
                            v1::JobState_Name(resp.job().state()));
    }
    Finish(call, st, bad, {StatusCode::RESOURCE_EXHAUSTED});
    if (!st.ok() || !bad.empty()) return;
    ++shared_->submitted;
    job.id = resp.job().id();
    int64_t seen = shared_->max_job_id.load();
    while (job.id > seen && !shared_->max_job_id.compare_exchange_weak(seen, job.id)) {
    }
    jobs_.push_back(job);
    if (jobs_.size() > 200) jobs_.erase(jobs_.begin());
    // Like `fca audit` without --detach: follow it to its end.
    if (Chance(0.3) && !Done()) WatchCall(jobs_.back(), 0, -1);
  }

  // An own job to watch, get or cancel: -1 when there is none.
  int PickJob(bool prefer_running) {
    if (jobs_.empty()) return -1;
    if (prefer_running && Chance(0.7)) {
      std::vector<int> open;
      for (size_t i = 0; i < jobs_.size(); ++i) {
        if (!IsTerminal(jobs_[i].state)) open.push_back(static_cast<int>(i));
      }
      if (!open.empty()) return PickOf(open);
    }
    return static_cast<int>(rng_.Uniform(jobs_.size()));
  }

  void NoteState(JobInfo& job, v1::JobState state) {
    if (IsTerminal(job.state)) return;  // terminal states never change
    job.state = state;
  }

  // --- WatchJob: follow a job to its end from the start, resume after a
  // seq seen before, or drop the stream after a few events.
  void Watch(int index) {
    if (index < 0) {
      // No job of its own yet: any job (all clients are the same user).
      const int64_t max = shared_->max_job_id.load();
      if (max == 0) return GetJobCall(1 + rng_.Uniform(1000000), /*expect_missing=*/true, nullptr);
      JobInfo other;
      other.id = 1 + static_cast<int64_t>(rng_.Uniform(max));
      WatchCall(other, 0, -1);
      return;
    }
    JobInfo& job = jobs_[index];
    const uint64_t mode = rng_.Uniform(100);
    if (mode < 55) {
      WatchCall(job, 0, -1);
    } else if (mode < 80) {
      WatchCall(job, job.last_seq > 0 ? job.last_seq : 1 + rng_.Uniform(3), -1);
    } else {
      WatchCall(job, 0, 1 + static_cast<int>(rng_.Uniform(3)));
    }
  }

  // Watches `job` after `after_seq`; drops the stream after `drop_after`
  // events when that is >= 0.
  void WatchCall(JobInfo& job, int64_t after_seq, int drop_after) {
    Call call(this, kWatchJob, kWatchDeadlineS);
    v1::WatchJobRequest req;
    req.set_job_id(job.id);
    req.set_after_seq(after_seq);
    auto reader = stub_->WatchJob(&call.ctx, req);
    v1::WatchJobResponse msg;
    std::string bad;
    int64_t expect_seq = after_seq + 1;
    int events = 0;
    bool terminal = false;
    v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
    v1::JobState job_state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&msg)) {
      // A resumed watch waits for the job's next event, which may be far off
      // (a queued job): only watches from the start time their first message.
      if (after_seq == 0) call.FirstMessage();
      ++events;
      job_state = msg.job().state();
      const v1::JobEvent& e = msg.event();
      if (bad.empty() && terminal) bad = "WatchJob sent an event after the terminal one";
      if (bad.empty() && e.seq() != expect_seq) {
        bad = absl::StrFormat("WatchJob %d after %d: seq %d where %d was due", job.id, after_seq,
                              e.seq(), expect_seq);
      }
      if (bad.empty() && msg.job().id() != job.id) bad = "WatchJob event of another job";
      expect_seq = e.seq() + 1;
      if (e.has_state()) {
        last_state = e.state();
        terminal = IsTerminal(e.state());
      }
      if (drop_after >= 0 && events >= drop_after && !terminal) {
        call.dropped = true;
        call.ctx.TryCancel();
        break;
      }
    }
    const grpc::Status st = reader->Finish();
    if (st.ok() && !call.dropped && bad.empty() && events > 0 && !terminal) {
      bad = absl::StrFormat(
          "WatchJob %d (after_seq %d) ended OK after %d events (last seq %d) without a terminal "
          "state event; the job was %s at the last event",
          job.id, after_seq, events, expect_seq - 1, v1::JobState_Name(job_state));
    }
    Finish(call, st, bad, {});
    if (expect_seq - 1 > job.last_seq) job.last_seq = expect_seq - 1;
    if (terminal) {
      NoteState(job, last_state);
      ++shared_->watched_to_end;
    }
  }

  // --- GetJob: own job, someone's job, or an id that does not exist.
  void GetJob() {
    if (Chance(0.05)) return GetJobCall(1000000000 + rng_.Uniform(1000), true, nullptr);
    const int index = PickJob(/*prefer_running=*/true);
    if (index < 0) {
      const int64_t max = shared_->max_job_id.load();
      return GetJobCall(max > 0 ? 1 + rng_.Uniform(max) : 1000000000, max == 0, nullptr);
    }
    GetJobCall(jobs_[index].id, false, &jobs_[index]);
  }

  void GetJobCall(int64_t id, bool expect_missing, JobInfo* job) {
    Call call(this, kGetJob, kUnaryDeadlineS);
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    const grpc::Status st = stub_->GetJob(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok()) {
      const v1::Job& j = resp.job();
      if (expect_missing) {
        bad = absl::StrFormat("GetJob of unknown job %d answered OK", id);
      } else if (j.id() != id || j.progress() < 0 || j.progress() > 1) {
        bad = absl::StrFormat("GetJob %d: id %d, progress %g", id, j.id(), j.progress());
      } else if (job != nullptr && IsTerminal(job->state) && j.state() != job->state) {
        bad = absl::StrFormat("job %d was %s, GetJob now says %s", id,
                              v1::JobState_Name(job->state), v1::JobState_Name(j.state()));
      } else if (IsTerminal(j.state()) && !j.has_finished_at()) {
        bad = absl::StrFormat("job %d is %s without finished_at", id, v1::JobState_Name(j.state()));
      }
    }
    Finish(call, st, bad,
           expect_missing ? std::initializer_list<StatusCode>{StatusCode::NOT_FOUND}
                          : std::initializer_list<StatusCode>{});
    if (st.ok() && bad.empty() && job != nullptr) NoteState(*job, resp.job().state());
  }

  // --- ListJobs: pages of all jobs or of one state, newest first.
  void ListJobs() {
    static const int kSizes[] = {0, 1, 5, 20, 100, 500};
    v1::ListJobsRequest req;
    req.set_page_size(kSizes[rng_.Uniform(6)]);
    if (Chance(0.3)) req.set_state(static_cast<v1::JobState>(1 + rng_.Uniform(5)));
    const int pages = Chance(0.1) ? 20 : 1 + static_cast<int>(rng_.Uniform(3));
    int64_t last_id = INT64_MAX;
    for (int p = 0; p < pages && !Done(); ++p) {
      Call call(this, kListJobs, kUnaryDeadlineS);
      v1::ListJobsResponse resp;
      const grpc::Status st = stub_->ListJobs(&call.ctx, req, &resp);
      std::string bad;
      if (st.ok()) {
        const int limit = req.page_size() == 0 ? 50 : req.page_size();
        if (resp.jobs_size() > limit) bad = "ListJobs page larger than page_size";
        for (const v1::Job& j : resp.jobs()) {
          if (j.id() >= last_id) {
            bad = absl::StrFormat("ListJobs not newest first across pages: %d after %d", j.id(),
                                  last_id);
          }
          if (req.state() != v1::JOB_STATE_UNSPECIFIED && j.state() != req.state()) {
            bad = "ListJobs state filter not respected";
          }
          last_id = j.id();
        }
      }
      Finish(call, st, bad, {});
      if (!st.ok() || resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
  }

  // --- CancelJob: mostly jobs not known to be finished;
  // FAILED_PRECONDITION when it had finished.
  void Cancel() {
    const int index = PickJob(/*prefer_running=*/true);
    if (index < 0) return;
    JobInfo& job = jobs_[index];
    Call call(this, kCancelJob, kUnaryDeadlineS);
    v1::CancelJobRequest req;
    req.set_job_id(job.id);
    v1::CancelJobResponse resp;
    const grpc::Status st = stub_->CancelJob(&call.ctx, req, &resp);
    std::string bad;
    if (st.ok()) {
      const v1::Job& j = resp.job();
      const bool fine = j.state() == v1::JOB_STATE_CANCELLED ||
                        (j.state() == v1::JOB_STATE_RUNNING && j.cancel_requested());
      if (!fine) {
        bad = absl::StrFormat("CancelJob %d answered OK with state %s cancel_requested %d", job.id,
                              v1::JobState_Name(j.state()), j.cancel_requested());
      } else if (IsTerminal(job.state)) {
        bad = absl::StrFormat("CancelJob of job %d, known %s, answered OK", job.id,
                              v1::JobState_Name(job.state));
      }
    }
    Finish(call, st, bad, {StatusCode::FAILED_PRECONDITION});
    if (st.ok() && bad.empty()) {
      ++shared_->cancels_accepted;
      if (resp.job().state() == v1::JOB_STATE_CANCELLED) NoteState(job, v1::JOB_STATE_CANCELLED);
    }
  }

  // --- QueryResults: by job with optional filters, or across jobs (the
  // caller is an admin without --auth); paged, oldest first.
  void QueryResults() {
    v1::QueryResultsRequest req;
    v1::ResultFilter* f = req.mutable_filter();
    const JobInfo* job = nullptr;
    std::vector<const JobInfo*> done;
    for (const JobInfo& j : jobs_) {
      if (j.state == v1::JOB_STATE_SUCCEEDED) done.push_back(&j);
    }
    const bool across = Chance(0.2) || jobs_.empty();
    if (!across) {
      job = !done.empty() && Chance(0.8) ? PickOf(done) : &jobs_[rng_.Uniform(jobs_.size())];
      f->set_job_id(job->id);
    }
    if (Chance(across ? 0.6 : 0.3)) f->set_metric(kMetrics[rng_.Uniform(7)]);
    if (Chance(0.3)) f->set_intervention(kResultInterventions[rng_.Uniform(7)]);
    if (Chance(0.3)) f->set_model(PickModel(/*dense_too=*/true));
    if (Chance(0.1)) f->set_dataset_sha256(shared_->eval_sha);
    int64_t after_us = 0, before_us = 0;
    if (Chance(0.15)) {
      after_us = WallMicros() - static_cast<int64_t>(rng_.Uniform(120)) * 1000000;
      SetMicros(after_us, f->mutable_created_after());
    }
    if (Chance(0.1)) {
      before_us = WallMicros() - static_cast<int64_t>(rng_.Uniform(60)) * 1000000;
      SetMicros(before_us, f->mutable_created_before());
    }
    static const int kSizes[] = {0, 10, 50, 200, 1000};
    req.set_page_size(kSizes[rng_.Uniform(5)]);
    const bool unfiltered = !across && f->model().empty() && f->metric().empty() &&
                            f->intervention().empty() && f->dataset_sha256().empty() &&
                            after_us == 0 && before_us == 0;
    const int pages = across ? 1 + static_cast<int>(rng_.Uniform(2)) : 50;
    std::set<std::string> keys;
    int64_t last_created = 0, rows = 0;
    for (int p = 0; p < pages && !Done(); ++p) {
      Call call(this, kQueryResults, kUnaryDeadlineS);
      v1::QueryResultsResponse resp;
      const grpc::Status st = stub_->QueryResults(&call.ctx, req, &resp);
      std::string bad;
      if (st.ok()) {
        const int limit = req.page_size() == 0 ? 100 : req.page_size();
        if (resp.results_size() > limit) bad = "QueryResults page larger than page_size";
        for (const v1::Result& r : resp.results()) {
          const int64_t created = ToMicros(r.created_at());
          if ((f->job_id() != 0 && r.job_id() != f->job_id()) ||
              (!f->model().empty() && r.model() != f->model()) ||
              (!f->metric().empty() && r.metric() != f->metric()) ||
              (!f->intervention().empty() && r.intervention() != f->intervention()) ||
              (!f->dataset_sha256().empty() && r.dataset_sha256() != f->dataset_sha256()) ||
              (after_us != 0 && created < after_us) || (before_us != 0 && created >= before_us)) {
            bad = absl::StrFormat("QueryResults row (job %d, %s, %s, %s) outside the filter %s",
                                  r.job_id(), r.model(), r.intervention(), r.metric(),
                                  f->ShortDebugString());
          }
          if (created < last_created) bad = "QueryResults rows not oldest first";
          last_created = created;
          const std::string key =
              absl::StrCat(r.job_id(), "/", r.model(), "/", r.intervention(), "/", r.metric());
          if (!keys.insert(key).second) bad = "QueryResults row twice: " + key;
        }
        rows += resp.results_size();
        if (bad.empty() && resp.next_page_token().empty() && unfiltered &&
            job->state == v1::JOB_STATE_SUCCEEDED && rows == 0) {
          bad = absl::StrFormat("succeeded job %d has no result rows", job->id);
        }
      }
      Finish(call, st, bad, {});
      if (!st.ok() || resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
  }

  // --- ExportCoefficients: an evaluation window of a succeeded job (its
  // hash from Tokenize, as a user would compute it) must be cached; random
  // hashes, the dense twin and unknown models are NOT_FOUND.
  void Export() {
    std::vector<JobInfo*> done;
    for (JobInfo& j : jobs_) {
      if (j.state == v1::JOB_STATE_SUCCEEDED) done.push_back(&j);
    }
    v1::ExportCoefficientsRequest req;
    const uint64_t mode = rng_.Uniform(100);
    int64_t window = 0;
    if (mode < 65 && !done.empty()) {
      JobInfo& job = *done[rng_.Uniform(done.size())];
      if (job.hashes.empty() && (Done() || !WindowHashes(job) || Done())) return;
      req.set_model(job.models[rng_.Uniform(job.models.size())]);
      req.set_window_hash(PickOf(job.hashes));
      if (Chance(0.5)) req.set_dtype("float32");
      window = job.window;
    } else {
      static const char* kOther[] = {"fg-a", "fg-b", "dense", "no-such-model"};
      req.set_model(kOther[rng_.Uniform(4)]);
      req.set_window_hash(Sha256Hex(absl::StrCat("random window ", rng_.Next())));
    }
    Call call(this, kExportCoefficients, kExportDeadlineS);
    auto reader = stub_->ExportCoefficients(&call.ctx, req);
    v1::ExportCoefficientsResponse msg;
    std::string bad;
    int64_t total = -1, got = 0;
    while (reader->Read(&msg)) {
      call.FirstMessage();
      if (msg.has_header()) {
        const v1::CoefficientsHeader& h = msg.header();
        if (total >= 0) bad = "ExportCoefficients sent a second header";
        total = h.total_bytes();
        if (h.window_length() != window || h.sites_size() != 4 ||
            h.total_bytes() != window * shared_->coeff_bytes_per_token ||
            h.weights_sha256() != WeightsOf(req.model())) {
          bad = absl::StrFormat("ExportCoefficients header: T %d, %d sites, %d bytes (want T %d)",
                                h.window_length(), h.sites_size(), h.total_bytes(), window);
        }
      } else {
        if (total < 0) bad = "ExportCoefficients sent a chunk before the header";
        if (msg.chunk().size() > static_cast<size_t>(kMiB)) bad = "export chunk over 1 MiB";
        got += static_cast<int64_t>(msg.chunk().size());
      }
    }
    const grpc::Status st = reader->Finish();
    if (st.ok() && window == 0) bad = "ExportCoefficients of a random window answered OK";
    if (st.ok() && bad.empty() && got != total) {
      bad = absl::StrFormat("ExportCoefficients: %d bytes after a header of %d", got, total);
    }
    if (!st.ok() && window > 0 && st.error_code() == StatusCode::NOT_FOUND) {
      bad = "window of a succeeded job not in the cache: " + st.error_message();
    }
    Finish(call, st, bad,
           window > 0 ? std::initializer_list<StatusCode>{}
                      : std::initializer_list<StatusCode>{StatusCode::NOT_FOUND});
  }

  // The hashes of `job`'s evaluation windows: the ids from Tokenize (text)
  // or the uploaded ids (tokens). False when Tokenize failed.
  bool WindowHashes(JobInfo& job) {
    std::vector<int32_t> ids;
    const size_t need = static_cast<size_t>(job.window * job.eval_windows);
    if (job.dataset >= 0 && datasets_[job.dataset].tokens) {
      const std::string bytes = datasets_[job.dataset].Bytes();
      for (size_t i = 0; i < need; ++i) ids.push_back(static_cast<uint8_t>(bytes[4 * i]));
    } else {
      const std::string text =
          job.dataset >= 0 ? datasets_[job.dataset].Bytes() : shared_->eval_text;
      v1::TokenizeRequest req;
      req.set_model(job.models[0]);
      // Byte-level: the first `need` ids are the ids of the first `need` bytes.
      req.set_text(text.substr(0, need));
      if (!TokenizeCall(req, false, &ids)) return false;
    }
    for (int64_t w = 0; w < job.eval_windows; ++w) {
      job.hashes.push_back(WindowHash(ids, w * job.window, job.window));
    }
    return true;
  }

  const int index_;
  Shared* shared_;
  Rng rng_;
  std::unique_ptr<v1::AuditService::Stub> stub_;
  std::vector<JobInfo> jobs_;
  std::vector<DatasetInfo> datasets_;
  std::string last_dataset_;
  int next_dataset_ = 0;
  std::mutex active_mu_;
  Call* active_ = nullptr;  // guarded by active_mu_
};

Call::Call(Client* client, int op, int deadline_s) : op(op), t0(Clock::now()), client_(client) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  client_->Register(this);
}

Call::~Call() { client_->Unregister(); }

// ---------------------------------------------------------------- setup

std::string MakeWorkDir() {
  if (!absl::GetFlag(FLAGS_work_dir).empty()) {
    fs::create_directories(absl::GetFlag(FLAGS_work_dir));
    return fs::absolute(absl::GetFlag(FLAGS_work_dir)).string();
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/fca_soak_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

// A tiny model folder, as tests/e2e writes them: one audit of a few windows
// takes a fraction of a second.
bool InitModel(const std::string& dir, const std::string& name,
               const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {absl::GetFlag(FLAGS_local_audit),
                                   "init",
                                   "--out=" + dir + "/" + name,
                                   "--d_model=32",
                                   "--n_layers=2",
                                   "--n_heads=2",
                                   "--n_groups=4",
                                   "--d_ff=64",
                                   "--controller_width=16",
                                   absl::StrCat("--max_seq_len=", kMaxSeqLen)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  CommandResult r = RunCommand(argv, 120);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "soak: fca-local-audit init %s failed (%d): %s\n", name.c_str(),
                 r.exit_code, r.err.c_str());
    return false;
  }
  return true;
}

grpc::Status SetupUpload(v1::AuditService::Stub& stub, const std::string& name,
                         const std::string& text) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::UploadDatasetResponse resp;
  auto writer = stub.UploadDataset(&ctx, &resp);
  v1::UploadDatasetRequest header;
  header.mutable_header()->set_name(name);
  header.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
  header.mutable_header()->set_size_bytes(static_cast<int64_t>(text.size()));
  writer->Write(header);
  v1::UploadDatasetRequest chunk;
  chunk.set_chunk(text);
  writer->Write(chunk);
  writer->WritesDone();
  return writer->Finish();
}

// Submits one small audit and follows it: the idle time of the kind of job
// the soak submits. -1 on failure.
double IdleAuditSeconds(v1::AuditService::Stub& stub, std::string* error) {
  const Clock::time_point t0 = Clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::SubmitAuditRequest req;
  v1::AuditSpec* spec = req.mutable_spec();
  spec->add_models("fg-a");
  spec->add_models("fg-b");
  spec->set_dense_twin(kDenseModel);
  spec->set_eval_dataset("eval");
  spec->set_calib_dataset("calib");
  spec->set_window_length(16);
  spec->set_max_eval_windows(8);
  spec->set_max_calib_windows(8);
  spec->set_batch_size(4);
  spec->set_bootstrap_resamples(200);
  spec->set_timing_repeats(1);
  spec->set_label("soak warm-up");
  v1::SubmitAuditResponse resp;
  grpc::Status st = stub.SubmitAudit(&ctx, req, &resp);
  if (!st.ok()) {
    *error = "warm-up SubmitAudit: " + st.error_message();
    return -1;
  }
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::WatchJobRequest watch;
  watch.set_job_id(resp.job().id());
  auto reader = stub.WatchJob(&watch_ctx, watch);
  v1::WatchJobResponse msg;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&msg)) {
    if (msg.event().has_state()) state = msg.event().state();
  }
  st = reader->Finish();
  if (!st.ok() || state != v1::JOB_STATE_SUCCEEDED) {
    *error = absl::StrFormat("warm-up audit: %s, state %s, error %s", st.error_message(),
                             v1::JobState_Name(state), msg.job().error());
    return -1;
  }
  return SecondsBetween(t0, Clock::now());
}

// ---------------------------------------------------------------- report

struct Figures {
  int clients = 0, duration_s = 0;
  double load_s = 0, setup_s = 0, idle_audit_s = 0;
  std::string address, work_dir, server_binary;
  int64_t server_pid = 0;
  std::vector<OpSummary> ops;
  std::vector<Bucket> buckets;
  std::vector<ResourceSample> resources;
  // jobs
  int64_t submitted = 0, cancels_accepted = 0, watched_to_end = 0;
  std::map<std::string, int64_t> jobs_by_state;  // ListJobs sweep after the load
  std::vector<std::string> failed_job_errors;
  bool sweep_ok = false;
  // server
  ProcStatus at_start, at_end;
  int64_t fds_start = -1, fds_end = -1, fds_peak = -1;
  int64_t rss_peak_kb = 0, threads_peak = 0, hwm_kb = 0;
  bool crashed = false;  // ended before the SIGTERM
  std::string crash;
  bool sigterm_clean = false, killed_after_sigterm = false, serving_after_load = false;
  std::string exit_description;
  double shutdown_s = 0;
  int64_t server_log_lines = 0;
  std::vector<std::string> server_log_tail;
  // database
  std::string integrity, foreign_keys, table_rows;
  bool integrity_ok = false;
  int64_t db_bytes = 0, wal_bytes = 0;
  std::vector<std::string> problems;
};

std::string Codes(const std::map<std::string, int64_t>& m) {
  if (m.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [code, n] : m) parts.push_back(absl::StrCat(code, " ", n));
  return absl::StrJoin(parts, ", ");
}

std::string Lat(const Latency& l) {
  if (l.n == 0) return "-";
  return absl::StrFormat("%.1f / %.1f / %.1f", l.p50, l.p99, l.max);
}

double Mb(int64_t kb) { return kb / 1024.0; }

void PrintFigures(const Figures& f) {
  std::printf("\n== fca_soak_bench: %d clients, %.0f s of load against %s (pid %lld), %s\n",
              f.clients, f.load_s, f.address.c_str(), static_cast<long long>(f.server_pid),
              f.server_binary.c_str());
  std::printf(
      "   setup %.1f s; one small audit (2 models + twin, 8+8 windows of 16) alone: "
      "%.2f s\n\n",
      f.setup_s, f.idle_audit_s);
  std::printf("%-18s %8s %8s  %-40s %-28s %9s  %-26s %-26s\n", "RPC", "calls", "ok",
              "expected refusals", "errors", "drop/cut", "latency ms p50/p99/max",
              "first msg ms p50/p99/max");
  int64_t calls = 0, errors = 0;
  for (const OpSummary& o : f.ops) {
    calls += o.calls;
    errors += o.errors;
    std::printf("%-18s %8lld %8lld  %-40s %-28s %4lld/%-4lld  %-26s %-26s\n", o.name.c_str(),
                static_cast<long long>(o.calls), static_cast<long long>(o.ok),
                Codes(o.expected_by_code).c_str(), Codes(o.errors_by_code).c_str(),
                static_cast<long long>(o.dropped), static_cast<long long>(o.cut),
                Lat(o.total).c_str(), o.stream ? Lat(o.first).c_str() : "");
  }
  std::printf("%-18s %8lld  (%.1f calls/s), errors %lld\n", "all", static_cast<long long>(calls),
              calls / std::max(1.0, f.load_s), static_cast<long long>(errors));
  for (const OpSummary& o : f.ops) {
    for (const auto& [code, list] : o.error_messages) {
      for (const std::string& m : list) {
        std::printf("   error %s %s: %s\n", o.name.c_str(), code.c_str(), m.c_str());
      }
    }
  }
  std::printf("\njobs: %lld submitted (accepted); after the load the server lists %s%s\n",
              static_cast<long long>(f.submitted), Codes(f.jobs_by_state).c_str(),
              f.sweep_ok ? "" : " (ListJobs sweep failed)");
  std::printf("      %lld cancels accepted, %lld watches followed a job to its terminal event\n",
              static_cast<long long>(f.cancels_accepted), static_cast<long long>(f.watched_to_end));
  for (const std::string& e : f.failed_job_errors) std::printf("      FAILED: %s\n", e.c_str());
  std::printf("\nserver: RSS start %.1f MB, end %.1f MB, peak %.1f MB (sampled; VmHWM %.1f MB)\n",
              Mb(f.at_start.vm_rss_kb), Mb(f.at_end.vm_rss_kb), Mb(f.rss_peak_kb), Mb(f.hwm_kb));
  std::printf(
      "        threads start %lld, peak %lld, end %lld; open fds start %lld, peak %lld, "
      "end %lld\n",
      static_cast<long long>(f.at_start.threads), static_cast<long long>(f.threads_peak),
      static_cast<long long>(f.at_end.threads), static_cast<long long>(f.fds_start),
      static_cast<long long>(f.fds_peak), static_cast<long long>(f.fds_end));
  std::printf("        still serving after the load: %s; crashed during the soak: %s%s\n",
              f.serving_after_load ? "yes" : "NO", f.crashed ? "YES, " : "no", f.crash.c_str());
  std::printf("        SIGTERM: %s (%s after %.1f s%s)\n",
              f.sigterm_clean ? "exited cleanly" : "NOT CLEAN", f.exit_description.c_str(),
              f.shutdown_s, f.killed_after_sigterm ? ", then SIGKILLed" : "");
  std::printf(
      "sqlite: PRAGMA integrity_check: %s; foreign_key_check: %s; %.1f MB (+ %.1f MB "
      "wal)\n        rows: %s\n",
      f.integrity.c_str(), f.foreign_keys.empty() ? "clean" : f.foreign_keys.c_str(),
      f.db_bytes / 1048576.0, f.wal_bytes / 1048576.0, f.table_rows.c_str());
  std::printf("server log: %lld lines%s\n", static_cast<long long>(f.server_log_lines),
              f.server_log_tail.empty() ? "" : "; last ones:");
  for (const std::string& line : f.server_log_tail) std::printf("   | %s\n", line.c_str());

  std::printf("\nover time:\n%-13s %8s %7s  %-24s %9s %8s %6s\n", "seconds", "calls", "errors",
              "unary ok ms p50/p99/max", "RSS MB", "threads", "fds");
  for (const Bucket& b : f.buckets) {
    std::printf("%5.0f - %-5.0f %8lld %7lld  %-24s %9.1f %8lld %6lld\n", b.t0_s, b.t1_s,
                static_cast<long long>(b.calls), static_cast<long long>(b.errors),
                Lat(b.unary_ok).c_str(), Mb(b.rss_max_kb), static_cast<long long>(b.threads_max),
                static_cast<long long>(b.fds_max));
  }
  static const char* kShort[kNumOps] = {"Models", "Tokenize", "Upload", "ListDs", "Submit", "Watch",
                                        "GetJob", "ListJobs", "Cancel", "Query",  "Export"};
  std::printf("\np50 latency ms per RPC over time (Watch: whole streams):\n%-13s", "seconds");
  for (int op = 0; op < kNumOps; ++op) std::printf(" %8s", kShort[op]);
  std::printf("\n");
  for (const Bucket& b : f.buckets) {
    std::printf("%5.0f - %-5.0f", b.t0_s, b.t1_s);
    for (const Latency& l : b.per_op) {
      if (l.n == 0) {
        std::printf(" %8s", "-");
      } else {
        std::printf(" %8.1f", l.p50);
      }
    }
    std::printf("\n");
  }
  std::printf("\nverdict: %s\n", f.problems.empty() ? "PASS" : "FAIL");
  for (const std::string& p : f.problems) std::printf("   - %s\n", p.c_str());
  std::fflush(stdout);
}

json::Value LatJson(const Latency& l) {
  json::Value v = json::Value::MakeObject();
  v.Set("n", json::Value::Int(l.n));
  v.Set("p50", json::Value::Number(l.p50));
  v.Set("p99", json::Value::Number(l.p99));
  v.Set("max", json::Value::Number(l.max));
  return v;
}

json::Value CountsJson(const std::map<std::string, int64_t>& m) {
  json::Value v = json::Value::MakeObject();
  for (const auto& [k, n] : m) v.Set(k, json::Value::Int(n));
  return v;
}

json::Value Strings(const std::vector<std::string>& list) {
  json::Value v = json::Value::MakeArray();
  for (const std::string& s : list) v.mutable_array().push_back(json::Value::String(s));
  return v;
}

json::Value FiguresJson(const Figures& f) {
  using json::Value;
  Value root = Value::MakeObject();
  Value config = Value::MakeObject();
  config.Set("clients", Value::Int(f.clients));
  config.Set("duration_s", Value::Int(f.duration_s));
  config.Set("load_s", Value::Number(f.load_s));
  config.Set("setup_s", Value::Number(f.setup_s));
  config.Set("idle_audit_s", Value::Number(f.idle_audit_s));
  config.Set("address", Value::String(f.address));
  config.Set("server_binary", Value::String(f.server_binary));
  config.Set("work_dir", Value::String(f.work_dir));
  root.Set("config", config);
  Value rpcs = Value::MakeArray();
  for (const OpSummary& o : f.ops) {
    Value r = Value::MakeObject();
    r.Set("rpc", Value::String(o.name));
    r.Set("calls", Value::Int(o.calls));
    r.Set("ok", Value::Int(o.ok));
    r.Set("expected_refusals", CountsJson(o.expected_by_code));
    r.Set("errors", CountsJson(o.errors_by_code));
    Value messages = Value::MakeObject();
    for (const auto& [code, list] : o.error_messages) messages.Set(code, Strings(list));
    r.Set("error_messages", messages);
    r.Set("dropped", Value::Int(o.dropped));
    r.Set("cut_at_end", Value::Int(o.cut));
    r.Set("latency_ms", LatJson(o.total));
    if (o.stream) r.Set("first_message_ms", LatJson(o.first));
    rpcs.mutable_array().push_back(r);
  }
  root.Set("rpcs", rpcs);
  Value jobs = Value::MakeObject();
  jobs.Set("submitted", Value::Int(f.submitted));
  jobs.Set("by_state_after_load", CountsJson(f.jobs_by_state));
  jobs.Set("cancels_accepted", Value::Int(f.cancels_accepted));
  jobs.Set("watched_to_end", Value::Int(f.watched_to_end));
  jobs.Set("failed_job_errors", Strings(f.failed_job_errors));
  root.Set("jobs", jobs);
  Value server = Value::MakeObject();
  server.Set("rss_start_kb", Value::Int(f.at_start.vm_rss_kb));
  server.Set("rss_end_kb", Value::Int(f.at_end.vm_rss_kb));
  server.Set("rss_peak_kb", Value::Int(f.rss_peak_kb));
  server.Set("vm_hwm_kb", Value::Int(f.hwm_kb));
  server.Set("threads_start", Value::Int(f.at_start.threads));
  server.Set("threads_peak", Value::Int(f.threads_peak));
  server.Set("threads_end", Value::Int(f.at_end.threads));
  server.Set("fds_start", Value::Int(f.fds_start));
  server.Set("fds_peak", Value::Int(f.fds_peak));
  server.Set("fds_end", Value::Int(f.fds_end));
  server.Set("serving_after_load", Value::Bool(f.serving_after_load));
  server.Set("crashed", Value::Bool(f.crashed));
  server.Set("crash", Value::String(f.crash));
  server.Set("sigterm_clean", Value::Bool(f.sigterm_clean));
  server.Set("exit", Value::String(f.exit_description));
  server.Set("shutdown_s", Value::Number(f.shutdown_s));
  server.Set("log_lines", Value::Int(f.server_log_lines));
  server.Set("log_tail", Strings(f.server_log_tail));
  root.Set("server", server);
  Value db = Value::MakeObject();
  db.Set("integrity_check", Value::String(f.integrity));
  db.Set("integrity_ok", Value::Bool(f.integrity_ok));
  db.Set("foreign_key_check", Value::String(f.foreign_keys));
  db.Set("rows", Value::String(f.table_rows));
  db.Set("db_bytes", Value::Int(f.db_bytes));
  db.Set("wal_bytes", Value::Int(f.wal_bytes));
  root.Set("sqlite", db);
  Value timeline = Value::MakeArray();
  for (const Bucket& b : f.buckets) {
    Value v = Value::MakeObject();
    v.Set("t0_s", Value::Number(b.t0_s));
    v.Set("t1_s", Value::Number(b.t1_s));
    v.Set("calls", Value::Int(b.calls));
    v.Set("errors", Value::Int(b.errors));
    v.Set("unary_ok_ms", LatJson(b.unary_ok));
    v.Set("rss_max_kb", Value::Int(b.rss_max_kb));
    v.Set("threads_max", Value::Int(b.threads_max));
    v.Set("fds_max", Value::Int(b.fds_max));
    Value by_rpc = Value::MakeObject();
    for (int op = 0; op < kNumOps; ++op) by_rpc.Set(OpName(op), LatJson(b.per_op[op]));
    v.Set("latency_ms_by_rpc", by_rpc);
    timeline.mutable_array().push_back(v);
  }
  root.Set("timeline", timeline);
  Value samples = Value::MakeArray();  // [t_s, rss_kb, threads, fds]
  for (const ResourceSample& r : f.resources) {
    Value row = Value::MakeArray();
    row.mutable_array().push_back(Value::Number(std::round(r.t_s * 10) / 10));
    row.mutable_array().push_back(Value::Int(r.rss_kb));
    row.mutable_array().push_back(Value::Int(r.threads));
    row.mutable_array().push_back(Value::Int(r.fds));
    samples.mutable_array().push_back(row);
  }
  root.Set("samples_t_rsskb_threads_fds", samples);
  root.Set("pass", Value::Bool(f.problems.empty()));
  root.Set("problems", Strings(f.problems));
  return root;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// ---------------------------------------------------------------- main

int Main() {
  Figures f;
  f.clients = absl::GetFlag(FLAGS_clients);
  f.duration_s = absl::GetFlag(FLAGS_duration_s);
  f.server_binary = absl::GetFlag(FLAGS_server);
  if (f.clients < 1 || f.duration_s < 1) {
    std::fprintf(stderr, "soak: --clients and --duration_s must be positive\n");
    return 2;
  }
  for (const std::string& bin : {absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_local_audit)}) {
    if (access(bin.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "soak: %s is not an executable (build it first)\n", bin.c_str());
      return 2;
    }
  }
  const Clock::time_point setup_start = Clock::now();
  f.work_dir = MakeWorkDir();
  if (f.work_dir.empty()) {
    std::fprintf(stderr, "soak: cannot create a work folder\n");
    return 2;
  }
  std::fprintf(stderr, "soak: work folder %s\n", f.work_dir.c_str());
  const std::string models = f.work_dir + "/models";
  const std::string db =
      absl::GetFlag(FLAGS_db).empty() ? f.work_dir + "/fca.sqlite" : absl::GetFlag(FLAGS_db);
  if (!absl::GetFlag(FLAGS_db).empty() && !fs::is_regular_file(db)) {
    std::fprintf(stderr, "soak: --db=%s is not a file\n", db.c_str());
    return 2;
  }
  fs::create_directories(models);
  if (!InitModel(models, "fg-a", {"--seed=1", "--controller_out_std=1.0"}) ||
      !InitModel(models, "fg-b", {"--seed=2", "--controller_out_std=1.0"}) ||
      !InitModel(models, kDenseModel, {"--family=dense", "--seed=1"})) {
    return 2;
  }

  std::vector<std::string> server_args = {"--models=" + models, "--db=" + db};
  if (absl::GetFlag(FLAGS_server_threads) > 0) {
    server_args.push_back(absl::StrCat("--threads=", absl::GetFlag(FLAGS_server_threads)));
  }
  for (const std::string& a : absl::GetFlag(FLAGS_server_args)) server_args.push_back(a);
  std::string error;
  std::unique_ptr<ServerProcess> server =
      ServerProcess::Start(f.server_binary, server_args, f.work_dir, 60, &error);
  if (server == nullptr) {
    std::fprintf(stderr, "soak: %s\n", error.c_str());
    return 2;
  }
  f.address = server->address();
  f.server_pid = server->pid();
  std::fprintf(stderr, "soak: fca-server pid %d on %s\n", server->pid(), f.address.c_str());

  Shared shared;
  shared.address = f.address;
  shared.think_ms = absl::GetFlag(FLAGS_think_ms);
  shared.run_tag = absl::StrFormat("r%x", static_cast<uint32_t>(WallMicros() ^ getpid()));
  if (!absl::GetFlag(FLAGS_db).empty()) {
    shared.content_salt = static_cast<uint64_t>(WallMicros()) * 0x9E3779B97F4A7C15ull;
  }
  shared.medium_budget_bytes = absl::GetFlag(FLAGS_medium_upload_budget_mb) * kMiB;
  for (const std::string& item : absl::GetFlag(FLAGS_mix)) {
    const std::vector<std::string> kv = absl::StrSplit(item, '=');
    int op = 0;
    while (op < kNumOps && (kv.size() != 2 || kv[0] != OpName(op))) ++op;
    int w = -1;
    if (op == kNumOps || !absl::SimpleAtoi(kv[1], &w) || w < 0) {
      std::fprintf(stderr, "soak: --mix wants RPC=WEIGHT items, not '%s'\n", item.c_str());
      return 2;
    }
    shared.weights_of_ops[op] = w;
  }
  if (std::all_of(std::begin(shared.weights_of_ops), std::end(shared.weights_of_ops),
                  [](int w) { return w == 0; })) {
    std::fprintf(stderr, "soak: --mix leaves no RPC\n");
    return 2;
  }
  for (const std::string& a : absl::GetFlag(FLAGS_server_args)) {
    const std::string flag = "--max_tokenize_bytes=";
    if (a.rfind(flag, 0) == 0) shared.max_tokenize_bytes = std::atoll(a.c_str() + flag.size());
  }
  shared.eval_text = Letters(16 * 64, 1001);
  shared.calib_text = Letters(16 * 64, 1002);
  shared.eval_sha = Sha256Hex(shared.eval_text);
  {
    auto channel = NewChannel(f.address);
    auto stub = v1::AuditService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ListModelsResponse resp;
    grpc::Status st = stub->ListModels(&ctx, v1::ListModelsRequest(), &resp);
    if (!st.ok() || resp.models_size() != 3) {
      std::fprintf(stderr, "soak: setup ListModels: %s (%d models)\n", st.error_message().c_str(),
                   resp.models_size());
      return 2;
    }
    for (const v1::Model& m : resp.models()) {
      shared.weights[m.name()] = m.weights_sha256();
      if (m.name() == "fg-a") {
        for (const v1::CoefficientSite& s : m.sites())
          shared.coeff_bytes_per_token += 4 * s.channels();
      }
    }
    for (const auto& [name, text] : {std::pair<std::string, std::string>{"eval", shared.eval_text},
                                     {"calib", shared.calib_text}}) {
      st = SetupUpload(*stub, name, text);
      if (!st.ok()) {
        std::fprintf(stderr, "soak: setup upload of %s: %s\n", name.c_str(),
                     st.error_message().c_str());
        return 2;
      }
    }
    f.idle_audit_s = IdleAuditSeconds(*stub, &error);
    if (f.idle_audit_s < 0) {
      std::fprintf(stderr, "soak: %s\n", error.c_str());
      return 2;
    }
    // A model's weights hash is listed once it is loaded (the listing
    // itself reads headers only); the warm-up audit loaded all three.
    grpc::ClientContext relist;
    v1::ListModelsResponse loaded;
    st = stub->ListModels(&relist, v1::ListModelsRequest(), &loaded);
    for (const v1::Model& m : loaded.models()) shared.weights[m.name()] = m.weights_sha256();
    shared.max_job_id = 1;
  }
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < f.clients; ++i) {
    clients.push_back(std::make_unique<Client>(
        i, &shared, DeriveSeed(absl::GetFlag(FLAGS_seed), "soak client", i)));
  }
  f.setup_s = SecondsBetween(setup_start, Clock::now());

  // The sampler: /proc/PID/status every --sample_ms, and a crash watch.
  std::mutex resources_mu;
  std::atomic<bool> sampler_stop{false};
  shared.start = Clock::now();
  shared.end = shared.start + std::chrono::seconds(f.duration_s);
  auto sample_now = [&]() -> std::optional<ResourceSample> {
    auto s = ReadProcStatus(server->pid());
    if (!s) return std::nullopt;
    ResourceSample r;
    r.t_s = SecondsBetween(shared.start, Clock::now());
    r.rss_kb = s->vm_rss_kb;
    r.hwm_kb = s->vm_hwm_kb;
    r.threads = s->threads;
    r.fds = CountOpenFds(server->pid());
    return r;
  };
  if (auto s = sample_now()) {
    f.at_start = {s->rss_kb, s->hwm_kb, s->threads};
    f.fds_start = s->fds;
    f.resources.push_back(*s);
  }
  std::thread sampler([&] {
    const auto period = std::chrono::milliseconds(std::max(10, absl::GetFlag(FLAGS_sample_ms)));
    Clock::time_point next = Clock::now();
    while (!sampler_stop.load()) {
      next += period;
      std::this_thread::sleep_until(next);
      const ExitInfo e = server->Poll();
      if (e.exited) {
        if (!shared.stop.exchange(true)) {
          std::lock_guard<std::mutex> lock(resources_mu);
          f.crashed = true;
          f.crash = absl::StrFormat("%s at t=%.1f s", e.Describe(),
                                    SecondsBetween(shared.start, Clock::now()));
        }
        return;
      }
      if (auto s = sample_now()) {
        std::lock_guard<std::mutex> lock(resources_mu);
        f.resources.push_back(*s);
      }
    }
  });

  std::fprintf(stderr, "soak: %d clients for %d s\n", f.clients, f.duration_s);
  std::vector<std::thread> threads;
  std::atomic<int> running{f.clients};
  for (auto& c : clients) {
    threads.emplace_back([&, client = c.get()] {
      client->Run();
      --running;
    });
  }
  // Progress to stderr once a minute (or every tenth of a short run).
  const int progress_every = std::max(10, std::min(60, f.duration_s / 10));
  int next_report = progress_every;
  while (Clock::now() < shared.end && !shared.stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double t = SecondsBetween(shared.start, Clock::now());
    if (t >= next_report) {
      next_report += progress_every;
      std::lock_guard<std::mutex> lock(resources_mu);
      const ResourceSample last = f.resources.empty() ? ResourceSample() : f.resources.back();
      std::fprintf(stderr,
                   "soak: t=%.0f s: %lld jobs submitted, server RSS %.1f MB, %lld threads\n", t,
                   static_cast<long long>(shared.submitted.load()), Mb(last.rss_kb),
                   static_cast<long long>(last.threads));
    }
  }
  shared.stop = true;
  f.load_s = SecondsBetween(shared.start, Clock::now());
  // Calls still in flight 2 s after the end (mostly watches of queued jobs)
  // are cut.
  const Clock::time_point grace = Clock::now() + std::chrono::seconds(2);
  while (running.load() > 0 && Clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (running.load() > 0) {
    for (auto& c : clients) c->CutActive();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::thread& t : threads) t.join();
  Recorder all;
  for (auto& c : clients) all.Merge(c->recorder);
  f.submitted = shared.submitted.load();
  f.cancels_accepted = shared.cancels_accepted.load();
  f.watched_to_end = shared.watched_to_end.load();

  // After the load: does it still answer, what became of the jobs, and what
  // does it hold once idle.
  bool crashed = false;
  {
    std::lock_guard<std::mutex> lock(resources_mu);
    crashed = f.crashed;
  }
  if (!crashed) {
    auto stub = v1::AuditService::NewStub(NewChannel(f.address));
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::ListModelsResponse resp;
      f.serving_after_load = stub->ListModels(&ctx, v1::ListModelsRequest(), &resp).ok();
    }
    v1::ListJobsRequest req;
    req.set_page_size(500);
    f.sweep_ok = true;
    std::map<std::string, std::pair<int64_t, std::string>> failed;  // key -> (jobs, example)
    for (int page = 0; page < 10000; ++page) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      v1::ListJobsResponse resp;
      if (!stub->ListJobs(&ctx, req, &resp).ok()) {
        f.sweep_ok = false;
        break;
      }
      for (const v1::Job& j : resp.jobs()) {
        std::string state = v1::JobState_Name(j.state());
        if (state.rfind("JOB_STATE_", 0) == 0) state = state.substr(10);
        ++f.jobs_by_state[state];
        if (j.state() == v1::JOB_STATE_FAILED) {
          // Grouped by the message with names and numbers blanked.
          std::string key = j.error();
          for (char& c : key) c = (c >= '0' && c <= '9') ? '#' : c;
          for (const char* name : {"fg-a", "fg-b"}) {
            for (size_t at; (at = key.find(name)) != std::string::npos;) key.replace(at, 4, "*");
          }
          auto it =
              failed.try_emplace(key, 0, absl::StrFormat("job %d: %s", j.id(), j.error())).first;
          ++it->second.first;
        }
      }
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    for (const auto& [key, group] : failed) {
      f.failed_job_errors.push_back(absl::StrFormat("%d x, e.g. %s", group.first, group.second));
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    if (auto s = sample_now()) {
      f.at_end = {s->rss_kb, s->hwm_kb, s->threads};
      f.fds_end = s->fds;
      std::lock_guard<std::mutex> lock(resources_mu);
      f.resources.push_back(*s);
    }
  }

  // SIGTERM: the server drains (a running job is queued again) and exits 0.
  const Clock::time_point term = Clock::now();
  server->Signal(SIGTERM);
  const ExitInfo exit = server->Wait(60, &f.killed_after_sigterm);
  f.shutdown_s = SecondsBetween(term, Clock::now());
  sampler_stop = true;
  sampler.join();
  f.exit_description = exit.Describe();
  f.sigterm_clean = !f.crashed && !f.killed_after_sigterm && !exit.by_signal && exit.code == 0;

  {
    std::lock_guard<std::mutex> lock(resources_mu);
    for (const ResourceSample& r : f.resources) {
      f.rss_peak_kb = std::max(f.rss_peak_kb, r.rss_kb);
      f.hwm_kb = std::max(f.hwm_kb, r.hwm_kb);
      f.threads_peak = std::max(f.threads_peak, r.threads);
      f.fds_peak = std::max(f.fds_peak, r.fds);
    }
  }
  const std::string log = ReadFileOrEmpty(server->stderr_path());
  std::vector<std::string> lines = absl::StrSplit(log, '\n', absl::SkipEmpty());
  f.server_log_lines = static_cast<int64_t>(lines.size());
  for (size_t i = lines.size() > 12 ? lines.size() - 12 : 0; i < lines.size(); ++i) {
    f.server_log_tail.push_back(lines[i].substr(0, 300));
  }

  // The database after the server has gone.
  const std::string sqlite3 = absl::GetFlag(FLAGS_sqlite3);
  if (access(sqlite3.c_str(), X_OK) == 0) {
    CommandResult r = RunCommand({sqlite3, db, "PRAGMA integrity_check;"}, 600);
    f.integrity = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
    f.integrity_ok = r.exit_code == 0 && f.integrity == "ok";
    r = RunCommand({sqlite3, db, "PRAGMA foreign_key_check;"}, 600);
    f.foreign_keys = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
    r = RunCommand({sqlite3, db,
                    "SELECT 'jobs ' || (SELECT count(*) FROM jobs) || ', job_events ' || "
                    "(SELECT count(*) FROM job_events) || ', results ' || (SELECT count(*) FROM "
                    "results) || ', datasets ' || (SELECT count(*) FROM datasets) || "
                    "', dataset_blobs ' || (SELECT count(*) FROM dataset_blobs) || "
                    "', coeff_cache ' || (SELECT count(*) FROM coeff_cache) || '; job states: ' "
                    "|| (SELECT group_concat(state || ' ' || n, ', ') FROM (SELECT state, "
                    "count(*) AS n FROM jobs GROUP BY state));"},
                   600);
    f.table_rows = Trim(r.exit_code == 0 ? r.out : "sqlite3 failed: " + r.err);
  } else {
    f.integrity = "not checked: no " + sqlite3 + " (apt-get install sqlite3)";
  }
  std::error_code ec;
  f.db_bytes = static_cast<int64_t>(fs::file_size(db, ec));
  if (ec) f.db_bytes = 0;
  f.wal_bytes = static_cast<int64_t>(fs::file_size(db + "-wal", ec));
  if (ec) f.wal_bytes = 0;

  f.ops = SummarizeOps(all);
  int bucket = absl::GetFlag(FLAGS_bucket_s);
  if (bucket <= 0) bucket = std::max(10, (f.duration_s + 19) / 20);
  // Calls that end in the grace period after the load count in the last row.
  f.buckets = Buckets(all, f.resources, std::min<double>(f.load_s, f.duration_s), bucket);

  int64_t errors = 0;
  for (const OpSummary& o : f.ops) errors += o.errors;
  if (errors > 0) f.problems.push_back(absl::StrCat(errors, " calls ended in an error"));
  if (f.crashed) f.problems.push_back("the server crashed: " + f.crash);
  if (!f.crashed && !f.serving_after_load) f.problems.push_back("the server stopped answering");
  if (!f.sigterm_clean) f.problems.push_back("SIGTERM: " + f.exit_description);
  if (!f.integrity_ok) f.problems.push_back("database integrity: " + f.integrity);
  if (!f.foreign_keys.empty()) f.problems.push_back("foreign_key_check: " + f.foreign_keys);
  if (shared.submitted.load() == 0) f.problems.push_back("no audit was accepted");
  // Every audit the soak submits is valid: a FAILED job is the server's fault.
  if (f.jobs_by_state.count("FAILED") > 0) {
    f.problems.push_back(absl::StrCat(f.jobs_by_state["FAILED"], " jobs FAILED"));
  }

  PrintFigures(f);
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_json), std::ios::trunc);
    out << json::Write(FiguresJson(f), /*pretty=*/true) << "\n";
    if (!out.good()) {
      std::fprintf(stderr, "soak: cannot write %s\n", absl::GetFlag(FLAGS_json).c_str());
      f.problems.push_back("cannot write the JSON file");
    }
  }
  if (f.problems.empty() && !absl::GetFlag(FLAGS_keep) && absl::GetFlag(FLAGS_work_dir).empty()) {
    fs::remove_all(f.work_dir, ec);
  } else {
    std::printf("work folder kept: %s (server.err is the server's log)\n", f.work_dir.c_str());
  }
  return f.problems.empty() ? 0 : 1;
}

}  // namespace
}  // namespace fca::soak

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fca_soak_bench [--clients=50] [--duration_s=600] [--json=FILE]: soak test of a real "
      "fca-server");
  absl::ParseCommandLine(argc, argv);
  // A peer that goes away mid-write must not kill the bench.
  signal(SIGPIPE, SIG_IGN);
  return fca::soak::Main();
}
