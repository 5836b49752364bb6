#include "client/commands_keys.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/text_safety.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, user, "",
          "keys list, keys create: whose keys (admins: any user) [you]; admin log: by user");
ABSL_FLAG(std::string, role, "",
          "keys create: user | admin | worker (admins only: admin, worker) [user]; projects "
          "add-member: reader, writer or owner");
ABSL_FLAG(int64_t, expires_days, 0, "keys create: the key expires after this many days; 0 = never");
ABSL_FLAG(absl::Duration, grace, absl::ZeroDuration(),
          "keys rotate: how long the old key stays valid, e.g. 1h, 24h (at most 720h) [0: none]");
ABSL_FLAG(std::string, action, "", "admin log: only this action, e.g. job.submit, key.revoke");
// admin log also takes --since, --until and --page_size (commands.cc).
ABSL_DECLARE_FLAG(std::string, since);
ABSL_DECLARE_FLAG(std::string, until);
ABSL_DECLARE_FLAG(int32_t, page_size);
ABSL_DECLARE_FLAG(bool, wide);

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

absl::Status ExpectNoArgs(const CommandContext& ctx, const char* usage) {
  if (ctx.args().empty()) return absl::OkStatus();
  return UsageError(absl::StrCat("expected: fca ", usage));
}

absl::StatusOr<int64_t> ParseKeyId(const CommandContext& ctx, const char* usage) {
  if (ctx.args().size() != 1) return UsageError(absl::StrCat("expected: fca ", usage));
  int64_t id = 0;
  if (!absl::SimpleAtoi(ctx.args()[0], &id) || id <= 0) {
    return UsageError(absl::StrFormat("key id must be a positive integer, got '%s'",
                                      SanitizeForTerminal(ctx.args()[0].substr(0, 64))));
  }
  return id;
}

std::string KeysTable(const v1::ListApiKeysResponse& keys) {
  using A = TextTable::Align;
  TextTable table({{"ID", A::kRight},
                   {"PREFIX"},
                   {"USER"},
                   {"ROLE"},
                   {"STATE"},
                   {"CREATED"},
                   {"EXPIRES"},
                   {"LAST USED"},
                   {"LAST ADDRESS"},
                   {"CREATED BY"}});
  for (const v1::ApiKey& key : keys.keys()) {
    std::string state = key.state();
    if (key.replaced_by() != 0) absl::StrAppend(&state, " (rotated to ", key.replaced_by(), ")");
    table.AddRow({absl::StrCat(key.id()), key.prefix().empty() ? "-" : key.prefix() + "...",
                  SanitizeForTerminal(key.user()), key.role(), state,
                  FormatTimestamp(key.created_at()), FormatTimestamp(key.expires_at()),
                  FormatTimestamp(key.last_used_at()),
                  key.last_peer().empty() ? "-" : SanitizeForTerminal(key.last_peer()),
                  SanitizeForTerminal(key.created_by())});
  }
  return table.Render();
}

// The one time a key is shown: on stdout alone on its line, so a script
// takes it with $(...); what it is goes to stderr.
void ShowSecret(CommandContext& ctx, const v1::ApiKey& key, const std::string& secret) {
  ctx.err() << absl::StrFormat(
      "API key %d for %s (role %s, expires %s); it is shown this once, keep it safe:\n", key.id(),
      SanitizeForTerminal(key.user()), key.role(), FormatTimestamp(key.expires_at()));
  ctx.out() << secret << "\n";
}

}  // namespace

CommandResult RunKeysList(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectNoArgs(ctx, "keys list [--user=U]"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  v1::ListApiKeysRequest request;
  request.set_user(absl::GetFlag(FLAGS_user));
  FCA_ASSIGN_OR_RETURN(const v1::ListApiKeysResponse keys, client->ListApiKeys(request));
  ctx.out() << KeysTable(keys);
  return kExitOk;
}

CommandResult RunKeysCreate(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectNoArgs(ctx, "keys create [--user=U] [--role=R] [--expires_days=N]"));
  const int64_t days = absl::GetFlag(FLAGS_expires_days);
  if (days < 0 || days > 36500) {
    return UsageError("--expires_days must be in [0, 36500] (0: never)");
  }
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  v1::CreateApiKeyRequest request;
  request.set_user(absl::GetFlag(FLAGS_user));
  const std::string role = absl::GetFlag(FLAGS_role);
  request.set_role(role.empty() ? "user" : role);
  request.set_expires_in_seconds(days * 24 * 3600);
  FCA_ASSIGN_OR_RETURN(const v1::CreateApiKeyResponse created, client->CreateApiKey(request));
  ShowSecret(ctx, created.key(), created.secret());
  return kExitOk;
}

CommandResult RunKeysRevoke(CommandContext& ctx) {
  FCA_ASSIGN_OR_RETURN(const int64_t id, ParseKeyId(ctx, "keys revoke ID"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::RevokeApiKeyResponse revoked, client->RevokeApiKey(id));
  ctx.out() << absl::StrFormat("API key %d of %s: revoked (refused from its next call on)\n", id,
                               SanitizeForTerminal(revoked.key().user()));
  return kExitOk;
}

CommandResult RunKeysRotate(CommandContext& ctx) {
  FCA_ASSIGN_OR_RETURN(const int64_t id, ParseKeyId(ctx, "keys rotate ID [--grace=DURATION]"));
  const absl::Duration grace = absl::GetFlag(FLAGS_grace);
  if (grace < absl::ZeroDuration()) return UsageError("--grace is negative");
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  v1::RotateApiKeyRequest request;
  request.set_id(id);
  request.set_grace_seconds(absl::ToInt64Seconds(grace));
  FCA_ASSIGN_OR_RETURN(const v1::RotateApiKeyResponse rotated, client->RotateApiKey(request));
  ctx.err() << absl::StrFormat("API key %d: valid until %s, then refused\n", id,
                               FormatTimestamp(rotated.replaced().expires_at()));
  ShowSecret(ctx, rotated.key(), rotated.secret());
  return kExitOk;
}

CommandResult RunAdminLog(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectNoArgs(ctx, "admin log [--since=T --until=T --user=U --action=A]"));
  v1::QueryAuditLogRequest request;
  if (ctx.Specified("since")) {
    FCA_ASSIGN_OR_RETURN(*request.mutable_since(), ParseRfc3339(absl::GetFlag(FLAGS_since)));
  }
  if (ctx.Specified("until")) {
    FCA_ASSIGN_OR_RETURN(*request.mutable_until(), ParseRfc3339(absl::GetFlag(FLAGS_until)));
  }
  request.set_user(absl::GetFlag(FLAGS_user));
  request.set_action(absl::GetFlag(FLAGS_action));
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  using A = TextTable::Align;
  TextTable table({{"ID", A::kRight},
                   {"TIME"},
                   {"USER"},
                   {"KEY", A::kRight},
                   {"ADDRESS"},
                   {"ACTION"},
                   {"OBJECT"},
                   {"OUTCOME"},
                   {"DETAIL"}});
  // Every page, newest first.
  do {
    FCA_ASSIGN_OR_RETURN(const v1::QueryAuditLogResponse page, client->QueryAuditLog(request));
    for (const v1::AuditLogEntry& e : page.entries()) {
      const std::string object =
          e.object_id().empty() ? e.object_kind() : e.object_kind() + " " + e.object_id();
      table.AddRow({absl::StrCat(e.id()), FormatTimestamp(e.time()),
                    e.user().empty() ? "-" : SanitizeForTerminal(e.user()),
                    e.key_id() == 0 ? "-" : absl::StrCat(e.key_id()),
                    e.peer().empty() ? "-" : SanitizeForTerminal(e.peer()), e.action(),
                    SanitizeForTerminal(object), e.outcome(), SanitizeForTerminal(e.detail())});
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  // Within 100 columns: the table in parts (ID and TIME in each), a DETAIL
  // wider than a part broken under it; --wide prints each row on one line.
  if (absl::GetFlag(FLAGS_wide)) {
    ctx.out() << table.Render();
  } else {
    table.set_key_columns(2);
    ctx.out() << FitToWidth(table.Render(kReportWidth), kReportWidth);
  }
  return kExitOk;
}

}  // namespace fca::client
