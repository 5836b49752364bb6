#include "server/jobs/model_registry.h"

#include <string>

#include "absl/strings/str_format.h"
#include "common/log.h"

namespace fca::jobs {

runtime::ModelRepository::LoadListener RecordLoadsIn(storage::Store* store) {
  return [store](const engine::ModelInfo& model, const std::string& config_json) {
    storage::ModelRecord record;
    record.name = model.name;
    record.family = model.family;
    record.weights_sha256 = model.weights_sha256;
    record.config_json = config_json;
    record.num_parameters = model.num_parameters;
    LogIfError(absl::StrFormat("cannot record model '%s' in the store", record.name),
               store->UpsertModel(record).status());
  };
}

}  // namespace fca::jobs
