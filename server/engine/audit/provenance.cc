#include "server/engine/audit/provenance.h"

#include <unistd.h>

#include "common/build_version.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/torch_util.h"

namespace fca::engine {

std::string HostName() {
  char name[256] = {};
  // The name may be cut without a terminating NUL: the last byte stays 0.
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

RuntimeProvenance CurrentRuntime(const std::string& device) {
  RuntimeProvenance r;
  r.engine_version = BuildVersion();
  r.torch_version = TorchVersion();
  r.host = HostName();
  r.device = device;
  if (!device.empty()) r.device_name = DeviceName(device);
  r.threads = TorchThreads();
  return r;
}

json::Value RuntimeToJson(const RuntimeProvenance& runtime) {
  json::Value v = json::Value::MakeObject();
  v.Set("engine_version", json::Value::String(runtime.engine_version));
  v.Set("torch_version", json::Value::String(runtime.torch_version));
  v.Set("host", json::Value::String(runtime.host));
  v.Set("device", json::Value::String(runtime.device));
  v.Set("device_name", json::Value::String(runtime.device_name));
  v.Set("threads", json::Value::Int(runtime.threads));
  return v;
}

}  // namespace fca::engine
