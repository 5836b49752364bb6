// The `fca` subcommands. Internal to the CLI binary: flags are defined in
// commands*.cc and parsed once by main.cc, then RunCommand dispatches on the
// positional words.
#ifndef FCA_CLIENT_COMMANDS_H_
#define FCA_CLIENT_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace fca::client {

// What a subcommand runs with.
class CommandContext {
 public:
  CommandContext(std::vector<std::string> args, std::set<std::string> specified, std::ostream& out,
                 std::ostream& err)
      : args_(std::move(args)), specified_(std::move(specified)), out_(out), err_(err) {}

  // Positional arguments after the command words.
  const std::vector<std::string>& args() const { return args_; }
  // True when the flag appeared on the command line (not just defaulted).
  bool Specified(const std::string& flag) const { return specified_.count(flag) > 0; }
  const std::set<std::string>& specified() const { return specified_; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  // Opens the connection on first use from --server/FCA_SERVER,
  // --token/FCA_TOKEN, --tls, --ca_cert and --timeout.
  [[nodiscard]] absl::StatusOr<AuditClient*> Client();
  // Replaces the connection with a fresh channel (after a dropped stream) and
  // returns it; pointers from earlier Client() calls become invalid.
  [[nodiscard]] absl::StatusOr<AuditClient*> ReopenClient();

 private:
  std::vector<std::string> args_;
  std::set<std::string> specified_;
  std::ostream& out_;
  std::ostream& err_;
  ClientOptions client_options_;  // valid once client_ is set
  std::unique_ptr<AuditClient> client_;
};

// A subcommand's result: the process exit code (0, or a job-state code for
// watching commands) or an error that main maps with ExitCodeForStatus.
using CommandResult = absl::StatusOr<int>;

// Helpers of every subcommand (commands.cc). A file the user named on the
// command line: unreadable is a usage error.
[[nodiscard]] absl::StatusOr<std::string> ReadLocalFile(const std::string& path,
                                                        const std::string& what);
// A usage error "expected: fca <usage>" unless there are `count` positional
// arguments.
[[nodiscard]] absl::Status ExpectArgs(const CommandContext& ctx, size_t count,
                                      const std::string& usage);
// A usage error "--<flag> is required" when `value` is empty.
[[nodiscard]] absl::Status RequireFlag(const std::string& value, const std::string& flag);

// `words` are the positional arguments after the program name; `specified`
// the flags seen on the command line. Prints errors as "CODE: message" on
// `err` and returns the exit code.
int RunCommand(const std::vector<std::string>& words, const std::set<std::string>& specified,
               std::ostream& out, std::ostream& err);

// The full `fca help` text: commands, global flags, exit codes.
std::string HelpText();
// `fca COMMAND --help` and `fca help COMMAND`: the command's synopsis and
// its flags with their ranges and defaults; HelpText() when `words` name no
// command.
std::string CommandHelpText(const std::vector<std::string>& words);

// Parses a positional job id; usage error when it is not a positive integer.
[[nodiscard]] absl::StatusOr<int64_t> ParseJobId(const std::string& text);

}  // namespace fca::client

#endif  // FCA_CLIENT_COMMANDS_H_
