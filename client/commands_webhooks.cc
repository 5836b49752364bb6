#include "client/commands_webhooks.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/text_safety.h"
#include "common/proto_json.h"
#include "common/status_macros.h"

ABSL_FLAG(int32_t, limit, 0, "webhooks deliveries: how many, newest first [20, at most 100]");
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, project);

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

absl::Status Expect(const CommandContext& ctx, size_t count, const char* usage) {
  if (ctx.args().size() == count) return absl::OkStatus();
  return UsageError(absl::StrFormat("expected: fca %s", usage));
}

absl::StatusOr<int64_t> ParseWebhookId(const std::string& text) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id <= 0) {
    return UsageError(absl::StrFormat("'%s' is not a webhook id (a positive integer)",
                                      SanitizeForTerminal(text.substr(0, 64))));
  }
  return id;
}

std::string DeliveryStateName(v1::WebhookDeliveryState state) {
  const auto* value = v1::WebhookDeliveryState_descriptor()->FindValueByNumber(state);
  return value == nullptr ? absl::StrCat(state) : ShortEnumName(*value);
}

std::string FormatWebhooks(const v1::ListWebhooksResponse& response) {
  if (response.webhooks().empty()) return "no webhooks\n";
  std::string out = absl::StrFormat("%-6s %-16s %-20s %-16s %s\n", "ID", "PROJECT", "CREATED",
                                    "CREATED_BY", "URL");
  for (const v1::Webhook& w : response.webhooks()) {
    out += absl::StrFormat("%-6d %-16s %-20s %-16s %s\n", w.id(), SanitizeForTerminal(w.project()),
                           FormatTimestamp(w.created_at()), SanitizeForTerminal(w.created_by()),
                           SanitizeForTerminal(w.url()));
  }
  return out;
}

std::string FormatAttempt(const v1::WebhookAttempt& a) {
  std::string out = absl::StrFormat("  attempt %d at %s: ", a.attempt(), FormatTimestamp(a.time()));
  if (a.http_status() != 0) out += absl::StrFormat("HTTP %d", a.http_status());
  if (!a.error().empty()) {
    out += (a.http_status() != 0 ? ", " : "") + SanitizeForTerminal(a.error());
  }
  if (a.has_next_attempt_at()) out += "; next at " + FormatTimestamp(a.next_attempt_at());
  return out + "\n";
}

std::string FormatDeliveries(const v1::ListWebhookDeliveriesResponse& response) {
  if (response.deliveries().empty()) return "no deliveries\n";
  std::string out;
  for (const v1::WebhookDelivery& d : response.deliveries()) {
    out += absl::StrFormat(
        "delivery %d: job %d %s, %s after %d attempt(s)%s\n", d.id(), d.job_id(),
        JobStateName(d.job_state()), DeliveryStateName(d.state()), d.attempts_size(),
        d.has_next_attempt_at() ? ", next at " + FormatTimestamp(d.next_attempt_at()) : "");
    for (const v1::WebhookAttempt& a : d.attempts()) out += FormatAttempt(a);
  }
  return out;
}

}  // namespace

CommandResult RunWebhooksAdd(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(Expect(ctx, 1, "webhooks add URL [--project=P]"));
  v1::AddWebhookRequest request;
  request.set_project(absl::GetFlag(FLAGS_project));
  request.set_url(ctx.args()[0]);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::AddWebhookResponse added, client->AddWebhook(request));
  if (absl::GetFlag(FLAGS_json)) {
    ctx.out() << FormatProtoJson(added);
    return kExitOk;
  }
  // As `fca keys create`: the secret alone on stdout, so a script takes it
  // with $(...); what it is goes to stderr.
  ctx.err() << absl::StrFormat(
      "webhook %d of project %s: %s\nits secret, shown only now (receivers check the "
      "X-Fca-Signature-256 header with it; see docs/operator-guide.md, \"Webhooks\"):\n",
      added.webhook().id(), SanitizeForTerminal(added.webhook().project()),
      SanitizeForTerminal(added.webhook().url()));
  ctx.out() << added.secret() << "\n";
  return kExitOk;
}

CommandResult RunWebhooksList(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(Expect(ctx, 0, "webhooks list [--project=P]"));
  v1::ListWebhooksRequest request;
  request.set_project(absl::GetFlag(FLAGS_project));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::ListWebhooksResponse listed, client->ListWebhooks(request));
  ctx.out() << (absl::GetFlag(FLAGS_json) ? FormatProtoJson(listed) : FormatWebhooks(listed));
  return kExitOk;
}

CommandResult RunWebhooksRemove(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(Expect(ctx, 1, "webhooks remove ID"));
  v1::RemoveWebhookRequest request;
  FCA_ASSIGN_OR_RETURN(const int64_t id, ParseWebhookId(ctx.args()[0]));
  request.set_webhook_id(id);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_RETURN_IF_ERROR(client->RemoveWebhook(request).status());
  ctx.out() << absl::StrFormat("removed webhook %d\n", id);
  return kExitOk;
}

CommandResult RunWebhooksDeliveries(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(Expect(ctx, 1, "webhooks deliveries ID [--limit=N]"));
  v1::ListWebhookDeliveriesRequest request;
  FCA_ASSIGN_OR_RETURN(const int64_t id, ParseWebhookId(ctx.args()[0]));
  request.set_webhook_id(id);
  request.set_limit(absl::GetFlag(FLAGS_limit));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::ListWebhookDeliveriesResponse listed,
                       client->ListWebhookDeliveries(request));
  ctx.out() << (absl::GetFlag(FLAGS_json) ? FormatProtoJson(listed) : FormatDeliveries(listed));
  return kExitOk;
}

}  // namespace fca::client
