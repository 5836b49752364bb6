// End to end: the real fca-server binary on 127.0.0.1, driven by the real
// fca CLI, over tiny models written by fca-local-audit.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/file.h"
#include "common/json.h"
#include "common/random.h"
#include "common/sha256.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

std::string g_root;  // models/, data/, per-test databases

void InitModel(const std::string& name, const std::vector<std::string>& flags) {
  CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, g_root + "/models/" + name, flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// The widest line of `text` in terminal columns (one per UTF-8 code point:
// the CLI prints no wide characters).
size_t MaxLineWidth(const std::string& text) {
  size_t widest = 0, width = 0;
  for (unsigned char ch : text) {
    if (ch == '\n') {
      widest = std::max(widest, width);
      width = 0;
    } else if ((ch & 0xC0) != 0x80) {
      ++width;
    }
  }
  return std::max(widest, width);
}

class E2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = ::testing::TempDir() + "fca_e2e_" + std::to_string(getpid());
    fs::create_directories(g_root + "/models");
    fs::create_directories(g_root + "/data");
    InitModel("fg-a", {"--seed=1", "--controller_out_std=1.0"});
    InitModel("fg-b", {"--seed=2", "--controller_out_std=1.0"});
    InitModel("dense", {"--family=dense", "--seed=1"});
    // A slower model for jobs that must still be running when interrupted.
    InitModel("fg-wide", {"--seed=3", "--controller_out_std=1.0", "--d_model=256", "--d_ff=1024",
                          "--n_heads=4"});
    fs::create_directories(g_root + "/models/broken");
    WriteFile(g_root + "/models/broken/config.json", "{");
    WriteFile(g_root + "/data/eval.txt", RandomWords(16 * 40, 1));
    WriteFile(g_root + "/data/calib.txt", RandomWords(16 * 30, 2));
    WriteFile(g_root + "/data/long.txt", RandomWords(64 * 200, 3));
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    db_ = g_root + "/" + info->name() + ".sqlite";
  }

  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--models=" + g_root + "/models", "--db=" + db_,
                                     "--threads=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = e2e::StartServer(FCA_SERVER_BIN, args);
    ASSERT_NE(server_, nullptr);
  }

  CommandResult Cli(std::vector<std::string> args, const std::string& token = "") {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address()};
    if (!token.empty()) argv.push_back("--token=" + token);
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  void Upload(const std::string& name, const std::string& file, const std::string& token = "") {
    CommandResult r =
        Cli({"datasets", "upload", "--name=" + name, g_root + "/data/" + file}, token);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // The server still answers after whatever happened.
  void ExpectServing(const std::string& token = "") {
    CommandResult r = Cli({"models"}, token);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("fg-a"), std::string::npos);
  }

  std::vector<std::string> SmallAudit() {
    return {"audit",       "--models=fg-a,fg-b", "--dense_twin=dense",
            "--eval=eval", "--calib=calib",      "--window=16",
            "--batch=4",   "--bootstrap=200",    "--timing_repeats=2",
            "--seed=5"};
  }

  json::Value Results(const std::string& job, const std::string& token = "") {
    CommandResult r = Cli({"results", "--job=" + job, "--format=json"}, token);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto v = json::Parse(r.out);
    EXPECT_TRUE(v.ok()) << v.status() << r.out.substr(0, 200);
    return v.ok() ? *v : json::Value::MakeArray();
  }

  std::string State(const std::string& job) {
    CommandResult r = Cli({"jobs", "show", job});
    const size_t at = r.out.find("state:");
    if (at == std::string::npos) return "?";
    std::string rest = r.out.substr(at + 6);
    rest = rest.substr(rest.find_first_not_of(' '));
    return rest.substr(0, rest.find('\n'));
  }

  std::string db_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(E2ETest, UploadSubmitWatchQuery) {
  StartServer();
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  CommandResult list = Cli({"datasets", "list"});
  EXPECT_NE(list.out.find("calib"), std::string::npos);
  const std::string manifest = g_root + "/manifest.json";
  std::vector<std::string> args = SmallAudit();
  args.push_back("--save_manifest=" + manifest);
  CommandResult audit = Cli(args);
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_NE(audit.out.find("SUCCEEDED"), std::string::npos) << audit.out;
  json::Value rows = Results("1");
  std::set<std::string> models;
  int penalties = 0;
  for (const json::Value& row : rows.as_array()) {
    models.insert(StringField(row, "model"));
    if (StringField(row, "intervention") == "cross_input" &&
        StringField(row, "metric") == "penalty") {
      ++penalties;
      EXPECT_NE(row.Find("ci_low"), nullptr);
    }
  }
  // The dense twin has its execution rows too.
  EXPECT_EQ(models, (std::set<std::string>{"fg-a", "fg-b", "dense"}));
  EXPECT_EQ(penalties, 2);
  CommandResult csv = Cli({"results", "--job=1", "--metric=slowdown", "--format=csv"});
  EXPECT_EQ(csv.exit_code, 0);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 3) << csv.out;  // header + 2
  // The saved manifest reruns the same audit: same NLLs to the last digit,
  // and the second run takes its coefficients from the cache.
  CommandResult rerun = Cli({"audit", "--manifest=" + manifest});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_NE((rerun.out + rerun.err).find("came from the coefficient cache"), std::string::npos);
  CommandResult a = Cli({"results", "--job=1", "--metric=nll", "--format=csv"});
  CommandResult b = Cli({"results", "--job=2", "--metric=nll", "--format=csv"});
  auto strip = [](std::string s) {  // drop job ids and times
    std::string out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> cols;
      std::istringstream ls(line);
      for (std::string c; std::getline(ls, c, ',');) cols.push_back(c);
      for (size_t i = 0; i < cols.size(); ++i) {
        if (i == 0 || cols[i].find('T') != std::string::npos) continue;
        out += cols[i] + ",";
      }
      out += "\n";
    }
    return out;
  };
  EXPECT_EQ(strip(a.out), strip(b.out));
  // Export a cached window: the first evaluation window of fg-a.
  std::string first(16, '\0');
  std::ifstream(g_root + "/data/eval.txt").read(first.data(), 16);
  Sha256 h;
  for (unsigned char c : first) {
    const uint8_t le[4] = {c, 0, 0, 0};
    h.Update(le, 4);
  }
  const std::string out = g_root + "/coeff.bin";
  const std::string first_hash = h.FinishHex();
  CommandResult exp =
      Cli({"export", "--model=fg-a", "--window_hash=" + first_hash, "--out=" + out});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_EQ(fs::file_size(out), 16u * 4 /*sites*/ * 4 /*G*/ * 4 /*float32*/);
  // The same as .npy (NPY format 1.0: magic, version, header length, a dict
  // with dtype and shape [T, every site's channels], data at a multiple of
  // 64), row t holding each site's row t in turn; and as .safetensors.
  const std::string raw = ReadFileOrEmpty(out);
  CommandResult npy =
      Cli({"export", "--model=fg-a", "--window_hash=" + first_hash, "--out=" + g_root + "/c.npy"});
  ASSERT_EQ(npy.exit_code, 0) << npy.err;
  const std::string n = ReadFileOrEmpty(g_root + "/c.npy");
  ASSERT_GT(n.size(), 10u);
  EXPECT_EQ(n.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t start = 10 + (static_cast<uint8_t>(n[8]) | static_cast<uint8_t>(n[9]) << 8);
  EXPECT_EQ(start % 64, 0u);
  EXPECT_NE(n.find("'descr': '<f4', 'fortran_order': False, 'shape': (16, 16)"), std::string::npos)
      << n.substr(0, start);
  ASSERT_EQ(n.size() - start, raw.size());
  for (size_t site = 0; site < 4; ++site) {  // token 0: 4 floats of each site
    EXPECT_EQ(n.substr(start + site * 16, 16), raw.substr(site * 16 * 16, 16)) << site;
  }
  CommandResult st = Cli({"export", "--model=fg-a", "--window_hash=" + first_hash,
                          "--out=" + g_root + "/c.data", "--format=safetensors"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  const std::string s = ReadFileOrEmpty(g_root + "/c.data");
  ASSERT_GT(s.size(), raw.size());
  EXPECT_EQ(s.substr(s.size() - raw.size()), raw);  // the tensors, site by site
  EXPECT_NE(s.find("\"shape\":[16,4]"), std::string::npos) << s.substr(0, 200);

  // The server lists the windows with the hash export takes.
  CommandResult windows = Cli({"windows", "1", "--model=fg-b"});
  ASSERT_EQ(windows.exit_code, 0) << windows.err;
  EXPECT_NE(windows.out.find(first_hash), std::string::npos) << windows.out;
  // The report is the server's, with the range across models.
  CommandResult report = Cli({"report", "1", "--save_json=" + g_root + "/report.json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("mean ± sd (min..max)"), std::string::npos) << report.out;
  // Within 100 terminal columns by default; --wide gives the full tables.
  EXPECT_LE(MaxLineWidth(report.out), 100u) << report.out;
  CommandResult wide_report = Cli({"report", "1", "--wide"});
  ASSERT_EQ(wide_report.exit_code, 0) << wide_report.err;
  EXPECT_GT(MaxLineWidth(wide_report.out), 100u) << wide_report.out;
  CommandResult compare = Cli({"compare", "1", "2"});
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  EXPECT_NE(compare.out.find("PENALTY cross_input"), std::string::npos) << compare.out;
  EXPECT_LE(MaxLineWidth(compare.out), 100u) << compare.out;
  CommandResult wide_compare = Cli({"compare", "1", "2", "--wide"});
  ASSERT_EQ(wide_compare.exit_code, 0) << wide_compare.err;
  EXPECT_GT(MaxLineWidth(wide_compare.out), 100u) << wide_compare.out;
  EXPECT_EQ(Cli({"compare"}).exit_code, 2);  // usage
  CommandResult info = Cli({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("nats/token"), std::string::npos) << info.out;
  CommandResult by_model = Cli({"jobs", "list", "--model=fg-b", "--state=succeeded"});
  ASSERT_EQ(by_model.exit_code, 0) << by_model.err;
  EXPECT_EQ(std::count(by_model.out.begin(), by_model.out.end(), '\n'), 3) << by_model.out;
  CommandResult none = Cli({"jobs", "list", "--label=nothing-has-this"});
  EXPECT_EQ(std::count(none.out.begin(), none.out.end(), '\n'), 1) << none.out;  // header
}

TEST_F(E2ETest, CancelARunningJob) {
  StartServer();
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  CommandResult sub = Cli({"audit", "--detach", "--models=fg-wide", "--eval=long", "--calib=calib",
                           "--window=64", "--batch=2", "--timing_repeats=0"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  ASSERT_TRUE(PollUntil([&] { return State("1") == "RUNNING"; }, 30));
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult cancel = Cli({"jobs", "cancel", "1"});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  CommandResult watch = Cli({"watch", "1"});
  EXPECT_EQ(watch.exit_code, 10) << watch.out << watch.err;  // CANCELLED
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(State("1"), "CANCELLED");
  CommandResult again = Cli({"jobs", "cancel", "1"});
  EXPECT_EQ(again.exit_code, 8) << again.err;  // FAILED_PRECONDITION
  ExpectServing();
}

TEST_F(E2ETest, ResumedWatchMissesNothing) {
  StartServer();
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  std::vector<std::string> args = SmallAudit();
  args.push_back("--detach");
  ASSERT_EQ(Cli(args).exit_code, 0);
  CommandResult full = Cli({"watch", "1"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  // Resuming after event 2 (QUEUED, RUNNING) still brings every result.
  CommandResult rest = Cli({"watch", "1", "--after_seq=2"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(std::count(rest.out.begin(), rest.out.end(), '\n'),
            std::count(full.out.begin(), full.out.end(), '\n'));
  // Resuming after the last event ends at once with the job's state.
  CommandResult none = Cli({"watch", "1", "--after_seq=100000"});
  EXPECT_EQ(none.exit_code, 0) << none.err;
}

// Progress is weighted by each phase's expected time (docs/user-guide.md
// "Progress"), in window-forwards: with E = C = 20 windows, LIVE (20), C
// (20), cross_input's replay (20) and the statistics (0.1 x 20 = 2) weigh 62,
// the timing 4 rows x (3 + 4 x (2 warm-up + 20 repeats)) = 364. So the timing
// starts at 62 / 426 = 14.6% and moves the bar the rest of the way, rather
// than the last few percent.
TEST_F(E2ETest, TimingMovesTheProgressFraction) {
  StartServer();
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  CommandResult audit =
      Cli({"audit", "--models=fg-a", "--dense_twin=dense", "--eval=eval", "--calib=calib",
           "--window=16", "--batch=4", "--max_eval_windows=20", "--max_calib_windows=20",
           "--bootstrap=100", "--interventions=correct,cross_input", "--timing_repeats=20",
           "--timing_max_repeats=20"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  // The watch prints a line at each phase change: "[ 14%] timing model 1/1 ...".
  EXPECT_NE(audit.err.find("[ 14%] timing "), std::string::npos) << audit.err;
  EXPECT_NE(audit.err.find("[100%] done"), std::string::npos) << audit.err;
}

TEST_F(E2ETest, KilledServerFinishesTheJobAfterRestartWithoutDuplicates) {
  StartServer();
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  ASSERT_EQ(Cli({"audit", "--detach", "--models=fg-a,fg-wide", "--eval=long", "--calib=calib",
                 "--window=64", "--batch=2", "--timing_repeats=1", "--bootstrap=100"})
                .exit_code,
            0);
  // Kill it once the first model's results are stored, mid-job.
  ASSERT_TRUE(PollUntil([&] { return Results("1").as_array().size() > 0; }, 60));
  ASSERT_NE(State("1"), "SUCCEEDED");
  server_->Signal(SIGKILL);
  server_->Wait(10);
  StartServer();
  CommandResult watch = Cli({"watch", "1"});
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_EQ(State("1"), "SUCCEEDED");
  json::Value rows = Results("1");
  std::set<std::string> keys;
  for (const json::Value& row : rows.as_array()) {
    keys.insert(StringField(row, "model") + "/" + StringField(row, "intervention") + "/" +
                StringField(row, "metric"));
  }
  EXPECT_EQ(keys.size(), rows.as_array().size());  // no row written twice
  EXPECT_GT(rows.as_array().size(), 40u);
  CommandResult show = Cli({"jobs", "show", "1"});
  EXPECT_NE(show.out.find("attempts:         2"), std::string::npos) << show.out;
}

TEST_F(E2ETest, SigtermDrainsAndTheJobResumes) {
  StartServer();
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  ASSERT_EQ(Cli({"audit", "--detach", "--models=fg-wide", "--eval=long", "--calib=calib",
                 "--window=64", "--batch=2", "--timing_repeats=0", "--bootstrap=100"})
                .exit_code,
            0);
  ASSERT_TRUE(PollUntil([&] { return State("1") == "RUNNING"; }, 30));
  server_->Signal(SIGTERM);
  EXPECT_EQ(server_->Wait(20), 0) << server_->Stderr();
  StartServer();
  CommandResult watch = Cli({"watch", "1"});
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_EQ(State("1"), "SUCCEEDED");
}

TEST_F(E2ETest, AuthSeparatesUsers) {
  const std::string keys = g_root + "/keys.txt";
  WriteFile(keys,
            "# key user role\nalice-key-0123456789 alice user\n"
            "bob-key-0123456789ab bob user\nroot-key-0123456789a root admin\n");
  // fca-server refuses a key file that group or others may read.
  fs::permissions(keys, fs::perms::owner_read | fs::perms::owner_write);
  StartServer({"--auth", "--api_keys=" + keys});
  CommandResult anonymous = Cli({"models"});
  EXPECT_EQ(anonymous.exit_code, 5) << anonymous.err;
  EXPECT_NE(anonymous.err.find("UNAUTHENTICATED"), std::string::npos);
  EXPECT_EQ(Cli({"models"}, "wrong-key-000000000").exit_code, 5);
  const std::string alice = "alice-key-0123456789", bob = "bob-key-0123456789ab";
  Upload("eval", "eval.txt", alice);
  Upload("calib", "calib.txt", alice);
  std::vector<std::string> args = SmallAudit();
  args.push_back("--detach");
  ASSERT_EQ(Cli(args, alice).exit_code, 0);
  EXPECT_EQ(Cli({"jobs", "show", "1"}, bob).exit_code, 4);
  EXPECT_EQ(Cli({"jobs", "cancel", "1"}, bob).exit_code, 4);
  EXPECT_EQ(Cli({"results", "--job=1"}, bob).exit_code, 4);
  // Bob cannot use Alice's datasets by name either.
  EXPECT_EQ(Cli(SmallAudit(), bob).exit_code, 4);
  CommandResult admin = Cli({"jobs", "list"}, "root-key-0123456789a");
  EXPECT_EQ(admin.exit_code, 0);
  EXPECT_NE(admin.out.find("alice"), std::string::npos);
  EXPECT_EQ(Cli({"watch", "1"}, alice).exit_code, 0);
  ExpectServing(bob);
}

TEST_F(E2ETest, BadInputGetsAClearCodeAndTheServerKeepsServing) {
  StartServer({"--max_dataset_bytes=100000", "--max_windows=50", "--max_window_length=512"});
  Upload("eval", "eval.txt");
  Upload("calib", "calib.txt");
  WriteFile(g_root + "/data/big.txt", std::string(150000, 'x'));
  WriteFile(g_root + "/data/odd.bin", std::string(7, 'x'));
  WriteFile(g_root + "/data/bad_manifest.json", "{\"models\": [\"fg-a\"], \"nonsense\": 1}");
  auto audit = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"audit", "--eval=eval", "--calib=calib", "--window=16"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  struct Case {
    std::string what;
    std::vector<std::string> args;
    int code;
    std::string message;
  } cases[] = {
      {"unknown model", audit({"--models=nope"}), 4, "nope"},
      {"model path traversal", audit({"--models=../models"}), 3, "not valid"},
      {"broken model folder", audit({"--models=broken"}), 8, "is unavailable: config.json"},
      {"dense model audited", audit({"--models=dense"}), 3, "no controller"},
      {"featuregate twin", audit({"--models=fg-a", "--dense_twin=fg-b"}), 3, "dense twin"},
      {"unknown dataset",
       {"audit", "--models=fg-a", "--eval=nope", "--calib=calib", "--window=16"},
       4,
       "nope"},
      {"unknown intervention", audit({"--models=fg-a", "--interventions=telepathy"}), 3,
       "telepathy"},
      {"window too long", audit({"--models=fg-a", "--window=100000"}), 3, "512"},
      {"too many windows", audit({"--models=fg-a", "--max_eval_windows=51"}), 3, "50"},
      // Refused at submission (it used to fail the job when it ran).
      {"window longer than the model", audit({"--models=fg-a", "--window=65"}), 3,
       "max_seq_len of model 'fg-a' (64 tokens)"},
      {"overlapping calibration",
       {"audit", "--models=fg-a", "--eval=eval", "--calib=eval", "--window=16"},
       9,
       "share"},
      {"oversized upload",
       {"datasets", "upload", "--name=big", g_root + "/data/big.txt"},
       7,
       "100000"},
      {"bad dataset name",
       {"datasets", "upload", "--name=../etc", g_root + "/data/eval.txt"},
       3,
       "not valid"},
      {"tokens not int32",
       {"datasets", "upload", "--name=odd", "--kind=tokens", g_root + "/data/odd.bin"},
       3,
       "int32"},
      {"unknown job", {"jobs", "show", "999"}, 4, "999"},
      {"cancel unknown job", {"jobs", "cancel", "999"}, 4, "999"},
      {"watch unknown job", {"watch", "999"}, 4, "999"},
      {"malformed manifest",
       {"audit", "--manifest=" + g_root + "/data/bad_manifest.json"},
       2,
       "nonsense"},
  };
  for (const Case& c : cases) {
    CommandResult r = Cli(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.what << ": " << r.out << r.err;
    EXPECT_NE((r.out + r.err).find(c.message), std::string::npos) << c.what << ": " << r.err;
    ExpectServing();
  }
}

TEST_F(E2ETest, TlsFromCertificateFlags) {
  const std::string cert = g_root + "/cert.pem", key = g_root + "/key.pem";
  CommandResult gen =
      e2e::Run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  StartServer({"--tls_cert=" + cert, "--tls_key=" + key});
  CommandResult tls = Cli({"--ca_cert=" + cert, "models"});
  EXPECT_EQ(tls.exit_code, 0) << tls.err;
  EXPECT_NE(tls.out.find("fg-a"), std::string::npos);
  // A plaintext client cannot talk to a TLS server.
  CommandResult plain = Cli({"--timeout=3s", "models"});
  EXPECT_EQ(plain.exit_code, 6) << plain.err;
}

TEST_F(E2ETest, QueuedJobLimitIsResourceExhausted) {
  StartServer({"--max_queued_jobs=1"});
  Upload("long", "long.txt");
  Upload("calib", "calib.txt");
  int exhausted = 0;
  for (int i = 0; i < 3; ++i) {
    CommandResult r = Cli({"audit", "--detach", "--models=fg-wide", "--eval=long", "--calib=calib",
                           "--window=64", "--timing_repeats=0"});
    if (r.exit_code == 7) {
      ++exhausted;
      EXPECT_NE(r.err.find("limit is 1"), std::string::npos) << r.err;
    } else {
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
  }
  EXPECT_GE(exhausted, 1);
  ExpectServing();
}

}  // namespace
}  // namespace fca::e2e
