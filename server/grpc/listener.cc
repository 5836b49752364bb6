#include "server/grpc/listener.h"

#include <utility>

namespace fca::grpc_server {

absl::StatusOr<Listener> Listen(const std::vector<grpc::Service*>& services,
                                ListenOptions options) {
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("fca-server");
  if (options.max_rpc_threads > 0) {
    quota.SetMaxThreads(options.max_rpc_threads);
    builder.SetResourceQuota(quota);
  }
  Listener out;
  builder.AddListeningPort(
      options.address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &out.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (!options.interceptors.empty()) {
    builder.experimental().SetInterceptorCreators(std::move(options.interceptors));
  }
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError("cannot listen on " + options.address);
  }
  return out;
}

}  // namespace fca::grpc_server
