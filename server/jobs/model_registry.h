// The store's models table as a model repository's load listener: each
// model a repository loads is recorded (Store::UpsertModel: name, family,
// weights hash, config.json, parameters), so stored results can be traced
// to the weights they came from.
#ifndef FCA_SERVER_JOBS_MODEL_REGISTRY_H_
#define FCA_SERVER_JOBS_MODEL_REGISTRY_H_

#include "server/runtime/model_repository.h"
#include "storage/store.h"

namespace fca::jobs {

// For ModelRepository::Options::on_load. `store` is not owned and must
// outlive the repository. A failed write is logged and does not fail the
// load.
runtime::ModelRepository::LoadListener RecordLoadsIn(storage::Store* store);

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_MODEL_REGISTRY_H_
