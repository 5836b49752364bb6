#include "server/http/request_head.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "server/http/json_io.h"

namespace fca::http {
namespace {

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Service Unavailable";
  }
}

// RFC 9110 5.6.2: token = 1*tchar.
bool IsToken(absl::string_view text) {
  static constexpr absl::string_view kMarks = "!#$%&'*+-.^_`|~";
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isalnum(c) || kMarks.find(c) != absl::string_view::npos;
  });
}

}  // namespace

bool IsProbe(absl::string_view method, absl::string_view target) {
  const absl::string_view path = target.substr(0, target.find('?'));
  return method == "GET" && (path == "/healthz" || path == "/readyz" || path == "/metrics");
}

std::variant<Head, Refusal> ParseHead(absl::string_view text) {
  auto malformed = [](absl::string_view why) {
    return Refusal{400, absl::InvalidArgumentError(absl::StrCat("malformed request: ", why)),
                   "malformed"};
  };
  std::vector<absl::string_view> lines =
      absl::StrSplit(text.substr(0, text.size() - 4), absl::ByString("\r\n"));
  std::vector<absl::string_view> request_line = absl::StrSplit(lines[0], ' ');
  if (request_line.size() != 3) return malformed("the request line is not METHOD TARGET VERSION");
  Head head;
  head.probe = IsProbe(request_line[0], request_line[1]);
  std::optional<int64_t> length;
  absl::StrAppend(&head.rewritten, lines[0], "\r\n");
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) return malformed("a header line without ':'");
    const absl::string_view name = lines[i].substr(0, colon);
    // RFC 9112 5.1 and 5.2: a name is a token; whitespace before the colon
    // or a folded line must be refused, or a proxy and this server could
    // read two different requests ("Content-Length : 5").
    if (!IsToken(name)) return malformed("a header name that is not a token (space before ':'?)");
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      int64_t n = 0;
      if (value.empty() || !std::all_of(value.begin(), value.end(), absl::ascii_isdigit) ||
          !absl::SimpleAtoi(value, &n) || (length && *length != n)) {
        return malformed("a bad Content-Length");
      }
      length = n;
    } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
      return Refusal{411,
                     absl::InvalidArgumentError(
                         "send the request body with a Content-Length (chunked request bodies "
                         "are not accepted)"),
                     "length_required"};
    } else if (absl::EqualsIgnoreCase(name, "Expect")) {
      head.expect_continue = absl::EqualsIgnoreCase(value, "100-continue");
      continue;  // answered here; httplib would answer it again
    } else if (absl::EqualsIgnoreCase(name, "Authorization")) {
      head.authorization = std::string(value);
    }
    absl::StrAppend(&head.rewritten, lines[i], "\r\n");
  }
  absl::StrAppend(&head.rewritten, "\r\n");
  head.content_length = length.value_or(0);
  head.length = text.size();
  return head;
}

std::string RefusalResponse(int http_status, const absl::Status& status) {
  const std::string body = ErrorJson(status);
  return absl::StrFormat(
      "HTTP/1.1 %d %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n"
      "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n%s",
      http_status, ReasonPhrase(http_status),
      http_status == 401 ? "WWW-Authenticate: Bearer\r\n" : "", body.size(), body);
}

}  // namespace fca::http
