#include "client/cli_flags.h"

#include <string_view>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/text_safety.h"

namespace fca::client {
namespace {

// absl handles these itself (reading files, the environment, usage output);
// checking their values here would duplicate that logic.
bool IsAbseilSpecialFlag(const std::string& name) {
  static const std::set<std::string> kSpecial = {
      "flagfile",    "fromenv", "tryfromenv",      "undefok", "helpfull", "helpshort",
      "helppackage", "version", "only_check_args", "helpon",  "helpmatch"};
  return kSpecial.count(name) > 0;
}

struct FlagToken {
  std::string name;
  std::string value;
  bool has_value = false;  // an '=' was present
};

FlagToken SplitFlag(std::string_view arg) {
  arg.remove_prefix(arg.size() > 1 && arg[1] == '-' ? 2 : 1);
  FlagToken token;
  const size_t eq = arg.find('=');
  token.name = std::string(arg.substr(0, eq));
  if (eq != std::string_view::npos) {
    token.value = std::string(arg.substr(eq + 1));
    token.has_value = true;
  }
  return token;
}

// Finds the flag, resolving the --noNAME form of booleans.
absl::CommandLineFlag* Locate(const std::string& name, bool* negated) {
  *negated = false;
  if (absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) {
    return flag;
  }
  if (name.size() > 2 && name.compare(0, 2, "no") == 0) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name.substr(2));
    if (flag != nullptr) {
      *negated = true;
      return flag;
    }
  }
  return nullptr;
}

// The value absl would assign, consuming the next argument when the syntax
// is "--name value". `next` indexes args and is advanced on consumption.
absl::StatusOr<std::string> ResolveValue(const FlagToken& token, absl::CommandLineFlag& flag,
                                         bool negated, const std::vector<std::string>& args,
                                         size_t* next) {
  const std::string name(flag.Name());
  if (flag.IsOfType<bool>()) {
    if (negated && token.has_value) {
      return UsageError(absl::StrFormat("--no%s takes no value", name));
    }
    if (!token.has_value) return std::string(negated ? "0" : "1");
    if (token.value.empty()) {
      return UsageError(absl::StrFormat("missing the value after --%s=", name));
    }
    return token.value;
  }
  if (negated) {
    return UsageError(absl::StrFormat("--%s is not a boolean flag", name));
  }
  if (token.has_value) return token.value;
  if (*next >= args.size()) {
    return UsageError(absl::StrFormat("missing the value for --%s", name));
  }
  return args[(*next)++];
}

}  // namespace

absl::StatusOr<CommandLineCheck> CheckCommandLine(const std::vector<std::string>& args) {
  CommandLineCheck check;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i++];
    if (arg == "--") {  // the rest is positional
      check.words.insert(check.words.end(), args.begin() + i, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {  // positional, or "-"
      check.words.push_back(arg);
      continue;
    }
    if (arg == "-h" || arg == "-help" || arg == "--help") {
      check.help = true;
      continue;
    }
    FlagToken token = SplitFlag(arg);
    if (IsAbseilSpecialFlag(token.name)) {
      // Not all of them are registered flags (--helpfull is not), so they
      // are recognised by name; absl reads their values itself.
      check.specified.insert(token.name);
      const absl::CommandLineFlag* special = absl::FindCommandLineFlag(token.name);
      if (special != nullptr && !token.has_value && !special->IsOfType<bool>()) ++i;
      continue;
    }
    bool negated = false;
    absl::CommandLineFlag* flag = Locate(token.name, &negated);
    if (flag == nullptr) {
      return UsageError(absl::StrFormat("unknown flag --%s", token.name));
    }
    const std::string name(flag->Name());
    check.specified.insert(name);
    auto value = ResolveValue(token, *flag, negated, args, &i);
    if (!value.ok()) return value.status();
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return UsageError(absl::StrFormat("bad value '%s' for --%s: %s", *value, name, error));
    }
  }
  return check;
}

absl::Status CheckFlagValuesAreUtf8(const std::set<std::string>& specified,
                                    const std::set<std::string>& byte_flags) {
  for (const std::string& name : specified) {
    if (byte_flags.count(name) > 0) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    const std::string value = flag->CurrentValue();
    if (!IsValidUtf8(value)) {
      // The value is not echoed: it may be a secret (--token).
      return UsageError(absl::StrFormat(
          "--%s is not valid UTF-8 text; text sent to the server must be UTF-8", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace fca::client
