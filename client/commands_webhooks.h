// `fca webhooks add|list|remove|deliveries` (commands_webhooks.cc): a
// project's webhooks and their deliveries.
#ifndef FCA_CLIENT_COMMANDS_WEBHOOKS_H_
#define FCA_CLIENT_COMMANDS_WEBHOOKS_H_

#include "client/commands.h"

namespace fca::client {

[[nodiscard]] CommandResult RunWebhooksAdd(CommandContext& ctx);
[[nodiscard]] CommandResult RunWebhooksList(CommandContext& ctx);
[[nodiscard]] CommandResult RunWebhooksRemove(CommandContext& ctx);
[[nodiscard]] CommandResult RunWebhooksDeliveries(CommandContext& ctx);

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_WEBHOOKS_H_
