// fca_soak_bench: the load generator. Each client thread has its own channel
// and loops over a weighted random mix of every RPC of fca.v1.AuditService,
// checks each response against what the API promises, and records the
// outcome (bench/soak_bench.cc says what counts as what).
//
// Client's RPCs are defined by what they touch: soak_client.cc (the loop and
// the outcome of a call), soak_client_data.cc (models, tokens, datasets,
// coefficients), soak_client_jobs.cc (jobs and their results).
#ifndef FCA_BENCH_SOAK_CLIENT_H_
#define FCA_BENCH_SOAK_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/soak_stats.h"
#include "common/random.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

namespace fca::soak {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = 1 << 20;
// The tiny models: 2 layers x (attn_gate, mlp_gate) sites of G = 4 channels.
inline const char* const kGateModels[] = {"fg-a", "fg-b"};
inline const char* const kDenseModel = "dense";
// Every call has a deadline.
constexpr int kUnaryDeadlineS = 30;
constexpr int kUploadDeadlineS = 120;
constexpr int kWatchDeadlineS = 300;
constexpr int kExportDeadlineS = 60;

double MsSince(Clock::time_point t0);
double SecondsBetween(Clock::time_point a, Clock::time_point b);
// Microseconds since the Unix epoch.
int64_t WallMicros();

// Random lowercase letters and spaces: 27^16 possible 16-byte windows, so two
// seeds share no window and no dataset overlaps another by chance.
std::string Letters(size_t n, uint64_t seed);
// Pre-tokenized ids < 256 (the byte vocabulary), little-endian int32.
std::string TokenBytes(size_t n_ids, uint64_t seed);

bool IsTerminal(v1::JobState s);
std::string CodeName(grpc::StatusCode c);

// Projects (issue 23, --projects): three shared projects and users whose
// memberships cross them. User k writes in kProjects[k % 3], reads
// kProjects[(k + 1) % 3] and is no member of kProjects[(k + 2) % 3].
inline const char* const kProjects[] = {"lab", "alpha", "beta"};
constexpr int kNumProjects = 3;
struct SoakUser {
  std::string name, token;
  int write = 0, read = 1, stranger = 2;  // indexes into kProjects
};
// Share of a --projects client's calls that probe where it may not go.
constexpr double kProbeShare = 0.15;

// Adds the API key to a call's metadata (nothing when `token` is empty).
void Authorize(const std::string& token, grpc::ClientContext* ctx);

// A channel of its own (one connection per client thread, as separate users
// would have).
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address);

// What every client thread shares.
struct Shared {
  std::string address;
  Clock::time_point start, end;
  std::atomic<bool> stop{false};
  std::string eval_text, calib_text, eval_sha;  // datasets "eval" and "calib"
  // What the API promises of a model's weights hash: a model lists it once
  // it is loaded in the server's own repository (a listing reads headers
  // only, and audits run on workers), and once shown it never changes.
  // "" when `hash` agrees with what was seen of `model` (an empty one:
  // not loaded yet, unless `must_have` it); else what is wrong. The first
  // hash seen is remembered.
  std::string CheckWeights(const std::string& model, const std::string& hash, bool must_have);
  std::mutex weights_mu;
  std::map<std::string, std::string> weights;  // model -> weights_sha256 seen
  int64_t coeff_bytes_per_token = 0;           // of a gate model, float32
  int64_t medium_budget_bytes = 0;
  std::atomic<int64_t> medium_bytes{0};
  int64_t max_tokenize_bytes = kMiB;
  int think_ms = 0;
  int weights_of_ops[kNumOps] = {5, 8, 6, 5, 12, 10, 12, 10, 3, 14, 10};
  std::string run_tag;        // makes dataset names unique across runs on one database
  uint64_t content_salt = 0;  // with --db: new bytes are new to the old database too
  std::atomic<int64_t> max_job_id{0};
  std::atomic<int64_t> submitted{0}, cancels_accepted{0}, watched_to_end{0};

  // --projects: the users, and the ledger of what they were told was stored
  // (the sweep after the load compares each project's listing with it).
  bool projects = false;
  std::vector<SoakUser> users;
  std::string admin_token;
  void NoteJob(int project, int64_t id);
  void NoteDataset(int project, const std::string& name);
  // A random accepted job of kProjects[project]; 0 when there is none yet.
  int64_t JobOf(int project, Rng& rng);
  std::mutex ledger_mu;
  std::vector<int64_t> jobs_of[kNumProjects];          // guarded by ledger_mu
  std::vector<std::string> datasets_of[kNumProjects];  // guarded by ledger_mu
  // Probes: kind ("stranger GetJob", "reader SubmitAudit", ...) -> status
  // code -> calls; a stranger's probe or a reader's write answered OK.
  void NoteProbe(const std::string& kind, grpc::StatusCode code);
  std::mutex probe_mu;
  std::map<std::string, std::map<std::string, int64_t>> probes;  // guarded by probe_mu
  std::atomic<int64_t> cross_project_ok{0}, reader_writes_ok{0};
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

// One client thread: Run() calls RPCs until the soak ends.
class Client {
 public:
  // `user`: who the client is with --projects (nullptr: no key, as before).
  Client(int index, Shared* shared, uint64_t seed, const SoakUser* user = nullptr)
      : index_(index),
        shared_(shared),
        user_(user),
        rng_(seed),
        stub_(v1::AuditService::NewStub(NewChannel(shared->address))) {}

  void Run();
  // Cancels the call in flight, if any (the soak is over). Thread-safe.
  void CutActive();
  void Register(Call* call);
  void Unregister();
  const std::string& token() const { return user_ == nullptr ? kNoToken : user_->token; }

  Recorder recorder;

 private:
  bool Done() const { return shared_->stop.load() || Clock::now() >= shared_->end; }
  bool Chance(double p) { return rng_.Uniform(1000000) < static_cast<uint64_t>(p * 1e6); }
  template <typename T>
  const T& PickOf(const std::vector<T>& v) {
    return v[rng_.Uniform(v.size())];
  }
  std::string PickModel(bool dense_too);
  // An own job to watch, get or cancel: -1 when there is none.
  int PickJob(bool prefer_running);
  void NoteState(JobInfo& job, v1::JobState state);
  // Records a finished call. `bad` is why a response broke the API's
  // promises (empty when it did not); `expected` lists the refusals the API
  // documents for what was asked.
  void Finish(Call& call, const grpc::Status& st, const std::string& bad,
              std::initializer_list<grpc::StatusCode> expected);

  // Where the client writes: its project with --projects, else "" (the
  // caller's personal project).
  std::string WriteProject() const { return user_ == nullptr ? "" : kProjects[user_->write]; }
  // A job of a project the client may read (--projects), 0 when none.
  int64_t ReadableJob();

  // soak_client_projects.cc: calls where the client may not go.
  void Probe();
  void StrangerProbe();
  template <typename Req, typename Resp>
  void StrangerCall(int op, const std::string& kind,
                    grpc::Status (v1::AuditService::Stub::*rpc)(grpc::ClientContext*, const Req&,
                                                                Resp*),
                    const Req& req);
  void StrangerWatch(int64_t job);
  void ReaderProbe();
  // Records a probe expecting `want`: OK instead counts in `*leaks`.
  void FinishProbe(Call& call, const std::string& kind, const grpc::Status& st,
                   grpc::StatusCode want, std::string bad, std::atomic<int64_t>* leaks);
  void SubmitTo(const std::string& project, Call& call, grpc::Status* st);

  // soak_client_data.cc
  void ListModels();
  void Tokenize();
  bool TokenizeCall(const v1::TokenizeRequest& req, bool refusal_expected,
                    std::vector<int32_t>* ids);
  void Upload();
  void ListDatasets();
  void Export();
  bool WindowHashes(JobInfo& job);

  // soak_client_jobs.cc
  void Submit();
  void Watch(int index);
  void WatchCall(JobInfo& job, int64_t after_seq, int drop_after);
  void GetJob();
  void GetJobCall(int64_t id, bool expect_missing, JobInfo* job);
  void ListJobs();
  void Cancel();
  void QueryResults();

  static inline const std::string kNoToken;
  const int index_;
  Shared* shared_;
  const SoakUser* user_;
  Rng rng_;
  std::unique_ptr<v1::AuditService::Stub> stub_;
  std::vector<JobInfo> jobs_;
  std::vector<DatasetInfo> datasets_;
  std::string last_dataset_;
  int next_dataset_ = 0;
  std::mutex active_mu_;
  Call* active_ = nullptr;  // guarded by active_mu_
};

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_CLIENT_H_
