// AuditServiceCore: the project RPCs (who may call them: server/core/projects.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/proto_json.h"
#include "common/status_macros.h"
#include "server/core/audit_log.h"
#include "server/core/retention.h"
#include "server/core/service.h"
#include "server/runtime/messages.h"

namespace fca::core {
namespace {

v1::Project ToProto(const storage::ProjectRecord& p, ProjectRole role) {
  v1::Project out;
  out.set_name(p.name);
  out.set_personal(p.personal);
  out.set_created_by(p.created_by);
  runtime::ToTimestamp(p.created_at_us, out.mutable_created_at());
  out.set_role(core::ToProto(role));
  return out;
}

}  // namespace

absl::StatusOr<v1::Project> AuditServiceCore::ProjectWithMembers(const std::string& name,
                                                                 ProjectRole role) {
  FCA_ASSIGN_OR_RETURN(const storage::ProjectRecord project, store_->GetProject(name));
  v1::Project out = ToProto(project, role);
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::ProjectMember> members,
                       store_->ListMembers(name));
  for (const storage::ProjectMember& m : members) {
    const std::optional<ProjectRole> member_role = ParseProjectRole(m.role);
    if (!member_role) return absl::DataLossError("storage: a member has an unknown role");
    v1::ProjectMember* added = out.add_members();
    added->set_user(m.user);
    added->set_role(core::ToProto(*member_role));
  }
  return out;
}

absl::StatusOr<v1::CreateProjectResponse> AuditServiceCore::CreateProject(
    const Caller& caller, const v1::CreateProjectRequest& request) {
  absl::StatusOr<v1::CreateProjectResponse> result =
      [&]() -> absl::StatusOr<v1::CreateProjectResponse> {
    if (!caller.admin) return absl::PermissionDeniedError("only admins create projects");
    FCA_RETURN_IF_ERROR(runtime::ValidateName(request.name(), "project"));
    const std::string owner = request.owner().empty() ? caller.user : request.owner();
    FCA_RETURN_IF_ERROR(ValidateUserName(owner));
    FCA_ASSIGN_OR_RETURN(const storage::ProjectRecord created,
                         store_->CreateProject(request.name(), caller.user, owner));
    v1::CreateProjectResponse response;
    FCA_ASSIGN_OR_RETURN(*response.mutable_project(),
                         ProjectWithMembers(created.name, ProjectRole::kOwner));
    return response;
  }();
  Record(caller, audit_action::kProjectCreate, {"project", request.name()}, result.status(),
         absl::StrCat("owner ", request.owner().empty() ? caller.user : request.owner()));
  return result;
}

absl::StatusOr<v1::ListProjectsResponse> AuditServiceCore::ListProjects(
    const Caller& caller, const v1::ListProjectsRequest&) {
  FCA_RETURN_IF_ERROR(store_->EnsurePersonalProject(caller.user).status());
  std::optional<std::string> member;
  if (!caller.admin) member = caller.user;
  FCA_ASSIGN_OR_RETURN(std::vector<storage::ProjectRecord> projects, store_->ListProjects(member));
  // The caller's personal project first, then by name (as stored).
  std::stable_partition(projects.begin(), projects.end(),
                        [&](const storage::ProjectRecord& p) { return p.name == caller.user; });
  v1::ListProjectsResponse response;
  for (const storage::ProjectRecord& p : projects) {
    FCA_ASSIGN_OR_RETURN(const ProjectRole role, RoleIn(caller, p.name));
    *response.add_projects() = ToProto(p, role);
  }
  return response;
}

absl::StatusOr<v1::GetProjectResponse> AuditServiceCore::GetProject(
    const Caller& caller, const v1::GetProjectRequest& request) {
  FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.name()));
  FCA_ASSIGN_OR_RETURN(const ProjectRole role, RoleIn(caller, name));
  v1::GetProjectResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_project(), ProjectWithMembers(name, role));
  return response;
}

namespace {

// "READER": the role as the CLI prints it (common/proto_json.h).
std::string RoleWord(v1::ProjectRole role) {
  const auto* value = v1::ProjectRole_descriptor()->FindValueByNumber(role);
  return value == nullptr ? absl::StrCat(role) : ShortEnumName(*value);
}

}  // namespace

absl::StatusOr<bool> AuditServiceCore::UserHasKey(const std::string& user) {
  if (facts_.key_file_users.count(user) > 0) return true;
  FCA_ASSIGN_OR_RETURN(const std::vector<storage::ApiKeyRecord> keys, store_->ListApiKeys(user));
  return std::any_of(keys.begin(), keys.end(), [](const storage::ApiKeyRecord& key) {
    return key.state == storage::ApiKeyState::kActive;
  });
}

absl::StatusOr<v1::AddProjectMemberResponse> AuditServiceCore::AddProjectMember(
    const Caller& caller, const v1::AddProjectMemberRequest& request) {
  absl::StatusOr<v1::AddProjectMemberResponse> result =
      [&]() -> absl::StatusOr<v1::AddProjectMemberResponse> {
    FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.project()));
    FCA_ASSIGN_OR_RETURN(const ProjectRole role,
                         RequireRole(store_, caller, name, ProjectRole::kOwner));
    FCA_RETURN_IF_ERROR(ValidateUserName(request.user()));
    FCA_ASSIGN_OR_RETURN(const ProjectRole given, FromProto(request.role()));
    FCA_RETURN_IF_ERROR(store_->SetMember(name, request.user(), ProjectRoleName(given)));
    v1::AddProjectMemberResponse response;
    FCA_ASSIGN_OR_RETURN(*response.mutable_project(), ProjectWithMembers(name, role));
    if (facts_.auth) {
      FCA_ASSIGN_OR_RETURN(const bool has_key, UserHasKey(request.user()));
      response.set_user_has_key(has_key);
    }
    return response;
  }();
  Record(caller, audit_action::kMemberAdd,
         {"project", request.project().empty() ? caller.user : request.project()}, result.status(),
         absl::StrCat(request.user(), " as ", RoleWord(request.role())));
  return result;
}

absl::StatusOr<v1::RemoveProjectMemberResponse> AuditServiceCore::RemoveProjectMember(
    const Caller& caller, const v1::RemoveProjectMemberRequest& request) {
  absl::StatusOr<v1::RemoveProjectMemberResponse> result =
      [&]() -> absl::StatusOr<v1::RemoveProjectMemberResponse> {
    FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.project()));
    FCA_RETURN_IF_ERROR(RequireRole(store_, caller, name, ProjectRole::kOwner).status());
    FCA_RETURN_IF_ERROR(ValidateUserName(request.user()));
    // The member's open WatchJob streams of the project's jobs check their
    // membership at every turn (at most 500 ms apart) and end with NOT_FOUND.
    FCA_RETURN_IF_ERROR(store_->RemoveMember(name, request.user()));
    v1::RemoveProjectMemberResponse response;
    // The caller may have removed themselves (an owner of several).
    const absl::StatusOr<ProjectRole> now = RoleIn(caller, name);
    if (!now.ok()) return response;
    FCA_ASSIGN_OR_RETURN(*response.mutable_project(), ProjectWithMembers(name, *now));
    return response;
  }();
  Record(caller, audit_action::kMemberRemove,
         {"project", request.project().empty() ? caller.user : request.project()}, result.status(),
         request.user());
  return result;
}

absl::StatusOr<v1::DeleteProjectResponse> AuditServiceCore::DeleteProject(
    const Caller& caller, const v1::DeleteProjectRequest& request) {
  absl::StatusOr<v1::DeleteProjectResponse> result =
      [&]() -> absl::StatusOr<v1::DeleteProjectResponse> {
    FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.name()));
    FCA_RETURN_IF_ERROR(RequireRole(store_, caller, name, ProjectRole::kOwner).status());
    FCA_ASSIGN_OR_RETURN(const storage::ProjectRecord project, store_->GetProject(name));
    if (project.personal) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "'%s' is a personal project and cannot be deleted; delete its jobs and datasets instead",
          name));
    }
    FCA_ASSIGN_OR_RETURN(const storage::ProjectDeletion deleted, store_->DeleteProject(name));
    v1::DeleteProjectResponse response;
    response.set_jobs_deleted(deleted.jobs);
    response.set_datasets_deleted(deleted.datasets);
    response.set_webhooks_deleted(deleted.webhooks);
    return response;
  }();
  Record(caller, audit_action::kProjectDelete,
         {"project", request.name().empty() ? caller.user : request.name()}, result.status(), "");
  return result;
}

absl::StatusOr<v1::GetRetentionResponse> AuditServiceCore::GetRetention(
    const Caller& caller, const v1::GetRetentionRequest& request) {
  FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.project()));
  FCA_RETURN_IF_ERROR(RoleIn(caller, name).status());
  v1::GetRetentionResponse response;
  FCA_ASSIGN_OR_RETURN(*response.mutable_retention(),
                       DescribeRetention(store_, retention_defaults_, name));
  return response;
}

absl::StatusOr<v1::SetRetentionResponse> AuditServiceCore::SetRetention(
    const Caller& caller, const v1::SetRetentionRequest& request) {
  absl::StatusOr<v1::SetRetentionResponse> result =
      [&]() -> absl::StatusOr<v1::SetRetentionResponse> {
    FCA_ASSIGN_OR_RETURN(const std::string name, ProjectOrPersonal(caller, request.project()));
    FCA_RETURN_IF_ERROR(RequireRole(store_, caller, name, ProjectRole::kOwner).status());
    FCA_RETURN_IF_ERROR(store_->Transaction([&]() -> absl::Status {
      FCA_ASSIGN_OR_RETURN(storage::RetentionRule rule, store_->GetRetentionRule(name));
      FCA_RETURN_IF_ERROR(ApplyRetentionRequest(request, &rule));
      return store_->SetRetentionRule(rule, caller.user);
    }));
    v1::SetRetentionResponse response;
    FCA_ASSIGN_OR_RETURN(*response.mutable_retention(),
                         DescribeRetention(store_, retention_defaults_, name));
    return response;
  }();
  std::string detail;
  if (result.ok()) {
    detail = absl::StrFormat("keep_jobs_days=%d keep_unused_datasets_days=%d",
                             result->retention().keep_jobs_days(),
                             result->retention().keep_unused_datasets_days());
  }
  Record(caller, audit_action::kRetentionSet,
         {"project", request.project().empty() ? caller.user : request.project()}, result.status(),
         detail);
  return result;
}

}  // namespace fca::core
