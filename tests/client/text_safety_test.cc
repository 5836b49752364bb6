// Server text in the CLI's output (client/format.h SanitizeForTerminal and
// its callers), UTF-8 checks before sending, and hash normalization.
#include "client/text_safety.h"

#include <string>
#include <vector>

#include "client/client.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/format_progress.h"
#include "client/report_format.h"
#include "client/watch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;
using ::testing::Not;

// A label that clears the screen, sets the window title, rings the bell,
// swaps the text direction and forges a second table row (valid UTF-8:
// the server sends nothing else).
const std::string kHostile =
    "lab\x1b[2J\x1b]0;owned\x07\xe2\x80\xae"
    "evil\nFAKE  ROW\r\xc2\x9b"
    "31m";

// No byte a terminal would act on: C0 (newline allowed: ours), DEL, C1 or
// bidi controls, invalid UTF-8.
void ExpectTerminalSafe(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_FALSE((c < 0x20 && c != '\n') || c == 0x7F) << "byte " << int(c) << " at " << i;
  }
  EXPECT_TRUE(IsValidUtf8(text));
  EXPECT_THAT(text, Not(HasSubstr("\xe2\x80\xae")));
  EXPECT_THAT(text, Not(HasSubstr("\xc2\x9b")));
}

size_t LineCount(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

TEST(Utf8Test, AcceptsWellFormedAndRefusesMalformed) {
  for (const std::string& ok :
       std::vector<std::string>{"", "plain", "ünïcödé ±", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                std::string("nul\0inside", 10)}) {
    EXPECT_TRUE(IsValidUtf8(ok)) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{
           "\xff", "\x80", "caf\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
           "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "ok\xc3(", "\xe2\x82"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
  }
}

TEST(SanitizeForTerminalTest, EscapesControlsBidiAndInvalidBytes) {
  EXPECT_EQ(SanitizeForTerminal("fg-s1 ± ünï"), "fg-s1 ± ünï");
  EXPECT_EQ(SanitizeForTerminal("\x1b[2Jx"), "\\x1b[2Jx");
  EXPECT_EQ(SanitizeForTerminal("a\nb\tc\rd\x7f"), "a\\nb\\tc\\rd\\x7f");
  EXPECT_EQ(SanitizeForTerminal(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(SanitizeForTerminal("\xc2\x9b"
                                "31m"),
            "\\u009b31m");
  EXPECT_EQ(SanitizeForTerminal("\xe2\x80\xae"
                                "cba"),
            "\\u202ecba");
  EXPECT_EQ(SanitizeForTerminal("\xe2\x81\xa6x\xe2\x80\xa8"), "\\u2066x\\u2028");
  EXPECT_EQ(SanitizeForTerminal("ok\xff\xc3("), "ok\\xff\\xc3(");
  const std::string once = SanitizeForTerminal(kHostile);
  ExpectTerminalSafe(once);
  EXPECT_EQ(LineCount(once), 0u);
  EXPECT_EQ(SanitizeForTerminal(once), once);  // idempotent
}

TEST(SanitizeForTerminalTest, LinesKeepTheirNewlines) {
  EXPECT_EQ(SanitizeLinesForTerminal("a\x1b\nb\n"), "a\\x1b\nb\n");
  EXPECT_EQ(SanitizeLinesForTerminal(""), "");
}

v1::Job HostileJob() {
  v1::Job job;
  job.set_id(7);
  job.set_owner("eve\x1b[1m");
  job.set_state(v1::JOB_STATE_FAILED);
  job.mutable_spec()->add_models("fg\x1b[31m");
  job.mutable_spec()->set_label(kHostile);
  job.set_error("INTERNAL: \x1b]0;title\x07");
  return job;
}

TEST(SanitizedOutputTest, JobsTableHasOneLinePerJob) {
  const std::string table = FormatJobsTable({HostileJob()});
  ExpectTerminalSafe(table);
  EXPECT_EQ(LineCount(table), 2u) << table;
  EXPECT_THAT(table, HasSubstr("lab\\x1b[2J\\x1b]0;owned\\x07\\u202eevil\\nFAKE  ROW\\r"));
}

TEST(SanitizedOutputTest, JobDetails) {
  const std::string details = FormatJobDetails(HostileJob());
  ExpectTerminalSafe(details);
  EXPECT_THAT(details, HasSubstr("owner:            eve\\x1b[1m\n"));
  EXPECT_THAT(details, HasSubstr("error:            INTERNAL: \\x1b]0;title\\x07\n"));
}

TEST(SanitizedOutputTest, ListingsUploadAndExportSummaries) {
  v1::Model model;
  model.set_name("m\x1b[0m");
  model.set_weights_sha256("\x1b[2J0123456789");
  ExpectTerminalSafe(FormatModelsTable({model}));
  v1::Dataset dataset;
  dataset.set_name("d\x1b[0m");
  dataset.set_owner("o\x07");
  dataset.set_sha256("\x9b");
  ExpectTerminalSafe(FormatDatasetsTable({dataset}));
  v1::UploadDatasetResponse upload;
  *upload.mutable_dataset() = dataset;
  ExpectTerminalSafe(FormatUploadSummary(upload));
  v1::CoefficientsHeader header;
  header.set_model("m\x1b[0m");
  header.set_dtype("f\x1b");
  ExpectTerminalSafe(FormatCoefficientsHeader(header));
}

TEST(SanitizedOutputTest, ProgressWatchAndErrors) {
  v1::Progress progress;
  progress.set_phase("replay\x1b[2K");
  progress.set_model("fg\r\x1b[1A");
  progress.set_fraction(0.5);
  ExpectTerminalSafe(RenderProgressLine(progress, absl::Seconds(3)));
  ExpectTerminalSafe(RenderProgressBar(progress, 80, absl::Seconds(3)));

  std::ostringstream out, err;
  WatchPrinter printer(out, err, {});
  v1::WatchJobResponse message;
  message.mutable_event()->set_message("cache hit\x1b[2J");
  printer.OnEvent(message);
  v1::WatchJobResponse results;
  results.mutable_event()->mutable_results()->set_model("fg\x1b[31m");
  v1::Result* row = results.mutable_event()->mutable_results()->add_results();
  row->set_model("fg\x1b[31m");
  row->set_intervention("cross\x07");
  row->set_metric("nll");
  printer.OnEvent(results);
  ExpectTerminalSafe(out.str());
  ExpectTerminalSafe(err.str());
  EXPECT_THAT(err.str(), HasSubstr("note: cache hit\\x1b[2J\n"));

  const std::string error =
      FormatError(absl::NotFoundError("model 'x\x1b[2J' is not in the repository"));
  ExpectTerminalSafe(error);
  EXPECT_EQ(error, "NOT_FOUND: model 'x\\x1b[2J' is not in the repository");
}

TEST(SanitizedOutputTest, ReportText) {
  v1::GetReportResponse report;
  v1::Job* job = report.mutable_job();
  job->set_id(3);
  job->mutable_spec()->add_models("fg\x1b[31m");
  job->mutable_spec()->set_dense_twin("d\x07");
  job->mutable_spec()->set_label("l\x1b[2J");
  report.add_models("fg\x1b[31m");
  report.set_dense_twin("d\x07");
  report.set_eval_sha256("\x1b]0;x\x07");
  v1::ReportMetric* metric = report.add_metrics();
  metric->set_intervention("replay");
  metric->set_metric("live_nll");
  for (const char* model : {"fg\x1b[31m", "d\x07"}) {
    v1::Result r;
    r.set_model(model);
    r.set_intervention("replay");
    r.set_metric("live_nll");
    r.set_defined(true);
    r.set_value(1.5);
    r.set_dataset_sha256("\x1b]0;x\x07");
    *(model[0] == 'd' ? report.add_dense_twin_rows() : metric->add_per_model()) = r;
  }
  ExpectTerminalSafe(FormatReportText(ReportView(report)));
  v1::CompareJobsResponse comparison;
  *comparison.add_reports() = report;
  ExpectTerminalSafe(FormatComparisonText(comparison));
}

TEST(FaithfulOutputTest, CsvAndJsonKeepTheTextEscapedByTheirOwnRules) {
  v1::Result r;
  r.set_model("fg\x1b[31m");
  r.set_intervention("a,b");
  r.set_metric("nll");
  const std::string csv = FormatResultsCsv({r});
  EXPECT_THAT(csv, HasSubstr(",fg\x1b[31m,"));  // faithful: the bytes as stored
  EXPECT_THAT(csv, HasSubstr(",\"a,b\","));
  const std::string json = FormatResultsJson({r});
  EXPECT_THAT(json, HasSubstr("\"model\":\"fg\\u001b[31m\""));
}

TEST(NormalizeSha256Test, UpperCaseHexBecomesLowerCase) {
  const std::string lower(64, 'a');
  const std::string upper(64, 'A');
  const std::string mixed = "0123456789ABCDEFabcdef" + std::string(42, 'F');
  EXPECT_EQ(NormalizeSha256Hex(upper), lower);
  EXPECT_EQ(NormalizeSha256Hex(mixed), "0123456789abcdefabcdef" + std::string(42, 'f'));
  EXPECT_EQ(NormalizeSha256Hex(lower), lower);
  // Not a SHA-256: left for the server to judge.
  EXPECT_EQ(NormalizeSha256Hex(std::string(63, 'A')), std::string(63, 'A'));
  EXPECT_EQ(NormalizeSha256Hex("EVAL"), "EVAL");
  EXPECT_EQ(NormalizeSha256Hex(std::string(64, 'G')), std::string(64, 'G'));
}

TEST(NormalizeSha256Test, DatasetReferences) {
  const std::string lower(64, 'c'), upper(64, 'C');
  EXPECT_EQ(NormalizeDatasetRef("sha256:" + upper), "sha256:" + lower);
  EXPECT_EQ(NormalizeDatasetRef("SHA256:" + upper), "sha256:" + lower);
  EXPECT_EQ(NormalizeDatasetRef("sha256:" + lower), "sha256:" + lower);
  EXPECT_EQ(NormalizeDatasetRef("Eval-Set"), "Eval-Set");
  EXPECT_EQ(NormalizeDatasetRef("sha256:XYZ"), "sha256:XYZ");
  EXPECT_EQ(NormalizeDatasetRef("sha256"), "sha256");
}

TEST(CheckStringFieldsTest, NamesTheFirstNonUtf8TextField) {
  v1::SubmitAuditRequest request;
  request.mutable_spec()->add_models("fg-a");
  request.mutable_spec()->set_label("ok ünï");
  EXPECT_TRUE(CheckStringFieldsAreUtf8(request).ok());
  request.mutable_spec()->set_label("bad\xff");
  absl::Status st = CheckStringFieldsAreUtf8(request);
  EXPECT_TRUE(IsUsageError(st)) << st;
  EXPECT_EQ(ExitCodeForStatus(st), kExitUsage);
  EXPECT_THAT(std::string(st.message()), HasSubstr("spec.label is not valid UTF-8"));
  request.mutable_spec()->set_label("");
  request.mutable_spec()->add_models("\xc0\xaf");
  st = CheckStringFieldsAreUtf8(request);
  EXPECT_THAT(std::string(st.message()), HasSubstr("spec.models is not valid UTF-8"));
  // `bytes` fields carry any bytes.
  v1::TokenizeRequest tokenize;
  tokenize.set_model("fg-a");
  tokenize.set_text("\xff\xfe");
  EXPECT_TRUE(CheckStringFieldsAreUtf8(tokenize).ok());
}

}  // namespace
}  // namespace fca::client
