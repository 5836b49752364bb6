#include "server/http/gateway.h"

#include <glog/logging.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "server/http/web/assets.h"

namespace fca::http {
namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------ metrics

metrics::Family<metrics::Counter>& HttpRequests() {
  static auto& f = metrics::Registry::Default().AddCounter(
      "fca_http_requests_total",
      "HTTP requests served, by handler (the RPC name, events, metrics, healthz, readyz, ui, "
      "unmatched) and HTTP status code.",
      {"handler", "code"});
  return f;
}
metrics::Family<metrics::Histogram>& HttpLatency() {
  static auto& f = metrics::Registry::Default().AddHistogram(
      "fca_http_request_duration_seconds",
      "Latency of HTTP requests (event streams: their whole life), by handler and HTTP status "
      "code.",
      {"handler", "code"}, metrics::LatencyBuckets());
  return f;
}
metrics::Gauge& EventStreams() {
  static auto& g = metrics::Registry::Default()
                       .AddGauge("fca_http_event_streams", "Job event streams open now.")
                       .WithLabels();
  return g;
}

// What the logger needs of the request being served on this thread: set
// by the pre-routing handler and the route, read by the logger, which runs
// on the same thread once the response (a whole event stream) is written.
struct RequestContext {
  bool started = false;
  Clock::time_point start;
  std::string handler;
};
thread_local RequestContext t_request;

// --------------------------------------------------------- thread pool

// httplib's pool with a bounded queue: when every thread is busy and the
// queue is full, the accepting thread waits (new connections then wait in
// the kernel's backlog) instead of queueing without limit.
class BoundedThreadPool final : public httplib::TaskQueue {
 public:
  BoundedThreadPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~BoundedThreadPool() override = default;

  void enqueue(std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BoundedThreadPool::HasSpace));
    jobs_.push_back(std::move(fn));
  }

  void shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 private:
  // Conditions of the waits on mu_, which absl::Mutex re-checks whenever
  // mu_ is released: enqueue, Work and shutdown need no notify.
  bool HasSpace() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return jobs_.size() < max_queued_ || shutdown_;
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || shutdown_; }

  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &BoundedThreadPool::HasWork));
        if (jobs_.empty()) return;  // shut down
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_queued_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

// ---------------------------------------------------------------- JSON

// Text that goes into a JSON string: valid UTF-8 (other bytes become '?').
std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (ok && n > 1) {
      // Overlong forms, surrogates and values past U+10FFFF.
      const unsigned char c1 = static_cast<unsigned char>(text[i + 1]);
      if ((n == 2 && c < 0xC2) || (n == 3 && c == 0xE0 && c1 < 0xA0) ||
          (n == 3 && c == 0xED && c1 >= 0xA0) || (n == 4 && c == 0xF0 && c1 < 0x90) ||
          (n == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90)))) {
        ok = false;
      }
    }
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    out.append(text.data() + i, n);
    i += n;
  }
  return out;
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : ValidUtf8(text)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string ErrorJson(const absl::Status& status) {
  return absl::StrCat("{\"code\":", JsonString(absl::StatusCodeToString(status.code())),
                      ",\"message\":", JsonString(status.message()), "}");
}

template <typename Message>
absl::Status ParseJson(const std::string& body, Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a typo must not pass silently
  const auto status = google::protobuf::util::JsonStringToMessage(body, message, options);
  if (status.ok()) return absl::OkStatus();
  // The parser's message names the field ("bogus: Cannot find field.");
  // syntax errors come with a caret line, folded here into one line.
  std::string why(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  absl::StripAsciiWhitespace(&why);
  return absl::InvalidArgumentError(
      absl::StrFormat("the request body is not a valid %s in JSON: %s",
                      Message::descriptor()->full_name(), why.empty() ? "malformed" : why));
}

template <typename Message>
absl::StatusOr<std::string> PrintJson(const Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the response as JSON: ", std::string(status.message())));
  }
  return out;
}

// A method whose core call takes the request message.
template <typename Req, typename Resp>
Gateway::Method Unary(bool read_only,
                      std::function<absl::StatusOr<Resp>(const core::Caller&, const Req&)> call) {
  Gateway::Method m;
  m.read_only = read_only;
  m.call = [call = std::move(call)](const core::Caller& caller,
                                    const std::string& body) -> absl::StatusOr<std::string> {
    Req request;
    FCA_RETURN_IF_ERROR(ParseJson(body, &request));
    FCA_ASSIGN_OR_RETURN(const Resp response, call(caller, request));
    return PrintJson(response);
  };
  return m;
}

// ---------------------------------------------------------- responses

void SendJson(httplib::Response& res, int status, const std::string& json) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(json, "application/json");
}

void SendError(httplib::Response& res, const absl::Status& status, int http_status = 0) {
  if (status.code() == absl::StatusCode::kInternal || status.code() == absl::StatusCode::kUnknown) {
    LOG(ERROR) << "http: " << status;
  }
  SendJson(res, http_status != 0 ? http_status : HttpStatus(status.code()), ErrorJson(status));
}

std::string Peer(const httplib::Request& req) {
  return absl::StrCat("http ", req.remote_addr, ":", req.remote_port);
}

// ---------------------------------------------------------- cross-site

// The dashboard loads only its own files and may not be framed; no
// response is sniffed for another type. (Every response: cheap, and a
// JSON or error page is no more frameable than the dashboard.)
void SetSecurityHeaders(httplib::Response& res) {
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                 "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
}

std::optional<std::string> Header(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

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

// Answers a cross-site request (cross_site.h) with its refusal: false when
// refused. A caller from an allowed origin gets CORS headers.
bool PassesCrossSite(const httplib::Request& req, httplib::Response& res, bool changes_state,
                     const CrossSitePolicy& policy) {
  const absl::Status status = CheckCrossSite(CrossSiteOf(req, changes_state), policy);
  if (!status.ok()) {
    LOG(WARNING) << "http: " << Peer(req) << " " << req.method << " " << req.path.substr(0, 80)
                 << ": " << status.message();
    SendError(res, status, absl::IsInvalidArgument(status) ? 415 : 403);
    return false;
  }
  AllowOrigin(req, res, policy);
  return true;
}

// "HOST:PORT" -> host, port; "[::1]:7401" -> "::1", 7401.
absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the HTTP address '%s' is not HOST:PORT (e.g. 127.0.0.1:7401)", listen));
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &p) || p < 0 || p > 65535 || host->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the HTTP address '%s' is not HOST:PORT with a port in [0, 65535]", listen));
  }
  *port = p;
  return absl::OkStatus();
}

// A non-negative integer of at most 18 digits (no sign, no spaces).
bool ParseSeq(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(text, out);
}

// Holds one place among the open event streams while it lives.
class StreamSlot {
 public:
  explicit StreamSlot(std::atomic<int64_t>* count) : count_(count), n_(++*count) {
    EventStreams().Add(1);
  }
  ~StreamSlot() {
    --*count_;
    EventStreams().Add(-1);
  }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;
  int64_t count() const { return n_; }

 private:
  std::atomic<int64_t>* count_;
  const int64_t n_;
};

}  // namespace

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Gateway::Gateway(core::AuditServiceCore* core, grpc_server::Authenticator auth,
                 GatewayOptions options)
    : core_(core), auth_(std::move(auth)), options_(std::move(options)) {
  using core::Caller;
  namespace v1 = fca::v1;
  auto* c = core_;
  // The same methods as AuditServiceImpl. UploadDataset and
  // ExportCoefficients (client and server streams of binary chunks) are
  // served by gRPC only; WatchJob is the event stream below.
  methods_["ListModels"] = Unary<v1::ListModelsRequest, v1::ListModelsResponse>(
      true,
      [c](const Caller& caller, const v1::ListModelsRequest&) { return c->ListModels(caller); });
  methods_["ListDatasets"] = Unary<v1::ListDatasetsRequest, v1::ListDatasetsResponse>(
      true, [c](const Caller& caller, const v1::ListDatasetsRequest&) {
        return c->ListDatasets(caller);
      });
  methods_["SubmitAudit"] = Unary<v1::SubmitAuditRequest, v1::SubmitAuditResponse>(
      false, [c](const Caller& caller, const v1::SubmitAuditRequest& r) {
        return c->SubmitAudit(caller, r);
      });
  methods_["GetJob"] = Unary<v1::GetJobRequest, v1::GetJobResponse>(
      true, [c](const Caller& caller, const v1::GetJobRequest& r) { return c->GetJob(caller, r); });
  methods_["ListJobs"] = Unary<v1::ListJobsRequest, v1::ListJobsResponse>(
      true,
      [c](const Caller& caller, const v1::ListJobsRequest& r) { return c->ListJobs(caller, r); });
  methods_["CancelJob"] = Unary<v1::CancelJobRequest, v1::CancelJobResponse>(
      false,
      [c](const Caller& caller, const v1::CancelJobRequest& r) { return c->CancelJob(caller, r); });
  methods_["DeleteJob"] = Unary<v1::DeleteJobRequest, v1::DeleteJobResponse>(
      false,
      [c](const Caller& caller, const v1::DeleteJobRequest& r) { return c->DeleteJob(caller, r); });
  methods_["DeleteDataset"] = Unary<v1::DeleteDatasetRequest, v1::DeleteDatasetResponse>(
      false, [c](const Caller& caller, const v1::DeleteDatasetRequest& r) {
        return c->DeleteDataset(caller, r);
      });
  methods_["QueryResults"] = Unary<v1::QueryResultsRequest, v1::QueryResultsResponse>(
      true, [c](const Caller& caller, const v1::QueryResultsRequest& r) {
        return c->QueryResults(caller, r);
      });
  methods_["Tokenize"] = Unary<v1::TokenizeRequest, v1::TokenizeResponse>(
      true,
      [c](const Caller& caller, const v1::TokenizeRequest& r) { return c->Tokenize(caller, r); });
  methods_["GetReport"] = Unary<v1::GetReportRequest, v1::GetReportResponse>(
      true,
      [c](const Caller& caller, const v1::GetReportRequest& r) { return c->GetReport(caller, r); });
  methods_["CompareJobs"] = Unary<v1::CompareJobsRequest, v1::CompareJobsResponse>(
      true, [c](const Caller& caller, const v1::CompareJobsRequest& r) {
        return c->CompareJobs(caller, r);
      });
  methods_["GetServerInfo"] = Unary<v1::GetServerInfoRequest, v1::GetServerInfoResponse>(
      true, [c](const Caller& caller, const v1::GetServerInfoRequest&) {
        return c->GetServerInfo(caller);
      });
  methods_["ListJobWindows"] = Unary<v1::ListJobWindowsRequest, v1::ListJobWindowsResponse>(
      true, [c](const Caller& caller, const v1::ListJobWindowsRequest& r) {
        return c->ListJobWindows(caller, r);
      });
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(core::AuditServiceCore* core,
                                                        grpc_server::Authenticator auth,
                                                        GatewayOptions options) {
  if (options.threads < 2 || options.threads > 100000) {
    return absl::InvalidArgumentError("the HTTP gateway needs 2 to 100000 threads");
  }
  if (options.max_body_bytes < 1) {
    return absl::InvalidArgumentError("the HTTP gateway's body limit must be positive");
  }
  std::string host;
  int port = 0;
  FCA_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &port));
  FCA_ASSIGN_OR_RETURN(CrossSitePolicy cross_site,
                       CrossSitePolicy::Make(host, options.allowed_hosts, options.allowed_origins));
  std::unique_ptr<Gateway> g(new Gateway(core, std::move(auth), std::move(options)));
  g->cross_site_ = std::move(cross_site);
  g->host_ = host;
  const GatewayOptions& o = g->options_;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("the HTTP gateway's TLS needs both a certificate and a key");
  }
  if (!o.tls_cert_file.empty()) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    auto tls =
        std::make_unique<httplib::SSLServer>(o.tls_cert_file.c_str(), o.tls_key_file.c_str());
    if (!tls->is_valid()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("the HTTP gateway cannot use the TLS certificate %s with the key %s",
                          o.tls_cert_file, o.tls_key_file));
    }
    g->server_ = std::move(tls);
    g->tls_ = true;
#else
    return absl::FailedPreconditionError(
        "this build's HTTP library has no TLS: turn the HTTP gateway off (--http_listen=) or "
        "serve it on loopback behind a TLS proxy");
#endif
  } else {
    g->server_ = std::make_unique<httplib::Server>();
  }
  g->Route();
  const int threads = o.threads;
  g->server_->new_task_queue = [threads] {
    return new BoundedThreadPool(static_cast<size_t>(threads), static_cast<size_t>(threads) * 4);
  };
  // SO_REUSEADDR only. httplib's default adds SO_REUSEPORT, which lets a
  // second process of the same user bind the same address and take half of
  // the connections: a second server must fail to bind instead.
  g->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  g->server_->set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  g->server_->set_keep_alive_max_count(100);
  g->server_->set_keep_alive_timeout(5);
  g->server_->set_read_timeout(10, 0);
  g->server_->set_write_timeout(10, 0);
  if (port == 0) {
    port = g->server_->bind_to_any_port(host);
    if (port <= 0) port = -1;
  } else if (!g->server_->bind_to_port(host.c_str(), port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for HTTP on %s (in use, or not an address of this host)", o.listen));
  }
  g->port_ = port;
  httplib::Server* server = g->server_.get();
  g->listener_ = std::thread([server] { server->listen_after_bind(); });
  // stop() only stops a server that is running: wait until it is.
  for (int i = 0; i < 5000 && !server->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return g;
}

Gateway::~Gateway() { Shutdown(); }

void Gateway::Shutdown() {
  shutting_down_ = true;
  if (stopped_.exchange(true)) return;
  if (server_ != nullptr) {
    // Until the listener runs, stop() would do nothing.
    for (int i = 0; i < 5000 && listener_.joinable() && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
  }
  if (listener_.joinable()) listener_.join();
}

void Gateway::Route() {
  httplib::Server& s = *server_;
  // Families exist (empty) before the first request.
  HttpRequests();
  HttpLatency();
  EventStreams();

  s.set_pre_routing_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        t_request.started = true;
        t_request.start = Clock::now();
        t_request.handler = "unmatched";
        SetSecurityHeaders(res);
        return httplib::Server::HandlerResponse::Unhandled;
      }));
  s.set_logger([](const httplib::Request&, const httplib::Response& res) {
    // Requests refused before routing (a malformed request line) have no
    // start time: they count with a latency of 0.
    const double seconds =
        t_request.started ? std::chrono::duration<double>(Clock::now() - t_request.start).count()
                          : 0.0;
    const std::string handler = t_request.started ? t_request.handler : "unmatched";
    const std::string code = std::to_string(res.status);
    HttpRequests().WithLabels({handler, code}).Increment();
    HttpLatency().WithLabels({handler, code}).Observe(seconds);
    t_request.started = false;
  });
  // httplib's own refusals (a malformed request, 404 of an unknown path,
  // 413) get the API's JSON error body too.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty() || res.get_header_value("Content-Type") == "text/event-stream") {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        absl::StatusCode code = absl::StatusCode::kInvalidArgument;
        std::string message = "malformed request";
        if (res.status == 404) {
          code = absl::StatusCode::kNotFound;
          message = "no such endpoint (the API is POST /api/v1/<RpcName>)";
        } else if (res.status == 413) {
          code = absl::StatusCode::kResourceExhausted;
          message = "the request body is too large";
        } else if (res.status == 414) {
          message = "the request line is too long";
        } else if (res.status >= 500) {
          code = absl::StatusCode::kInternal;
          message = "internal error";
        }
        res.set_header("Cache-Control", "no-store");
        res.set_content(ErrorJson(absl::Status(code, message)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          if (error) std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LOG(ERROR) << "http: request failed: " << what;
        SendError(res, absl::InternalError("internal error"));
      });

  // The caller of an API request, as on gRPC: a worker key is refused.
  auto authenticate = [this](const httplib::Request& req) -> absl::StatusOr<core::Caller> {
    const bool present = req.has_header("Authorization");
    const std::string value = present ? req.get_header_value("Authorization") : "";
    absl::StatusOr<core::Caller> caller = auth_.Authenticate(
        present ? std::optional<absl::string_view>(value) : std::nullopt, Peer(req));
    if (caller.ok() && caller->worker) {
      return absl::PermissionDeniedError(
          "a worker key may call fca.v1.WorkerService only; use a user key");
    }
    return caller;
  };

  // CORS preflight: only for the allowed origins (a browser asks before a
  // cross-site JSON POST or a request with the Authorization header).
  s.Options(R"(/api/v1/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    t_request.handler = "preflight";
    absl::Status status = CheckCrossSite(CrossSiteOf(req, false), cross_site_);
    if (status.ok() && !(req.has_header("Origin") &&
                         IsAllowedOrigin(req.get_header_value("Origin"), cross_site_))) {
      status = absl::PermissionDeniedError(
          "cross-site request refused: no CORS for this origin (see --http_allowed_origins)");
    }
    if (!status.ok()) {
      SendError(res, status, 403);
      return;
    }
    AllowOrigin(req, res, cross_site_);
    res.set_header("Access-Control-Allow-Methods", "GET, POST");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID");
    res.set_header("Access-Control-Max-Age", "600");
    res.status = 204;
  });

  // One API call: the method by name, the caller, the body.
  auto serve = [this, authenticate](const httplib::Request& req, httplib::Response& res,
                                    const std::string& name, const std::string& body) {
    auto it = methods_.find(name);
    if (it == methods_.end()) {
      SendError(res,
                absl::NotFoundError(absl::StrFormat(
                    "no such method: %s (fca.v1.AuditService over JSON)", name.substr(0, 64))));
      return;
    }
    t_request.handler = name;
    if (req.method == "GET" && !it->second.read_only) {
      res.set_header("Allow", "POST");
      SendError(res, absl::InvalidArgumentError(absl::StrCat(name, " changes state: use POST")),
                405);
      return;
    }
    if (!PassesCrossSite(req, res, !it->second.read_only, cross_site_)) return;
    absl::StatusOr<core::Caller> caller = authenticate(req);
    if (!caller.ok()) {
      if (caller.status().code() == absl::StatusCode::kUnauthenticated) {
        res.set_header("WWW-Authenticate", "Bearer");
      }
      SendError(res, caller.status());
      return;
    }
    const bool blank = body.find_first_not_of(" \t\r\n") == std::string::npos;
    absl::StatusOr<std::string> out = it->second.call(*caller, blank ? "{}" : body);
    if (!out.ok()) {
      SendError(res, out.status());
      return;
    }
    SendJson(res, 200, *out);
  };

  const std::string kMethodPattern = R"(/api/v1/([A-Za-z][A-Za-z0-9]*))";
  s.Post(kMethodPattern, [this, serve](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& read) {
    const std::string name = req.matches[1];
    std::string body;
    // A request with neither Content-Length nor Transfer-Encoding has no
    // body (RFC 9112 6.3); httplib would wait for the connection to close.
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) {
      bool too_large = false;
      const bool read_ok = read([&](const char* data, size_t n) {
        if (body.size() + n > static_cast<size_t>(options_.max_body_bytes)) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (too_large || res.status == 413) {
        t_request.handler = methods_.count(name) ? name : "unmatched";
        res.set_header("Connection", "close");
        SendError(res,
                  absl::ResourceExhaustedError(absl::StrFormat(
                      "the request body exceeds the limit of %d bytes", options_.max_body_bytes)),
                  413);
        return;
      }
      if (!read_ok) {
        res.set_header("Connection", "close");
        SendError(res, absl::InvalidArgumentError("cannot read the request body"));
        return;
      }
    }
    serve(req, res, name, body);
  });
  s.Get(kMethodPattern, [serve](const httplib::Request& req, httplib::Response& res) {
    serve(req, res, req.matches[1], "");
  });

  s.Get(R"(/api/v1/jobs/([0-9]{1,18})/events)", [this, authenticate](const httplib::Request& req,
                                                                     httplib::Response& res) {
    t_request.handler = "events";
    if (!PassesCrossSite(req, res, false, cross_site_)) return;
    int64_t job_id = 0;
    if (!absl::SimpleAtoi(std::string(req.matches[1]), &job_id)) {
      SendError(res, absl::InvalidArgumentError("bad job id"));
      return;
    }
    absl::StatusOr<core::Caller> caller = authenticate(req);
    if (!caller.ok()) {
      if (caller.status().code() == absl::StatusCode::kUnauthenticated) {
        res.set_header("WWW-Authenticate", "Bearer");
      }
      SendError(res, caller.status());
      return;
    }
    // Where to resume: Last-Event-ID (what EventSource sends when it
    // reconnects) wins over ?after_seq=.
    int64_t after = 0;
    const bool has_last = req.has_header("Last-Event-ID");
    const std::string from =
        has_last ? req.get_header_value("Last-Event-ID") : req.get_param_value("after_seq");
    if ((has_last || req.has_param("after_seq")) && !ParseSeq(from, &after)) {
      SendError(res, absl::InvalidArgumentError(absl::StrFormat(
                         "%s must be a non-negative integer (an event's sequence number)",
                         has_last ? "Last-Event-ID" : "after_seq")));
      return;
    }
    // Errors are answered with their status before the stream starts; once
    // it has, they come as one `event: error`.
    v1::GetJobRequest get;
    get.set_job_id(job_id);
    absl::StatusOr<v1::GetJobResponse> job = core_->GetJob(*caller, get);
    if (!job.ok()) {
      SendError(res, job.status());
      return;
    }
    auto slot = std::make_shared<StreamSlot>(&event_streams_);
    const int64_t limit = std::min<int64_t>(options_.max_event_streams, options_.threads / 2);
    if (slot->count() > limit || shutting_down_) {
      SendError(res, shutting_down_ ? absl::UnavailableError("the server is shutting down")
                                    : absl::ResourceExhaustedError(absl::StrFormat(
                                          "the server is serving %d event streams, its limit; "
                                          "retry shortly",
                                          limit)));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
    const core::Caller who = *caller;
    res.set_chunked_content_provider(
        "text/event-stream", [this, slot, who, job_id, after](size_t, httplib::DataSink& sink) {
          Clock::time_point last_write = Clock::now();
          bool client_gone = false;
          auto send = [&](const std::string& text) {
            if (!sink.write(text.data(), text.size())) client_gone = true;
            last_write = Clock::now();
            return !client_gone;
          };
          v1::WatchJobRequest request;
          request.set_job_id(job_id);
          request.set_after_seq(after);
          const absl::Status status = core_->WatchJob(
              who, request,
              [&](const v1::WatchJobResponse& r) {
                absl::StatusOr<std::string> json = PrintJson(r);
                if (!json.ok())
                  return send(
                      absl::StrCat(": event ", r.event().seq(), " cannot be written as JSON\n\n"));
                return send(
                    absl::StrCat("id: ", r.event().seq(), "\nevent: job\ndata: ", *json, "\n\n"));
              },
              [&] {
                if (client_gone || shutting_down_) return true;
                if (Clock::now() - last_write >= options_.keepalive_interval) {
                  return !send(": keep-alive\n\n");
                }
                return false;
              });
          if (client_gone) return false;
          if (!status.ok()) {
            send(absl::StrCat("event: error\ndata: ", ErrorJson(status), "\n\n"));
          }
          sink.done();
          return true;
        });
  });

  s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    t_request.handler = "metrics";
    res.set_header("Cache-Control", "no-store");
    res.set_content(metrics::Registry::Default().Expose(),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    t_request.handler = "healthz";
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    t_request.handler = "readyz";
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
  auto asset = [](const std::string& path, httplib::Response& res) {
    t_request.handler = "ui";
    std::optional<Asset> found = FindAsset(path.empty() ? "index.html" : path);
    if (!found) {
      SendError(res, absl::NotFoundError("no such file"));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(found->bytes), std::string(found->content_type));
  };
  s.Get("/", [asset](const httplib::Request&, httplib::Response& res) { asset("", res); });
  s.Get("/ui", [asset](const httplib::Request&, httplib::Response& res) { asset("", res); });
  s.Get(R"(/ui/(.*))", [asset](const httplib::Request& req, httplib::Response& res) {
    asset(req.matches[1], res);
  });
}

}  // namespace fca::http
