// The server's own HTTP side end to end, on http_fixture.h's server:
//   - /metrics passes a strict text-format parser (prom_text.h) and its
//     counters move when jobs run (jobs, RPCs, HTTP requests, the
//     coefficient cache, forwards);
//   - HTTPS with the gRPC certificate; an HTTP address in use (a flag or a
//     flag file) or a malformed allowed origin stops a second server;
//   - cross-site requests are refused without auth.
#include <gtest/gtest.h>

#include <string>

#include "tests/http/http_fixture.h"

namespace fca::http_test {
namespace {

TEST_F(HttpTest, MetricsParseStrictlyAndMoveWhenJobsRun) {
  auto before = Scrape();
  ASSERT_TRUE(before.ok()) << before.status();
  for (const char* family :
       {"fca_jobs", "fca_job_queue_wait_seconds", "fca_job_run_seconds", "fca_forward_tokens_total",
        "fca_forward_seconds_total", "fca_forward_tokens_per_second", "fca_coeff_cache_hits_total",
        "fca_coeff_cache_misses_total", "fca_coeff_cache_read_bytes_total",
        "fca_coeff_cache_written_bytes_total", "fca_coeff_cache_bytes", "fca_workers",
        "fca_grpc_requests_total", "fca_grpc_request_duration_seconds", "fca_http_requests_total",
        "fca_http_request_duration_seconds", "fca_http_event_streams"}) {
    EXPECT_TRUE(before->count(family)) << family;
  }
  const std::vector<std::string> lifecycle = {
      "fca_jobs_submitted_total",       "fca_jobs_started_total",
      "fca_jobs_ended_total",           "fca_job_progress",
      "fca_tasks_lost_total",           "fca_store_filesystem_avail_bytes",
      "fca_store_filesystem_size_bytes"};
  for (const std::string& family : lifecycle) EXPECT_TRUE(before->count(family)) << family;
  const std::map<std::string, std::string> succeeded = {{"state", "succeeded"}};
  const std::map<std::string, std::string> get_ok = {{"method", "/fca.v1.AuditService/GetJob"},
                                                     {"code", "OK"}};
  const std::map<std::string, std::string> submit_ok = {{"handler", "SubmitAudit"},
                                                        {"code", "200"}};
  auto value = [](const std::map<std::string, prom::Family>& f, const std::string& name,
                  const std::map<std::string, std::string>& labels = {}) {
    return prom::Value(f, name, labels, 0);
  };

  // A job on data no job has seen: cache misses and writes; the same job
  // again: hits.
  Upload("eval2", e2e::RandomWords(16 * 12, 11));
  Upload("calib2", e2e::RandomWords(16 * 8, 12));
  const int64_t first = Submit(Spec("eval2", "calib2"), kAlice);
  ASSERT_EQ(WaitJob(first, kAlice), v1::JOB_STATE_SUCCEEDED);
  v1::GetJobRequest get;
  get.set_job_id(first);
  v1::GetJobResponse unused;
  ASSERT_TRUE(stub_->GetJob(Ctx(kAlice).get(), get, &unused).ok());
  // A call is counted when the server has finished it, which can be just
  // after the client got its answer: scrape until both calls are counted.
  auto middle = Scrape();
  for (const auto deadline = Clock::now() + std::chrono::seconds(10);
       middle.ok() && Clock::now() < deadline &&
       (value(*middle, "fca_grpc_requests_total", get_ok) <
            value(*before, "fca_grpc_requests_total", get_ok) + 1 ||
        value(*middle, "fca_http_requests_total", submit_ok) <
            value(*before, "fca_http_requests_total", submit_ok) + 1);
       middle = Scrape()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(value(*middle, "fca_jobs", succeeded), value(*before, "fca_jobs", succeeded) + 1);
  EXPECT_EQ(value(*middle, "fca_job_run_seconds_count", succeeded),
            value(*before, "fca_job_run_seconds_count", succeeded) + 1);
  EXPECT_EQ(value(*middle, "fca_job_queue_wait_seconds_count", succeeded),
            value(*before, "fca_job_queue_wait_seconds_count", succeeded) + 1);
  EXPECT_GE(value(*middle, "fca_grpc_requests_total", get_ok),
            value(*before, "fca_grpc_requests_total", get_ok) + 1);
  EXPECT_EQ(value(*middle, "fca_http_requests_total", submit_ok),
            value(*before, "fca_http_requests_total", submit_ok) + 1);
  EXPECT_GT(value(*middle, "fca_coeff_cache_misses_total"),
            value(*before, "fca_coeff_cache_misses_total"));
  EXPECT_GT(value(*middle, "fca_coeff_cache_written_bytes_total"),
            value(*before, "fca_coeff_cache_written_bytes_total"));
  EXPECT_GT(value(*middle, "fca_coeff_cache_bytes"), 0);
  EXPECT_GT(value(*middle, "fca_forward_tokens_total", {{"model", "fg-a"}}),
            value(*before, "fca_forward_tokens_total", {{"model", "fg-a"}}));
  EXPECT_GT(value(*middle, "fca_forward_seconds_total", {{"model", "fg-a"}}), 0);
  EXPECT_EQ(value(*middle, "fca_forward_tokens_per_second_count", {{"model", "fg-a"}}),
            value(*before, "fca_forward_tokens_per_second_count", {{"model", "fg-a"}}) + 1);
  EXPECT_EQ(value(*middle, "fca_workers", {{"state", "busy"}}) +
                value(*middle, "fca_workers", {{"state", "idle"}}),
            1);
  for (const char* counter : {"fca_jobs_submitted_total", "fca_jobs_started_total"}) {
    EXPECT_EQ(value(*middle, counter), value(*before, counter) + 1) << counter;
  }
  EXPECT_EQ(value(*middle, "fca_jobs_ended_total", succeeded),
            value(*before, "fca_jobs_ended_total", succeeded) + 1);
  // The job has ended: no progress series is left for it.
  EXPECT_EQ(prom::Value(*middle, "fca_job_progress", {{"job_id", std::to_string(first)}}, -1), -1);

  const int64_t second = Submit(Spec("eval2", "calib2"), kAlice);
  ASSERT_EQ(WaitJob(second, kAlice), v1::JOB_STATE_SUCCEEDED);
  auto after = Scrape();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(value(*after, "fca_coeff_cache_hits_total"),
            value(*middle, "fca_coeff_cache_hits_total"));
  EXPECT_GT(value(*after, "fca_coeff_cache_read_bytes_total"),
            value(*middle, "fca_coeff_cache_read_bytes_total"));
  EXPECT_EQ(value(*after, "fca_jobs", succeeded), value(*middle, "fca_jobs", succeeded) + 1);
  // The scrapes themselves are counted.
  EXPECT_GT(value(*after, "fca_http_requests_total", {{"handler", "metrics"}, {"code", "200"}}),
            value(*before, "fca_http_requests_total", {{"handler", "metrics"}, {"code", "200"}}));
}

// With --tls_cert/--tls_key the HTTP port speaks HTTPS with the same files.
TEST_F(HttpTest, HttpsWithTheGrpcCertificate) {
  const std::string cert = *root_ + "/cert.pem", key = *root_ + "/key.pem";
  CommandResult gen =
      e2e::Run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  auto server = e2e::StartServer(
      FCA_SERVER_BIN,
      {"--models=" + *root_ + "/models", "--db=" + *root_ + "/tls.sqlite", "--threads=1",
       "--workers=0", "--api_keys=" + *root_ + "/keys", "--tls_cert=" + cert, "--tls_key=" + key});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->http_port(), 0);
  httplib::SSLClient tls("127.0.0.1", server->http_port());
  tls.set_ca_cert_path(cert.c_str());
  tls.enable_server_certificate_verification(true);
  auto r = tls.Post("/api/v1/ListModels", Auth(kAlice), "", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"fg-a\""), std::string::npos);
  // Plain HTTP gets no answer from it.
  httplib::Client plain("127.0.0.1", server->http_port());
  plain.set_read_timeout(3, 0);
  auto refused = plain.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(30), 0) << server->Stderr();
}

// A second server cannot take the HTTP address of the first (no
// SO_REUSEPORT sharing): an explicit --http_listen that is taken stops it.
TEST_F(HttpTest, AnHttpAddressInUseStopsTheServer) {
  const std::string taken = "127.0.0.1:" + std::to_string(server_->http_port());
  CommandResult second = e2e::Run(
      {FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--http_listen=" + taken,
       "--models=" + *root_ + "/models", "--db=" + *root_ + "/second.sqlite", "--workers=0"},
      {}, 60);
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("cannot listen for HTTP on " + taken), std::string::npos) << second.err;
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// The same in a --flagfile (the systemd unit keeps its --http_listen there):
// given is given, wherever it was written.
TEST_F(HttpTest, AnHttpAddressInUseGivenInAFlagFileStopsTheServer) {
  const std::string taken = "127.0.0.1:" + std::to_string(server_->http_port());
  const std::string flags = *root_ + "/taken_http.flags";
  WriteFile(flags, "# as deploy/debian/fca-server.flags\n--http_listen=" + taken + "\n");
  CommandResult second = e2e::Run(
      {FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--flagfile=" + flags,
       "--models=" + *root_ + "/models", "--db=" + *root_ + "/flagfile.sqlite", "--workers=0"},
      {}, 60);
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("cannot listen for HTTP on " + taken), std::string::npos) << second.err;
  EXPECT_EQ(second.out.find("listening on"), std::string::npos) << second.out;
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// The attacks of issue 22 replayed on a server without --auth (how it runs
// when started by hand): a page on another site posting text/plain and
// form bodies, and a page whose name was re-bound to 127.0.0.1 (DNS
// rebinding: a foreign Host). Each is refused with 403 and changes
// nothing; the dashboard's own origin and an allowed one still work.
TEST_F(HttpTest, CrossSiteRequestsAreRefusedWithoutAuth) {
  const std::string allowed = "https://dash.lab.example.org";
  auto server = e2e::StartServer(
      FCA_SERVER_BIN, {"--models=" + *root_ + "/models", "--db=" + *root_ + "/open.sqlite",
                       "--threads=1", "--workers=0", "--http_allowed_origins=" + allowed});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  ASSERT_GT(port, 0);
  const std::string self = "127.0.0.1:" + std::to_string(port);
  const std::string evil = "https://evil.example";
  const std::string rebound = "evil.example:" + std::to_string(port);
  auto call = [port](const std::string& method, const std::string& path, const std::string& body,
                     const std::string& type, httplib::Headers headers) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return ToReply(method == "POST"      ? c.Post(path.c_str(), headers, body, type.c_str())
                   : method == "OPTIONS" ? c.Options(path.c_str(), headers)
                                         : c.Get(path.c_str(), headers));
  };
  // A queued job (no workers): what the attacks try to cancel and delete.
  v1::SubmitAuditRequest submit;
  *submit.mutable_spec() = Spec("eval", "calib");
  v1::UploadDatasetResponse unused;
  auto stub = v1::AuditService::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  for (const char* name : {"eval", "calib"}) {
    grpc::ClientContext context;
    auto writer = stub->UploadDataset(&context, &unused);
    v1::UploadDatasetRequest part;
    part.mutable_header()->set_name(name);
    part.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
    const std::string bytes = e2e::RandomWords(16 * 24, 3);
    part.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
    ASSERT_TRUE(writer->Write(part));
    part.set_chunk(bytes);
    ASSERT_TRUE(writer->Write(part));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }
  Reply made = call("POST", "/api/v1/SubmitAudit", ToJson(submit), "application/json", {});
  ASSERT_EQ(made.status, 200) << made.body;
  v1::SubmitAuditResponse job;
  ASSERT_TRUE(FromJson(made.body, &job));
  const std::string id = "{\"job_id\": " + std::to_string(job.job().id()) + "}";

  struct Attack {
    std::string what, method, path, body, type;
    httplib::Headers headers;
  };
  const std::vector<Attack> attacks = {
      {"cancel, text/plain", "POST", "/api/v1/CancelJob", id, "text/plain", {{"Origin", evil}}},
      {"cancel, form",
       "POST",
       "/api/v1/CancelJob",
       id,
       "application/x-www-form-urlencoded",
       {{"Origin", evil}}},
      {"delete, text/plain", "POST", "/api/v1/DeleteJob", id, "text/plain", {{"Origin", evil}}},
      {"submit, text/plain",
       "POST",
       "/api/v1/SubmitAudit",
       ToJson(submit),
       "text/plain",
       {{"Origin", evil}}},
      {"delete, rebound",
       "POST",
       "/api/v1/DeleteJob",
       id,
       "application/json",
       {{"Host", rebound}, {"Origin", "http://" + rebound}}},
      {"cancel, rebound, no Origin",
       "POST",
       "/api/v1/CancelJob",
       id,
       "text/plain",
       {{"Host", rebound}}},
      {"read, rebound", "GET", "/api/v1/ListJobs", "", "", {{"Host", rebound}}},
      {"read, foreign origin", "POST", "/api/v1/GetJob", id, "text/plain", {{"Origin", evil}}},
      {"events, rebound",
       "GET",
       "/api/v1/jobs/" + std::to_string(job.job().id()) + "/events",
       "",
       "",
       {{"Host", rebound}}},
      {"framed origin", "POST", "/api/v1/CancelJob", id, "text/plain", {{"Origin", "null"}}},
      {"preflight",
       "OPTIONS",
       "/api/v1/CancelJob",
       "",
       "",
       {{"Origin", evil}, {"Access-Control-Request-Method", "POST"}}},
  };
  for (const Attack& a : attacks) {
    const Reply r = call(a.method, a.path, a.body, a.type, a.headers);
    EXPECT_EQ(r.status, 403) << a.what << ": " << r.body;
    EXPECT_NE(r.body.find("\"code\":\"PERMISSION_DENIED\""), std::string::npos) << a.what;
    EXPECT_EQ(r.Header("Access-Control-Allow-Origin"), "") << a.what;
  }
  // Without an Origin (an old browser, a plugin), a text body is still no
  // way to change state: 415.
  const Reply untyped = call("POST", "/api/v1/CancelJob", id, "text/plain", {});
  EXPECT_EQ(untyped.status, 415) << untyped.body;
  // Nothing changed: one job, queued, no cancel asked.
  const Reply list = call("POST", "/api/v1/ListJobs", "{}", "application/json", {});
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(FromJson(list.body, &jobs));
  ASSERT_EQ(jobs.jobs_size(), 1) << list.body;
  EXPECT_EQ(jobs.jobs(0).state(), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(jobs.jobs(0).cancel_requested());
  EXPECT_EQ(list.Header("Cache-Control"), "no-store");

  // An allowed origin: CORS preflight and the call itself.
  const Reply preflight = call("OPTIONS", "/api/v1/CancelJob", "", "",
                               {{"Origin", allowed}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(preflight.status, 204) << preflight.body;
  EXPECT_EQ(preflight.Header("Access-Control-Allow-Origin"), allowed);
  EXPECT_NE(preflight.Header("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  const Reply from_allowed =
      call("POST", "/api/v1/GetJob", id, "application/json", {{"Origin", allowed}});
  EXPECT_EQ(from_allowed.status, 200) << from_allowed.body;
  EXPECT_EQ(from_allowed.Header("Access-Control-Allow-Origin"), allowed);
  // The dashboard's own origin cancels, as a user clicking Cancel would.
  const Reply own =
      call("POST", "/api/v1/CancelJob", id, "application/json", {{"Origin", "http://" + self}});
  EXPECT_EQ(own.status, 200) << own.body;
  EXPECT_EQ(own.Header("Access-Control-Allow-Origin"), "");

  // The dashboard cannot be framed or sniffed.
  const Reply page = call("GET", "/", "", "", {});
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.Header("X-Frame-Options"), "DENY");
  EXPECT_EQ(page.Header("X-Content-Type-Options"), "nosniff");
  EXPECT_NE(page.Header("Content-Security-Policy").find("frame-ancestors 'none'"),
            std::string::npos)
      << page.Header("Content-Security-Policy");
  // Probes need no Host check (a load balancer names the server its way).
  EXPECT_EQ(call("GET", "/healthz", "", "", {{"Host", rebound}}).status, 200);
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(30), 0) << server->Stderr();
}

// A malformed --http_allowed_origins stops the server at start, naming it.
TEST_F(HttpTest, AMalformedAllowedOriginStopsTheServer) {
  CommandResult r =
      e2e::Run({FCA_SERVER_BIN, "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
                "--http_allowed_origins=evil.example/x", "--models=" + *root_ + "/models",
                "--db=" + *root_ + "/bad_origin.sqlite", "--workers=0"},
               {}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--http_allowed_origins: 'evil.example/x'"), std::string::npos) << r.err;
}
}  // namespace
}  // namespace fca::http_test
