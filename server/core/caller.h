// Who is calling an RPC, as the transports' authentication (server/auth)
// hands it to the core.
#ifndef FCA_SERVER_CORE_CALLER_H_
#define FCA_SERVER_CORE_CALLER_H_

#include <cstdint>
#include <string>

namespace fca::core {

// Who is calling. With auth off every caller is the single user "local",
// an admin. A worker (API key role "worker") runs tasks through the worker
// protocol (fca.v1.WorkerService) and may call nothing else: it sees no
// user's jobs, datasets or results.
struct Caller {
  std::string user;
  bool admin = false;
  bool worker = false;
  // The stored API key it presented (0: auth off, or a --api_keys file's
  // key) and where the call came from: for the audit log.
  int64_t key_id = 0;
  std::string peer = {};  // an initializer: callers may leave it out
};

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_CALLER_H_
