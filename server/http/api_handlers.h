// fca.v1.AuditService's unary methods as JSON, free of any HTTP library:
// a request's method name, HTTP method and body in, an ApiReply (HTTP
// status, JSON body, extra headers) out. The transport (gateway.cc) writes
// the reply; tests call HandleUnary directly (tests/http/api_handlers_test.cc).
//
// The methods served are the unary ones of the service descriptor, GET
// allowed for those the proto marks `idempotency_level = NO_SIDE_EFFECTS`;
// each is bound to its core call in one table keyed by method name
// (api_handlers.cc). A unary method without a binding, or a binding naming
// no unary method, fails Create: a new RPC cannot be half-added. WatchJob is
// the event stream (event_stream.h); UploadDataset and ExportCoefficients
// (client and server streams of binary chunks) are served by gRPC only.
#ifndef FCA_SERVER_HTTP_API_HANDLERS_H_
#define FCA_SERVER_HTTP_API_HANDLERS_H_

#include <google/protobuf/descriptor.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/caller.h"
#include "server/core/service.h"

namespace fca::http {

// What an API request gets back, before a transport writes it.
struct ApiReply {
  int status = 200;  // HTTP
  std::string json;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the content type
};

// The error body (json_io.h) with HttpStatus(code), or `http_status` when
// given; UNAUTHENTICATED adds `WWW-Authenticate: Bearer`. INTERNAL and
// UNKNOWN errors are logged: the caller learns no more than the code.
ApiReply ErrorReply(const absl::Status& status, int http_status = 0);

// One core call over JSON: the request body (a JSON object) in, the
// response's JSON out.
using JsonCall = std::function<absl::StatusOr<std::string>(
    core::AuditServiceCore& core, const core::Caller& caller, absl::string_view body)>;

// A core call bound to a method, with the message types it takes and gives.
struct CoreBinding {
  const google::protobuf::Descriptor* request = nullptr;
  const google::protobuf::Descriptor* response = nullptr;
  JsonCall call;
};

// fca.v1.AuditService, from the generated messages' file descriptor.
const google::protobuf::ServiceDescriptor& AuditServiceDescriptor();

// The table: each unary AuditService method's core call, by method name.
const std::map<std::string, CoreBinding>& CoreBindings();

// OK when `bindings` binds every unary method of `service`, each with the
// method's own request and response types, and nothing else; INTERNAL
// naming the first method that breaks this otherwise.
[[nodiscard]] absl::Status CheckBindings(const google::protobuf::ServiceDescriptor& service,
                                         const std::map<std::string, CoreBinding>& bindings);

// One method served over JSON.
struct ApiMethod {
  std::string name;        // "GetJob"
  bool read_only = false;  // NO_SIDE_EFFECTS in the proto: GET accepted too
  JsonCall call;
  const google::protobuf::Descriptor* request = nullptr;  // its request message
};

class ApiHandlers {
 public:
  // The unary methods of fca.v1.AuditService bound by CoreBindings() to
  // `core` (which must outlive this). INTERNAL when CheckBindings fails.
  [[nodiscard]] static absl::StatusOr<ApiHandlers> Create(core::AuditServiceCore* core);

  // The method of that name; nullptr when none is served.
  const ApiMethod* Find(absl::string_view name) const;

  // What the transport checks of a request for `method` once the method is
  // known (cross-site rules, authentication): the caller, or the refusal
  // to answer with.
  using Admit = std::function<std::variant<core::Caller, ApiReply>(const ApiMethod& method)>;

  // One call: an unknown `name` is 404, GET on a method that changes state
  // 405 (with `Allow: POST`), both before `admit` is asked; then the body
  // (blank: the empty message) is parsed (400 names what is wrong), the
  // core is called (its error mapped by HttpStatus) and its response
  // printed (200).
  ApiReply HandleUnary(absl::string_view name, absl::string_view http_method,
                       absl::string_view body, const Admit& admit) const;

 private:
  explicit ApiHandlers(core::AuditServiceCore* core) : core_(core) {}

  core::AuditServiceCore* core_;
  std::map<std::string, ApiMethod, std::less<>> methods_;
};

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_API_HANDLERS_H_
