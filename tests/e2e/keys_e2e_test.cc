// End to end, the real binaries: the API key lifecycle and the audit log.
// `fca-server --create_api_key` against the database of a running server;
// a key created over the API works at once, and once revoked its very next
// call is UNAUTHENTICATED through the CLI (gRPC) and over HTTP, without a
// restart; `fca keys list` never shows a key; `fca admin log` shows who did
// what, including the server's stop.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kExitAuth = 5;

// POST `body` to `path` on 127.0.0.1:`port` with `key` as the bearer token;
// the reply with its status line ("" when the server could not be reached).
std::string HttpPost(int port, const std::string& path, const std::string& key,
                     const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nAuthorization: Bearer " +
                                key + "\r\nContent-Length: " + std::to_string(body.size()) +
                                "\r\n\r\n" + body;
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) reply.append(buffer, n);
    }
  }
  close(fd);
  return reply;
}

// The key printed on stdout (one line of 64 hex digits), "" when none.
std::string KeyIn(const std::string& out) {
  std::smatch match;
  static const std::regex kKey("^([0-9a-f]{64})\n");
  return std::regex_search(out, match, kKey) ? match[1].str() : "";
}

// The id in "API key N ..." on stderr, 0 when none.
int64_t KeyIdIn(const std::string& err) {
  std::smatch match;
  static const std::regex kId("API key ([0-9]+)");
  return std::regex_search(err, match, kId) ? std::stoll(match[1].str()) : 0;
}

class KeysE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_keys_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, root_ + "/models/fg-a", {"--seed=1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    db_ = root_ + "/fca.sqlite";
  }
  void TearDown() override { fs::remove_all(root_); }

  CommandResult CreateKeyOnTheCommandLine(const std::string& user, const std::string& role) {
    return e2e::Run({FCA_SERVER_BIN, "--db=" + db_, "--create_api_key=" + user, "--role=" + role});
  }
  void StartServer() {
    server_ =
        e2e::StartServer(FCA_SERVER_BIN, {"--models=" + root_ + "/models", "--db=" + db_,
                                          "--threads=1", "--auth", "--http_listen=127.0.0.1:0"});
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->http_port(), 0);
  }
  CommandResult Cli(const std::string& token, std::vector<std::string> args) {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server_->address(),
                                     "--token=" + token};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  std::string root_, db_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(KeysE2ETest, KeysAreCreatedRevokedAndRefusedAtTheNextCallWhileTheServerRuns) {
  // The first admin key, before the server exists.
  // --create_api_key follows the API's user-name rule (a user's name is
  // its personal project's): nothing is created for a name the API refuses.
  for (const std::string& bad :
       std::vector<std::string>{"../x", "a b", std::string(300, 'u'), ".hidden"}) {
    CommandResult refused = CreateKeyOnTheCommandLine(bad, "user");
    EXPECT_NE(refused.exit_code, 0) << bad;
    EXPECT_THAT(refused.err, HasSubstr("user name")) << bad;
  }
  CommandResult first = CreateKeyOnTheCommandLine("root", "admin");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string root = KeyIn(first.out);
  ASSERT_FALSE(root.empty()) << first.out;
  StartServer();

  // --create_api_key against the running server's database works, at once.
  CommandResult alice_created = CreateKeyOnTheCommandLine("alice", "user");
  ASSERT_EQ(alice_created.exit_code, 0) << alice_created.err;
  EXPECT_THAT(alice_created.err, Not(HasSubstr("another fca-server")));
  const std::string alice = KeyIn(alice_created.out);
  ASSERT_FALSE(alice.empty());
  CommandResult models = Cli(alice, {"models"});
  EXPECT_EQ(models.exit_code, 0) << models.err;

  // A key created over the API works at once, on gRPC and HTTP.
  CommandResult bob_created = Cli(root, {"keys", "create", "--user=bob"});
  ASSERT_EQ(bob_created.exit_code, 0) << bob_created.err;
  const std::string bob = KeyIn(bob_created.out);
  const int64_t bob_id = KeyIdIn(bob_created.err);
  ASSERT_FALSE(bob.empty()) << bob_created.out;
  ASSERT_GT(bob_id, 0) << bob_created.err;
  EXPECT_EQ(Cli(bob, {"models"}).exit_code, 0);
  EXPECT_THAT(HttpPost(server_->http_port(), "/api/v1/ListModels", bob, "{}"), HasSubstr("200 OK"));
  const std::string data = root_ + "/bob.txt";
  std::ofstream(data) << RandomWords(2048, 3);
  CommandResult upload = Cli(bob, {"datasets", "upload", "--name=bobs", data});
  EXPECT_EQ(upload.exit_code, 0) << upload.err;

  // User and shared-project names never collide, in either direction.
  EXPECT_EQ(Cli(root, {"projects", "create", "lab"}).exit_code, 0);
  CommandResult named_like_lab = Cli(root, {"keys", "create", "--user=lab"});
  EXPECT_NE(named_like_lab.exit_code, 0);
  EXPECT_THAT(named_like_lab.err, HasSubstr("shared project is named 'lab'"));
  CommandResult lab_on_the_command_line = CreateKeyOnTheCommandLine("lab", "user");
  EXPECT_NE(lab_on_the_command_line.exit_code, 0);
  EXPECT_THAT(lab_on_the_command_line.err, HasSubstr("shared project is named 'lab'"));
  // carol has a key and has not called yet (no personal project).
  ASSERT_EQ(Cli(root, {"keys", "create", "--user=carol"}).exit_code, 0);
  CommandResult project_named_like_carol = Cli(root, {"projects", "create", "carol"});
  EXPECT_NE(project_named_like_carol.exit_code, 0);
  EXPECT_THAT(project_named_like_carol.err, HasSubstr("user named 'carol'"));

  // Listings show prefixes, never keys; bob sees his own key only.
  CommandResult listed = Cli(root, {"keys", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr(bob.substr(0, 8) + "..."));
  EXPECT_THAT(listed.out, HasSubstr("fca-server --create_api_key"));
  for (const std::string& key : {root, alice, bob}) {
    EXPECT_THAT(listed.out, Not(HasSubstr(key)));
  }
  CommandResult own = Cli(bob, {"keys", "list"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out, HasSubstr("bob"));
  EXPECT_THAT(own.out, Not(HasSubstr("alice")));

  // Revoked: the very next call is refused, on gRPC and HTTP, no restart.
  CommandResult revoked = Cli(root, {"keys", "revoke", std::to_string(bob_id)});
  ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  CommandResult refused = Cli(bob, {"models"});
  EXPECT_EQ(refused.exit_code, kExitAuth) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(refused.err, HasSubstr("revoked"));
  const std::string http = HttpPost(server_->http_port(), "/api/v1/ListModels", bob, "{}");
  EXPECT_THAT(http, HasSubstr("401"));
  EXPECT_THAT(http, HasSubstr("revoked"));
  EXPECT_EQ(Cli(alice, {"models"}).exit_code, 0);  // other keys unaffected

  // The audit log, admins only.
  CommandResult log = Cli(root, {"admin", "log"});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  for (const char* action :
       {"server.start", "key.create", "key.revoke", "dataset.upload", "auth.refused"}) {
    EXPECT_THAT(log.out, HasSubstr(action)) << action;
  }
  for (const std::string& key : {root, alice, bob}) EXPECT_THAT(log.out, Not(HasSubstr(key)));
  CommandResult revokes = Cli(root, {"admin", "log", "--action=key.revoke"});
  ASSERT_EQ(revokes.exit_code, 0) << revokes.err;
  EXPECT_THAT(revokes.out, HasSubstr("api_key " + std::to_string(bob_id)));
  EXPECT_THAT(revokes.out, Not(HasSubstr("key.create")));
  CommandResult bobs = Cli(root, {"admin", "log", "--user=bob"});
  ASSERT_EQ(bobs.exit_code, 0) << bobs.err;
  EXPECT_THAT(bobs.out, HasSubstr("dataset.upload"));
  EXPECT_THAT(bobs.out, Not(HasSubstr("key.revoke")));
  CommandResult denied = Cli(alice, {"admin", "log"});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_THAT(denied.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(
      HttpPost(server_->http_port(), "/api/v1/QueryAuditLog", root, R"({"action": "key.revoke"})"),
      HasSubstr("\"action\":\"key.revoke\""));

  // The stop is recorded too.
  server_->Signal(SIGTERM);
  ASSERT_EQ(server_->Wait(30), 0) << server_->Stderr();
  EXPECT_THAT(server_->Stderr(), Not(HasSubstr(bob)));
  StartServer();
  CommandResult stops = Cli(root, {"admin", "log", "--action=server.stop"});
  ASSERT_EQ(stops.exit_code, 0) << stops.err;
  EXPECT_THAT(stops.out, HasSubstr("server.stop"));
  server_->Signal(SIGTERM);
  EXPECT_EQ(server_->Wait(30), 0);
}

}  // namespace
}  // namespace fca::e2e
