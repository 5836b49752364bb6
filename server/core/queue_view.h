// GetQueue: the queue as the caller may see it, from the store's active
// tasks and what the workers, the server's own and remote ones, hold loaded.
#ifndef FCA_SERVER_CORE_QUEUE_VIEW_H_
#define FCA_SERVER_CORE_QUEUE_VIEW_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/caller.h"
#include "storage/store.h"

namespace fca::core {

// The models each worker holds in memory, by worker name: the server's own
// (WorkerPool::LoadedModels) and remote ones (Coordinator::RemoteLoadedModels).
using LoadedModels = std::function<std::map<std::string, std::vector<std::string>>()>;

// Model and project rows count only the projects the caller is a member of
// (an admin: every project); the jobs of all others are summed in one
// project row named "" and in the totals, so a non-member learns neither
// their names, their owners nor their models. Jobs are the caller's own (an
// admin's: all). Loaded models are shown to every caller, like ListModels.
// `loaded` may be unset (nothing is shown loaded).
[[nodiscard]] absl::StatusOr<v1::GetQueueResponse> QueueView(const Caller& caller,
                                                             storage::Store* store,
                                                             const LoadedModels& loaded);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_QUEUE_VIEW_H_
