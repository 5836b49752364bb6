#include "server/core/projects.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/runtime/model_repository.h"

namespace fca::core {
namespace {

// Longest project name a request may name (created ones are at most 128
// characters; personal ones are user names).
constexpr size_t kMaxProjectRefBytes = 256;

absl::Status NoSuchProject(absl::string_view project) {
  return absl::NotFoundError(
      absl::StrFormat("project '%s' does not exist", project.substr(0, kMaxProjectRefBytes)));
}

}  // namespace

const char* ProjectRoleName(ProjectRole role) {
  switch (role) {
    case ProjectRole::kReader:
      return "reader";
    case ProjectRole::kWriter:
      return "writer";
    case ProjectRole::kOwner:
      return "owner";
  }
  return "reader";
}

std::optional<ProjectRole> ParseProjectRole(absl::string_view name) {
  for (ProjectRole role : {ProjectRole::kReader, ProjectRole::kWriter, ProjectRole::kOwner}) {
    if (name == ProjectRoleName(role)) return role;
  }
  return std::nullopt;
}

v1::ProjectRole ToProto(ProjectRole role) {
  switch (role) {
    case ProjectRole::kReader:
      return v1::PROJECT_ROLE_READER;
    case ProjectRole::kWriter:
      return v1::PROJECT_ROLE_WRITER;
    case ProjectRole::kOwner:
      return v1::PROJECT_ROLE_OWNER;
  }
  return v1::PROJECT_ROLE_UNSPECIFIED;
}

absl::StatusOr<ProjectRole> FromProto(v1::ProjectRole role) {
  switch (role) {
    case v1::PROJECT_ROLE_READER:
      return ProjectRole::kReader;
    case v1::PROJECT_ROLE_WRITER:
      return ProjectRole::kWriter;
    case v1::PROJECT_ROLE_OWNER:
      return ProjectRole::kOwner;
    default:
      return absl::InvalidArgumentError("role must be reader, writer or owner");
  }
}

absl::StatusOr<std::string> ProjectOrPersonal(const Caller& caller, const std::string& requested) {
  if (requested.empty()) return caller.user;
  if (requested.size() > kMaxProjectRefBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("project name is %d bytes; at most %d",
                                                      requested.size(), kMaxProjectRefBytes));
  }
  return requested;
}

absl::StatusOr<ProjectRole> RoleIn(storage::Store* store, const Caller& caller,
                                   absl::string_view project) {
  const std::string name(project);
  if (name.empty()) return NoSuchProject(name);
  if (name == caller.user) FCA_RETURN_IF_ERROR(store->EnsurePersonalProject(caller.user).status());
  FCA_ASSIGN_OR_RETURN(const std::optional<std::string> stored,
                       store->MemberRole(name, caller.user));
  if (stored) {
    const std::optional<ProjectRole> role = ParseProjectRole(*stored);
    if (!role) return absl::DataLossError("storage: a member has an unknown role");
    if (!caller.admin) return *role;
  }
  if (caller.admin) {
    const absl::StatusOr<storage::ProjectRecord> found = store->GetProject(name);
    if (absl::IsNotFound(found.status())) return NoSuchProject(name);
    FCA_RETURN_IF_ERROR(found.status());
    return ProjectRole::kOwner;
  }
  return NoSuchProject(name);
}

absl::Status Require(ProjectRole have, ProjectRole need, absl::string_view project) {
  if (have >= need) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrFormat("you are a %s in project '%s'; this needs a %s", ProjectRoleName(have),
                      project, ProjectRoleName(need)));
}

absl::StatusOr<ProjectRole> RequireRole(storage::Store* store, const Caller& caller,
                                        absl::string_view project, ProjectRole need) {
  FCA_ASSIGN_OR_RETURN(const ProjectRole role, RoleIn(store, caller, project));
  FCA_RETURN_IF_ERROR(Require(role, need, project));
  return role;
}

absl::Status RequireOwnOrOwner(ProjectRole role, const Caller& caller, const std::string& made_by,
                               absl::string_view what, absl::string_view project) {
  if (role == ProjectRole::kOwner) return absl::OkStatus();
  FCA_RETURN_IF_ERROR(Require(role, ProjectRole::kWriter, project));
  if (made_by == caller.user) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrFormat("%s is %s's; in project '%s' only owners change other members' work", what,
                      made_by, project));
}

absl::Status ValidateUserName(const std::string& user) {
  // A user name names a personal project too, so it follows the names' rule.
  return runtime::ValidateName(user, "user");
}

}  // namespace fca::core
