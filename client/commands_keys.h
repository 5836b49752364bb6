// `fca keys list|create|revoke|rotate` and `fca admin log`
// (commands_keys.cc): the API key lifecycle and the audit log.
#ifndef FCA_CLIENT_COMMANDS_KEYS_H_
#define FCA_CLIENT_COMMANDS_KEYS_H_

#include "client/commands.h"

namespace fca::client {

[[nodiscard]] CommandResult RunKeysList(CommandContext& ctx);
[[nodiscard]] CommandResult RunKeysCreate(CommandContext& ctx);
[[nodiscard]] CommandResult RunKeysRevoke(CommandContext& ctx);
[[nodiscard]] CommandResult RunKeysRotate(CommandContext& ctx);
[[nodiscard]] CommandResult RunAdminLog(CommandContext& ctx);

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_KEYS_H_
