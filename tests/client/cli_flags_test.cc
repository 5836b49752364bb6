// The argv dry run that turns flag mistakes into exit 2 (client/cli_flags.h).
#include "client/cli_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, tf_name, "", "test string flag");
ABSL_FLAG(bool, tf_verbose, false, "test bool flag");
ABSL_FLAG(int64_t, tf_count, 0, "test int flag");
ABSL_FLAG(std::vector<std::string>, tf_list, {}, "test list flag");

namespace fca::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Args = std::vector<std::string>;

absl::Status CheckFails(const Args& args) {
  auto check = CheckCommandLine(args);
  EXPECT_FALSE(check.ok());
  if (check.ok()) return absl::OkStatus();
  EXPECT_TRUE(IsUsageError(check.status())) << check.status();
  return check.status();
}

TEST(CheckCommandLineTest, AcceptsEverySyntaxAndRecordsFlags) {
  auto check = CheckCommandLine(
      {"jobs", "--tf_name=a", "list", "--tf_count", "7", "-tf_verbose", "--tf_list=x,y"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_THAT(check->specified, ElementsAre("tf_count", "tf_list", "tf_name", "tf_verbose"));
  EXPECT_FALSE(check->help);
  EXPECT_EQ(absl::GetFlag(FLAGS_tf_count), 7);
}

TEST(CheckCommandLineTest, NegatedBoolRecordsTheFlag) {
  auto check = CheckCommandLine({"--notf_verbose"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_THAT(check->specified, ElementsAre("tf_verbose"));
  EXPECT_FALSE(absl::GetFlag(FLAGS_tf_verbose));
}

TEST(CheckCommandLineTest, UnknownFlag) {
  EXPECT_THAT(CheckFails({"models", "--tf_nmae=x"}).message(), HasSubstr("unknown flag --tf_nmae"));
}

TEST(CheckCommandLineTest, MissingAndBadValues) {
  EXPECT_THAT(CheckFails({"--tf_count"}).message(), HasSubstr("missing the value for --tf_count"));
  EXPECT_THAT(CheckFails({"--tf_count=seven"}).message(),
              HasSubstr("bad value 'seven' for --tf_count"));
  EXPECT_THAT(CheckFails({"--tf_verbose=maybe"}).message(), HasSubstr("--tf_verbose"));
  EXPECT_FALSE(CheckFails({"--tf_verbose="}).ok());
  EXPECT_FALSE(CheckFails({"--notf_verbose=1"}).ok());
  EXPECT_THAT(CheckFails({"--notf_name"}).message(), HasSubstr("not a boolean"));
}

TEST(CheckCommandLineTest, DoubleDashEndsFlags) {
  auto check = CheckCommandLine({"upload", "--", "--not-a-flag", "-x"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->specified.empty());
}

TEST(CheckCommandLineTest, LoneDashAndPositionalsPass) {
  auto check = CheckCommandLine({"watch", "12", "-"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->words, (std::vector<std::string>{"watch", "12", "-"}));
}

// The words `fca jobs list --help` names its command by: not a flag's value.
TEST(CheckCommandLineTest, RecordsThePositionalWordsWithoutFlagValues) {
  auto check =
      CheckCommandLine({"--tf_count", "16", "jobs", "--tf_name=x", "list", "--help", "--", "--x"});
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->help);
  EXPECT_EQ(check->words, (std::vector<std::string>{"jobs", "list", "--x"}));
}

TEST(CheckCommandLineTest, HelpFormsAreRecognised) {
  for (const char* help : {"-h", "-help", "--help"}) {
    auto check = CheckCommandLine({"models", help});
    ASSERT_TRUE(check.ok()) << help;
    EXPECT_TRUE(check->help) << help;
  }
}

TEST(CheckCommandLineTest, PassesAbseilHelpFlagsThrough) {
  // absl prints the help for these; they are not registered flags.
  for (const std::string& help :
       std::vector<std::string>{"--helpfull", "--helpshort", "--helpmatch=tf_", "--version"}) {
    auto check = CheckCommandLine({help});
    EXPECT_TRUE(check.ok()) << help << ": " << check.status();
  }
}

TEST(CheckFlagValuesAreUtf8Test, RefusesNonUtf8TextWithoutEchoingIt) {
  ASSERT_TRUE(CheckCommandLine({"--tf_name=ok ünï", "--tf_list=a,b"}).ok());
  EXPECT_TRUE(CheckFlagValuesAreUtf8({"tf_name", "tf_list", "tf_count"}, {}).ok());
  ASSERT_TRUE(CheckCommandLine({"--tf_name=sec\xffret"}).ok());
  const absl::Status st = CheckFlagValuesAreUtf8({"tf_count", "tf_name"}, {});
  EXPECT_TRUE(IsUsageError(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("--tf_name is not valid UTF-8"));
  EXPECT_THAT(std::string(st.message()), ::testing::Not(HasSubstr("sec")));
  // A flag holding a local path may be any bytes.
  EXPECT_TRUE(CheckFlagValuesAreUtf8({"tf_name"}, {"tf_name"}).ok());
  // Only flags given on the command line are judged.
  EXPECT_TRUE(CheckFlagValuesAreUtf8({"tf_count"}, {}).ok());
  ASSERT_TRUE(CheckCommandLine({"--tf_list=a,\xc0\xaf"}).ok());
  EXPECT_FALSE(CheckFlagValuesAreUtf8({"tf_list"}, {}).ok());
  ASSERT_TRUE(CheckCommandLine({"--tf_name=", "--tf_list="}).ok());
}

}  // namespace
}  // namespace fca::client
