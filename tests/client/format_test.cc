// Tables, CSV and JSON output of `fca` (client/format.h).
#include "client/format.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "common/json.h"
#include "common/proto_json.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Result MakeResult(const std::string& model, const std::string& metric, double value) {
  v1::Result r;
  r.set_job_id(7);
  r.set_model(model);
  r.set_weights_sha256("abcdef0123456789");
  r.set_dataset_sha256("5555");
  r.set_intervention("cross_input");
  r.set_metric(metric);
  r.set_value(value);
  r.set_defined(true);
  r.set_n(64);
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(CsvFieldTest, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\rhere"), "\"cr\rhere\"");
}

TEST(ResultsCsvTest, HeaderQuotingUndefinedAndCi) {
  v1::Result tricky = MakeResult("fg,\"76m\"\nseed1", "nll", 3.25);
  tricky.set_ci_low(3.125);
  tricky.set_ci_high(3.5);
  tricky.mutable_created_at()->set_seconds(1714564800);  // 2024-05-01T12:00Z
  v1::Result undefined = MakeResult("fg", "retention_pct", 123);
  undefined.set_defined(false);

  const std::string csv = FormatResultsCsv({tricky, undefined});
  EXPECT_EQ(csv,
            "job_id,model,weights_sha256,dataset_sha256,intervention,metric,"
            "value,defined,ci_low,ci_high,n,created_at\n"
            "7,\"fg,\"\"76m\"\"\nseed1\",abcdef0123456789,5555,cross_input,"
            "nll,3.25,true,3.125,3.5,64,2024-05-01T12:00:00Z\n"
            "7,fg,abcdef0123456789,5555,cross_input,retention_pct,,false,,,64,"
            "\n");
}

TEST(ResultsCsvTest, NumbersRoundTripExactly) {
  v1::Result r = MakeResult("m", "penalty", 0.1 + 0.2);
  const std::string csv = FormatResultsCsv({r});
  EXPECT_THAT(csv, HasSubstr(",0.30000000000000004,"));
}

TEST(ShortestDoubleTest, ShortestThatReadsBack) {
  EXPECT_EQ(ShortestDouble(0.1), "0.1");
  EXPECT_EQ(ShortestDouble(3.0), "3");
  EXPECT_EQ(ShortestDouble(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(ShortestDouble(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(std::stod(ShortestDouble(98.7000000001)), 98.7000000001);
}

TEST(ResultsTableTest, AlignedWithUndefinedAndCi) {
  v1::Result a = MakeResult("fg-76m-s1", "penalty", 0.0123456789);
  a.set_ci_low(0.01);
  a.set_ci_high(0.015);
  v1::Result b = MakeResult("fg", "retention_pct", 0);
  b.set_defined(false);
  b.set_intervention("static_layer");

  const auto lines = Lines(FormatResultsTable({a, b}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "JOB  MODEL      INTERVENTION  METRIC             VALUE  CI"
            "              N");
  EXPECT_EQ(lines[1],
            "  7  fg-76m-s1  cross_input   penalty        0.0123457  "
            "[0.01, 0.015]  64");
  EXPECT_EQ(lines[2],
            "  7  fg         static_layer  retention_pct  undefined  -"
            "              64");
}

// The table words a verdict as the report does; CSV keeps the number.
TEST(ResultsTableTest, VerdictsInWords) {
  std::vector<v1::Result> rows;
  for (double verdict : {1.0, -1.0, 0.0}) {
    v1::Result r = MakeResult("fg", "slowdown_verdict", verdict);
    r.set_intervention("execution");
    rows.push_back(r);
  }
  const auto lines = Lines(FormatResultsTable(rows));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[1], HasSubstr("  slower  "));
  EXPECT_THAT(lines[2], HasSubstr("  faster  "));
  EXPECT_THAT(lines[3], HasSubstr("  no detectable difference  "));
  const auto csv = Lines(FormatResultsCsv(rows));
  EXPECT_THAT(csv[1], HasSubstr(",slowdown_verdict,1,true,"));
  EXPECT_THAT(csv[2], HasSubstr(",slowdown_verdict,-1,true,"));
}

TEST(ResultsJsonTest, ArrayOfCanonicalJsonOnePerLine) {
  v1::Result a = MakeResult("m", "nll", 3.5);
  a.set_ci_low(3.25);
  a.set_ci_high(3.75);
  v1::Result b = MakeResult("m", "retention_pct", 0);
  b.set_defined(false);
  const std::string json = FormatResultsJson({a, b});
  const auto lines = Lines(json);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "[");
  EXPECT_EQ(lines[3], "]");
  // fca's one JSON (common/proto_json.h): proto names, int64 as strings.
  EXPECT_THAT(lines[1], HasSubstr("\"job_id\":\"7\""));
  EXPECT_THAT(lines[1], HasSubstr("\"ci_low\":3.25"));
  EXPECT_THAT(lines[1], Not(HasSubstr("jobId")));
  EXPECT_EQ(lines[1].back(), ',');
  // Defaults are printed: a script must see defined=false explicitly.
  EXPECT_THAT(lines[2], HasSubstr("\"defined\":false"));
  EXPECT_THAT(lines[2], HasSubstr("\"value\":0"));

  // Each element parses back to the same message.
  v1::Result parsed;
  std::string element = lines[1].substr(0, lines[1].size() - 1);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(element, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), a.SerializeAsString());
}

TEST(TextTableTest, WideTableSplitsIntoPartsRepeatingTheKeyColumns) {
  TextTable t({{"GROUP"}, {"NAME"}, {"A", TextTable::Align::kRight}, {"B"}, {"C"}});
  t.set_key_columns(2);
  t.AddRow({"g", "x", "1", std::string(10, 'b'), std::string(10, 'c')});
  EXPECT_EQ(t.Render(), "GROUP  NAME  A  B           C\ng      x     1  bbbbbbbbbb  cccccccccc\n");
  // 26 columns: GROUP NAME A B in the first part, GROUP NAME C below.
  EXPECT_EQ(t.Render(26),
            "GROUP  NAME  A  B\ng      x     1  bbbbbbbbbb\n\nGROUP  NAME  C\n"
            "g      x     cccccccccc\n");
  // A column too wide for any part still gets one of its own.
  EXPECT_EQ(t.Render(5),
            "GROUP  NAME  A\ng      x     1\n\nGROUP  NAME  B\ng      x     bbbbbbbbbb\n"
            "\nGROUP  NAME  C\ng      x     cccccccccc\n");
}

// jobs show, info and admin log within 100 columns: a long line goes on
// under its last field; a word wider than a line is cut; short lines and
// width 0 (--wide) are left as they are.
TEST(FitToWidthTest, BreaksUnderTheLastFieldAndCutsWordsWiderThanALine) {
  EXPECT_EQ(FitToWidth("short\nline\n", 10), "short\nline\n");
  EXPECT_EQ(FitToWidth("key:  aaa bbb ccc", 12), "key:  aaa\n      bbb\n      ccc");
  EXPECT_EQ(FitToWidth("key:  aaa bbb ccc", 0), "key:  aaa bbb ccc");
  const std::string ys(30, 'y');
  // A word wider than any line fills the line and goes on below, cut after
  // its last comma that fits, else where the line ends.
  EXPECT_EQ(FitToWidth("  x " + ys, 20),
            "  x " + std::string(16, 'y') + "\n    " + std::string(14, 'y'));
  EXPECT_EQ(FitToWidth("k: a,b,c,d,e,f", 8), "k: a,b,\n  c,d,e,\n  f");
  // Columns are code points: "é" is one, and is never cut in two.
  std::string accents;
  for (int i = 0; i < 30; ++i) accents += "\xc3\xa9";
  const std::string fitted = FitToWidth("ab " + accents, 20);
  for (absl::string_view line : absl::StrSplit(fitted, '\n')) {
    size_t columns = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 20u) << line;
    EXPECT_EQ(json::ToValidUtf8(std::string(line)), std::string(line));
  }
  EXPECT_EQ(absl::StrReplaceAll(fitted, {{"\n", ""}, {" ", ""}}), "ab" + accents);
}

TEST(WrapTextTest, BreaksLongLinesAtSpaces) {
  EXPECT_EQ(WrapText("one two three", 0), "one two three");
  EXPECT_EQ(WrapText("one two three", 7), "one two\nthree");
  EXPECT_EQ(WrapText("a ± b ± c\nshort", 5), "a ± b\n± c\nshort");  // ± is one column
  EXPECT_EQ(WrapText("abcdefghij x", 4), "abcdefghij\nx");          // a long word stays whole
  EXPECT_EQ(WrapText("a  b c d", 6), "a  b c\nd");                  // runs of spaces kept
}

TEST(ResultsJsonTest, EmptyIsEmptyArray) { EXPECT_EQ(FormatResultsJson({}), "[]\n"); }

TEST(ResultFormatTest, ParsesNamesAndRejectsOthersAsUsage) {
  EXPECT_EQ(*ParseResultFormat("csv"), ResultFormat::kCsv);
  EXPECT_EQ(*ParseResultFormat("json"), ResultFormat::kJson);
  EXPECT_EQ(*ParseResultFormat("table"), ResultFormat::kTable);
  auto bad = ParseResultFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(IsUsageError(bad.status()));
}

TEST(FormatCiTest, NeedsBothBounds) {
  v1::Result r;
  EXPECT_EQ(FormatCi(r), "-");
  r.set_ci_low(-0.5);
  EXPECT_EQ(FormatCi(r), "-");
  r.set_ci_high(1.25);
  EXPECT_EQ(FormatCi(r), "[-0.5, 1.25]");
}

TEST(HumanTest, CountsAndBytes) {
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(76214528), "76.2M");
  EXPECT_EQ(HumanCount(504000000), "504.0M");
  EXPECT_EQ(HumanCount(1200000000), "1.2B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(3 << 20), "3.0 MiB");
}

TEST(TimestampTest, FormatAndParseRfc3339) {
  google::protobuf::Timestamp unset;
  EXPECT_EQ(FormatTimestamp(unset), "-");
  auto ts = ParseRfc3339("2024-05-01T12:00:03.25+02:00");
  ASSERT_TRUE(ts.ok()) << ts.status();
  EXPECT_EQ(ts->seconds(), 1714557603);
  EXPECT_EQ(ts->nanos(), 250000000);
  EXPECT_EQ(FormatTimestamp(*ts), "2024-05-01T10:00:03Z");
  auto bad = ParseRfc3339("yesterday");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(IsUsageError(bad.status()));
}

TEST(EnumNamesTest, JobStatesAndKinds) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(*ParseJobState("Cancelled"), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(*ParseJobState("queued"), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(*ParseJobState("JOB_STATE_SUCCEEDED"), v1::JOB_STATE_SUCCEEDED);  // both spellings
  EXPECT_EQ(*ParseJobState("job_state_failed"), v1::JOB_STATE_FAILED);
  EXPECT_FALSE(ParseJobState("unspecified").ok());
  EXPECT_FALSE(ParseJobState("JOB_STATE_UNSPECIFIED").ok());
  EXPECT_FALSE(ParseJobState("done").ok());
  EXPECT_FALSE(ParseJobState("").ok());
  EXPECT_EQ(*ParseDatasetKind("tokens"), v1::DATASET_KIND_TOKENS_INT32);
  EXPECT_FALSE(ParseDatasetKind("int32").ok());
  EXPECT_EQ(DatasetKindName(v1::DATASET_KIND_TEXT), "text");
}

// The one rule (common/proto_json.h): the enum type's name in UPPER_SNAKE_CASE
// and "_" is stripped, for every enum of the API.
TEST(EnumNamesTest, ShortNamesStripTheTypesPrefixAndBothSpellingsAreFound) {
  EXPECT_EQ(ShortEnumName(*v1::JobState_descriptor()->FindValueByNumber(v1::JOB_STATE_SUCCEEDED)),
            "SUCCEEDED");
  EXPECT_EQ(ShortEnumName(*v1::ProjectRole_descriptor()->FindValueByNumber(v1::PROJECT_ROLE_OWNER)),
            "OWNER");
  EXPECT_EQ(ShortEnumName(
                *v1::DatasetKind_descriptor()->FindValueByNumber(v1::DATASET_KIND_TOKENS_INT32)),
            "TOKENS_INT32");
  EXPECT_EQ(ShortEnumName(*v1::WebhookDeliveryState_descriptor()->FindValueByNumber(
                v1::WEBHOOK_DELIVERY_STATE_DELIVERED)),
            "DELIVERED");
  EXPECT_EQ(ShortEnumName(*v1::MetricScope_descriptor()->FindValueByNumber(v1::METRIC_SCOPE_LAYER)),
            "LAYER");
  for (const char* name : {"OWNER", "owner", "PROJECT_ROLE_OWNER", "project_role_owner"}) {
    const auto* value = FindEnumValue(*v1::ProjectRole_descriptor(), name);
    ASSERT_NE(value, nullptr) << name;
    EXPECT_EQ(value->number(), v1::PROJECT_ROLE_OWNER) << name;
  }
  EXPECT_EQ(FindEnumValue(*v1::ProjectRole_descriptor(), "boss"), nullptr);
  EXPECT_EQ(FindEnumValue(*v1::ProjectRole_descriptor(), ""), nullptr);
  EXPECT_EQ(FindEnumValue(*v1::ProjectRole_descriptor(), "JOB_STATE_QUEUED"), nullptr);

  // JSON: printed short (nested, repeated), read back in either spelling.
  v1::ListJobsResponse jobs;
  jobs.add_jobs()->set_state(v1::JOB_STATE_QUEUED);
  v1::JobTask* task = jobs.add_jobs()->add_tasks();
  task->set_state(v1::JOB_STATE_FAILED);
  const std::string json = PrintProtoJsonShortEnums(jobs).value();
  EXPECT_THAT(json, HasSubstr(R"("state":"QUEUED")"));
  EXPECT_THAT(json, HasSubstr(R"("state":"FAILED")"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("JOB_STATE_")));
  v1::ListJobsResponse back;
  ASSERT_TRUE(ParseProtoJson(json, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), jobs.SerializeAsString());
  EXPECT_TRUE(
      ParseProtoJson(R"({"jobs": [{"state": "job_state_running", "tasks": []}]})", &back).ok());
  EXPECT_EQ(back.jobs(0).state(), v1::JOB_STATE_RUNNING);
  // A label that happens to spell an enum value is a string, not an enum.
  v1::Job labelled;
  labelled.mutable_spec()->set_label("JOB_STATE_QUEUED");
  EXPECT_THAT(PrintProtoJsonShortEnums(labelled).value(),
              HasSubstr(R"("label":"JOB_STATE_QUEUED")"));
}

TEST(ListingTest, ModelsTable) {
  v1::Model m;
  m.set_name("fg-76m");
  m.set_family("featuregate");
  m.set_num_parameters(76214528);
  m.set_weights_sha256("0123456789abcdef0123");
  m.add_sites()->set_name("attn_gate.0");
  m.add_sites()->set_name("mlp_gate.0");
  v1::Model dense;
  dense.set_name("dense");
  dense.set_family("dense");
  dense.set_num_parameters(500);
  EXPECT_EQ(FormatModelsTable({m, dense}),
            "NAME    FAMILY       PARAMS  SITES  WEIGHTS\n"
            "fg-76m  featuregate   76.2M      2  0123456789ab\n"
            "dense   dense           500      0\n");
}

// `fca models` lists the folders the server cannot serve apart, each reason
// wrapped to 100 columns; nothing when every folder serves.
TEST(ListingTest, UnavailableModels) {
  EXPECT_EQ(FormatUnavailableModels({}), "");
  v1::UnavailableModel missing;
  missing.set_name("fg-old");
  missing.set_reason("config.json: missing key 'd_model'");
  v1::UnavailableModel unknown;
  unknown.set_name("xl");
  std::string reason = "config.json: model_type 'transformer-xl' is not supported, known:";
  for (int i = 0; i < 12; ++i) reason += " family" + std::to_string(i);
  unknown.set_reason(reason + " \x1b[2J");
  const std::string out = FormatUnavailableModels({missing, unknown});
  const auto lines = Lines(out);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "");
  EXPECT_EQ(lines[1], "Unavailable (the server refused their config.json; fix the folder):");
  EXPECT_EQ(lines[2], "fg-old: config.json: missing key 'd_model'");
  EXPECT_EQ(lines[3].substr(0, 4), "xl: ");
  for (const auto& line : lines) EXPECT_LE(line.size(), kReportWidth) << line;
  EXPECT_EQ(out.find('\x1b'), std::string::npos);  // the terminal's escapes are not passed on
}

TEST(ListingTest, JobsTableAndDetails) {
  v1::Job job;
  job.set_id(12);
  job.set_owner("ana");
  job.set_project("lab");
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_progress(0.5);
  job.mutable_spec()->add_models("a");
  job.mutable_spec()->add_models("b");
  job.mutable_spec()->set_label("seeds");
  job.set_error("FAILED_PRECONDITION: replay is not faithful");
  const auto lines = Lines(FormatJobsTable({job}));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "12  FAILED       50%  ana    lab      -        a,b     seeds");
  const std::string details = FormatJobDetails(job);
  EXPECT_THAT(details, HasSubstr("state:            FAILED\n"));
  EXPECT_THAT(details, HasSubstr("error:            FAILED_PRECONDITION"));
  EXPECT_THAT(details, HasSubstr("\"label\": \"seeds\""));
  EXPECT_THAT(details, ::testing::Not(HasSubstr("tasks:")));
}

TEST(ListingTest, JobDetailsShowEachTaskWithItsWorkerAndPlacement) {
  v1::Job job;
  job.set_id(3);
  job.set_state(v1::JOB_STATE_RUNNING);
  v1::JobTask* a = job.add_tasks();
  a->set_index(0);
  a->set_model("fg_a");
  a->set_state(v1::JOB_STATE_RUNNING);
  a->set_attempts(2);
  a->set_worker("node7:991");
  a->set_placement("slurm job 41 RUNNING");
  a->set_error("its worker stopped renewing its lease (worker node3:17)");
  v1::JobTask* b = job.add_tasks();
  b->set_index(1);
  b->set_model("fg_b");
  b->set_state(v1::JOB_STATE_QUEUED);
  const std::string details = FormatJobDetails(job);
  EXPECT_THAT(details,
              HasSubstr("tasks:\n  0 fg_a                 RUNNING   attempts 2  on node7:991  "
                        "[slurm job 41 RUNNING]\n      its worker stopped renewing"));
  EXPECT_THAT(details, HasSubstr("  1 fg_b                 QUEUED    attempts 0\n"));
}

}  // namespace
TEST(ListingTest, JobDetailsShowProvenance) {
  v1::Job job;
  job.set_id(5);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  v1::Provenance* p = job.mutable_provenance();
  p->set_eval_dataset("eval");
  p->set_eval_sha256("e1");
  p->set_calib_dataset("calib");
  p->set_calib_sha256("c2");
  p->set_server_version("v1-3-gabc");
  p->set_seed(7);
  v1::JobTask* t = job.add_tasks();
  t->set_model("fg_a");
  t->set_state(v1::JOB_STATE_SUCCEEDED);
  v1::TaskProvenance* tp = t->mutable_provenance();
  tp->set_worker("w1@alice");
  tp->set_host("node7");
  tp->set_engine_version("v1-3-gabc");
  tp->set_torch_version("1.13.1");
  tp->set_device("cpu");
  tp->set_dtype("float32");
  tp->set_threads(4);
  tp->set_weights_sha256("ww");
  tp->set_window_length(16);
  tp->set_eval_windows(6);
  tp->set_cached_eval_windows(2);
  tp->set_calib_windows(4);
  tp->set_seed(7);
  tp->set_attempt(1);
  tp->add_interventions("correct");
  tp->add_interventions("cross_input");
  const std::string details = FormatJobDetails(job);
  EXPECT_THAT(details, HasSubstr("ran by w1@alice on node7: engine v1-3-gabc, torch 1.13.1, cpu "
                                 "float32, threads=4\n"));
  EXPECT_THAT(details, HasSubstr("windows T=16: eval 6 (2 cached), calib 4 (0 cached); seed 7"));
  EXPECT_THAT(details, HasSubstr("interventions correct,cross_input"));
  EXPECT_THAT(details, HasSubstr("  eval:           eval (sha256:e1)\n"));
  EXPECT_THAT(details, HasSubstr("  calib:          calib (sha256:c2)\n"));
  EXPECT_THAT(details, HasSubstr("  server_version: v1-3-gabc\n"));
}

// `fca queue`: the totals, then the models, the projects (the unnamed row
// as "(other projects)") and the caller's jobs with their places; `fca
// info` takes the first two lines.
TEST(ListingTest, QueueTables) {
  v1::GetQueueResponse q;
  q.set_queued_jobs(3);
  q.set_running_jobs(1);
  q.set_queued_tasks(4);
  q.set_running_tasks(1);
  v1::ModelQueue* m = q.add_models();
  m->set_model("fg-a");
  m->set_queued_tasks(2);
  m->set_running_tasks(1);
  m->add_loaded_on("local/0");
  m->add_running_on("local/0");
  v1::ProjectQueue* lab = q.add_projects();
  lab->set_project("lab");
  lab->set_queued_jobs(1);
  lab->set_running_jobs(1);
  lab->set_queued_tasks(2);
  lab->set_running_tasks(1);
  v1::ProjectQueue* others = q.add_projects();
  others->set_queued_jobs(2);
  others->set_queued_tasks(2);
  v1::QueuedJob* j = q.add_jobs();
  j->set_job_id(7);
  j->set_project("lab");
  j->set_owner("walt");
  j->set_state(v1::JOB_STATE_QUEUED);
  j->set_position(3);
  j->set_tasks_ahead(2);
  j->set_queued_tasks(1);
  const std::string summary = FormatQueueSummary(q);
  EXPECT_EQ(summary,
            "queue:            3 jobs queued, 1 running (tasks: 4 queued, 1 running)\n"
            "loaded models:    fg-a (on local/0)\n");
  const std::string text = FormatQueue(q);
  EXPECT_EQ(text.substr(0, summary.size()), summary);
  const auto lines = Lines(text.substr(summary.size()));
  ASSERT_EQ(lines.size(), 10u) << text;
  EXPECT_EQ(lines[1], "MODEL  QUEUED  RUNNING  LOADED ON  RUNNING ON");
  EXPECT_EQ(lines[2], "fg-a        2        1  local/0    local/0");
  EXPECT_EQ(lines[5], "lab                         1             1             2              1");
  EXPECT_EQ(lines[6], "(other projects)            2             0             2              0");
  EXPECT_EQ(lines[9], "  7  lab      walt   QUEUED         3            2       1        0");

  v1::GetServerInfoResponse info;
  EXPECT_THAT(FormatServerInfo(info, summary), HasSubstr("\n" + summary));
  // An empty queue shows its totals and no tables.
  EXPECT_EQ(FormatQueue(v1::GetQueueResponse()),
            "queue:            0 jobs queued, 0 running (tasks: 0 queued, 0 running)\n"
            "loaded models:    none\n");
}

}  // namespace fca::client
