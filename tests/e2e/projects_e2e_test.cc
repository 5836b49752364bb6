// Issue 23, projects, with the real fca-server and fca CLI and the HTTP
// gateway (curl): an admin creates `lab`; alice (writer) uploads and submits
// a job there; bob (reader) sees it, its results and its report in the CLI
// and over HTTP, and cannot cancel it; carol (no member) gets NOT_FOUND from
// every call that names the job, a dataset of lab or lab itself, with no
// hint that they exist.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/file.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdminKey[] = "admin-key-0123456789";
constexpr char kAliceKey[] = "alice-key-0123456789";
constexpr char kBobKey[] = "bob-key-0123456789ab";
constexpr char kCarolKey[] = "carol-key-0123456789";
constexpr int kExitNotFound = 4;  // client/exit_codes.h
constexpr int kExitAuth = 5;
constexpr int kExitPrecondition = 8;

class ProjectsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_projects_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    fs::create_directories(root_ + "/data");
    CommandResult model = InitTinyModel(FCA_LOCAL_AUDIT_BIN, root_ + "/models/fg",
                                        {"--seed=1", "--controller_out_std=1.0"});
    ASSERT_EQ(model.exit_code, 0) << model.err;
    WriteFile(root_ + "/data/eval.txt", RandomWords(16 * 12, 1));
    WriteFile(root_ + "/data/calib.txt", RandomWords(16 * 8, 2));
    WriteFile(root_ + "/keys", std::string(kAdminKey) + " root admin\n" + kAliceKey +
                                   " alice user\n" + kBobKey + " bob user\n" + kCarolKey +
                                   " carol user\n");
    ASSERT_EQ(chmod((root_ + "/keys").c_str(), 0600), 0);
    std::vector<std::string> args = {"--models=" + root_ + "/models", "--db=" + root_ + "/db",
                                     "--threads=1", "--api_keys=" + root_ + "/keys"};
    args.insert(args.end(), ExtraServerArgs().begin(), ExtraServerArgs().end());
    server_ = e2e::StartServer(FCA_SERVER_BIN, args);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->http_port(), 0);
  }
  virtual const std::vector<std::string>& ExtraServerArgs() const {
    static const std::vector<std::string> none;
    return none;
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(root_);
  }

  CommandResult Cli(const std::string& token, std::vector<std::string> args) const {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address(),
                                     "--token=" + token};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  // POST /api/v1/<method> with a JSON body through curl: the HTTP status,
  // a newline, then the body.
  std::string Http(const std::string& token, const std::string& method,
                   const std::string& body) const {
    CommandResult r = e2e::Run(
        {"/usr/bin/env", "curl", "-s", "-w", "\n%{http_code}", "-H",
         "Authorization: Bearer " + token, "-H", "Content-Type: application/json", "-d", body,
         "http://127.0.0.1:" + std::to_string(server_->http_port()) + "/api/v1/" + method});
    EXPECT_EQ(r.exit_code, 0) << "curl: " << r.err;
    const size_t cut = r.out.rfind('\n');
    return cut == std::string::npos ? r.out : r.out.substr(cut + 1) + "\n" + r.out.substr(0, cut);
  }

  std::string HttpGet(const std::string& token, const std::string& path) const {
    CommandResult r = e2e::Run({"/usr/bin/env", "curl", "-s", "-o", "/dev/null", "-w",
                                "%{http_code}", "-H", "Authorization: Bearer " + token,
                                "http://127.0.0.1:" + std::to_string(server_->http_port()) + path});
    EXPECT_EQ(r.exit_code, 0) << "curl: " << r.err;
    return r.out;
  }

  std::vector<std::string> Audit(const std::string& project) const {
    return {"audit",
            "--detach",
            "--models=fg",
            "--eval=eval",
            "--calib=calib",
            "--window=16",
            "--timing_repeats=0",
            "--bootstrap=50",
            "--batch=4",
            "--project=" + project};
  }

  std::string root_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ProjectsE2ETest, AReaderSeesTheLabsWorkAndAStrangerNothing) {
  // The admin sets up lab; alice writes in it, bob reads it.
  CommandResult created = Cli(kAdminKey, {"projects", "create", "lab"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  ASSERT_EQ(Cli(kAdminKey, {"projects", "add-member", "lab", "alice", "--role=writer"}).exit_code,
            0);
  CommandResult added = Cli(kAdminKey, {"projects", "add-member", "lab", "bob", "--role=reader"});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  EXPECT_THAT(added.out, HasSubstr("bob"));
  EXPECT_THAT(added.err, Not(HasSubstr("warning")));  // bob's key is in the key file
  // dave has no key: added all the same, with a warning on stderr; once a
  // key is stored for him, no warning.
  CommandResult keyless =
      Cli(kAdminKey, {"projects", "add-member", "lab", "dave", "--role=PROJECT_ROLE_READER"});
  ASSERT_EQ(keyless.exit_code, 0) << keyless.err;
  EXPECT_THAT(keyless.out, HasSubstr("dave"));
  EXPECT_THAT(keyless.out, HasSubstr("READER"));  // the role by its short name, either taken
  EXPECT_THAT(keyless.out, Not(HasSubstr("PROJECT_ROLE_")));
  EXPECT_THAT(keyless.err, HasSubstr("warning: dave has no API key yet"));
  ASSERT_EQ(Cli(kAdminKey, {"keys", "create", "--user=dave"}).exit_code, 0);
  CommandResult keyed = Cli(kAdminKey, {"projects", "add-member", "lab", "dave", "--role=reader"});
  ASSERT_EQ(keyed.exit_code, 0) << keyed.err;
  EXPECT_THAT(keyed.err, Not(HasSubstr("warning")));
  ASSERT_EQ(Cli(kAdminKey, {"projects", "remove-member", "lab", "dave"}).exit_code, 0);
  CommandResult by_user = Cli(kAliceKey, {"projects", "create", "mine"});
  EXPECT_EQ(by_user.exit_code, kExitAuth);
  EXPECT_THAT(by_user.err, HasSubstr("PERMISSION_DENIED"));

  for (const std::string name : {"eval", "calib"}) {
    CommandResult up = Cli(kAliceKey, {"datasets", "upload", "--name=" + name, "--project=lab",
                                       root_ + "/data/" + name + ".txt"});
    ASSERT_EQ(up.exit_code, 0) << up.err;
  }
  // A reader may not upload there, nor submit.
  CommandResult bob_up = Cli(
      kBobKey, {"datasets", "upload", "--name=mine", "--project=lab", root_ + "/data/eval.txt"});
  EXPECT_EQ(bob_up.exit_code, kExitAuth);
  EXPECT_THAT(bob_up.err, HasSubstr("PERMISSION_DENIED"));
  CommandResult bob_audit = Cli(kBobKey, Audit("lab"));
  EXPECT_EQ(bob_audit.exit_code, kExitAuth);
  EXPECT_THAT(bob_audit.err, HasSubstr("PERMISSION_DENIED"));

  CommandResult submitted = Cli(kAliceKey, Audit("lab"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  CommandResult watched = Cli(kAliceKey, {"watch", job});
  ASSERT_EQ(watched.exit_code, 0) << watched.out << watched.err;

  // Bob sees it, whose it is, its results and its report.
  CommandResult listed = Cli(kBobKey, {"jobs", "list", "--project=lab"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("alice"));
  EXPECT_THAT(listed.out, HasSubstr("SUCCEEDED"));
  CommandResult shown = Cli(kBobKey, {"jobs", "show", job});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("owner:            alice"));
  EXPECT_THAT(shown.out, HasSubstr("project:          lab"));
  CommandResult results = Cli(kBobKey, {"results", "--job=" + job, "--format=json"});
  ASSERT_EQ(results.exit_code, 0) << results.err;
  EXPECT_THAT(results.out, HasSubstr("\"metric\""));
  CommandResult report = Cli(kBobKey, {"report", job});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("fg"));
  CommandResult datasets = Cli(kBobKey, {"datasets", "list", "--project=lab"});
  ASSERT_EQ(datasets.exit_code, 0) << datasets.err;
  EXPECT_THAT(datasets.out, HasSubstr("calib"));
  CommandResult members = Cli(kBobKey, {"projects", "show", "lab"});
  ASSERT_EQ(members.exit_code, 0) << members.err;
  EXPECT_THAT(members.out, HasSubstr("alice"));
  EXPECT_THAT(members.out, HasSubstr("READER"));
  // ... and over HTTP, which calls the same core.
  const std::string job_body = "{\"job_id\": " + job + "}";
  const std::string http_job = Http(kBobKey, "GetJob", job_body);
  EXPECT_THAT(http_job, HasSubstr("200\n"));
  EXPECT_THAT(http_job, HasSubstr("\"project\":\"lab\""));
  EXPECT_THAT(Http(kBobKey, "GetReport", job_body), HasSubstr("200\n"));
  const std::string http_rows = Http(kBobKey, "QueryResults", "{\"filter\": " + job_body + "}");
  EXPECT_THAT(http_rows, HasSubstr("200\n"));
  EXPECT_THAT(http_rows, HasSubstr("\"metric\""));
  EXPECT_EQ(HttpGet(kBobKey, "/api/v1/ListJobs?project=lab"), "200");

  // A reader cannot cancel: neither the finished job nor a queued one.
  CommandResult second = Cli(kAliceKey, Audit("lab"));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const std::string queued = second.out.substr(0, second.out.find('\n'));
  for (const std::string& id : {job, queued}) {
    CommandResult cancel = Cli(kBobKey, {"jobs", "cancel", id});
    EXPECT_EQ(cancel.exit_code, kExitAuth) << id;
    EXPECT_THAT(cancel.err, HasSubstr("PERMISSION_DENIED"));
    EXPECT_THAT(Http(kBobKey, "CancelJob", "{\"job_id\": " + id + "}"), HasSubstr("403\n"));
  }
  EXPECT_EQ(Cli(kAliceKey, {"watch", queued}).exit_code, 0);

  // Carol: NOT_FOUND from every call that names them, as for nothing.
  const std::vector<std::vector<std::string>> naming = {
      {"jobs", "show", job},
      {"jobs", "manifest", job},
      {"jobs", "cancel", job},
      {"jobs", "delete", job},
      {"watch", job},
      {"results", "--job=" + job},
      {"report", job},
      {"compare", job},
      {"windows", job},
      {"jobs", "list", "--project=lab"},
      {"datasets", "list", "--project=lab"},
      {"datasets", "delete", "eval", "--project=lab"},
      {"datasets", "upload", "--name=x", "--project=lab", root_ + "/data/eval.txt"},
      Audit("lab"),
      {"export", "--project=lab", "--model=fg", "--window_hash=" + std::string(64, 'a'),
       "--out=" + root_ + "/coefficients"},
      {"projects", "show", "lab"},
      {"projects", "add-member", "lab", "carol", "--role=owner"},
      {"projects", "remove-member", "lab", "bob"},
      {"projects", "delete", "lab"},
      {"projects", "retention", "lab"},
      {"projects", "retention", "lab", "--keep_jobs_days=1"},
  };
  for (const std::vector<std::string>& args : naming) {
    CommandResult r = Cli(kCarolKey, args);
    const std::string what = args[0] + " " + args[1];
    EXPECT_EQ(r.exit_code, kExitNotFound) << what << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("NOT_FOUND")) << what;
    EXPECT_THAT(r.err, Not(HasSubstr("alice"))) << what;
  }
  for (const auto& [method, body] : std::vector<std::pair<std::string, std::string>>{
           {"GetJob", job_body},
           {"CancelJob", job_body},
           {"DeleteJob", job_body},
           {"GetReport", job_body},
           {"ListJobWindows", job_body},
           {"QueryResults", "{\"filter\": " + job_body + "}"},
           {"CompareJobs", "{\"job_ids\": [" + job + "]}"},
           {"ListJobs", "{\"project\": \"lab\"}"},
           {"ListDatasets", "{\"project\": \"lab\"}"},
           {"DeleteDataset", "{\"project\": \"lab\", \"name\": \"eval\"}"},
           {"SubmitAudit",
            "{\"project\": \"lab\", \"spec\": {\"models\": [\"fg\"], "
            "\"eval_dataset\": \"eval\", \"calib_dataset\": \"calib\"}}"},
           {"GetProject", "{\"name\": \"lab\"}"},
           {"AddProjectMember",
            "{\"project\": \"lab\", \"user\": \"carol\", \"role\": \"PROJECT_ROLE_OWNER\"}"},
           {"RemoveProjectMember", "{\"project\": \"lab\", \"user\": \"bob\"}"},
           {"DeleteProject", "{\"name\": \"lab\"}"},
           {"GetRetention", "{\"project\": \"lab\"}"},
           {"SetRetention", "{\"project\": \"lab\", \"keep_jobs_days\": 1}"}}) {
    const std::string reply = Http(kCarolKey, method, body);
    EXPECT_THAT(reply, HasSubstr("404\n")) << method << ": " << reply;
    EXPECT_THAT(reply, Not(HasSubstr("alice"))) << method;
  }
  EXPECT_EQ(HttpGet(kCarolKey, "/api/v1/jobs/" + job + "/events"), "404");
  // Her own listings hold nothing of lab's.
  CommandResult own = Cli(kCarolKey, {"jobs", "list"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out, Not(HasSubstr("alice")));
  CommandResult projects = Cli(kCarolKey, {"projects", "list"});
  ASSERT_EQ(projects.exit_code, 0) << projects.err;
  EXPECT_THAT(projects.out, Not(HasSubstr("lab")));
  // And the lab is as it was.
  CommandResult after = Cli(kBobKey, {"projects", "show", "lab"});
  EXPECT_THAT(after.out, HasSubstr("bob"));
  EXPECT_THAT(after.out, Not(HasSubstr("carol")));
  EXPECT_EQ(Cli(kBobKey, {"jobs", "show", job}).exit_code, 0);
}

// Terminal columns of a line: one per code point (the CLI prints no wide
// characters).
size_t Columns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

size_t WidestLine(const std::string& text) {
  size_t widest = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    widest = std::max(widest, Columns(text.substr(start, end - start)));
    start = end + 1;
  }
  return widest;
}

// Issue 39: `jobs show`, `info` and `admin log` fit in 100 columns on a real
// server's output (a finished job's provenance, every metric, a log with
// long details); --wide prints the full lines, which are wider.
TEST_F(ProjectsE2ETest, JobsShowInfoAndAdminLogFitIn100Columns) {
  for (const std::string name : {"eval", "calib"}) {
    ASSERT_EQ(Cli(kAliceKey, {"datasets", "upload", "--name=" + name, "--project=alice",
                              root_ + "/data/" + name + ".txt"})
                  .exit_code,
              0);
  }
  CommandResult submitted = Cli(kAliceKey, Audit("alice"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_EQ(Cli(kAliceKey, {"watch", job}).exit_code, 0);

  // An unknown metric is INVALID_ARGUMENT naming it and the known ones, not
  // an empty table.
  CommandResult typo = Cli(kAliceKey, {"results", "--job=" + job, "--metric=nosuch"});
  EXPECT_EQ(typo.exit_code, 3) << typo.out;  // kExitInvalidArgument
  EXPECT_THAT(typo.err, HasSubstr("unknown metric 'nosuch'"));
  EXPECT_THAT(typo.err, HasSubstr("penalty"));
  EXPECT_EQ(typo.out, "");
  // Enums print by their short names, and flags take either spelling.
  for (const std::string state : {"succeeded", "SUCCEEDED", "JOB_STATE_SUCCEEDED"}) {
    CommandResult listed = Cli(kAliceKey, {"jobs", "list", "--project=alice", "--state=" + state});
    ASSERT_EQ(listed.exit_code, 0) << listed.err;
    EXPECT_THAT(listed.out, HasSubstr("SUCCEEDED")) << state;
    EXPECT_THAT(listed.out, Not(HasSubstr("JOB_STATE_"))) << state;
  }
  CommandResult info_json = Cli(kAliceKey, {"info", "--json"});
  ASSERT_EQ(info_json.exit_code, 0) << info_json.err;
  EXPECT_THAT(info_json.out, HasSubstr("\"scope\": \"MODEL\""));
  EXPECT_THAT(info_json.out, Not(HasSubstr("METRIC_SCOPE_")));

  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {kAliceKey, {"jobs", "show", job}}, {kAliceKey, {"info"}}, {kAdminKey, {"admin", "log"}}};
  for (const auto& [key, args] : commands) {
    CommandResult narrow = Cli(key, args);
    ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
    EXPECT_LE(WidestLine(narrow.out), 100u) << narrow.out;
    std::vector<std::string> wide_args = args;
    wide_args.push_back("--wide");
    CommandResult wide = Cli(key, wide_args);
    ASSERT_EQ(wide.exit_code, 0) << wide.err;
    EXPECT_GT(WidestLine(wide.out), 100u) << wide.out;
  }
}

// A server whose own workers run nothing (--workers=0): jobs stay QUEUED.
class IdleProjectsE2ETest : public ProjectsE2ETest {
 protected:
  const std::vector<std::string>& ExtraServerArgs() const override {
    static const std::vector<std::string> idle = {"--workers=0"};
    return idle;
  }
};

// Issue 23's faults through the real server and CLI: bob's open `fca watch`
// of a lab job ends NOT_FOUND once he is removed from lab; deleting lab
// while the job is queued is FAILED_PRECONDITION and leaves it whole.
TEST_F(IdleProjectsE2ETest, ARemovedMembersWatchEndsAndABusyProjectStays) {
  ASSERT_EQ(Cli(kAdminKey, {"projects", "create", "lab"}).exit_code, 0);
  ASSERT_EQ(Cli(kAdminKey, {"projects", "add-member", "lab", "alice", "--role=writer"}).exit_code,
            0);
  ASSERT_EQ(Cli(kAdminKey, {"projects", "add-member", "lab", "bob", "--role=reader"}).exit_code, 0);
  for (const std::string name : {"eval", "calib"}) {
    CommandResult up = Cli(kAliceKey, {"datasets", "upload", "--name=" + name, "--project=lab",
                                       root_ + "/data/" + name + ".txt"});
    ASSERT_EQ(up.exit_code, 0) << up.err;
  }
  CommandResult submitted = Cli(kAliceKey, Audit("lab"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find('\n'));

  // Bob watches it (its QUEUED line reaches his stderr file at once).
  const std::string err = root_ + "/watch.err", rc = root_ + "/watch.rc";
  std::thread watcher([&] {
    e2e::Run({"/bin/sh", "-c",
              std::string("'") + FCA_CLI_BIN + "' --server=" + server_->address() + " --token=" +
                  kBobKey + " watch " + job + " 2>'" + err + "'; echo $? >'" + rc + "'"});
  });
  for (int polls = 0; polls < 6000 && ReadFileOrEmpty(err).find("QUEUED") == std::string::npos;
       ++polls) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(ReadFileOrEmpty(err).find("QUEUED"), std::string::npos) << ReadFileOrEmpty(err);
  EXPECT_TRUE(ReadFileOrEmpty(rc).empty()) << "the watch of a queued job ended by itself";

  // Deleting lab while its job is queued is refused; nothing goes.
  CommandResult busy = Cli(kAdminKey, {"projects", "delete", "lab"});
  EXPECT_EQ(busy.exit_code, kExitPrecondition) << busy.err;
  EXPECT_THAT(busy.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_EQ(Cli(kAliceKey, {"jobs", "show", job}).exit_code, 0);
  EXPECT_TRUE(ReadFileOrEmpty(rc).empty()) << "a refused delete ended bob's watch";

  CommandResult removed = Cli(kAdminKey, {"projects", "remove-member", "lab", "bob"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  watcher.join();  // bounded by e2e::Run's timeout: a stream left open fails below
  EXPECT_EQ(ReadFileOrEmpty(rc), std::to_string(kExitNotFound) + "\n") << ReadFileOrEmpty(err);
  EXPECT_THAT(ReadFileOrEmpty(err), HasSubstr("NOT_FOUND"));
  // The job is as it was, for alice; bob learns nothing more of it.
  CommandResult still = Cli(kAliceKey, {"jobs", "show", job});
  EXPECT_EQ(still.exit_code, 0) << still.err;
  EXPECT_THAT(still.out, HasSubstr("QUEUED"));
  EXPECT_EQ(Cli(kBobKey, {"jobs", "show", job}).exit_code, kExitNotFound);
}

}  // namespace
}  // namespace fca::e2e
