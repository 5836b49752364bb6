// The one place a grpc::ServerBuilder is wired. fca::Server (server/server.h)
// starts its gRPC side here, and a test that hosts a service of its own
// (client_test: the CLI's client against a fake AuditService) starts it here
// too, on the same code path, so no test or benchmark builds a gRPC server
// by hand. Nothing of fca's services: gRPC and absl only.
#ifndef FCA_SERVER_GRPC_LISTENER_H_
#define FCA_SERVER_GRPC_LISTENER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fca::grpc_server {

struct ListenOptions {
  std::string address = "127.0.0.1:0";  // port 0 picks a free one (Listener::port)
  // nullptr: plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Each streaming or unary call holds a thread of the synchronous server:
  // bounded, so a flood of streams cannot exhaust the process. 0: gRPC's
  // default.
  int max_rpc_threads = 0;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
};

struct Listener {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// A started gRPC server of `services` (not owned: they outlive it).
// UNAVAILABLE when the address cannot be bound.
[[nodiscard]] absl::StatusOr<Listener> Listen(const std::vector<grpc::Service*>& services,
                                              ListenOptions options);

}  // namespace fca::grpc_server

#endif  // FCA_SERVER_GRPC_LISTENER_H_
