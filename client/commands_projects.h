// `fca projects ...` (commands_projects.cc): shared projects and their
// members.
#ifndef FCA_CLIENT_COMMANDS_PROJECTS_H_
#define FCA_CLIENT_COMMANDS_PROJECTS_H_

#include "client/commands.h"

namespace fca::client {

[[nodiscard]] CommandResult RunProjectsCreate(CommandContext& ctx);
[[nodiscard]] CommandResult RunProjectsList(CommandContext& ctx);
[[nodiscard]] CommandResult RunProjectsShow(CommandContext& ctx);
[[nodiscard]] CommandResult RunProjectsAddMember(CommandContext& ctx);
[[nodiscard]] CommandResult RunProjectsRemoveMember(CommandContext& ctx);
[[nodiscard]] CommandResult RunProjectsDelete(CommandContext& ctx);
// Shows a project's retention, or sets it with --keep_jobs_days and
// --keep_unused_datasets_days.
[[nodiscard]] CommandResult RunProjectsRetention(CommandContext& ctx);

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_PROJECTS_H_
