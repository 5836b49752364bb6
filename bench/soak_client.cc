#include "bench/soak_client.h"

#include <algorithm>
#include <string>
#include <thread>

namespace fca::soak {

using grpc::StatusCode;

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

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  // One connection per client thread, as 50 separate users would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void Authorize(const std::string& token, grpc::ClientContext* ctx) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

Call::Call(Client* client, int op, int deadline_s) : op(op), t0(Clock::now()), client_(client) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  Authorize(client->token(), &ctx);
  client_->Register(this);
}

Call::~Call() { client_->Unregister(); }

void Client::Run() {
  const int* kWeights = shared_->weights_of_ops;
  int total = 0;
  for (int op = 0; op < kNumOps; ++op) total += kWeights[op];
  while (!Done()) {
    int pick = static_cast<int>(rng_.Uniform(total)), op = 0;
    while (pick >= kWeights[op]) pick -= kWeights[op++];
    if (user_ != nullptr && Chance(kProbeShare)) op = kNumOps;  // a probe instead
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
      default:
        Probe();
        break;
    }
    if (shared_->think_ms > 0 && !Done()) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(rng_.Uniform(2 * shared_->think_ms + 1)));
    }
  }
}

// Cancels the call in flight, if any (the soak is over). Thread-safe.
void Client::CutActive() {
  std::lock_guard<std::mutex> lock(active_mu_);
  if (active_ != nullptr) {
    active_->cut = true;
    active_->ctx.TryCancel();
  }
}

void Client::Register(Call* call) {
  std::lock_guard<std::mutex> lock(active_mu_);
  active_ = call;
}

void Client::Unregister() {
  std::lock_guard<std::mutex> lock(active_mu_);
  active_ = nullptr;
}

std::string Shared::CheckWeights(const std::string& model, const std::string& hash,
                                 bool must_have) {
  if (hash.empty()) return must_have ? "model " + model + " has no weights hash" : "";
  std::lock_guard<std::mutex> lock(weights_mu);
  auto [it, first] = weights.emplace(model, hash);
  if (first || it->second == hash) return "";
  return "model " + model + ": its weights hash changed";
}

// Records a finished call. `bad` is why a response broke the API's
// promises (empty when it did not); `expected` lists the refusals the API
// documents for what was asked.
void Client::Finish(Call& call, const grpc::Status& st, const std::string& bad,
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

std::string Client::PickModel(bool dense_too) {
  const uint64_t n = dense_too ? 3 : 2;
  const uint64_t i = rng_.Uniform(n);
  return i == 2 ? kDenseModel : kGateModels[i];
}

// An own job to watch, get or cancel: -1 when there is none.
int Client::PickJob(bool prefer_running) {
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

int64_t Client::ReadableJob() {
  if (user_ == nullptr) return 0;
  return shared_->JobOf(Chance(0.5) ? user_->write : user_->read, rng_);
}

void Shared::NoteJob(int project, int64_t id) {
  std::lock_guard<std::mutex> lock(ledger_mu);
  jobs_of[project].push_back(id);
}

void Shared::NoteDataset(int project, const std::string& name) {
  std::lock_guard<std::mutex> lock(ledger_mu);
  datasets_of[project].push_back(name);
}

int64_t Shared::JobOf(int project, Rng& rng) {
  std::lock_guard<std::mutex> lock(ledger_mu);
  const std::vector<int64_t>& ids = jobs_of[project];
  return ids.empty() ? 0 : ids[rng.Uniform(ids.size())];
}

void Shared::NoteProbe(const std::string& kind, StatusCode code) {
  std::lock_guard<std::mutex> lock(probe_mu);
  ++probes[kind][CodeName(code)];
}

void Client::NoteState(JobInfo& job, v1::JobState state) {
  if (IsTerminal(job.state)) return;  // terminal states never change
  job.state = state;
}

}  // namespace fca::soak
