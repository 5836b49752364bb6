// Test helpers for webhooks: a real HTTP receiver on 127.0.0.1 and an
// HMAC-SHA256 computed from fca::Sha256 alone (RFC 2104), independent of
// the OpenSSL HMAC the server signs with. Header-only, torch-free.
#ifndef FCA_TESTS_CORE_WEBHOOK_RECEIVER_H_
#define FCA_TESTS_CORE_WEBHOOK_RECEIVER_H_

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace fca::core::testing {

// RFC 2104 HMAC over fca::Sha256, independent of the OpenSSL HMAC the
// server signs with.
inline std::string HmacSha256Hex(const std::string& key, const std::string& message) {
  std::string k = key;
  if (k.size() > 64) {
    Sha256 h;
    h.Update(k);
    const auto digest = h.Finish();
    k.assign(digest.begin(), digest.end());
  }
  k.resize(64, '\0');
  std::string ipad(64, '\0'), opad(64, '\0');
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(ipad);
  inner.Update(message);
  const auto inner_digest = inner.Finish();
  Sha256 outer;
  outer.Update(opad);
  outer.Update(inner_digest.data(), inner_digest.size());
  return outer.FinishHex();
}

// A real HTTP server on 127.0.0.1 that records every request and answers
// each path with the statuses scripted for it, in turn (the last repeats;
// 200 when none). While held (Hold), requests to paths starting with
// "/hang" wait, unanswered, until Release: a receiver that hangs.
class Receiver {
 public:
  struct Request {
    std::string path, body;
    httplib::Headers headers;
  };

  Receiver() {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      requests_.push_back({req.path, req.body, req.headers});
      if (req.path.rfind("/hang", 0) == 0) {
        max_hanging_ = std::max(max_hanging_, ++hanging_);
        released_.wait(lock, [this] { return !held_; });
        --hanging_;
      }
      std::vector<int>& script = statuses_[req.path];
      res.status = script.empty() ? 200 : script.front();
      if (script.size() > 1) script.erase(script.begin());
      if (res.status >= 300 && res.status < 400) {
        res.set_header("Location", absl::StrCat("http://127.0.0.1:", port_, "/target"));
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    Release();
    server_.stop();
    thread_.join();
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    released_.notify_all();
  }
  // Requests to "/hang..." waiting now, and the most that ever waited at once.
  int Hanging() {
    std::lock_guard<std::mutex> lock(mu_);
    return hanging_;
  }
  int MaxHanging() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_hanging_;
  }
  int port() const { return port_; }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  void Script(const std::string& path, std::vector<int> statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    statuses_[path] = std::move(statuses);
  }
  std::vector<Request> Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Request> requests_;
  std::map<std::string, std::vector<int>> statuses_;
  std::condition_variable released_;
  bool held_ = false;
  int hanging_ = 0, max_hanging_ = 0;
};

}  // namespace fca::core::testing

#endif  // FCA_TESTS_CORE_WEBHOOK_RECEIVER_H_
