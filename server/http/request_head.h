// A request head as the gateway's reception reads it (RFC 9112): the
// fields it acts on before httplib sees the request, and the whole
// responses it refuses a request with. Socket-free, so its tests need none.
#ifndef FCA_SERVER_HTTP_REQUEST_HEAD_H_
#define FCA_SERVER_HTTP_REQUEST_HEAD_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fca::http {

// What the reception needs of a request's head.
struct Head {
  int64_t content_length = 0;
  bool expect_continue = false;
  bool probe = false;     // GET /healthz, /readyz or /metrics
  std::string rewritten;  // the head without Expect (answered here)
  std::optional<std::string> authorization;
  size_t length = 0;  // of the head as received, "\r\n\r\n" included
};

// A request refused from its head alone: the status sent, and the reason
// counted in the refusals metric.
struct Refusal {
  int http_status;
  absl::Status status;
  const char* reason;
};

// GET /healthz, /readyz or /metrics (any query): served by the probe lane,
// and whatever the per-address cap.
bool IsProbe(absl::string_view method, absl::string_view target);

// What the reception needs of a whole head ("...\r\n\r\n"), or why it
// refuses it: 400 for a malformed head, 411 for a chunked body.
std::variant<Head, Refusal> ParseHead(absl::string_view text);

// A whole response refusing a request, for a connection that is then closed.
std::string RefusalResponse(int http_status, const absl::Status& status);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_REQUEST_HEAD_H_
