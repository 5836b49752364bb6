// A real gRPC server on 127.0.0.1 (an ephemeral port): fca::Server serving
// a complete core (tests/core/core_env.h), and a client stub connected to
// it.
#ifndef FCA_TESTS_GRPC_GRPC_ENV_H_
#define FCA_TESTS_GRPC_GRPC_ENV_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "proto/fca/v1/audit_service.grpc.pb.h"
#include "server/grpc/audit_service_impl.h"
#include "server/grpc/auth.h"
#include "server/server.h"
#include "tests/core/core_env.h"

namespace fca::grpc_server::testing {

// The admin key of the key files the auth suites write.
inline constexpr char kRootKey[] = "root-key-00000000003";

struct ServerConfig {
  core::ServiceLimits limits;
  bool auth = false;
  std::string key_file;  // lines "<key> <user> <role>"
  core::testing::RunOptions run = core::testing::FastRunOptions();
  // The core's store (CoreEnv: an empty path is ":memory:").
  storage::StoreOptions store;
};

// The parts of `env` a Server serves (ServerOptions::existing_core).
ExistingCore Served(core::testing::CoreEnv* env);

class GrpcEnv {
 public:
  explicit GrpcEnv(const ServerConfig& config = {});
  ~GrpcEnv();

  bool started() const { return server_ != nullptr && port_ > 0; }
  core::testing::CoreEnv* core_env() { return &core_env_; }
  v1::AuditService::Stub* stub() { return stub_.get(); }
  fca::Server* server() { return server_.get(); }
  int port() const { return port_; }

  // A context with a deadline and, when `key` is not empty,
  // "authorization: Bearer <key>".
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& key = "");

  // Streams a header announcing `announced` bytes (the true size when < 0),
  // then `bytes` in chunks of at most 1 MiB.
  grpc::Status Upload(const std::string& key, const std::string& name, const std::string& bytes,
                      v1::UploadDatasetResponse* response = nullptr, int64_t announced = -1,
                      const std::string& sha256 = "");
  // Uploads the core tests' "eval" and "calib" datasets.
  grpc::Status UploadEvalAndCalib(const std::string& key);
  grpc::Status Submit(const std::string& key, const v1::AuditSpec& spec, v1::Job* job);
  grpc::Status ListModels(const std::string& key, v1::ListModelsResponse* response = nullptr);
  grpc::Status ListJobs(const std::string& key, v1::ListJobsResponse* response);
  // Reads a whole WatchJob stream.
  grpc::Status Watch(const std::string& key, int64_t job_id, int64_t after_seq,
                     std::vector<v1::WatchJobResponse>* out);

 private:
  core::testing::CoreEnv core_env_;
  std::unique_ptr<fca::Server> server_;
  int port_ = 0;
  std::unique_ptr<v1::AuditService::Stub> stub_;
};

// Writes `text` to a new file in a temporary folder and returns its path.
std::string WriteTempFile(const std::string& text);

}  // namespace fca::grpc_server::testing

#endif  // FCA_TESTS_GRPC_GRPC_ENV_H_
