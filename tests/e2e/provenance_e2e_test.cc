// End to end, provenance (docs/fca.md "Reproducibility"): an audit run by
// the real fca-server on 127.0.0.1 through the real CLI, its provenance in
// `fca jobs show` (GetJob), report.json and the HTML report, and its stored
// manifest (`fca jobs manifest`, datasets pinned by sha256) rerun to the
// same NLLs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

std::string FileSha256(const std::string& path) {
  const std::string bytes = ReadFileOrEmpty(path);
  Sha256 h;
  h.Update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return h.FinishHex();
}

// A member of a JSON object as text: strings as they are, numbers and
// booleans printed, arrays and objects as JSON; "" when absent or null.
std::string Text(const json::Value& object, const std::string& key) {
  const json::Value* v = object.Find(key);
  if (v == nullptr || v->is_null()) return "";
  if (v->is_string()) return v->as_string();
  if (v->is_array() && v->as_array().empty()) return "";
  return json::Write(*v);
}

class ProvenanceE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_provenance_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"fg-a", {"--seed=1", "--controller_out_std=1.0"}},
             {"dense", {"--family=dense", "--seed=1"}}}) {
      CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, root_ + "/models/" + name, flags);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    std::ofstream(root_ + "/eval.txt") << RandomWords(16 * 40, 1);
    std::ofstream(root_ + "/calib.txt") << RandomWords(16 * 30, 2);
    server_ = e2e::StartServer(FCA_SERVER_BIN,
                               {"--models=" + root_ + "/models", "--db=" + root_ + "/fca.sqlite",
                                "--threads=1", "--http_listen="});
    ASSERT_NE(server_, nullptr);
    for (const char* name : {"eval", "calib"}) {
      CommandResult r =
          Fca({"datasets", "upload", std::string("--name=") + name, root_ + "/" + name + ".txt"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  CommandResult Fca(std::vector<std::string> args) {
    args.insert(args.begin(), {FCA_CLI_BIN, "--server=" + server_->address()});
    return e2e::Run(args, {}, 300);
  }

  json::Value Json(const CommandResult& r) {
    absl::StatusOr<json::Value> v = json::Parse(r.out);
    EXPECT_TRUE(v.ok()) << v.status() << ": " << r.out.substr(0, 300);
    return v.ok() ? *v : json::Value::MakeObject();
  }

  // (model, intervention) -> NLL of a job's stored rows, with each row's
  // dataset hashes checked against the expected ones.
  std::map<std::pair<std::string, std::string>, double> Nlls(const std::string& job) {
    const json::Value rows =
        Json(Fca({"results", "--job=" + job, "--metric=nll", "--format=json"}));
    std::map<std::pair<std::string, std::string>, double> out;
    for (const json::Value& row : rows.as_array()) {
      EXPECT_EQ(Text(row, "dataset_sha256"), eval_sha_);
      EXPECT_EQ(Text(row, "calib_sha256"), calib_sha_);
      out[{Text(row, "model"), Text(row, "intervention")}] = row.Find("value")->as_double();
    }
    return out;
  }

  std::string root_;
  std::unique_ptr<ServerProcess> server_;
  std::string eval_sha_, calib_sha_;
};

TEST_F(ProvenanceE2ETest, StoredManifestRerunsToTheSameNllsAndProvenanceIsEverywhere) {
  eval_sha_ = FileSha256(root_ + "/eval.txt");
  calib_sha_ = FileSha256(root_ + "/calib.txt");
  CommandResult audit =
      Fca({"audit", "--models=fg-a", "--dense_twin=dense", "--eval=eval", "--calib=calib",
           "--window=16", "--batch=4", "--bootstrap=200", "--timing_repeats=2", "--seed=5"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;

  // GetJob, as `fca jobs show` prints it.
  CommandResult show = Fca({"jobs", "show", "1"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  for (const std::string& needle :
       {std::string("provenance:"), std::string("ran by local/0 on "), "sha256:" + eval_sha_,
        "sha256:" + calib_sha_, std::string("cpu float32"), std::string("cpu float32, threads=1"),
        std::string("windows T=16: eval 40 (0 cached), calib 30 (0 cached); seed 5"),
        std::string("server_version: ")}) {
    EXPECT_NE(show.out.find(needle), std::string::npos) << needle << " in\n" << show.out;
  }

  // The stored job as a manifest, datasets pinned by content.
  const std::string manifest = root_ + "/rerun.json";
  CommandResult saved = Fca({"jobs", "manifest", "1", "--out=" + manifest});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  absl::StatusOr<json::Value> spec = json::Parse(ReadFileOrEmpty(manifest));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Text(*spec, "eval_dataset"), "sha256:" + eval_sha_);
  EXPECT_EQ(Text(*spec, "calib_dataset"), "sha256:" + calib_sha_);
  EXPECT_EQ(Text(*spec, "seed"), "5");  // uint64 in proto3 JSON: a string
  EXPECT_EQ(Text(*spec, "window_length"), "16");
  CommandResult printed = Fca({"jobs", "manifest", "1"});
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(printed.out, ReadFileOrEmpty(manifest));
  EXPECT_EQ(Fca({"jobs", "manifest", "99"}).exit_code, Fca({"jobs", "show", "99"}).exit_code);

  // Rerun: the same NLLs, every row traceable to the same datasets.
  CommandResult rerun = Fca({"audit", "--manifest=" + manifest});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  const auto first = Nlls("1"), second = Nlls("2");
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, second);

  // report.json (the GetReport message): every field of docs/fca.md
  // "Reproducibility" present and non-empty.
  const std::string report_json = root_ + "/report.json", report_html = root_ + "/report.html";
  CommandResult report =
      Fca({"report", "1", "--save_json=" + report_json, "--save_html=" + report_html});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("PROVENANCE"), std::string::npos) << report.out;
  absl::StatusOr<json::Value> parsed = json::Parse(ReadFileOrEmpty(report_json));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const json::Value* report_job = parsed->Find("job");
  ASSERT_NE(report_job, nullptr);
  const json::Value* job = report_job->Find("provenance");
  ASSERT_NE(job, nullptr);
  for (const char* key :
       {"eval_dataset", "eval_sha256", "calib_dataset", "calib_sha256", "server_version", "seed"}) {
    EXPECT_NE(Text(*job, key), "") << "job.provenance." << key;
  }
  EXPECT_EQ(Text(*job, "eval_sha256"), eval_sha_);
  EXPECT_EQ(Text(*job, "calib_sha256"), calib_sha_);
  const json::Value* job_spec = report_job->Find("spec");
  ASSERT_NE(job_spec, nullptr);
  EXPECT_EQ(Text(*job_spec, "window_length"), "16");
  EXPECT_EQ(Text(*job_spec, "ci_level"), "0.95");  // defaults applied
  const json::Value* tasks = report_job->Find("tasks");
  ASSERT_NE(tasks, nullptr);
  ASSERT_EQ(tasks->as_array().size(), 1u);
  const json::Value* task = tasks->as_array()[0].Find("provenance");
  ASSERT_NE(task, nullptr);
  for (const char* key : {"worker",         "host",
                          "engine_version", "torch_version",
                          "device",         "dtype",
                          "threads",        "weights_sha256",
                          "dense_twin",     "dense_twin_weights_sha256",
                          "eval_sha256",    "calib_sha256",
                          "window_length",  "eval_windows",
                          "calib_windows",  "seed",
                          "interventions",  "options_json",
                          "attempt",        "started_at",
                          "finished_at"}) {
    EXPECT_NE(Text(*task, key), "") << "job.tasks[0].provenance." << key;
  }
  EXPECT_EQ(Text(*task, "engine_version"), Text(*job, "server_version"));
  EXPECT_EQ(Text(*task, "eval_windows"), "40");  // int64 in proto3 JSON: a string
  EXPECT_EQ(Text(*task, "window_length"), "16");
  EXPECT_EQ(Text(*task, "device"), "cpu");
  EXPECT_EQ(Text(*task, "device_name"), "cpu");
  EXPECT_EQ(Text(*task, "dtype"), "float32");

  // The local tool records the same runtime fields, from the same helper.
  const std::string local_json = root_ + "/local.json";
  CommandResult local =
      e2e::Run({FCA_LOCAL_AUDIT_BIN, "audit", "--models=" + root_ + "/models/fg-a",
                "--eval=" + root_ + "/eval.txt", "--calib=" + root_ + "/calib.txt", "--window=16",
                "--max_eval_windows=4", "--max_calib_windows=4", "--batch=4", "--bootstrap=50",
                "--timing_repeats=0", "--threads=1", "--json=" + local_json});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  absl::StatusOr<json::Value> tool = json::Parse(ReadFileOrEmpty(local_json));
  ASSERT_TRUE(tool.ok()) << tool.status();
  for (const char* key : {"engine_version", "torch_version", "host", "threads", "device", "dtype",
                          "eval_dataset_sha256", "calib_dataset_sha256", "options"}) {
    EXPECT_NE(Text(*tool, key), "") << "fca-local-audit --json: " << key;
  }
  EXPECT_EQ(Text(*tool, "engine_version"), Text(*task, "engine_version"));
  EXPECT_EQ(Text(*tool, "host"), Text(*task, "host"));
  EXPECT_EQ(Text(*tool, "threads"), "1");
  EXPECT_EQ(Text(*tool, "device_name"), "cpu");
  EXPECT_EQ(Text(*tool, "eval_dataset_sha256"), eval_sha_);
  const json::Value& tool_model = tool->Find("models")->as_array().at(0);
  EXPECT_EQ(Text(tool_model, "weights_sha256"), Text(*task, "weights_sha256"));
  EXPECT_EQ(Text(tool_model, "cached_eval_windows"), "0");

  // The HTML report shows the same.
  const std::string html = ReadFileOrEmpty(report_html);
  for (const std::string& needle :
       {std::string("<h2>Provenance</h2>"), eval_sha_, calib_sha_, Text(*task, "host"),
        Text(*task, "engine_version"), Text(*task, "weights_sha256")}) {
    EXPECT_NE(html.find(needle), std::string::npos) << needle;
  }
}

}  // namespace
}  // namespace fca::e2e
