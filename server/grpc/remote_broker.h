// The worker protocol's client: runtime::TaskBroker over a
// fca.v1.WorkerService stub, for fca-worker on another machine. A
// runtime::Worker runs tasks through it exactly as through the in-process
// Coordinator.
//
// Every call carries the API key as `authorization: Bearer <key>` metadata
// and a deadline. UNAVAILABLE (the coordinator restarting, a network
// hiccup) is retried with exponential backoff for up to the coordinator's
// lease (Register sets it): a restart shorter than the lease loses nothing a
// running task does. Other errors return at once. One broker serves one
// worker (Options::worker); it is thread-safe (the worker's heartbeat
// thread calls it while the task runs).
#ifndef FCA_SERVER_GRPC_REMOTE_BROKER_H_
#define FCA_SERVER_GRPC_REMOTE_BROKER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/fca/v1/worker_service.grpc.pb.h"
#include "server/runtime/task_broker.h"

namespace fca::grpc_server {

class RemoteBroker final : public runtime::TaskBroker {
 public:
  struct Options {
    std::string address;  // HOST:PORT of the coordinator (fca-server)
    std::string api_key;  // "" sends no authorization metadata (auth off)
    bool use_tls = false;
    std::string tls_ca_pem;  // root certificates of TLS; "" = the system's
    std::string worker;      // this worker's name: [A-Za-z0-9._:-], 1-128 chars
    std::chrono::milliseconds call_timeout{30000};     // unary calls
    std::chrono::milliseconds stream_timeout{600000};  // datasets and cache entries
    // UNAVAILABLE is retried at least `min_attempts` times and, for calls on
    // a held lease, for up to `retry_window` (set to the lease by Register).
    int min_attempts = 3;
    std::chrono::milliseconds retry_window{30000};
    std::chrono::milliseconds initial_backoff{100};
    std::chrono::milliseconds max_backoff{2000};
    // The models the worker holds loaded now, sent with every ClaimTask and
    // RenewLease (at most runtime::kMaxLoadedModels of them) for GetQueue's
    // loaded_on; unset: none are reported.
    std::function<std::vector<std::string>()> loaded_models;
  };
  // INVALID_ARGUMENT for an empty address or worker name.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteBroker>> Create(const Options& options);
  RemoteBroker(std::shared_ptr<grpc::Channel> channel, Options options);

  // Announces the worker (and checks key, name and address early). Retries
  // UNAVAILABLE for up to retry_window; then adopts the coordinator's lease
  // as the retry window.
  [[nodiscard]] absl::StatusOr<v1::RegisterWorkerResponse> Register(const std::string& device,
                                                                    const std::string& host,
                                                                    const std::string& version);
  // Shutting down: calls make at most min_attempts tries from now on, and a
  // backoff in progress ends at once.
  void StopRetrying();

  // runtime::TaskBroker. `worker` must be Options::worker.
  [[nodiscard]] absl::StatusOr<std::optional<runtime::TaskAssignment>> Claim(
      const std::string& worker, int64_t task_id) override;
  [[nodiscard]] absl::StatusOr<bool> Renew(const runtime::Lease& lease) override;
  [[nodiscard]] absl::Status ReportProgress(const runtime::Lease& lease,
                                            const engine::AuditProgress& p) override;
  [[nodiscard]] absl::Status ReportNote(const runtime::Lease& lease,
                                        const std::string& text) override;
  [[nodiscard]] absl::Status ReportRows(const runtime::Lease& lease, const std::string& model,
                                        const std::string& weights_sha256,
                                        const std::vector<engine::ResultRow>& rows) override;
  [[nodiscard]] absl::Status Finish(const runtime::Lease& lease, const absl::Status& outcome,
                                    const v1::TaskProvenance& provenance) override;
  [[nodiscard]] absl::Status Release(const runtime::Lease& lease, const absl::Status& reason,
                                     bool refund) override;
  [[nodiscard]] absl::Status Refuse(const runtime::Lease& lease,
                                    const absl::Status& reason) override;
  [[nodiscard]] absl::StatusOr<runtime::DatasetBytes> ReadDataset(const runtime::Lease& lease,
                                                                  bool calibration) override;
  std::optional<std::string> GetCoefficients(const runtime::Lease& lease,
                                             const engine::CoefficientCacheKey& key) override;
  void PutCoefficients(const runtime::Lease& lease, const engine::CoefficientCacheKey& key,
                       const std::string& bytes) override;

 private:
  // Runs `call` (one attempt, on a fresh context) until it is not
  // UNAVAILABLE or the retries are spent; `held`: the call acts on a held
  // lease, so it may retry for the whole retry window.
  template <typename Call>
  [[nodiscard]] absl::Status WithRetries(std::chrono::milliseconds timeout, bool held, Call&& call);
  void Prepare(grpc::ClientContext* context, std::chrono::milliseconds timeout) const;
  // ReleaseTask (Release and Refuse).
  [[nodiscard]] absl::Status SendRelease(const runtime::Lease& lease, const absl::Status& reason,
                                         bool refund, bool refused);
  void LogCacheError(const char* what, const absl::Status& status);
  // Options::loaded_models into a request's loaded_models.
  void AddLoadedModels(google::protobuf::RepeatedPtrField<std::string>* out) const;

  Options options_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::atomic<int64_t> retry_window_ms_;
  std::atomic<bool> stopping_{false};
  // Backoffs wait on mu_ until stopping_ (absl::Mutex re-checks the
  // condition whenever mu_ is released, so StopRetrying needs no notify).
  absl::Mutex mu_;
  int cache_errors_logged_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_REMOTE_BROKER_H_
