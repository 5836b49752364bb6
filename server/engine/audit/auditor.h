// The audit engine's entry point: everything fca.md defines, as a library.
// Torch-free header; the plain structs in and out are audit_types.h's.
//
// One audit = for each model: window E and C, LIVE pass over E (recording
// A(x) and checking replay fidelity on the `correct` replay) and over C,
// calibration statistics, one REPLAY pass per intervention, statistics, and
// the execution audit (optionally timed against a dense twin); then an
// aggregate across models.
#ifndef FCA_SERVER_ENGINE_AUDIT_AUDITOR_H_
#define FCA_SERVER_ENGINE_AUDIT_AUDITOR_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/engine/audit/audit_types.h"

namespace fca::engine {

// Runs the audit. INVALID_ARGUMENT for a bad request (unknown intervention,
// too few windows, overlap, ids outside a model's vocabulary),
// FAILED_PRECONDITION when replay is not faithful (with the measured
// difference), CANCELLED, or INTERNAL naming the model for a torch failure.
[[nodiscard]] absl::StatusOr<AuditReport> RunAudit(const AuditRequest& request);

// fca::BuildVersion() (git describe at build time).
std::string EngineVersion();

}  // namespace fca::engine

#endif  // FCA_SERVER_ENGINE_AUDIT_AUDITOR_H_
