// Who may do what in a project (docs/user-guide.md "Projects"): the one
// access check every RPC of the core goes through.
//
// A project's members are readers (see its jobs, datasets, results, reports
// and cached coefficients), writers (also upload, submit, and cancel or
// delete their own) or owners (also manage members and delete anything in
// it). Admins act as owners of every project. Every user has a personal
// project named like them, created on first use, which they own.
#ifndef FCA_SERVER_CORE_PROJECTS_H_
#define FCA_SERVER_CORE_PROJECTS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/core/caller.h"
#include "storage/store.h"

namespace fca::core {

// Ordered: each role includes the ones before it.
enum class ProjectRole { kReader = 1, kWriter = 2, kOwner = 3 };

// "reader", "writer", "owner": the store's and the CLI's names.
const char* ProjectRoleName(ProjectRole role);
std::optional<ProjectRole> ParseProjectRole(absl::string_view name);
v1::ProjectRole ToProto(ProjectRole role);
// INVALID_ARGUMENT for PROJECT_ROLE_UNSPECIFIED or an unknown value.
[[nodiscard]] absl::StatusOr<ProjectRole> FromProto(v1::ProjectRole role);

// The project a request names: `requested`, or the caller's personal
// project when it is empty. INVALID_ARGUMENT for a name over 256 bytes.
[[nodiscard]] absl::StatusOr<std::string> ProjectOrPersonal(const Caller& caller,
                                                            const std::string& requested);

// The caller's role in `project`: an admin is owner of every project that
// exists. The caller's personal project is created on first use. NOT_FOUND
// ("project 'x' does not exist") for a project the caller is no member of,
// exactly as for one that does not exist.
[[nodiscard]] absl::StatusOr<ProjectRole> RoleIn(storage::Store* store, const Caller& caller,
                                                 absl::string_view project);

// OK when `have` includes `need`; PERMISSION_DENIED naming both otherwise.
[[nodiscard]] absl::Status Require(ProjectRole have, ProjectRole need, absl::string_view project);

// RoleIn, then Require: NOT_FOUND for a non-member, PERMISSION_DENIED for a
// member whose role is below `need`.
[[nodiscard]] absl::StatusOr<ProjectRole> RequireRole(storage::Store* store, const Caller& caller,
                                                      absl::string_view project, ProjectRole need);

// What writers may change: what they made themselves (a job they submitted,
// a dataset they uploaded); owners anything in the project.
// PERMISSION_DENIED otherwise, naming `what`.
[[nodiscard]] absl::Status RequireOwnOrOwner(ProjectRole role, const Caller& caller,
                                             const std::string& made_by, absl::string_view what,
                                             absl::string_view project);

// The one rule for user names, wherever one is given (CreateApiKey,
// fca-server --create_api_key, CreateProject's owner, AddProjectMember):
// runtime::ValidateName's, 1-128 of [A-Za-z0-9._-] not starting with '.',
// since a user's name is also its personal project's.
[[nodiscard]] absl::Status ValidateUserName(const std::string& user);

}  // namespace fca::core

#endif  // FCA_SERVER_CORE_PROJECTS_H_
