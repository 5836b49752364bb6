// `fca audit` and `fca watch` (commands_audit.cc): building a spec from
// flags and a manifest, submitting it, and following the job to its end.
#ifndef FCA_CLIENT_COMMANDS_AUDIT_H_
#define FCA_CLIENT_COMMANDS_AUDIT_H_

#include <string>
#include <vector>

#include "client/commands.h"

namespace fca::client {

[[nodiscard]] CommandResult RunAudit(CommandContext& ctx);
[[nodiscard]] CommandResult RunWatch(CommandContext& ctx);
// Flags `fca audit` accepts beyond the global ones.
const std::vector<std::string>& AuditFlagNames();

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_AUDIT_H_
