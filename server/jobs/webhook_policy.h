// What a webhook may call and how its bodies are signed: the URL checks and
// the operator's host allowlist (fca-server --webhook_allow), applied when a
// webhook is registered and again before every delivery, and the HMAC
// signature receivers verify (docs/operator-guide.md, "Webhooks").
#ifndef FCA_SERVER_JOBS_WEBHOOK_POLICY_H_
#define FCA_SERVER_JOBS_WEBHOOK_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fca::jobs {

// The signature header: "sha256=" and the lower-case hex HMAC-SHA256, under
// the webhook's secret, of "<timestamp>.<delivery id>.<raw body>" (as
// Stripe's "t.payload"), so a captured delivery resent with a fresh
// timestamp or another id fails verification (SignWebhook).
inline constexpr char kWebhookSignatureHeader[] = "X-Fca-Signature-256";
// The delivery's id (the same on every attempt: receivers drop repeats).
inline constexpr char kWebhookDeliveryHeader[] = "X-Fca-Delivery";
// The attempt's time, unix seconds (receivers may refuse stale ones).
inline constexpr char kWebhookTimestampHeader[] = "X-Fca-Timestamp";
// "job.ended", the only event so far.
inline constexpr char kWebhookEventHeader[] = "X-Fca-Event";
inline constexpr size_t kMaxWebhookUrlBytes = 2048;

// An http(s) URL split as the sender needs it.
struct WebhookUrl {
  std::string scheme;  // "http" | "https", lower case
  std::string host;    // lower case; an IPv6 address without brackets
  int port = 0;        // the explicit port, else 80 / 443
  std::string target;  // path and query, "/" when empty
  // "scheme://host:port" for the HTTP client ("[...]" around IPv6).
  std::string Origin() const;
};

// INVALID_ARGUMENT, saying why, for anything but an absolute http(s) URL
// without user info or fragment, of at most kMaxWebhookUrlBytes printable
// ASCII bytes.
[[nodiscard]] absl::StatusOr<WebhookUrl> ParseWebhookUrl(absl::string_view url);

// The hosts webhooks may call: entries "host" (any port) or "host:port"
// ("[v6]" or "[v6]:port"), matched exactly, case-insensitively (no
// wildcards, no name resolution). Empty: webhooks are off.
class WebhookAllowlist {
 public:
  WebhookAllowlist() = default;
  // INVALID_ARGUMENT naming a malformed entry.
  [[nodiscard]] static absl::StatusOr<WebhookAllowlist> Parse(
      const std::vector<std::string>& entries);
  bool empty() const { return entries_.empty(); }
  // The URL, parsed, when it is a webhook URL (else INVALID_ARGUMENT) to an
  // allowed host (else PERMISSION_DENIED, naming the host and the flag).
  [[nodiscard]] absl::StatusOr<WebhookUrl> Check(absl::string_view url) const;

 private:
  struct Entry {
    std::string host;
    int port = 0;  // 0: any
  };
  std::vector<Entry> entries_;
};

// What kWebhookSignatureHeader signs: "<timestamp>.<delivery id>.<body>",
// the timestamp in unix seconds as kWebhookTimestampHeader carries it.
std::string WebhookSignedContent(int64_t timestamp, int64_t delivery_id, absl::string_view body);

// "sha256=<hex>": HMAC-SHA256 of WebhookSignedContent under `secret`
// (OpenSSL).
std::string SignWebhook(absl::string_view secret, int64_t timestamp, int64_t delivery_id,
                        absl::string_view body);

}  // namespace fca::jobs

#endif  // FCA_SERVER_JOBS_WEBHOOK_POLICY_H_
