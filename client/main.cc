// fca: command-line client of the fca audit server. See `fca help`.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "client/cli_flags.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "common/flags_usage.h"

int main(int argc, char** argv) {
  using fca::client::CheckCommandLine;
  absl::SetProgramUsageMessage("client of the fca audit server; see 'fca help'");
  // --help prints HelpText(), or a command's help after its words;
  // --helpshort lists the flags of the commands.
  // --version passes CheckCommandLine and is answered by absl.
  fca::ConfigureFlagsUsage("fca", [](absl::string_view file) {
    return absl::StrContains(file, "client/commands") ||
           absl::StrContains(file, "client/spec_flags");
  });
  // Checked first so bad flags exit 2 with our message; absl would exit 1.
  auto check = CheckCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!check.ok()) {
    std::cerr << fca::client::FormatError(check.status()) << "\n";
    return fca::client::kExitUsage;
  }
  if (check->help) {
    std::cout << fca::client::CommandHelpText(check->words);
    return fca::client::kExitOk;
  }
  fca::ExitZeroAfterHelp(argc, argv);  // --helpshort and the like
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> words(positional.begin() + 1, positional.end());
  if (words.empty()) {
    std::cerr << fca::client::HelpText();
    return fca::client::kExitUsage;
  }
  return fca::client::RunCommand(words, check->specified, std::cout, std::cerr);
}
