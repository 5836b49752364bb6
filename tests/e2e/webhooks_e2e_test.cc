// Issue 23, notifications: the real fca-server with --webhook_allow naming a
// receiver on 127.0.0.1 (an HTTP server in this process). A webhook
// registered with the real `fca webhooks add` gets one signed POST when a
// tiny job ends (the signature checked with an HMAC computed here from
// SHA-256), the delivery is listed by `fca webhooks deliveries`, another
// user is told the webhook does not exist, and URLs outside the allowlist
// or of another scheme are refused with their exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "common/sha256.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kAliceKey[] = "alice-key-0123456789";
constexpr char kBobKey[] = "bob-key-0123456789ab";

// RFC 2104 HMAC-SHA256 over fca::Sha256 (the server signs with OpenSSL's).
std::string HmacSha256Hex(std::string key, const std::string& message) {
  key.resize(64, '\0');  // keys here are 64 bytes at most
  std::string ipad(64, '\0'), opad(64, '\0');
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(key[i] ^ 0x36);
    opad[i] = static_cast<char>(key[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(ipad);
  inner.Update(message);
  const auto digest = inner.Finish();
  Sha256 outer;
  outer.Update(opad);
  outer.Update(digest.data(), digest.size());
  return outer.FinishHex();
}

struct Post {
  std::string body, signature, delivery, timestamp;
};

// The Python recipe of docs/operator-guide.md ("Verifying it") run on a
// received POST: "True" or "False" as it prints them.
std::string RunDocumentedRecipe(const std::string& dir, const Post& post,
                                const std::string& secret) {
  std::ifstream guide(std::string(FCA_SOURCE_DIR) + "/docs/operator-guide.md");
  std::stringstream text;
  text << guide.rdbuf();
  const std::string doc = text.str();
  const size_t section = doc.find("**Verifying it**");
  const size_t start = doc.find("```python\n", section);
  const size_t end = doc.find("```", start + 10);
  if (section == std::string::npos || start == std::string::npos || end == std::string::npos) {
    return "no recipe in docs/operator-guide.md";
  }
  WriteFile(dir + "/recipe.py",
            doc.substr(start + 10, end - start - 10) +
                "\nimport sys\nbody = open(sys.argv[1], 'rb').read()\n"
                "headers = {'X-Fca-Signature-256': sys.argv[2], 'X-Fca-Timestamp': sys.argv[3],\n"
                "           'X-Fca-Delivery': sys.argv[4]}\n"
                "print(verify(sys.argv[5], body, headers))\n");
  WriteFile(dir + "/body.json", post.body);
  CommandResult r = Run({"/usr/bin/env", "python3", dir + "/recipe.py", dir + "/body.json",
                         post.signature, post.timestamp, post.delivery, secret});
  return r.exit_code == 0 ? r.out : "python3 failed: " + r.err;
}

class WebhooksE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_webhooks_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    fs::create_directories(root_ + "/data");
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"fg", {"--seed=1", "--controller_out_std=1.0"}}, {"dense", {"--family=dense"}}}) {
      CommandResult r = InitTinyModel(FCA_LOCAL_AUDIT_BIN, root_ + "/models/" + name, flags);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    WriteFile(root_ + "/data/eval.txt", RandomWords(16 * 40, 1));
    WriteFile(root_ + "/data/calib.txt", RandomWords(16 * 30, 2));
    WriteFile(root_ + "/keys", std::string(kAliceKey) + " alice user\n" + kBobKey + " bob user\n");
    ASSERT_EQ(chmod((root_ + "/keys").c_str(), 0600), 0);
    receiver_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      posts_.push_back({req.body, req.get_header_value("X-Fca-Signature-256"),
                        req.get_header_value("X-Fca-Delivery"),
                        req.get_header_value("X-Fca-Timestamp")});
      res.status = 204;
    });
    port_ = receiver_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { receiver_.listen_after_bind(); });
    while (!receiver_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    receiver_.stop();
    if (thread_.joinable()) thread_.join();
    fs::remove_all(root_);
  }

  std::unique_ptr<ServerProcess> StartServer() const {
    return e2e::StartServer(FCA_SERVER_BIN,
                            {"--models=" + root_ + "/models", "--db=" + root_ + "/db.sqlite",
                             "--threads=1", "--api_keys=" + root_ + "/keys",
                             "--http_listen=", "--external_url=https://fca.example.org",
                             "--webhook_allow=127.0.0.1:" + std::to_string(port_)});
  }

  static CommandResult Cli(const ServerProcess& server, std::vector<std::string> args,
                           const std::string& token = kAliceKey) {
    std::vector<std::string> argv = {FCA_CLI_BIN, "--server=" + server.address(),
                                     "--token=" + token};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::Run(argv);
  }

  std::vector<Post> Posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }

  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  std::string root_;
  httplib::Server receiver_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Post> posts_;
};

// The value after `key` on the line that starts with it.
std::string LineValue(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return text.substr(start, text.find('\n', start) - start);
}

TEST_F(WebhooksE2ETest, AnEndedJobIsPostedSignedToTheRegisteredWebhook) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  CommandResult added = Cli(*server, {"webhooks", "add", Url("/hook")});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  // The secret alone on stdout (a script takes it with $(...)), the prose
  // on stderr.
  ASSERT_EQ(added.out.size(), 65u) << added.out;
  ASSERT_EQ(added.out.back(), '\n');
  const std::string secret = added.out.substr(0, 64);
  ASSERT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
  const std::string id = LineValue(added.err, "webhook ").substr(0, 1);
  ASSERT_EQ(id, "1") << added.err;
  EXPECT_THAT(added.err, HasSubstr("X-Fca-Signature-256"));
  EXPECT_THAT(added.err, ::testing::Not(HasSubstr(secret)));
  CommandResult listed = Cli(*server, {"webhooks", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr(Url("/hook")));
  EXPECT_THAT(listed.out, ::testing::Not(HasSubstr(secret)));

  for (const char* name : {"eval", "calib"}) {
    CommandResult up = Cli(*server, {"datasets", "upload", std::string("--name=") + name,
                                     root_ + "/data/" + name + ".txt"});
    ASSERT_EQ(up.exit_code, 0) << up.err;
  }
  CommandResult job =
      Cli(*server, {"audit", "--models=fg", "--eval=eval", "--calib=calib", "--window=16",
                    "--batch=4", "--bootstrap=100", "--timing_repeats=0"});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  ASSERT_TRUE(PollUntil([&] { return !Posts().empty(); }, 30));
  // Delivered: never sent again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::vector<Post> posts = Posts();
  ASSERT_EQ(posts.size(), 1u);
  // Signed: "<timestamp>.<delivery id>.<body>".
  EXPECT_EQ(posts[0].signature,
            "sha256=" + HmacSha256Hex(secret, posts[0].timestamp + "." + posts[0].delivery + "." +
                                                  posts[0].body));
  // The operator guide's Python recipe accepts it, and refuses another key,
  // the same delivery replayed with a fresh timestamp (within its window) or
  // under another delivery id, and a changed body (issue 40).
  EXPECT_EQ(RunDocumentedRecipe(root_, posts[0], secret), "True\n");
  EXPECT_EQ(RunDocumentedRecipe(root_, posts[0], std::string(64, '0')), "False\n");
  Post replayed = posts[0];
  replayed.timestamp = std::to_string(std::stoll(posts[0].timestamp) + 60);
  EXPECT_EQ(RunDocumentedRecipe(root_, replayed, secret), "False\n");
  Post other_id = posts[0];
  other_id.delivery = std::to_string(std::stoll(posts[0].delivery) + 1);
  EXPECT_EQ(RunDocumentedRecipe(root_, other_id, secret), "False\n");
  Post changed = posts[0];
  changed.body += " ";
  EXPECT_EQ(RunDocumentedRecipe(root_, changed, secret), "False\n");
  absl::StatusOr<json::Value> body = json::Parse(posts[0].body);
  ASSERT_TRUE(body.ok()) << posts[0].body;
  EXPECT_EQ(body->Find("job_id")->as_int(), 1);
  EXPECT_EQ(body->Find("state")->as_string(), "SUCCEEDED");
  EXPECT_EQ(body->Find("project")->as_string(), "alice");
  EXPECT_EQ(body->Find("models")->as_array().at(0).as_string(), "fg");
  EXPECT_EQ(body->Find("url")->as_string(), "https://fca.example.org/#/job/1");

  ASSERT_TRUE(PollUntil(
      [&] {
        return Cli(*server, {"webhooks", "deliveries", id}).out.find("DELIVERED") !=
               std::string::npos;
      },
      10));
  CommandResult deliveries = Cli(*server, {"webhooks", "deliveries", id});
  EXPECT_THAT(deliveries.out, HasSubstr("delivery " + posts[0].delivery + ": job 1 SUCCEEDED"));
  EXPECT_THAT(deliveries.out, HasSubstr("HTTP 204"));

  // bob is no member of alice's project.
  EXPECT_EQ(Cli(*server, {"webhooks", "deliveries", id}, kBobKey).exit_code, 4);
  EXPECT_EQ(Cli(*server, {"webhooks", "remove", id}, kBobKey).exit_code, 4);
  EXPECT_EQ(Cli(*server, {"webhooks", "list", "--project=alice"}, kBobKey).exit_code, 4);
  // Refused URLs: another scheme, another host.
  CommandResult ftp = Cli(*server, {"webhooks", "add", "ftp://127.0.0.1/x"});
  EXPECT_EQ(ftp.exit_code, 3);
  EXPECT_THAT(ftp.err, HasSubstr("scheme"));
  CommandResult other = Cli(*server, {"webhooks", "add", "http://192.0.2.1/hook"});
  EXPECT_EQ(other.exit_code, 5);
  EXPECT_THAT(other.err, HasSubstr("--webhook_allow"));
  // The server kept serving; alice removes her webhook.
  EXPECT_EQ(Cli(*server, {"webhooks", "remove", id}).exit_code, 0);
  EXPECT_THAT(Cli(*server, {"webhooks", "list"}).out, HasSubstr("no webhooks"));
}

TEST_F(WebhooksE2ETest, AMalformedAllowlistStopsTheStart) {
  CommandResult r =
      e2e::Run({FCA_SERVER_BIN, "--models=" + root_ + "/models", "--db=" + root_ + "/db.sqlite",
                "--webhook_allow=hooks.example.org/x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--webhook_allow entry 'hooks.example.org/x'"));
}

}  // namespace
}  // namespace fca::e2e
