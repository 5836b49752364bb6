#include "client/commands_projects.h"

#include <functional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/text_safety.h"
#include "common/proto_json.h"
#include "common/status_macros.h"

ABSL_DECLARE_FLAG(std::string, role);   // commands_keys.cc
ABSL_DECLARE_FLAG(std::string, owner);  // commands.cc

ABSL_FLAG(std::string, keep_jobs_days, "",
          "projects retention: days finished jobs are kept (0 = forever, default = the "
          "server's) [unchanged]");
ABSL_FLAG(std::string, keep_unused_datasets_days, "",
          "projects retention: days unused datasets are kept (0 = forever, default = the "
          "server's) [unchanged]");

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

// "READER" for PROJECT_ROLE_READER.
std::string RoleName(v1::ProjectRole role) {
  const auto* value = v1::ProjectRole_descriptor()->FindValueByNumber(role);
  return value == nullptr ? absl::StrCat(role) : ShortEnumName(*value);
}

// "reader" or PROJECT_ROLE_READER, in any case.
absl::StatusOr<v1::ProjectRole> ParseRole(const std::string& text) {
  const auto* value = FindEnumValue(*v1::ProjectRole_descriptor(), text);
  if (value == nullptr || value->number() == v1::PROJECT_ROLE_UNSPECIFIED) {
    return UsageError("--role must be reader, writer or owner");
  }
  return static_cast<v1::ProjectRole>(value->number());
}

std::string FormatProjectsTable(const v1::ListProjectsResponse& list) {
  TextTable table({{"NAME"}, {"ROLE"}, {"KIND"}, {"CREATED BY"}, {"CREATED"}});
  for (const v1::Project& p : list.projects()) {
    table.AddRow({p.name(), RoleName(p.role()), p.personal() ? "personal" : "shared",
                  p.created_by(), FormatTimestamp(p.created_at())});
  }
  return table.Render();
}

std::string FormatProject(const v1::Project& p) {
  std::string out;
  absl::StrAppendFormat(&out, "project:    %s (%s)\n", SanitizeForTerminal(p.name()),
                        p.personal() ? "personal" : "shared");
  absl::StrAppendFormat(&out, "created by: %s, %s\n", SanitizeForTerminal(p.created_by()),
                        FormatTimestamp(p.created_at()));
  absl::StrAppendFormat(&out, "your role:  %s\n", RoleName(p.role()));
  TextTable table({{"MEMBER"}, {"ROLE"}});
  for (const v1::ProjectMember& m : p.members()) table.AddRow({m.user(), RoleName(m.role())});
  return out + table.Render();
}

// "--keep_jobs_days=N" into the request: "" leaves it, "default" is -1.
absl::Status ParseDaysFlag(const std::string& text, const char* flag,
                           const std::function<void(int32_t)>& set) {
  if (text.empty()) return absl::OkStatus();
  int32_t days = 0;
  if (text == "default") {
    days = -1;
  } else if (!absl::SimpleAtoi(text, &days) || days < 0) {
    return UsageError(
        absl::StrFormat("--%s must be a number of days, 0 (forever) or default", flag));
  }
  set(days);
  return absl::OkStatus();
}

std::string DaysText(int32_t days, bool is_default) {
  return absl::StrCat(days == 0 ? "forever" : absl::StrCat(days, " days"),
                      is_default ? " (the server's default)" : "");
}

std::string FormatRetention(const v1::Retention& r) {
  return absl::StrFormat(
      "project:               %s\nfinished jobs kept:    %s\nunused datasets kept:  %s\n",
      SanitizeForTerminal(r.project()), DaysText(r.keep_jobs_days(), r.jobs_days_default()),
      DaysText(r.keep_unused_datasets_days(), r.datasets_days_default()));
}

}  // namespace

CommandResult RunProjectsRetention(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(
      ctx, 1, "projects retention NAME [--keep_jobs_days=N] [--keep_unused_datasets_days=N]"));
  v1::SetRetentionRequest set;
  set.set_project(ctx.args()[0]);
  FCA_RETURN_IF_ERROR(ParseDaysFlag(absl::GetFlag(FLAGS_keep_jobs_days), "keep_jobs_days",
                                    [&](int32_t d) { set.set_keep_jobs_days(d); }));
  FCA_RETURN_IF_ERROR(ParseDaysFlag(absl::GetFlag(FLAGS_keep_unused_datasets_days),
                                    "keep_unused_datasets_days",
                                    [&](int32_t d) { set.set_keep_unused_datasets_days(d); }));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  if (!set.has_keep_jobs_days() && !set.has_keep_unused_datasets_days()) {
    v1::GetRetentionRequest get;
    get.set_project(set.project());
    FCA_ASSIGN_OR_RETURN(const v1::GetRetentionResponse got, client->GetRetention(get));
    ctx.out() << FormatRetention(got.retention());
    return kExitOk;
  }
  FCA_ASSIGN_OR_RETURN(const v1::SetRetentionResponse changed, client->SetRetention(set));
  ctx.out() << FormatRetention(changed.retention());
  return kExitOk;
}

CommandResult RunProjectsCreate(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "projects create NAME [--owner=U]"));
  v1::CreateProjectRequest request;
  request.set_name(ctx.args()[0]);
  request.set_owner(absl::GetFlag(FLAGS_owner));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::CreateProjectResponse created, client->CreateProject(request));
  ctx.out() << FormatProject(created.project());
  return kExitOk;
}

CommandResult RunProjectsList(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 0, "projects list"));
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::ListProjectsResponse list, client->ListProjects({}));
  ctx.out() << FormatProjectsTable(list);
  return kExitOk;
}

CommandResult RunProjectsShow(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "projects show NAME"));
  v1::GetProjectRequest request;
  request.set_name(ctx.args()[0]);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::GetProjectResponse got, client->GetProject(request));
  ctx.out() << FormatProject(got.project());
  return kExitOk;
}

CommandResult RunProjectsAddMember(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(
      ExpectArgs(ctx, 2, "projects add-member NAME USER --role=reader|writer|owner"));
  v1::AddProjectMemberRequest request;
  request.set_project(ctx.args()[0]);
  request.set_user(ctx.args()[1]);
  FCA_ASSIGN_OR_RETURN(const v1::ProjectRole role, ParseRole(absl::GetFlag(FLAGS_role)));
  request.set_role(role);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::AddProjectMemberResponse added, client->AddProjectMember(request));
  ctx.out() << FormatProject(added.project());
  // Unset: the server checks no keys (or is older and did not say).
  if (added.has_user_has_key() && !added.user_has_key()) {
    ctx.err() << absl::StrFormat(
        "warning: %s has no API key yet, so cannot call the server as a member; an admin "
        "creates one with: fca keys create --user=%s\n",
        SanitizeForTerminal(request.user()), SanitizeForTerminal(request.user()));
  }
  return kExitOk;
}

CommandResult RunProjectsRemoveMember(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 2, "projects remove-member NAME USER"));
  v1::RemoveProjectMemberRequest request;
  request.set_project(ctx.args()[0]);
  request.set_user(ctx.args()[1]);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::RemoveProjectMemberResponse removed,
                       client->RemoveProjectMember(request));
  if (removed.has_project()) {
    ctx.out() << FormatProject(removed.project());
  } else {
    ctx.out() << absl::StrFormat("%s: removed from %s\n", SanitizeForTerminal(request.user()),
                                 SanitizeForTerminal(request.project()));
  }
  return kExitOk;
}

CommandResult RunProjectsDelete(CommandContext& ctx) {
  FCA_RETURN_IF_ERROR(ExpectArgs(ctx, 1, "projects delete NAME"));
  v1::DeleteProjectRequest request;
  request.set_name(ctx.args()[0]);
  FCA_ASSIGN_OR_RETURN(AuditClient * client, ctx.Client());
  FCA_ASSIGN_OR_RETURN(const v1::DeleteProjectResponse deleted, client->DeleteProject(request));
  ctx.out() << absl::StrFormat("project %s: deleted with %d jobs, %d datasets and %d webhooks\n",
                               SanitizeForTerminal(request.name()), deleted.jobs_deleted(),
                               deleted.datasets_deleted(), deleted.webhooks_deleted());
  return kExitOk;
}

}  // namespace fca::client
