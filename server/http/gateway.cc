#include "server/http/gateway.h"

#include <glog/logging.h>
#include <httplib.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host_port.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "server/auth/stream_key_check.h"
#include "server/http/event_stream.h"
#include "server/http/query_params.h"
#include "server/http/transport.h"
#include "server/http/web/assets.h"

namespace fca::http {
namespace {

// ---------------------------------------------------------- cross-site

CrossSiteRequest CrossSiteOf(const httplib::Request& req, bool changes_state) {
  CrossSiteRequest r;
  r.host = Header(req, "Host");
  r.origin = Header(req, "Origin");
  r.content_type = Header(req, "Content-Type");
  r.changes_state = changes_state;
  return r;
}

// CORS for an allowed foreign origin (its responses may then be read).
void AllowOrigin(const httplib::Request& req, httplib::Response& res,
                 const CrossSitePolicy& policy) {
  res.set_header("Vary", "Origin");
  const std::optional<std::string> origin = Header(req, "Origin");
  if (origin && IsAllowedOrigin(*origin, policy)) {
    res.set_header("Access-Control-Allow-Origin", *origin);
  }
}

// The refusal of a cross-site request (cross_site.h), logged; nullopt when
// the request passes.
std::optional<ApiReply> CrossSiteRefusal(const httplib::Request& req, bool changes_state,
                                         const CrossSitePolicy& policy) {
  const absl::Status status = CheckCrossSite(CrossSiteOf(req, changes_state), policy);
  if (status.ok()) return std::nullopt;
  LOG(WARNING) << "http: " << Peer(req) << " " << req.method << " " << req.path.substr(0, 80)
               << ": " << status.message();
  return ErrorReply(status, absl::IsInvalidArgument(status) ? 415 : 403);
}

// CORS preflight: only for the allowed origins (a browser asks before a
// cross-site JSON POST or a request with the Authorization header).
void AnswerPreflight(const httplib::Request& req, httplib::Response& res,
                     const CrossSitePolicy& policy) {
  absl::Status status = CheckCrossSite(CrossSiteOf(req, false), policy);
  const std::optional<std::string> origin = Header(req, "Origin");
  if (status.ok() && !(origin && IsAllowedOrigin(*origin, policy))) {
    status = absl::PermissionDeniedError(
        "cross-site request refused: no CORS for this origin (see --http_allowed_origins)");
  }
  if (!status.ok()) {
    Send(res, ErrorReply(status, 403));
    return;
  }
  AllowOrigin(req, res, policy);
  res.set_header("Access-Control-Allow-Methods", "GET, POST");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID");
  res.set_header("Access-Control-Max-Age", "600");
  res.status = 204;
}

// ------------------------------------------------------------ dashboard

void ServeAsset(const std::string& path, httplib::Response& res) {
  SetHandler("ui");
  std::optional<Asset> found = FindAsset(path.empty() ? "index.html" : path);
  if (!found) {
    Send(res, ErrorReply(absl::NotFoundError("no such file")));
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_content(std::string(found->bytes), std::string(found->content_type));
}

}  // namespace

Gateway::Gateway(core::AuditServiceCore* core, auth::Authenticator auth, GatewayOptions options,
                 ApiHandlers api, CrossSitePolicy cross_site)
    : core_(core),
      auth_(std::move(auth)),
      options_(std::move(options)),
      cross_site_(std::move(cross_site)),
      api_(std::move(api)),
      // Half the threads at most: event streams hold theirs while open.
      event_streams_(std::min<int64_t>(options_.max_event_streams, options_.threads / 2),
                     CountEventStreams) {}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(core::AuditServiceCore* core,
                                                        auth::Authenticator auth,
                                                        GatewayOptions options) {
  if (options.threads < 2 || options.threads > 100000) {
    return absl::InvalidArgumentError("the HTTP gateway needs 2 to 100000 threads");
  }
  if (options.max_body_bytes < 1) {
    return absl::InvalidArgumentError("the HTTP gateway's body limit must be positive");
  }
  absl::StatusOr<HostPort> address = ParseHostPort(options.listen);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the HTTP address ", address.status().message()));
  }
  FCA_ASSIGN_OR_RETURN(
      CrossSitePolicy cross_site,
      CrossSitePolicy::Make(address->host, options.allowed_hosts, options.allowed_origins));
  FCA_ASSIGN_OR_RETURN(ApiHandlers api, ApiHandlers::Create(core));
  if (options.request_timeout < std::chrono::milliseconds(1) || options.max_connections < 1 ||
      options.max_connections_per_address < 1) {
    return absl::InvalidArgumentError(
        "the HTTP gateway's request timeout and connection caps must be positive");
  }
  TransportOptions transport;
  transport.address = *address;
  transport.threads = options.threads;
  transport.max_body_bytes = options.max_body_bytes;
  transport.request_timeout = options.request_timeout;
  transport.max_connections = options.max_connections;
  transport.max_connections_per_address = options.max_connections_per_address;
  transport.bodies = core->upload_budget();
  transport.tls_cert_file = options.tls_cert_file;
  transport.tls_key_file = options.tls_key_file;
  std::unique_ptr<Gateway> g(new Gateway(core, std::move(auth), std::move(options), std::move(api),
                                         std::move(cross_site)));
  transport.body_gate = [gateway = g.get()](std::optional<absl::string_view> authorization,
                                            const std::string& address, int port) {
    return gateway->BodySender(authorization, address, port);
  };
  g->host_ = address->host;
  FCA_ASSIGN_OR_RETURN(g->transport_, Transport::Bind(transport, g->options_.listen));
  g->RouteApi();
  g->RouteEvents();
  g->RouteProbesAndDashboard();
  FCA_RETURN_IF_ERROR(g->transport_->Start());
  return g;
}

Gateway::~Gateway() { Shutdown(); }

int Gateway::port() const { return transport_->port(); }
bool Gateway::tls() const { return transport_->tls(); }

void Gateway::Shutdown() {
  shutting_down_ = true;
  if (transport_ != nullptr) transport_->Stop();
}

std::variant<core::Caller, ApiReply> Gateway::Admit(const httplib::Request& req,
                                                    httplib::Response& res,
                                                    bool changes_state) const {
  if (std::optional<ApiReply> refusal = CrossSiteRefusal(req, changes_state, cross_site_)) {
    return *std::move(refusal);
  }
  AllowOrigin(req, res, cross_site_);
  const std::optional<std::string> header = Header(req, "Authorization");
  std::optional<absl::string_view> authorization;
  if (header) authorization = *header;
  absl::StatusOr<core::Caller> caller = auth_.Authenticate(authorization, Peer(req));
  if (!caller.ok()) return ErrorReply(caller.status());
  if (absl::Status allowed = auth::MayCallAuditService(*caller); !allowed.ok()) {
    return ErrorReply(allowed);
  }
  return *std::move(caller);
}

absl::StatusOr<std::string> Gateway::BodySender(std::optional<absl::string_view> authorization,
                                                const std::string& address, int port) const {
  FCA_ASSIGN_OR_RETURN(const core::Caller caller,
                       auth_.Authenticate(authorization, Peer(address, port)));
  FCA_RETURN_IF_ERROR(auth::MayCallAuditService(caller));
  return caller.user;
}

void Gateway::RouteApi() {
  httplib::Server& s = transport_->server();
  s.Options(R"(/api/v1/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    SetHandler("preflight");
    AnswerPreflight(req, res, cross_site_);
  });
  // One API call: the method by name, the caller, the body.
  auto serve = [this](const httplib::Request& req, httplib::Response& res, const std::string& name,
                      const std::string& body) {
    if (api_.Find(name) != nullptr) SetHandler(name);
    Send(res, api_.HandleUnary(name, req.method, body, [&](const ApiMethod& method) {
      return Admit(req, res, !method.read_only);
    }));
  };
  const std::string kMethodPattern = R"(/api/v1/([A-Za-z][A-Za-z0-9]*))";
  s.Post(kMethodPattern, [this, serve](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& read) {
    const std::string name = req.matches[1];
    absl::StatusOr<std::string> body = ReadBody(req, res, read, options_.max_body_bytes);
    if (!body.ok()) {
      const bool too_large = absl::IsResourceExhausted(body.status());
      if (too_large) SetHandler(api_.Find(name) != nullptr ? name : "unmatched");
      res.set_header("Connection", "close");
      Send(res, ErrorReply(body.status(), too_large ? 413 : 0));
      return;
    }
    serve(req, res, name, *body);
  });
  // A read-only method's request from the query (query_params.h): every
  // parameter is a field, or the request is refused naming it.
  s.Get(kMethodPattern, [this, serve](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const ApiMethod* method = api_.Find(name);
    if (req.params.empty() || method == nullptr || !method->read_only) {
      return serve(req, res, name, "");
    }
    const absl::StatusOr<std::string> body =
        QueryToJson(*method->request, QueryParams(req.params.begin(), req.params.end()));
    if (!body.ok()) {
      SetHandler(name);
      return Send(res, ErrorReply(body.status()));
    }
    serve(req, res, name, *body);
  });
}

void Gateway::RouteEvents() {
  transport_->server().Get(
      R"(/api/v1/jobs/([0-9]{1,18})/events)",
      [this](const httplib::Request& req, httplib::Response& res) { ServeEvents(req, res); });
}

void Gateway::ServeEvents(const httplib::Request& req, httplib::Response& res) {
  SetHandler("events");
  std::variant<core::Caller, ApiReply> admitted = Admit(req, res, false);
  if (const ApiReply* refusal = std::get_if<ApiReply>(&admitted)) return Send(res, *refusal);
  const core::Caller caller = std::get<core::Caller>(admitted);
  int64_t job_id = 0;
  if (!absl::SimpleAtoi(std::string(req.matches[1]), &job_id)) {
    return Send(res, ErrorReply(absl::InvalidArgumentError("bad job id")));
  }
  const absl::StatusOr<int64_t> after = ResumeAfter(
      Header(req, "Last-Event-ID"),
      req.has_param("after_seq") ? std::optional<std::string>(req.get_param_value("after_seq"))
                                 : std::nullopt);
  if (!after.ok()) return Send(res, ErrorReply(after.status()));
  // Errors are answered with their status before the stream starts; once
  // it has, they come as one `event: error`.
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  if (absl::StatusOr<v1::GetJobResponse> job = core_->GetJob(caller, get); !job.ok()) {
    return Send(res, ErrorReply(job.status()));
  }
  if (shutting_down_) {
    return Send(res, ErrorReply(absl::UnavailableError("the server is shutting down")));
  }
  absl::StatusOr<std::shared_ptr<StreamShares::Slot>> slot =
      event_streams_.Acquire(caller.user, "event streams");
  if (!slot.ok()) return Send(res, ErrorReply(slot.status()));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
  res.set_chunked_content_provider(
      "text/event-stream", [this, slot = *std::move(slot), caller, job_id, after = *after,
                            authorization = Header(req, "Authorization"),
                            peer = Peer(req)](size_t, httplib::DataSink& sink) {
        JobEventWriter writer(
            [&sink](absl::string_view text) { return sink.write(text.data(), text.size()); },
            options_.keepalive_interval, &shutting_down_, JobEventWriter::Clock::now);
        auth::StreamKeyCheck key(&auth_, authorization, peer);
        if (!StreamJobEvents(*core_, caller, job_id, after, writer,
                             [&](bool at_event) { return key.Check(at_event); })) {
          return false;
        }
        sink.done();
        return true;
      });
}

void Gateway::RouteProbesAndDashboard() {
  httplib::Server& s = transport_->server();
  s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    SetHandler("metrics");
    res.set_header("Cache-Control", "no-store");
    res.set_content(metrics::Registry::Default().Expose(),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    SetHandler("healthz");
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    SetHandler("readyz");
    absl::Status ready = shutting_down_   ? absl::UnavailableError("shutting down")
                         : options_.ready ? options_.ready()
                                          : absl::OkStatus();
    if (ready.ok()) {
      res.set_content("ready\n", "text/plain; charset=utf-8");
    } else {
      res.status = 503;
      res.set_content(absl::StrCat("not ready: ", ready.message(), "\n"),
                      "text/plain; charset=utf-8");
    }
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) { ServeAsset("", res); });
  s.Get("/ui", [](const httplib::Request&, httplib::Response& res) { ServeAsset("", res); });
  s.Get(R"(/ui/(.*))", [](const httplib::Request& req, httplib::Response& res) {
    ServeAsset(req.matches[1], res);
  });
}

}  // namespace fca::http
