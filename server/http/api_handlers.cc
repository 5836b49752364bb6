#include "server/http/api_handlers.h"

#include <glog/logging.h>
#include <google/protobuf/descriptor.pb.h>

#include <algorithm>
#include <initializer_list>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "proto/fca/v1/audit_service.pb.h"
#include "server/http/json_io.h"

namespace fca::http {
namespace {

using core::AuditServiceCore;
using core::Caller;

// `fn(core, caller, request)` over JSON: the body parsed into a Req, the
// Resp printed.
template <typename Req, typename Resp, typename Fn>
CoreBinding BindJson(Fn fn) {
  return {Req::descriptor(), Resp::descriptor(),
          [fn](AuditServiceCore& core, const Caller& caller,
               absl::string_view body) -> absl::StatusOr<std::string> {
            Req request;
            FCA_RETURN_IF_ERROR(ParseJson(body, &request));
            FCA_ASSIGN_OR_RETURN(const Resp response, fn(core, caller, request));
            return PrintJson(response);
          }};
}

// A core method that takes the request message.
template <typename Req, typename Resp>
CoreBinding Bind(absl::StatusOr<Resp> (AuditServiceCore::*fn)(const Caller&, const Req&)) {
  return BindJson<Req, Resp>([fn](AuditServiceCore& core, const Caller& caller,
                                  const Req& request) { return (core.*fn)(caller, request); });
}

// A core method whose request message has no fields: the body is still
// parsed, so an unknown field is refused as on every other method.
template <typename Req, typename Resp>
CoreBinding BindWithoutRequest(absl::StatusOr<Resp> (AuditServiceCore::*fn)(const Caller&)) {
  return BindJson<Req, Resp>([fn](AuditServiceCore& core, const Caller& caller, const Req&) {
    return (core.*fn)(caller);
  });
}

// Tokenize over JSON: `text` is the text itself, a string (what people
// send), and `text_base64` the bytes in base64 (any bytes, protobuf's own
// mapping of the bytes field); the body becomes protobuf's mapping, `text`
// in base64.
absl::StatusOr<std::string> TokenizeBody(absl::string_view body) {
  absl::StatusOr<json::Value> doc = json::Parse(std::string_view(body.data(), body.size()));
  if (!doc.ok() || !doc->is_object()) return std::string(body);  // the parser says why
  json::Object& members = doc->mutable_object();
  auto named = [&](std::initializer_list<const char*> names) {
    return std::find_if(members.begin(), members.end(), [&](const auto& m) {
      return std::find(names.begin(), names.end(), m.first) != names.end();
    });
  };
  const auto text = named({"text"});
  const auto base64 = named({"text_base64", "textBase64"});
  if (text != members.end() && base64 != members.end()) {
    return absl::InvalidArgumentError("give text (a string) or text_base64 (bytes), not both");
  }
  if (text != members.end() && text->second.is_string()) {
    text->second = json::Value::String(absl::Base64Escape(text->second.as_string()));
  } else if (base64 != members.end()) {
    base64->first = "text";
  }
  return json::Write(*doc);
}

CoreBinding BindTokenize() {
  CoreBinding binding = Bind(&AuditServiceCore::Tokenize);
  binding.call = [call = binding.call](AuditServiceCore& core, const Caller& caller,
                                       absl::string_view body) -> absl::StatusOr<std::string> {
    FCA_ASSIGN_OR_RETURN(const std::string rewritten, TokenizeBody(body));
    return call(core, caller, rewritten);
  };
  return binding;
}

bool IsUnary(const google::protobuf::MethodDescriptor& method) {
  return !method.client_streaming() && !method.server_streaming();
}

bool IsReadOnly(const google::protobuf::MethodDescriptor& method) {
  return method.options().idempotency_level() == google::protobuf::MethodOptions::NO_SIDE_EFFECTS;
}

bool IsBlank(absl::string_view body) {
  return body.find_first_not_of(" \t\r\n") == absl::string_view::npos;
}

}  // namespace

ApiReply ErrorReply(const absl::Status& status, int http_status) {
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kUnknown) {
    LOG(ERROR) << "http: " << status;
  }
  ApiReply reply;
  reply.status = http_status != 0 ? http_status : HttpStatus(status.code());
  reply.json = ErrorJson(status);
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return reply;
}

const std::map<std::string, CoreBinding>& CoreBindings() {
  namespace v1 = fca::v1;
  using Core = AuditServiceCore;
  static const auto* const bindings = new std::map<std::string, CoreBinding>{
      {"ListModels", BindWithoutRequest<v1::ListModelsRequest>(&Core::ListModels)},
      {"ListDatasets", Bind(&Core::ListDatasets)},
      {"SubmitAudit", Bind(&Core::SubmitAudit)},
      {"GetJob", Bind(&Core::GetJob)},
      {"ListJobs", Bind(&Core::ListJobs)},
      {"CancelJob", Bind(&Core::CancelJob)},
      {"DeleteJob", Bind(&Core::DeleteJob)},
      {"DeleteDataset", Bind(&Core::DeleteDataset)},
      {"QueryResults", Bind(&Core::QueryResults)},
      {"Tokenize", BindTokenize()},
      {"GetReport", Bind(&Core::GetReport)},
      {"CompareJobs", Bind(&Core::CompareJobs)},
      {"PoolJobs", Bind(&Core::PoolJobs)},
      {"GetServerInfo", BindWithoutRequest<v1::GetServerInfoRequest>(&Core::GetServerInfo)},
      {"GetQueue", BindWithoutRequest<v1::GetQueueRequest>(&Core::GetQueue)},
      {"ListJobWindows", Bind(&Core::ListJobWindows)},
      {"BackupDatabase", Bind(&Core::BackupDatabase)},
      {"CreateApiKey", Bind(&Core::CreateApiKey)},
      {"ListApiKeys", Bind(&Core::ListApiKeys)},
      {"RevokeApiKey", Bind(&Core::RevokeApiKey)},
      {"RotateApiKey", Bind(&Core::RotateApiKey)},
      {"QueryAuditLog", Bind(&Core::QueryAuditLog)},
      {"AddWebhook", Bind(&Core::AddWebhook)},
      {"ListWebhooks", Bind(&Core::ListWebhooks)},
      {"RemoveWebhook", Bind(&Core::RemoveWebhook)},
      {"ListWebhookDeliveries", Bind(&Core::ListWebhookDeliveries)},
      {"CreateProject", Bind(&Core::CreateProject)},
      {"ListProjects", Bind(&Core::ListProjects)},
      {"GetProject", Bind(&Core::GetProject)},
      {"AddProjectMember", Bind(&Core::AddProjectMember)},
      {"RemoveProjectMember", Bind(&Core::RemoveProjectMember)},
      {"DeleteProject", Bind(&Core::DeleteProject)},
      {"GetRetention", Bind(&Core::GetRetention)},
      {"SetRetention", Bind(&Core::SetRetention)},
  };
  return *bindings;
}

absl::Status CheckBindings(const google::protobuf::ServiceDescriptor& service,
                           const std::map<std::string, CoreBinding>& bindings) {
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *service.method(i);
    if (!IsUnary(method)) continue;
    auto it = bindings.find(method.name());
    if (it == bindings.end()) {
      return absl::InternalError(absl::StrFormat(
          "%s has no HTTP binding (server/http/api_handlers.cc)", method.full_name()));
    }
    if (it->second.request != method.input_type() || it->second.response != method.output_type()) {
      return absl::InternalError(
          absl::StrFormat("the HTTP binding of %s takes or gives other messages than the method",
                          method.full_name()));
    }
  }
  for (const auto& [name, binding] : bindings) {
    const google::protobuf::MethodDescriptor* method = service.FindMethodByName(name);
    if (method == nullptr || !IsUnary(*method)) {
      return absl::InternalError(absl::StrFormat("the HTTP binding %s names no unary method of %s",
                                                 name, service.full_name()));
    }
  }
  return absl::OkStatus();
}

const google::protobuf::ServiceDescriptor& AuditServiceDescriptor() {
  // Messages carry their file's descriptor, services too: no gRPC needed.
  return *v1::ListModelsRequest::descriptor()->file()->FindServiceByName("AuditService");
}

absl::StatusOr<ApiHandlers> ApiHandlers::Create(core::AuditServiceCore* core) {
  const google::protobuf::ServiceDescriptor& service = AuditServiceDescriptor();
  FCA_RETURN_IF_ERROR(CheckBindings(service, CoreBindings()));
  ApiHandlers handlers(core);
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *service.method(i);
    if (!IsUnary(method)) continue;
    handlers.methods_[method.name()] =
        ApiMethod{method.name(), IsReadOnly(method), CoreBindings().at(method.name()).call,
                  method.input_type()};
  }
  return handlers;
}

const ApiMethod* ApiHandlers::Find(absl::string_view name) const {
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

ApiReply ApiHandlers::HandleUnary(absl::string_view name, absl::string_view http_method,
                                  absl::string_view body, const Admit& admit) const {
  const ApiMethod* method = Find(name);
  const google::protobuf::MethodDescriptor* streaming =
      AuditServiceDescriptor().FindMethodByName(std::string(name));
  if (method == nullptr && streaming != nullptr) {
    // A stream (UploadDataset's chunks, WatchJob's events, exported
    // coefficients) has no JSON body.
    return ErrorReply(absl::UnimplementedError(absl::StrFormat(
        "%s streams and is not served over JSON: use gRPC or the fca CLI (%s)", name,
        name == "UploadDataset" ? "fca datasets upload"
        : name == "WatchJob"    ? "fca watch; here GET /api/v1/jobs/<id>/events"
                                : "fca export")));
  }
  if (method == nullptr) {
    return ErrorReply(absl::NotFoundError(
        absl::StrFormat("no such method: %s (fca.v1.AuditService over JSON)", name.substr(0, 64))));
  }
  if (http_method == "GET" && !method->read_only) {
    ApiReply reply = ErrorReply(
        absl::InvalidArgumentError(absl::StrCat(method->name, " changes state: use POST")), 405);
    reply.headers.emplace_back("Allow", "POST");
    return reply;
  }
  std::variant<core::Caller, ApiReply> admitted = admit(*method);
  if (auto* refusal = std::get_if<ApiReply>(&admitted)) return std::move(*refusal);
  const absl::StatusOr<std::string> out =
      method->call(*core_, std::get<core::Caller>(admitted), IsBlank(body) ? "{}" : body);
  if (!out.ok()) return ErrorReply(out.status());
  ApiReply reply;
  reply.json = *out;
  return reply;
}

}  // namespace fca::http
