// End to end, the real binaries: fca-server's start-up checks (flags, the
// API key file, file modes, --help, --version), what a refused call logs, and how the
// real fca CLI treats hostile or malformed text.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "common/build_version.h"
#include "common/sha256.h"
#include "storage/sqlite.h"
#include "storage/store.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAliceKey[] = "alice-key-0123456789";
constexpr int kExitUsage = 2, kExitAuth = 5;

std::string g_root;  // models/, data/, per-test files

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return 0;
  return info.st_mode & 07777;
}

// A byte a terminal acts on: an escape sequence, a bell, a carriage return.
bool HasTerminalControl(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\n') || u == 0x7F;
  });
}

class SecurityE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = ::testing::TempDir() + "fca_security_e2e_" + std::to_string(getpid());
    fs::create_directories(g_root + "/models");
    fs::create_directories(g_root + "/data");
    CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, g_root + "/models/fg-a",
                                    {"--seed=1", "--controller_out_std=1.0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    WriteFile(g_root + "/data/eval.txt", RandomWords(16 * 12, 1));
    WriteFile(g_root + "/data/calib.txt", RandomWords(16 * 8, 2));
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    db_ = g_root + "/" + name_ + ".sqlite";
  }

  std::vector<std::string> ServerArgs(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--models=" + g_root + "/models", "--db=" + db_,
                                     "--threads=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  void StartServer(std::vector<std::string> extra = {}) {
    server_ = e2e::StartServer(FCA_SERVER_BIN, ServerArgs(std::move(extra)));
    ASSERT_NE(server_, nullptr);
  }

  void StopServer() {
    server_->Signal(SIGTERM);
    EXPECT_EQ(server_->Wait(20), 0) << server_->Stderr();
  }

  // fca-server run to completion (it must refuse to start).
  CommandResult RunServer(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FCA_SERVER_BIN, "--listen=127.0.0.1:0"};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv, {}, 60);
  }

  CommandResult Cli(std::vector<std::string> args, const std::string& token = "") {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address()};
    if (!token.empty()) argv.push_back("--token=" + token);
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  void ExpectServing(const std::string& token = "") {
    CommandResult r = Cli({"models"}, token);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("fg-a"));
  }

  std::vector<std::string> Audit(const std::string& label) {
    return {"audit",           "--detach",    "--models=fg-a",      "--eval=eval",
            "--calib=calib",   "--window=16", "--timing_repeats=0", "--bootstrap=50",
            "--label=" + label};
  }

  std::string name_, db_;
  std::unique_ptr<ServerProcess> server_;
};

// The body of GET `path` on 127.0.0.1:`port` with its status line ("" when
// the server could not be reached).
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) reply.append(buffer, n);
    }
  }
  close(fd);
  return reply;
}

// Issue 22: the database deleted under a running server is noticed: /readyz
// turns 503 naming the file, writes are refused naming it, and the log says
// so once.
TEST_F(SecurityE2ETest, ADeletedDatabaseTurnsReadyzNotReadyAndRefusesWrites) {
  StartServer({"--http_listen=127.0.0.1:0"});
  ASSERT_GT(server_->http_port(), 0);
  EXPECT_THAT(HttpGet(server_->http_port(), "/readyz"), HasSubstr("200 OK"));
  ASSERT_EQ(unlink(db_.c_str()), 0);
  unlink((db_ + "-wal").c_str());
  const std::string ready = HttpGet(server_->http_port(), "/readyz");
  EXPECT_THAT(ready, HasSubstr("503"));
  EXPECT_THAT(ready, HasSubstr("was deleted"));
  EXPECT_THAT(ready, HasSubstr(name_ + ".sqlite"));
  WriteFile(g_root + "/data/more.txt", RandomWords(4096, 3));
  CommandResult r = Cli({"datasets", "upload", "--name=more", g_root + "/data/more.txt"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("was deleted"));
  StopServer();
  const std::string log = server_->Stderr();
  const auto count = [&log](const std::string& line) {
    size_t lines = 0;
    for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) {
      ++lines;
    }
    return lines;
  };
  // The store's ERROR line once; the worker's failed claims (each poll) at
  // most once as well.
  EXPECT_EQ(count("*** storage: the database file"), 1u) << log;
  EXPECT_LE(count("cannot claim a task"), 1u) << log;
}

// Issue 40: another process holding the database's write lock (an sqlite3
// shell left in a transaction): reads answer at once, and /readyz turns 503
// once writes have been refused for more than Store::kWriteStallLimitUs, and
// 200 again once the lock is given back.
TEST_F(SecurityE2ETest, AnOutsideWriteLockStallsNoReadAndTurnsReadyzNotReady) {
  StartServer({"--http_listen=127.0.0.1:0"});
  ASSERT_GT(server_->http_port(), 0);
  EXPECT_THAT(HttpGet(server_->http_port(), "/readyz"), HasSubstr("200 OK"));
  absl::StatusOr<std::unique_ptr<storage::Database>> outside = storage::Database::Open(db_, 0);
  ASSERT_TRUE(outside.ok()) << outside.status();
  ASSERT_TRUE((*outside)->Execute("BEGIN IMMEDIATE", "hold the write lock").ok());
  const auto wait_for_readyz = [&](const std::string& wanted) {
    std::string ready;
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::microseconds(3 * storage::Store::kWriteStallLimitUs);
    while (std::chrono::steady_clock::now() < give_up) {
      ready = HttpGet(server_->http_port(), "/readyz");
      if (ready.find(wanted) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return ready;
  };
  CommandResult r = Cli({"jobs", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Cli({"models"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string stalled = wait_for_readyz("503");
  EXPECT_THAT(stalled, HasSubstr("the store cannot take writes"));
  EXPECT_THAT(stalled, HasSubstr("write lock"));
  ASSERT_TRUE((*outside)->Execute("ROLLBACK", "release the write lock").ok());
  EXPECT_THAT(wait_for_readyz("200 OK"), HasSubstr("200 OK"));
}

// Issue 22: a restart on a new, empty database with --auth would let nobody
// log in: refused unless --allow_empty_auth_db, saying why and what to do.
TEST_F(SecurityE2ETest, AnAuthServerOnADatabaseWithoutKeysRefusesToStart) {
  CommandResult r = RunServer(ServerArgs({"--auth", "--http_listen="}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("nobody could log in"));
  EXPECT_THAT(r.err, HasSubstr("restore it from a backup"));
  EXPECT_THAT(r.err, HasSubstr("--create_api_key"));
  EXPECT_THAT(r.err, HasSubstr("--allow_empty_auth_db"));
  StartServer({"--auth", "--allow_empty_auth_db", "--http_listen="});
  StopServer();
}

TEST_F(SecurityE2ETest, ApiKeysImplyAuthAndRefusalsAreLoggedWithThePeer) {
  const std::string keys = g_root + "/keys_" + name_;
  WriteFile(keys, std::string(kAliceKey) + " alice admin\n");
  StartServer({"--api_keys=" + keys});  // no --auth
  CommandResult anonymous = Cli({"models"});
  EXPECT_EQ(anonymous.exit_code, kExitAuth) << anonymous.out << anonymous.err;
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED: missing 'authorization: Bearer <key>' "
                                       "metadata: set FCA_TOKEN or pass --token"));
  // A wrong key is not a missing one: no hint to set what is set.
  CommandResult wrong = Cli({"models"}, "wrong-key-000000000000");
  EXPECT_EQ(wrong.exit_code, kExitAuth);
  EXPECT_THAT(wrong.err, HasSubstr("UNAUTHENTICATED: unknown API key"));
  EXPECT_THAT(wrong.err, Not(HasSubstr("FCA_TOKEN")));
  ExpectServing(kAliceKey);
  const std::string log = server_->Stderr();
  EXPECT_THAT(log, HasSubstr("--api_keys implies --auth"));
  EXPECT_THAT(log, HasSubstr("authentication failed: peer ipv4:127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("missing 'authorization: Bearer <key>' metadata"));
  EXPECT_THAT(log, HasSubstr("unknown API key"));
  EXPECT_THAT(log, Not(HasSubstr("wrong-key")));
  EXPECT_THAT(log, Not(HasSubstr(kAliceKey)));
  StopServer();
}

TEST_F(SecurityE2ETest, ApiKeysWithAuthExplicitlyOffIsRefused) {
  const std::string keys = g_root + "/keys_" + name_;
  WriteFile(keys, std::string(kAliceKey) + " alice admin\n");
  CommandResult r = RunServer(ServerArgs({"--api_keys=" + keys, "--auth=false"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--api_keys with --auth=false"));
}

// The same in a --flagfile, where a service keeps its flags: an explicit
// --auth=false there is as explicit as on the command line.
TEST_F(SecurityE2ETest, ApiKeysWithAuthOffInAFlagFileIsRefused) {
  const std::string keys = g_root + "/keys_" + name_;
  WriteFile(keys, std::string(kAliceKey) + " alice admin\n");
  const std::string flags = g_root + "/" + name_ + ".flags";
  WriteFile(flags, "--api_keys=" + keys + "\n--auth=false\n");
  CommandResult r = RunServer(ServerArgs({"--flagfile=" + flags}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--api_keys with --auth=false"));
  EXPECT_THAT(r.out, Not(HasSubstr("listening on")));
}

TEST_F(SecurityE2ETest, KeyFileReadableByOthersIsRefused) {
  const std::string keys = g_root + "/keys_" + name_;
  WriteFile(keys, std::string(kAliceKey) + " alice admin\n", 0644);
  CommandResult r = RunServer(ServerArgs({"--auth", "--api_keys=" + keys}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("chmod 600 " + keys));
  EXPECT_THAT(r.err, Not(HasSubstr(kAliceKey)));
  ASSERT_EQ(chmod(keys.c_str(), 0640), 0);
  EXPECT_NE(RunServer(ServerArgs({"--auth", "--api_keys=" + keys})).exit_code, 0);
}

TEST_F(SecurityE2ETest, FilesTheServerCreatesArePrivate) {
  StartServer();
  ExpectServing();
  // While it runs: the database and its WAL companions.
  for (const std::string& path : {db_, db_ + "-wal", db_ + "-shm"}) {
    if (fs::exists(path)) {
      EXPECT_EQ(ModeOf(path), 0600u) << path;
    }
  }
  StopServer();
  EXPECT_EQ(ModeOf(db_), 0600u);
  // --create_api_key creates the database too.
  const std::string other = g_root + "/" + name_ + "_keys.sqlite";
  CommandResult key = e2e::Run({FCA_SERVER_BIN, "--db=" + other, "--create_api_key=alice"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  EXPECT_EQ(ModeOf(other), 0600u);
}

TEST_F(SecurityE2ETest, AnExistingDatabaseOpenToOthersIsReported) {
  StartServer();
  StopServer();
  ASSERT_EQ(chmod(db_.c_str(), 0644), 0);
  StartServer();
  EXPECT_THAT(server_->Stderr(), HasSubstr("warning: " + db_ + " has mode 0644"));
  EXPECT_THAT(server_->Stderr(), HasSubstr("chmod 600 " + db_));
  StopServer();
}

TEST_F(SecurityE2ETest, BadFlagValuesStopTheServerWithTheFlagAndItsRange) {
  struct Case {
    std::string flag, message;
  } cases[] = {
      {"--threads=-1", "--threads=-1 is out of range: it must be in [0, 1024]"},
      {"--threads=100000", "--threads=100000 is out of range"},
      {"--max_dataset_bytes=0", "--max_dataset_bytes=0 is out of range: it must be in [1, "},
      {"--max_tokenize_bytes=4000000", "--max_tokenize_bytes=4000000 is out of range"},
      {"--max_windows=0", "--max_windows=0 is out of range: it must be in [1, "},
      {"--max_window_length=1", "--max_window_length=1 is out of range: it must be in [2, "},
      {"--max_queued_jobs=0", "--max_queued_jobs=0 is out of range: it must be in [1, "},
      {"--max_queued_jobs=-5", "--max_queued_jobs=-5 is out of range"},
      {"--coeff_cache_bytes=-1", "--coeff_cache_bytes=-1 is out of range: it must be in [0, "},
      {"--dtype=fp8", "--dtype='fp8' is not one of: float32, bfloat16, float16"},
      {"--dtype=float16", "--dtype=float16 needs a cuda --device"},
      {"--device=tpu", "--device='tpu' is not cpu, cuda or cuda:N"},
      {"--role=root", "--role='root' is not one of: user, admin"},
      {"--listen=", "--listen must not be empty"},
      {"--http_listen=localhost", "--http_listen='localhost' is not HOST:PORT"},
      {"--http_listen=127.0.0.1:99999", "is not HOST:PORT with a port in [0, 65535]"},
      {"--max_http_threads=1", "--max_http_threads=1 is out of range: it must be in [4, "},
  };
  for (const Case& c : cases) {
    CommandResult r = RunServer(ServerArgs({c.flag}));
    EXPECT_NE(r.exit_code, 0) << c.flag;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.flag;
  }
}

TEST_F(SecurityE2ETest, HelpListsTheFlags) {
  CommandResult server = e2e::Run({FCA_SERVER_BIN, "--help"});
  EXPECT_THAT(server.out, HasSubstr("--models"));
  EXPECT_THAT(server.out, HasSubstr("--max_queued_jobs"));
  EXPECT_THAT(server.out, HasSubstr("implies --auth"));
  EXPECT_THAT(server.out, Not(HasSubstr("No flags matched")));
  CommandResult cli = e2e::Run({FCA_CLI_BIN, "--help"});
  EXPECT_EQ(cli.exit_code, 0);
  EXPECT_THAT(cli.out, HasSubstr("--token"));
  CommandResult cli_short = e2e::Run({FCA_CLI_BIN, "--helpshort"});
  EXPECT_THAT(cli_short.out, HasSubstr("--label"));
  CommandResult local = e2e::Run({FCA_LOCAL_AUDIT_BIN, "--help"});
  EXPECT_THAT(local.out, HasSubstr("--family"));
  EXPECT_THAT(local.out, Not(HasSubstr("No flags matched")));
  CommandResult train = e2e::Run({FCA_TRAIN_BIN, "--help"});
  EXPECT_THAT(train.out, HasSubstr("--steps"));
  EXPECT_THAT(train.out, Not(HasSubstr("No flags matched")));
}

// The "Flags from FILE:" headings of absl's help name files inside the
// project ("server/main.cc"), never the folder the binary was built in.
void ExpectProjectPathsOnly(const std::string& help) {
  size_t at = 0;
  int headings = 0;
  while ((at = help.find("Flags from ", at)) != std::string::npos) {
    at += std::string("Flags from ").size();
    const std::string file = help.substr(at, help.find(':', at) - at);
    EXPECT_NE(file[0], '/') << file;
    EXPECT_THAT(file, Not(HasSubstr(".."))) << file;
    ++headings;
  }
  EXPECT_GT(headings, 0) << help;
}

// Asking for help is no failure: exit 0 from every help flag, absl's
// included (absl itself exits 1).
TEST_F(SecurityE2ETest, HelpExitsZeroAndNamesNoBuildPath) {
  for (const char* help : {"--help", "--helpshort", "--helpfull"}) {
    CommandResult server = e2e::Run({FCA_SERVER_BIN, help});
    EXPECT_EQ(server.exit_code, 0) << help << server.err;
    ExpectProjectPathsOnly(server.out);
    CommandResult worker = e2e::Run({FCA_WORKER_BIN, help});
    EXPECT_EQ(worker.exit_code, 0) << help << worker.err;
  }
  EXPECT_THAT(e2e::Run({FCA_SERVER_BIN, "--help"}).out, HasSubstr("Flags from server/main.cc:"));
  CommandResult cli = e2e::Run({FCA_CLI_BIN, "--helpshort"});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  ExpectProjectPathsOnly(cli.out);
  EXPECT_EQ(e2e::Run({FCA_LOCAL_AUDIT_BIN, "--helpshort"}).exit_code, 0);
  EXPECT_EQ(e2e::Run({FCA_TRAIN_BIN, "--help"}).exit_code, 0);
}

// `fca COMMAND --help` is that command's help, with the spec fields' ranges
// and defaults from common/spec_fields; `fca help COMMAND` the same.
TEST_F(SecurityE2ETest, ACommandsHelpListsItsFlagsWithRangesAndDefaults) {
  CommandResult audit = e2e::Run({FCA_CLI_BIN, "audit", "--help"});
  EXPECT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_THAT(audit.out, HasSubstr("usage: fca audit --models=a,b"));
  EXPECT_THAT(audit.out,
              HasSubstr("  --window\n      tokens per window; range [2, 4096]; default 128\n"));
  EXPECT_THAT(audit.out, HasSubstr("  --ci_level\n      confidence level in (0, 1); default 0.95"));
  EXPECT_THAT(audit.out, HasSubstr("  --manifest\n"));
  EXPECT_THAT(audit.out, Not(HasSubstr("EXIT CODES")));  // not the global help
  EXPECT_EQ(e2e::Run({FCA_CLI_BIN, "help", "audit"}).out, audit.out);
  CommandResult list = e2e::Run({FCA_CLI_BIN, "jobs", "list", "-h"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("usage: fca jobs list"));
  EXPECT_THAT(list.out, HasSubstr("  --state\n      jobs list: queued|running|"));
  EXPECT_THAT(list.out, Not(HasSubstr("--window")));
  // No command: the global help.
  EXPECT_THAT(e2e::Run({FCA_CLI_BIN, "--help"}).out, HasSubstr("EXIT CODES"));
}

TEST_F(SecurityE2ETest, VersionPrintsTheBuild) {
  const std::pair<const char*, const char*> binaries[] = {{FCA_SERVER_BIN, "fca-server"},
                                                          {FCA_WORKER_BIN, "fca-worker"},
                                                          {FCA_CLI_BIN, "fca"},
                                                          {FCA_LOCAL_AUDIT_BIN, "fca-local-audit"},
                                                          {FCA_TRAIN_BIN, "fca-train"}};
  for (const auto& [path, name] : binaries) {
    CommandResult r = e2e::Run({path, "--version"});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(r.out, std::string(name) + " " + BuildVersion() + "\n");
  }
}

TEST_F(SecurityE2ETest, HostileLabelsArePrintedSanitizedAndNonUtf8IsRefused) {
  StartServer();
  for (const char* name : {"eval", "calib"}) {
    CommandResult r = Cli(
        {"datasets", "upload", std::string("--name=") + name, g_root + "/data/" + name + ".txt"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Escape sequences: the server refuses the label outright.
  const std::string hostile = "seeds\x1b[2J\x1b]0;owned\x07\rFAKE";
  CommandResult refused = Cli(Audit(hostile));
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("control character"));
  EXPECT_FALSE(HasTerminalControl(refused.err)) << refused.err;
  // A bidi override is printable UTF-8 and stored, but printed escaped.
  const std::string bidi = "seeds \xe2\x80\xae FAKE";
  CommandResult submit = Cli(Audit(bidi));
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  CommandResult list = Cli({"jobs", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_FALSE(HasTerminalControl(list.out)) << list.out;
  EXPECT_THAT(list.out, Not(HasSubstr("\xe2\x80\xae"))) << list.out;
  CommandResult show = Cli({"jobs", "show", "1"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_FALSE(HasTerminalControl(show.out)) << show.out;

  // Not UTF-8: refused by the CLI before anything is sent.
  CommandResult bad = Cli(Audit("bad \xff\xfe label"));
  EXPECT_EQ(bad.exit_code, kExitUsage) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--label is not valid UTF-8"));
  EXPECT_THAT(bad.err, Not(HasSubstr("INTERNAL")));
  ExpectServing();
  CommandResult after = Cli({"jobs", "list"});
  EXPECT_EQ(std::count(after.out.begin(), after.out.end(), '\n'), 2) << after.out;  // one job
  StopServer();
}

TEST_F(SecurityE2ETest, UpperCaseDatasetHashIsAccepted) {
  StartServer();
  for (const char* name : {"eval", "calib"}) {
    CommandResult r = Cli(
        {"datasets", "upload", std::string("--name=") + name, g_root + "/data/" + name + ".txt"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto sha = Sha256FileHex(g_root + "/data/eval.txt");
  ASSERT_TRUE(sha.ok());
  std::vector<std::string> args = Audit("upper");
  args[3] = "--eval=SHA256:" + absl::AsciiStrToUpper(*sha);
  CommandResult r = Cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  StopServer();
}

}  // namespace
}  // namespace fca::e2e
