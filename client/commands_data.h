// The listing and transfer subcommands (commands_data.cc): models,
// datasets, jobs, results, tokenize, report, compare, info, queue, windows,
// export and admin backup.
#ifndef FCA_CLIENT_COMMANDS_DATA_H_
#define FCA_CLIENT_COMMANDS_DATA_H_

#include "client/commands.h"

namespace fca::client {

[[nodiscard]] CommandResult RunModels(CommandContext& ctx);
[[nodiscard]] CommandResult RunDatasetsUpload(CommandContext& ctx);
[[nodiscard]] CommandResult RunDatasetsList(CommandContext& ctx);
[[nodiscard]] CommandResult RunJobsList(CommandContext& ctx);
[[nodiscard]] CommandResult RunJobsShow(CommandContext& ctx);
[[nodiscard]] CommandResult RunJobsManifest(CommandContext& ctx);
[[nodiscard]] CommandResult RunJobsCancel(CommandContext& ctx);
[[nodiscard]] CommandResult RunJobsDelete(CommandContext& ctx);
[[nodiscard]] CommandResult RunDatasetsDelete(CommandContext& ctx);
[[nodiscard]] CommandResult RunResults(CommandContext& ctx);
[[nodiscard]] CommandResult RunTokenize(CommandContext& ctx);
[[nodiscard]] CommandResult RunReport(CommandContext& ctx);
[[nodiscard]] CommandResult RunCompare(CommandContext& ctx);
[[nodiscard]] CommandResult RunPool(CommandContext& ctx);
[[nodiscard]] CommandResult RunInfo(CommandContext& ctx);
[[nodiscard]] CommandResult RunQueue(CommandContext& ctx);
[[nodiscard]] CommandResult RunWindows(CommandContext& ctx);
[[nodiscard]] CommandResult RunExport(CommandContext& ctx);
[[nodiscard]] CommandResult RunAdminBackup(CommandContext& ctx);

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_DATA_H_
