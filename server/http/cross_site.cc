#include "server/http/cross_site.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fca::http {
namespace {

bool IsIpLiteral(const std::string& name) {
  in6_addr buffer;
  return inet_pton(AF_INET, name.c_str(), &buffer) == 1 ||
         inet_pton(AF_INET6, name.c_str(), &buffer) == 1;
}

// Letters, digits, '-', '_' and '.', not empty, at most 253 characters.
bool IsHostNameText(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

bool IsPort(absl::string_view text) {
  int port = 0;
  return !text.empty() && text.size() <= 5 &&
         std::all_of(text.begin(), text.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) &&
         absl::SimpleAtoi(text, &port) && port <= 65535;
}

// "host[:port]" or "[v6]:port" -> the lower-case name and the port text
// (empty when absent); false when malformed.
bool SplitAuthority(absl::string_view authority, std::string* name, std::string* port) {
  authority = absl::StripAsciiWhitespace(authority);
  absl::string_view host = authority;
  absl::string_view rest;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    rest = host.substr(close + 1);
    host = host.substr(0, close);
    if (!rest.empty() && !absl::ConsumePrefix(&rest, ":")) return false;
    *name = absl::AsciiStrToLower(host);
    if (!IsIpLiteral(*name)) return false;
  } else {
    const size_t colon = host.find(':');
    if (colon != absl::string_view::npos) {
      rest = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
    absl::ConsumeSuffix(&host, ".");  // "example.org." names example.org
    if (!IsHostNameText(host)) return false;
    *name = absl::AsciiStrToLower(host);
  }
  if (!rest.empty() && !IsPort(rest)) return false;
  *port = std::string(rest);
  return true;
}

struct Origin {
  std::string scheme, host;
  int port = 0;
};

// "scheme://host[:port]" with scheme http or https, no path (a trailing
// '/' is tolerated in flags).
std::optional<Origin> ParseOrigin(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::ConsumeSuffix(&text, "/");
  Origin origin;
  const std::string lower = absl::AsciiStrToLower(text);
  absl::string_view rest = lower;
  if (absl::ConsumePrefix(&rest, "http://")) {
    origin.scheme = "http";
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    origin.scheme = "https";
  } else {
    return std::nullopt;
  }
  std::string port;
  if (rest.find_first_of("/?#@") != absl::string_view::npos ||
      !SplitAuthority(rest, &origin.host, &port)) {
    return std::nullopt;
  }
  origin.port = origin.scheme == "https" ? 443 : 80;
  if (!port.empty() && !absl::SimpleAtoi(port, &origin.port)) return std::nullopt;
  return origin;
}

std::string Normalized(const Origin& o) {
  const bool default_port =
      (o.scheme == "http" && o.port == 80) || (o.scheme == "https" && o.port == 443);
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  return default_port ? absl::StrCat(o.scheme, "://", host)
                      : absl::StrCat(o.scheme, "://", host, ":", o.port);
}

bool HostAllowed(const std::string& name, const CrossSitePolicy& policy) {
  if (IsIpLiteral(name) || name == "localhost" || absl::EndsWith(name, ".localhost")) return true;
  for (const std::string& allowed : policy.allowed_hosts) {
    if (allowed == "*" || allowed == name) return true;
    // ".lab.example.org" matches lab.example.org and every name under it.
    if (allowed.front() == '.' && (name == allowed.substr(1) || absl::EndsWith(name, allowed))) {
      return true;
    }
  }
  return false;
}

// Whether the Origin is the page of this very server: its host and port
// are the request's Host. The scheme is not compared, so that a proxy that
// ends TLS in front of a plain-HTTP gateway keeps working.
bool IsOwnOrigin(const Origin& origin, absl::string_view host_header) {
  std::string name, port_text;
  if (!SplitAuthority(host_header, &name, &port_text)) return false;
  int port = origin.scheme == "https" ? 443 : 80;
  if (!port_text.empty() && !absl::SimpleAtoi(port_text, &port)) return false;
  return name == origin.host && port == origin.port;
}

bool IsJson(absl::string_view content_type) {
  const absl::string_view media = content_type.substr(0, content_type.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(media), "application/json");
}

std::vector<std::string> SplitList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return out;
}

}  // namespace

std::optional<std::string> HostName(absl::string_view host_header) {
  std::string name, port;
  if (!SplitAuthority(host_header, &name, &port)) return std::nullopt;
  return name;
}

absl::StatusOr<CrossSitePolicy> CrossSitePolicy::Make(absl::string_view listen_host,
                                                      absl::string_view allowed_hosts,
                                                      absl::string_view allowed_origins) {
  CrossSitePolicy policy;
  for (const std::string& host : SplitList(allowed_hosts)) {
    absl::string_view domain = host;
    absl::ConsumePrefix(&domain, ".");
    if (host != "*" && !IsHostNameText(domain)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--http_allowed_hosts: '%s' is not a host name (no port or scheme; '.example.org' for "
          "a domain, '*' for any)",
          host));
    }
    policy.allowed_hosts.push_back(absl::AsciiStrToLower(host));
  }
  for (const std::string& text : SplitList(allowed_origins)) {
    const std::optional<Origin> origin = ParseOrigin(text);
    if (!origin) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--http_allowed_origins: '%s' is not an origin (http[s]://host[:port], no path)", text));
    }
    policy.allowed_origins.push_back(Normalized(*origin));
  }
  // The listen address's name and this machine's: how a lab reaches the
  // server when no proxy names it otherwise.
  const std::string listen = absl::AsciiStrToLower(listen_host);
  if (IsHostNameText(listen) && !IsIpLiteral(listen)) policy.allowed_hosts.push_back(listen);
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && IsHostNameText(name)) {
    policy.allowed_hosts.push_back(absl::AsciiStrToLower(name));
  }
  return policy;
}

bool IsAllowedOrigin(absl::string_view origin, const CrossSitePolicy& policy) {
  const std::optional<Origin> parsed = ParseOrigin(origin);
  if (!parsed) return false;
  const std::string normalized = Normalized(*parsed);
  return std::find(policy.allowed_origins.begin(), policy.allowed_origins.end(), normalized) !=
         policy.allowed_origins.end();
}

absl::Status CheckCrossSite(const CrossSiteRequest& request, const CrossSitePolicy& policy) {
  // A request without Host (HTTP/1.0) comes from no browser.
  if (request.host) {
    const std::optional<std::string> name = HostName(*request.host);
    if (!name || !HostAllowed(*name, policy)) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "cross-site request refused: this server does not answer to the host '%s' (a "
          "DNS-rebinding guard; a name the server is reached by goes in --http_allowed_hosts)",
          request.host->substr(0, 100)));
    }
  }
  if (request.origin) {
    const std::optional<Origin> origin = ParseOrigin(*request.origin);
    const bool own = origin && request.host && IsOwnOrigin(*origin, *request.host);
    if (!own && !IsAllowedOrigin(*request.origin, policy)) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "cross-site request refused: the page at origin '%s' is not this server's (a page "
          "that may call this API goes in --http_allowed_origins)",
          request.origin->substr(0, 100)));
    }
  }
  if (request.changes_state && !(request.content_type && IsJson(*request.content_type))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a call that changes state needs 'Content-Type: application/json' (got '%s'), so that "
        "a browser cannot send it from another site without asking first",
        request.content_type.value_or("").substr(0, 100)));
  }
  return absl::OkStatus();
}

}  // namespace fca::http
