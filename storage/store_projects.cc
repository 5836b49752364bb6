// Store: projects and their members.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "storage/store_internal.h"

namespace fca::storage {
namespace {

constexpr char kSelectProject[] = "SELECT name, personal, created_by, created_at_us FROM projects";

ProjectRecord ReadProject(const Statement& stmt) {
  ProjectRecord project;
  project.name = stmt.ColumnText(0);
  project.personal = stmt.ColumnInt(1) != 0;
  project.created_by = stmt.ColumnText(2);
  project.created_at_us = stmt.ColumnInt(3);
  return project;
}

absl::Status NoProject(const std::string& name) {
  return absl::NotFoundError(absl::StrFormat("project '%s' not found", name));
}

bool IsRole(const std::string& role) {
  return role == "reader" || role == "writer" || role == "owner";
}

// Inserts the project row and its first owner.
absl::Status InsertProject(Database& db, const std::string& name, bool personal,
                           const std::string& created_by, const std::string& owner, int64_t now) {
  FCA_ASSIGN_OR_RETURN(Statement insert,
                       db.Prepare("INSERT INTO projects (name, personal, created_by, "
                                  "created_at_us) VALUES (?1, ?2, ?3, ?4)",
                                  "create project"));
  insert.BindText(1, name);
  insert.BindInt(2, personal ? 1 : 0);
  insert.BindText(3, created_by);
  insert.BindInt(4, now);
  FCA_RETURN_IF_ERROR(insert.Run());
  FCA_ASSIGN_OR_RETURN(Statement member,
                       db.Prepare("INSERT INTO project_members (project, user, role, "
                                  "added_at_us) VALUES (?1, ?2, 'owner', ?3)",
                                  "create project"));
  member.BindText(1, name);
  member.BindText(2, owner);
  member.BindInt(3, now);
  return member.Run();
}

// Whether `sql` (one ?1 parameter) returns a row for `value`.
absl::StatusOr<bool> Exists(Database& db, const char* sql, const std::string& value,
                            const char* what) {
  FCA_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(sql, what));
  stmt.BindText(1, value);
  return stmt.Step();
}

absl::StatusOr<std::vector<ProjectMember>> ListMembersIn(const Database& db,
                                                         const std::string& project) {
  FCA_ASSIGN_OR_RETURN(Statement stmt,
                       db.Prepare("SELECT user, role, added_at_us FROM project_members "
                                  "WHERE project = ?1 ORDER BY user",
                                  "list members"));
  stmt.BindText(1, project);
  std::vector<ProjectMember> members;
  while (true) {
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) break;
    members.push_back({stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnInt(2)});
  }
  return members;
}

}  // namespace

absl::StatusOr<ProjectRecord> Store::CreateProject(const std::string& name,
                                                   const std::string& created_by,
                                                   const std::string& first_owner) {
  if (name.empty() || first_owner.empty()) {
    return absl::InvalidArgumentError("project name and owner must be non-empty");
  }
  FCA_RETURN_IF_ERROR(Inject("membership"));
  RecursiveMutexLock lock(&mu_);
  ProjectRecord created;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const bool project, Exists(*db_, "SELECT 1 FROM projects WHERE name = ?1",
                                                    name, "create project"));
    FCA_ASSIGN_OR_RETURN(const bool user, Exists(*db_, "SELECT 1 FROM api_keys WHERE user = ?1",
                                                 name, "create project"));
    if (project || user) {
      return absl::AlreadyExistsError(
          absl::StrFormat("a %s named '%s' exists already", project ? "project" : "user", name));
    }
    FCA_RETURN_IF_ERROR(InsertProject(*db_, name, false, created_by, first_owner, Now()));
    FCA_ASSIGN_OR_RETURN(
        Statement get,
        db_->Prepare(std::string(kSelectProject) + " WHERE name = ?1", "create project"));
    get.BindText(1, name);
    FCA_ASSIGN_OR_RETURN(const bool row, get.Step());
    if (!row) return absl::InternalError("storage: the new project vanished");
    created = ReadProject(get);
    return absl::OkStatus();
  }));
  return created;
}

absl::StatusOr<bool> Store::EnsurePersonalProject(const std::string& user) {
  if (user.empty()) return absl::InvalidArgumentError("user name is empty");
  RecursiveMutexLock lock(&mu_);
  // Read first: a personal project is created once, and every later call
  // only reads.
  FCA_ASSIGN_OR_RETURN(const bool exists, Exists(*db_, "SELECT 1 FROM projects WHERE name = ?1",
                                                 user, "find project"));
  if (exists) return false;
  bool created = false;
  FCA_RETURN_IF_ERROR(db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // Another connection may have created it since the read above.
    FCA_ASSIGN_OR_RETURN(
        const bool now_exists,
        Exists(*db_, "SELECT 1 FROM projects WHERE name = ?1", user, "create personal project"));
    if (now_exists) return absl::OkStatus();
    FCA_RETURN_IF_ERROR(InsertProject(*db_, user, true, user, user, Now()));
    created = true;
    return absl::OkStatus();
  }));
  return created;
}

absl::StatusOr<ProjectRecord> Store::GetProject(const std::string& name) {
  return Read([&](Database& db) -> absl::StatusOr<ProjectRecord> {
    FCA_ASSIGN_OR_RETURN(
        Statement stmt,
        db.Prepare(std::string(kSelectProject) + " WHERE name = ?1", "get project"));
    stmt.BindText(1, name);
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return NoProject(name);
    return ReadProject(stmt);
  });
}

absl::StatusOr<std::vector<ProjectRecord>> Store::ListProjects(
    const std::optional<std::string>& user) {
  return Read([&](Database& db) -> absl::StatusOr<std::vector<ProjectRecord>> {
    FCA_ASSIGN_OR_RETURN(
        Statement stmt,
        db.Prepare(std::string(kSelectProject) +
                       " WHERE ?1 IS NULL OR name IN (SELECT project FROM project_members "
                       "WHERE user = ?1) ORDER BY name",
                   "list projects"));
    if (user.has_value()) {
      stmt.BindText(1, *user);
    } else {
      stmt.BindNull(1);
    }
    std::vector<ProjectRecord> projects;
    while (true) {
      FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
      if (!row) break;
      projects.push_back(ReadProject(stmt));
    }
    return projects;
  });
}

absl::StatusOr<std::optional<std::string>> Store::MemberRole(const std::string& project,
                                                             const std::string& user) {
  return Read([&](Database& db) -> absl::StatusOr<std::optional<std::string>> {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db.Prepare("SELECT role FROM project_members WHERE project = ?1 AND "
                                    "user = ?2",
                                    "find member"));
    stmt.BindText(1, project);
    stmt.BindText(2, user);
    FCA_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return std::nullopt;
    return stmt.ColumnText(0);
  });
}

absl::StatusOr<std::vector<ProjectMember>> Store::ListMembers(const std::string& project) {
  return Read([&](Database& db) { return ListMembersIn(db, project); });
}

absl::StatusOr<std::vector<ProjectMember>> Store::ListMembersLocked(const std::string& project) {
  return ListMembersIn(*db_, project);
}

absl::Status Store::CheckHasOwnerLocked(const std::string& project) {
  FCA_ASSIGN_OR_RETURN(const bool owner,
                       Exists(*db_,
                              "SELECT 1 FROM project_members WHERE project = ?1 AND "
                              "role = 'owner'",
                              project, "count owners"));
  if (owner) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "project '%s' would have no owner left; make another member owner first", project));
}

absl::Status Store::SetMember(const std::string& project, const std::string& user,
                              const std::string& role) {
  if (user.empty()) return absl::InvalidArgumentError("member name is empty");
  if (!IsRole(role)) {
    return absl::InvalidArgumentError("role must be 'reader', 'writer' or 'owner'");
  }
  FCA_RETURN_IF_ERROR(Inject("membership"));
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(const bool exists, Exists(*db_, "SELECT 1 FROM projects WHERE name = ?1",
                                                   project, "set member"));
    if (!exists) return NoProject(project);
    FCA_ASSIGN_OR_RETURN(Statement upsert,
                         db_->Prepare("INSERT INTO project_members (project, user, role, "
                                      "added_at_us) VALUES (?1, ?2, ?3, ?4) "
                                      "ON CONFLICT (project, user) DO UPDATE SET role = ?3",
                                      "set member"));
    upsert.BindText(1, project);
    upsert.BindText(2, user);
    upsert.BindText(3, role);
    upsert.BindInt(4, Now());
    FCA_RETURN_IF_ERROR(upsert.Run());
    return CheckHasOwnerLocked(project);
  });
}

absl::Status Store::RemoveMember(const std::string& project, const std::string& user) {
  FCA_RETURN_IF_ERROR(Inject("membership"));
  RecursiveMutexLock lock(&mu_);
  return db_->Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    FCA_ASSIGN_OR_RETURN(Statement remove,
                         db_->Prepare("DELETE FROM project_members WHERE project = ?1 AND "
                                      "user = ?2",
                                      "remove member"));
    remove.BindText(1, project);
    remove.BindText(2, user);
    FCA_RETURN_IF_ERROR(remove.Run());
    if (db_->changes() == 0) {
      return absl::NotFoundError(
          absl::StrFormat("'%s' is no member of project '%s'", user, project));
    }
    return CheckHasOwnerLocked(project);
  });
}

absl::StatusOr<ProjectDeletion> Store::DeleteProject(const std::string& name) {
  FCA_RETURN_IF_ERROR(Inject("delete"));
  RecursiveMutexLock lock(&mu_);
  ProjectDeletion deleted;
  FCA_RETURN_IF_ERROR(DeleteLocked([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    deleted = {};
    FCA_ASSIGN_OR_RETURN(const bool exists, Exists(*db_, "SELECT 1 FROM projects WHERE name = ?1",
                                                   name, "delete project"));
    if (!exists) return NoProject(name);
    FCA_ASSIGN_OR_RETURN(const bool active,
                         Exists(*db_,
                                "SELECT 1 FROM jobs WHERE project = ?1 AND state IN "
                                "('QUEUED', 'RUNNING')",
                                name, "delete project"));
    if (active) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "project '%s' has queued or running jobs; cancel them before deleting it", name));
    }
    // Events, tasks and results go with their jobs, chunks with their
    // cache entries, members with the project, deliveries and their attempts
    // with their webhook (ON DELETE CASCADE). Webhooks name their project by
    // name only, so they are deleted here: a project created later under
    // the same name must not inherit them (nor their secrets).
    const auto run = [&](const char* sql, int64_t* count)
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      FCA_ASSIGN_OR_RETURN(Statement stmt, db_->Prepare(sql, "delete project"));
      stmt.BindText(1, name);
      FCA_RETURN_IF_ERROR(stmt.Run());
      if (count != nullptr) *count = db_->changes();
      return absl::OkStatus();
    };
    FCA_RETURN_IF_ERROR(run("DELETE FROM jobs WHERE project = ?1", &deleted.jobs));
    FCA_RETURN_IF_ERROR(run("DELETE FROM datasets WHERE project = ?1", &deleted.datasets));
    // Content goes with its last dataset, as in DeleteDataset.
    FCA_RETURN_IF_ERROR(
        db_->Execute("DELETE FROM dataset_blobs WHERE NOT EXISTS (SELECT 1 FROM "
                     "datasets d WHERE d.sha256 = dataset_blobs.sha256)",
                     "delete project"));
    FCA_RETURN_IF_ERROR(run("DELETE FROM coeff_cache WHERE project = ?1", nullptr));
    FCA_RETURN_IF_ERROR(run("DELETE FROM webhooks WHERE project = ?1", &deleted.webhooks));
    return run("DELETE FROM projects WHERE name = ?1", nullptr);
  }));
  return deleted;
}

}  // namespace fca::storage
