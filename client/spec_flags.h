// The `fca audit` flags that set AuditSpec fields, one per field: their
// names, help texts and defaults are common/spec_fields.h's. In fca_client
// (not the `fca` binary) so tests can see every flag.
#ifndef FCA_CLIENT_SPEC_FLAGS_H_
#define FCA_CLIENT_SPEC_FLAGS_H_

#include <set>
#include <string>

#include "client/manifest.h"

namespace fca::client {

// The fields whose flags are in `specified` (the flags typed on the command
// line): only those override a manifest; a flag's default must never
// silently reset a manifest field.
SpecOverrides OverridesFromFlags(const std::set<std::string>& specified);

}  // namespace fca::client

#endif  // FCA_CLIENT_SPEC_FLAGS_H_
