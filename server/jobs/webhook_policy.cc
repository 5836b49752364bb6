#include "server/jobs/webhook_policy.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace fca::jobs {
namespace {

absl::Status BadUrl(const std::string& why) {
  return absl::InvalidArgumentError("webhook url: " + why);
}

// "host", "host:port", "[v6]" or "[v6]:port"; port 0 when absent.
absl::Status SplitHostPort(absl::string_view text, std::string* host, int* port) {
  absl::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("unclosed '['");
    *host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.find(':');
    *host = std::string(text.substr(0, colon));
    rest = colon == absl::string_view::npos ? "" : text.substr(colon);
  }
  if (host->empty()) return absl::InvalidArgumentError("no host");
  *host = absl::AsciiStrToLower(*host);
  *port = 0;
  if (rest.empty()) return absl::OkStatus();
  if (rest.front() != ':' || !absl::SimpleAtoi(rest.substr(1), port) || *port < 1 ||
      *port > 65535) {
    return absl::InvalidArgumentError("the port must be a number in [1, 65535]");
  }
  return absl::OkStatus();
}

}  // namespace

std::string WebhookUrl::Origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(scheme, "://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

absl::StatusOr<WebhookUrl> ParseWebhookUrl(absl::string_view url) {
  if (url.empty()) return BadUrl("empty");
  if (url.size() > kMaxWebhookUrlBytes) {
    return BadUrl(absl::StrFormat("longer than %d bytes", kMaxWebhookUrlBytes));
  }
  for (char c : url) {
    if (c <= ' ' || c >= 127) return BadUrl("only printable ASCII without spaces is allowed");
  }
  const size_t sep = url.find("://");
  if (sep == absl::string_view::npos) return BadUrl("not an absolute URL (scheme://host/...)");
  WebhookUrl out;
  out.scheme = absl::AsciiStrToLower(url.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https") {
    return BadUrl(absl::StrFormat("scheme '%s' is refused; use http or https",
                                  std::string(url.substr(0, std::min<size_t>(sep, 16)))));
  }
  absl::string_view rest = url.substr(sep + 3);
  if (rest.find('#') != absl::string_view::npos) return BadUrl("a fragment ('#') is never sent");
  const size_t end = rest.find_first_of("/?");
  const absl::string_view authority = rest.substr(0, end);
  if (authority.find('@') != absl::string_view::npos) {
    return BadUrl("user info ('user@host') is refused; the body is signed instead");
  }
  const absl::Status split = SplitHostPort(authority, &out.host, &out.port);
  if (!split.ok()) return BadUrl(std::string(split.message()));
  if (out.port == 0) out.port = out.scheme == "https" ? 443 : 80;
  out.target = end == absl::string_view::npos ? "/" : std::string(rest.substr(end));
  if (out.target.front() == '?') out.target = "/" + out.target;
  return out;
}

absl::StatusOr<WebhookAllowlist> WebhookAllowlist::Parse(const std::vector<std::string>& entries) {
  WebhookAllowlist list;
  for (const std::string& raw : entries) {
    const std::string text(absl::StripAsciiWhitespace(raw));
    if (text.empty()) continue;
    Entry entry;
    const absl::Status split = SplitHostPort(text, &entry.host, &entry.port);
    if (!split.ok() || text.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--webhook_allow entry '%s' is not host or host:port%s", text.substr(0, 64),
          split.ok() ? "" : absl::StrCat(" (", split.message(), ")")));
    }
    list.entries_.push_back(std::move(entry));
  }
  return list;
}

absl::StatusOr<WebhookUrl> WebhookAllowlist::Check(absl::string_view url) const {
  FCA_ASSIGN_OR_RETURN(WebhookUrl parsed, ParseWebhookUrl(url));
  if (entries_.empty()) {
    return absl::PermissionDeniedError(
        "webhooks are off on this server: its --webhook_allow lists no host");
  }
  for (const Entry& e : entries_) {
    if (e.host == parsed.host && (e.port == 0 || e.port == parsed.port)) return parsed;
  }
  return absl::PermissionDeniedError(
      absl::StrFormat("webhook url: host %s port %d is not in the server's --webhook_allow",
                      parsed.host, parsed.port));
}

std::string WebhookSignedContent(int64_t timestamp, int64_t delivery_id, absl::string_view body) {
  return absl::StrCat(timestamp, ".", delivery_id, ".", body);
}

std::string SignWebhook(absl::string_view secret, int64_t timestamp, int64_t delivery_id,
                        absl::string_view body) {
  const std::string signed_content = WebhookSignedContent(timestamp, delivery_id, body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                 reinterpret_cast<const unsigned char*>(signed_content.data()),
                                 signed_content.size(), mac, &size);
  static const char kHex[] = "0123456789abcdef";
  std::string out = "sha256=";
  // A failed HMAC (a broken OpenSSL) signs nothing a receiver accepts.
  if (ok == nullptr) return out;
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

}  // namespace fca::jobs
