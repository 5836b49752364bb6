// What an audit ran on, beyond its inputs: the facts docs/fca.md
// "Reproducibility" asks every result to record. Gathered by one helper so
// the local tool (fca-local-audit, ReportToJson) and the service's workers
// (task provenance) record the same fields the same way. Torch-free header.
#ifndef FCA_SERVER_ENGINE_AUDIT_PROVENANCE_H_
#define FCA_SERVER_ENGINE_AUDIT_PROVENANCE_H_

#include <string>

#include "common/json.h"

namespace fca::engine {

struct RuntimeProvenance {
  std::string engine_version;  // fca::BuildVersion(): git describe at build time
  std::string torch_version;   // "1.13.1"
  std::string host;            // gethostname(); "unknown" when it fails
  std::string device;          // the compute device: "cpu", "cuda:0"
  std::string device_name;     // DeviceName(device): "cpu", "NVIDIA H100 80GB HBM3"
  // Torch intra-op threads of the calling thread (libtorch keeps the count
  // per thread, and each worker sets its own).
  int threads = 0;
};

// The runtime facts of the calling thread, computing on `device` ("": not
// known yet, device and device_name left empty): call it on the thread that
// runs the audit, after engine::ConfigureRuntime.
RuntimeProvenance CurrentRuntime(const std::string& device);

// This machine's name; "unknown" when the system does not say.
std::string HostName();

// {"engine_version", "torch_version", "host", "device", "device_name",
// "threads"}.
json::Value RuntimeToJson(const RuntimeProvenance& runtime);

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_PROVENANCE_H_
