// End to end over the other model kinds: the tiny MUDDPythia reference
// checkpoint (single file and sharded) audited through the real server and
// CLI, and a model folder with a GPT-NeoX tokenizer.json, whose tokenizer the
// server uses for `fca tokenize` and for text datasets.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

const std::string kData = FCA_TEST_DATA_DIR;

class ModelsE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "fca_models_e2e_" + std::to_string(getpid()));
    const fs::path models = fs::path(*root_) / "models";
    fs::create_directories(models / "mudd-tiny");
    const fs::path tiny = fs::path(kData) / "muddpythia-tiny-fp32";
    fs::copy_file(tiny / "config.json", models / "mudd-tiny" / "config.json");
    fs::copy_file(tiny / "model.safetensors", models / "mudd-tiny" / "model.safetensors");
    fs::copy(tiny / "sharded", models / "mudd-sharded");
    // A small FeatureGate model with the GPT-NeoX vocabulary and tokenizer.
    CommandResult init =
        InitTinyModel(FCA_LOCAL_AUDIT_BIN, (models / "bpe-fg").string(),
                      {"--vocab_size=50304", "--seed=3", "--controller_out_std=1.0"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    // A dense model ignores the tiny shape's gate groups and controller width.
    CommandResult dense =
        InitTinyModel(FCA_LOCAL_AUDIT_BIN, (models / "dense-byte").string(), {"--family=dense"});
    ASSERT_EQ(dense.exit_code, 0) << dense.err;
    fs::copy_file(fs::path(kData) / "tokenizer" / "tokenizer.json",
                  models / "bpe-fg" / "tokenizer.json");
    // The bundled size pair that is no matched twin (width 320 against 96).
    for (const char* name : {"featuregate-large", "dense-small"}) {
      const fs::path bundled = fs::path(FCA_SOURCE_DIR) / "models" / name;
      fs::create_directories(models / name);
      for (const char* file : {"config.json", "model.safetensors"}) {
        fs::copy_file(bundled / file, models / name / file);
      }
    }
    for (const char* name : {"eval", "calib"}) {
      std::ofstream(fs::path(*root_) / (std::string(name) + ".txt"))
          << RandomWords(3000, name[0] == 'e' ? 11 : 12);
    }
    server_ = e2e::StartServer(FCA_SERVER_BIN,
                               {"--models=" + models.string(), "--db=" + *root_ + "/fca.sqlite"})
                  .release();
  }

  static void TearDownTestSuite() {
    delete server_;
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
  }

  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static CommandResult Fca(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), FCA_CLI_BIN);
    env.push_back("FCA_SERVER=" + server_->address());
    return e2e::Run(args, env, 300);
  }

  // `fca tokenize --model=M [--json]` with `text` on stdin.
  static CommandResult Tokenize(const std::string& model, const std::string& text, bool json) {
    return e2e::Run(
        {"/bin/sh", "-c", "printf '%s' \"$FCA_TEXT\" | \"$0\" tokenize --model=\"$1\" $2",
         FCA_CLI_BIN, model, json ? "--json" : ""},
        {"FCA_SERVER=" + server_->address(), "FCA_TEXT=" + text});
  }

  static void Upload(const std::string& name) {
    CommandResult r = Fca({"datasets", "upload", "--name=" + name, *root_ + "/" + name + ".txt"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // Submits with --detach, then watches the job to its end; the job id, or
  // -1 (with a test failure).
  static int AuditAndWatch(std::vector<std::string> args) {
    args.insert(args.begin(), "audit");
    args.push_back("--detach");
    CommandResult submit = Fca(args);
    EXPECT_EQ(submit.exit_code, 0) << submit.err;
    if (submit.exit_code != 0) return -1;
    const int job = std::stoi(submit.out);
    CommandResult watch = Fca({"watch", std::to_string(job)});
    EXPECT_EQ(watch.exit_code, 0) << watch.out << watch.err;
    return watch.exit_code == 0 ? job : -1;
  }

  // Rows of a job as parsed JSON (`fca results --format=json`).
  static json::Value Results(int job) {
    CommandResult r = Fca({"results", "--job=" + std::to_string(job), "--format=json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto v = json::Parse(r.out);
    EXPECT_TRUE(v.ok()) << r.out;
    return v.ok() ? *v : json::Value::MakeArray();
  }

  static const json::Value* Row(const json::Value& rows, const std::string& model,
                                const std::string& intervention, const std::string& metric) {
    for (const json::Value& r : rows.as_array()) {
      if (r.Find("model")->as_string() == model &&
          r.Find("intervention")->as_string() == intervention &&
          r.Find("metric")->as_string() == metric) {
        return &r;
      }
    }
    return nullptr;
  }

  static std::string* root_;
  static ServerProcess* server_;
};

std::string* ModelsE2ETest::root_ = nullptr;
ServerProcess* ModelsE2ETest::server_ = nullptr;

TEST_F(ModelsE2ETest, ListsMuddPythiaAndTheBpeModel) {
  CommandResult r = Fca({"models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mudd-tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("muddpythia"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mudd-sharded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bpe-fg"), std::string::npos) << r.out;
}

TEST_F(ModelsE2ETest, TokenizeMatchesTheReferenceCases) {
  std::istringstream cases(ReadFileOrEmpty(fs::path(kData) / "tokenizer" / "cases.jsonl"));
  std::string line;
  int checked = 0;
  while (std::getline(cases, line) && checked < 12) {
    auto c = json::Parse(line);
    ASSERT_TRUE(c.ok());
    const std::string text = c->Find("text")->as_string();
    // printf '%s' cannot pass a NUL byte; the environment cannot hold one.
    if (text.find('\0') != std::string::npos) continue;
    CommandResult r = Tokenize("bpe-fg", text, /*json=*/true);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto got = json::Parse(r.out);
    ASSERT_TRUE(got.ok()) << r.out;
    EXPECT_EQ(got->Find("tokenizer")->as_string(), "bpe");
    EXPECT_EQ(got->Find("vocab_size")->as_int(), 50277);
    std::vector<int64_t> want, have;
    for (const json::Value& id : c->Find("ids")->as_array()) want.push_back(id.as_int());
    for (const json::Value& id : got->Find("ids")->as_array()) have.push_back(id.as_int());
    EXPECT_EQ(have, want) << "text: " << text;
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

TEST_F(ModelsE2ETest, TokenizePlainAndErrors) {
  CommandResult r = Tokenize("mudd-tiny", "Hi!", /*json=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "72 105 33\n");  // no tokenizer.json: one id per byte
  EXPECT_NE(r.err.find("byte"), std::string::npos) << r.err;
  EXPECT_EQ(Tokenize("no-such-model", "x", false).exit_code, 4);  // NOT_FOUND
  EXPECT_EQ(Fca({"tokenize"}).exit_code, 2);                      // --model missing
  // Not UTF-8: the BPE tokenizer refuses it (INVALID_ARGUMENT) and the
  // server keeps serving.
  CommandResult bad = Tokenize("bpe-fg", "ok \xff\xfe", false);
  EXPECT_EQ(bad.exit_code, 3) << bad.err;
  EXPECT_NE(bad.err.find("UTF-8"), std::string::npos) << bad.err;
  EXPECT_EQ(Fca({"models"}).exit_code, 0);
}

// Every intervention on the reference MUDDPythia, single-file and sharded
// (the same weights, so the same numbers), with text fed through the byte
// tokenizer.
TEST_F(ModelsE2ETest, AuditsMuddPythiaThroughServerAndCli) {
  Upload("eval");
  Upload("calib");
  const int job = AuditAndWatch({"--models=mudd-tiny,mudd-sharded", "--eval=eval", "--calib=calib",
                                 "--window=16", "--max_eval_windows=12", "--max_calib_windows=12",
                                 "--timing_repeats=1"});
  ASSERT_GT(job, 0);
  const json::Value rows = Results(job);
  for (const char* m : {"mudd-tiny", "mudd-sharded"}) {
    SCOPED_TRACE(m);
    const json::Value* live = Row(rows, m, "replay", "live_nll");
    const json::Value* correct = Row(rows, m, "correct", "nll");
    ASSERT_TRUE(live && correct);
    EXPECT_NEAR(live->Find("value")->as_double(), correct->Find("value")->as_double(), 1e-6);
    for (const char* i :
         {"cross_input", "token_shuffle", "static_layer", "static_layer_position", "global_mean"}) {
      EXPECT_NE(Row(rows, m, i, "penalty"), nullptr) << i;
    }
    for (const char* family : {"q", "k", "v", "r", "out"}) {
      EXPECT_NE(Row(rows, m, "variation", std::string("eta2.") + family), nullptr) << family;
    }
    const json::Value* fraction = Row(rows, m, "execution", "blocks_executed_fraction");
    ASSERT_NE(fraction, nullptr);
    EXPECT_EQ(fraction->Find("value")->as_double(), 1.0);
  }
  const json::Value* single = Row(rows, "mudd-tiny", "cross_input", "penalty");
  const json::Value* sharded = Row(rows, "mudd-sharded", "cross_input", "penalty");
  ASSERT_TRUE(single && sharded);
  EXPECT_EQ(single->Find("value")->as_double(), sharded->Find("value")->as_double());
  CommandResult report = Fca({"report", std::to_string(job)});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("eta2"), std::string::npos);
}

// Per-group dependence from the CLI's flags to stored rows and the report,
// and a bad scope refused before a job exists.
TEST_F(ModelsE2ETest, PerFamilyDependenceOfMuddPythia) {
  Upload("eval");
  Upload("calib");
  CommandResult bad = Fca({"audit", "--models=mudd-tiny", "--eval=eval", "--calib=calib",
                           "--per_layer=neutral", "--per_layer_scope=block"});
  EXPECT_EQ(bad.exit_code, 3) << bad.err;  // INVALID_ARGUMENT
  EXPECT_NE(bad.err.find("block"), std::string::npos) << bad.err;
  const int job =
      AuditAndWatch({"--models=mudd-tiny", "--eval=eval", "--calib=calib", "--window=16",
                     "--max_eval_windows=8", "--max_calib_windows=8", "--interventions=neutral",
                     "--per_layer=neutral", "--per_layer_scope=family", "--timing_repeats=0"});
  ASSERT_GT(job, 0);
  const json::Value rows = Results(job);
  for (const char* family : {"q", "k", "v", "r", "out"}) {
    EXPECT_NE(Row(rows, "mudd-tiny", "neutral", std::string("family_penalty.") + family), nullptr)
        << family;
  }
  CommandResult report = Fca({"report", std::to_string(job)});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("PER-GROUP DEPENDENCE"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("family out"), std::string::npos) << report.out;
}

// A text dataset audited on the BPE model is tokenized by the server with
// that model's tokenizer: the window count follows the BPE token count that
// `fca tokenize` reports, not the byte count.
TEST_F(ModelsE2ETest, TextDatasetsUseTheModelsTokenizer) {
  Upload("eval");
  Upload("calib");
  const std::string eval = ReadFileOrEmpty(*root_ + "/eval.txt");
  CommandResult tok = Tokenize("bpe-fg", eval, /*json=*/true);
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  auto parsed = json::Parse(tok.out);
  ASSERT_TRUE(parsed.ok()) << tok.out;
  const int64_t tokens = static_cast<int64_t>(parsed->Find("ids")->as_array().size());
  ASSERT_LT(tokens, static_cast<int64_t>(eval.size()) / 2);  // BPE, not bytes
  const int job = AuditAndWatch({"--models=bpe-fg", "--eval=eval", "--calib=calib", "--window=32",
                                 "--interventions=cross_input", "--timing_repeats=0"});
  ASSERT_GT(job, 0);
  const json::Value rows = Results(job);
  const json::Value* live = Row(rows, "bpe-fg", "replay", "live_nll");
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(std::stoll(live->Find("n")->as_string()), tokens / 32);
}

// A dense twin reading bytes cannot time or compare a model reading BPE
// tokens: the job is refused before it is queued.
TEST_F(ModelsE2ETest, ModelsOfOneJobMustShareATokenizer) {
  Upload("eval");
  Upload("calib");
  CommandResult r = Fca({"audit", "--models=bpe-fg", "--dense_twin=dense-byte", "--eval=eval",
                         "--calib=calib", "--window=32", "--detach"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;  // INVALID_ARGUMENT
  EXPECT_NE(r.err.find("share a tokenizer"), std::string::npos) << r.err;
}

// docs/fca.md "A matched twin": SubmitAudit refuses the bundled large
// FeatureGate model against the small dense twin, naming what differs, from
// the folders' configs; with a reason the job runs and its report prints it.
TEST_F(ModelsE2ETest, AMismatchedDenseTwinIsRefusedUnlessTheSpecSaysWhy) {
  Upload("eval");
  Upload("calib");
  const std::vector<std::string> audit = {"--models=featuregate-large",
                                          "--dense_twin=dense-small",
                                          "--eval=eval",
                                          "--calib=calib",
                                          "--window=32",
                                          "--max_eval_windows=4",
                                          "--max_calib_windows=4",
                                          "--interventions=global_mean",
                                          "--timing_repeats=0"};
  std::vector<std::string> refused = {"audit"};
  refused.insert(refused.end(), audit.begin(), audit.end());
  refused.push_back("--detach");
  CommandResult r = Fca(refused);
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;  // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("width 320 vs 96, heads 5 vs 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dense_twin_mismatch"), std::string::npos) << r.err;

  std::vector<std::string> allowed = audit;
  allowed.push_back("--dense_twin_mismatch=one small twin for every size");
  const int job = AuditAndWatch(allowed);
  ASSERT_GT(job, 0);
  CommandResult report = Fca({"report", std::to_string(job)});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  std::string text = report.out;
  std::replace(text.begin(), text.end(), '\n', ' ');  // the note is wrapped at spaces
  EXPECT_NE(text.find("dense_twin_mismatch: one small twin for every size"), std::string::npos)
      << report.out;
}

}  // namespace
}  // namespace fca::e2e
