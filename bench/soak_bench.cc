// fca_soak_bench: a soak test of the real fca-server process.
//
// Starts `fca-server` on 127.0.0.1:0 with a fresh SQLite file and a model
// folder of tiny models written by `fca-local-audit init` (two FeatureGate
// models and a dense twin), then runs --clients threads for --duration_s
// seconds. Each thread has its own channel and loops over a weighted random
// mix of every RPC of fca.v1.AuditService through the generated stubs; small
// audits are submitted throughout, so jobs run during the whole soak. Every
// call has a deadline. A sampler reads /proc/PID/status (VmRSS, VmHWM,
// Threads) and /proc/PID/fd every --sample_ms. At the end the server gets
// SIGTERM, and the SQLite file is checked with `PRAGMA integrity_check`.
//
// With --projects (the default; issue 23) the server checks API keys, an
// admin creates three projects and --users users cross them (a writer in
// one, a reader of the next, no member of the third); the clients take the
// users in turn, work in their projects and probe the others
// (soak_client_projects.cc), and after the load each project's listing is
// checked against the ledger of what the clients were told was stored.
//
// Outcome of a call: ok; an expected refusal (a code the API documents for
// what was asked: RESOURCE_EXHAUSTED for the per-user queue limit or an
// oversized Tokenize, NOT_FOUND for unknown ids/models/uncached windows,
// FAILED_PRECONDITION for cancelling a finished job); dropped (a WatchJob the
// client cancelled on purpose); cut (still running when the soak ended); or
// an error: any other code, or BAD_RESPONSE when the response breaks what the
// API promises (e.g. watch seqs not consecutive, a re-upload not reported as
// deduplicated, the cached window of a succeeded job not exportable).
//
// Exit code: 0 when there was no error, no crash, a clean SIGTERM exit and an
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/soak_checks.h"
#include "bench/soak_client.h"
#include "bench/soak_gateway.h"
#include "bench/soak_process.h"
#include "bench/soak_report.h"
#include "bench/soak_setup.h"
#include "bench/soak_stats.h"
#include "common/file.h"
#include "common/json.h"
#include "common/random.h"
#include "common/sha256.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

ABSL_FLAG(std::string, server, FCA_SERVER_BIN, "fca-server binary");
ABSL_FLAG(std::string, local_audit, FCA_LOCAL_AUDIT_BIN,
          "fca-local-audit binary (writes the tiny model folders)");
ABSL_FLAG(std::string, sqlite3, "/usr/bin/sqlite3", "sqlite3 CLI for the integrity check");
ABSL_FLAG(int, clients, 50, "client threads, one channel (connection) each");
ABSL_FLAG(int, duration_s, 600, "seconds of load");
ABSL_FLAG(std::string, json, "", "also write the figures as JSON to this file");
ABSL_FLAG(uint64_t, seed, 1, "seed of the clients' random choices");
ABSL_FLAG(int, think_ms, 0, "mean pause between a client's calls, ms (0: closed loop)");
ABSL_FLAG(int, sample_ms, 500, "period of the /proc/PID/status sampler, ms");
ABSL_FLAG(int, bucket_s, 0, "width of the time-series rows, s (0: about 20 rows, >= 10 s)");
ABSL_FLAG(int64_t, medium_upload_budget_mb, 1024,
          "medium uploads (256 KiB - 3 MiB) stop after this many MiB; later uploads are small");
ABSL_FLAG(std::vector<std::string>, mix, {},
          "change the weights of the RPC mix, e.g. UploadDataset=0,GetJob=20 (defaults: "
          "ListModels 5, Tokenize 8, UploadDataset 6, ListDatasets 5, SubmitAudit 12, WatchJob "
          "10, GetJob 12, ListJobs 10, CancelJob 3, QueryResults 14, ExportCoefficients 10)");
ABSL_FLAG(int, server_threads, 0, "fca-server --threads (torch threads; 0: its default)");
ABSL_FLAG(std::vector<std::string>, server_args, {},
          "extra fca-server flags, comma-separated (e.g. --max_queued_jobs=4)");
ABSL_FLAG(std::string, work_dir, "",
          "folder for models, database and server logs (default: a new /tmp/fca_soak_XXXXXX)");
ABSL_FLAG(std::string, db, "",
          "start from this existing database file instead of a fresh one (it is written to: "
          "pass a copy; an aged database from an earlier soak's work folder shows how the "
          "server does on accumulated state)");
ABSL_FLAG(int, slow_http_clients, 100,
          "HTTP clients trickling a request head a byte a second from 127.0.0.2 during the load "
          "(with cross-site attempts and a /healthz prober; 0: none of them)");
ABSL_FLAG(int, healthz_ms, 100, "pause between two /healthz probes, ms");
ABSL_FLAG(bool, projects, true,
          "issue 23: --users users with API keys in three projects (lab, alpha, beta), each a "
          "writer in one, a reader of another and no member of the third; clients work as "
          "them and probe where they may not go (--noprojects: one keyless admin, as before)");
ABSL_FLAG(int, users, 6, "with --projects: users, the clients taking them in turn");
ABSL_FLAG(bool, keep, false, "keep the work folder (it is always kept after a failure)");

namespace fca::soak {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- phases

// False (after saying why) when the flags or the binaries rule out a soak.
bool CheckFlags(const Figures& f) {
  if (absl::GetFlag(FLAGS_projects) && absl::GetFlag(FLAGS_users) < kNumProjects) {
    std::fprintf(stderr, "soak: --users must be at least %d with --projects\n", kNumProjects);
    return false;
  }
  if (f.clients < 1 || f.duration_s < 1) {
    std::fprintf(stderr, "soak: --clients and --duration_s must be positive\n");
    return false;
  }
  for (const std::string& bin : {absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_local_audit)}) {
    if (access(bin.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "soak: %s is not an executable (build it first)\n", bin.c_str());
      return false;
    }
  }
  return true;
}

// The work folder, the tiny models and the database file, then the server
// on them. nullptr (after saying why) when any of it fails.
std::unique_ptr<ServerProcess> StartServer(Figures* f, Shared* shared, std::string* db) {
  f->work_dir = MakeWorkDir();
  if (f->work_dir.empty()) {
    std::fprintf(stderr, "soak: cannot create a work folder\n");
    return nullptr;
  }
  std::fprintf(stderr, "soak: work folder %s\n", f->work_dir.c_str());
  const std::string models = f->work_dir + "/models";
  *db = absl::GetFlag(FLAGS_db).empty() ? f->work_dir + "/fca.sqlite" : absl::GetFlag(FLAGS_db);
  if (!absl::GetFlag(FLAGS_db).empty() && !fs::is_regular_file(*db)) {
    std::fprintf(stderr, "soak: --db=%s is not a file\n", db->c_str());
    return nullptr;
  }
  fs::create_directories(models);
  if (!InitModel(models, "fg-a", {"--seed=1", "--controller_out_std=1.0"}) ||
      !InitModel(models, "fg-b", {"--seed=2", "--controller_out_std=1.0"}) ||
      !InitModel(models, kDenseModel, {"--family=dense", "--seed=1"})) {
    return nullptr;
  }
  std::vector<std::string> server_args = {"--models=" + models, "--db=" + *db};
  if (absl::GetFlag(FLAGS_server_threads) > 0) {
    server_args.push_back(absl::StrCat("--threads=", absl::GetFlag(FLAGS_server_threads)));
  }
  if (absl::GetFlag(FLAGS_projects)) {
    const std::string keys = WriteKeys(f->work_dir, shared);
    if (keys.empty()) return nullptr;
    server_args.push_back("--api_keys=" + keys);
  }
  for (const std::string& a : absl::GetFlag(FLAGS_server_args)) server_args.push_back(a);
  std::string error;
  std::unique_ptr<ServerProcess> server =
      ServerProcess::Start(f->server_binary, server_args, f->work_dir, 60, &error);
  if (server == nullptr) {
    std::fprintf(stderr, "soak: %s\n", error.c_str());
    return nullptr;
  }
  f->address = server->address();
  f->server_pid = server->pid();
  std::fprintf(stderr, "soak: fca-server pid %d on %s\n", server->pid(), f->address.c_str());
  return server;
}

// --mix: RPC=WEIGHT items over the default weights. False (after saying
// why) for a bad item or a mix that leaves no RPC.
bool ParseMix(int (&weights)[kNumOps]) {
  for (const std::string& item : absl::GetFlag(FLAGS_mix)) {
    const std::vector<std::string> kv = absl::StrSplit(item, '=');
    int op = 0;
    while (op < kNumOps && (kv.size() != 2 || kv[0] != OpName(op))) ++op;
    int w = -1;
    if (op == kNumOps || !absl::SimpleAtoi(kv[1], &w) || w < 0) {
      std::fprintf(stderr, "soak: --mix wants RPC=WEIGHT items, not '%s'\n", item.c_str());
      return false;
    }
    weights[op] = w;
  }
  if (std::all_of(std::begin(weights), std::end(weights), [](int w) { return w == 0; })) {
    std::fprintf(stderr, "soak: --mix leaves no RPC\n");
    return false;
  }
  return true;
}

// What the clients share, from the flags. False when --mix is bad.
bool ConfigureClients(const Figures& f, Shared* shared) {
  shared->address = f.address;
  shared->projects = absl::GetFlag(FLAGS_projects);
  shared->think_ms = absl::GetFlag(FLAGS_think_ms);
  shared->run_tag = absl::StrFormat("r%x", static_cast<uint32_t>(WallMicros() ^ getpid()));
  if (!absl::GetFlag(FLAGS_db).empty()) {
    shared->content_salt = static_cast<uint64_t>(WallMicros()) * 0x9E3779B97F4A7C15ull;
  }
  shared->medium_budget_bytes = absl::GetFlag(FLAGS_medium_upload_budget_mb) * kMiB;
  if (!ParseMix(shared->weights_of_ops)) return false;
  for (const std::string& a : absl::GetFlag(FLAGS_server_args)) {
    const std::string flag = "--max_tokenize_bytes=";
    if (a.rfind(flag, 0) == 0) shared->max_tokenize_bytes = std::atoll(a.c_str() + flag.size());
  }
  shared->eval_text = Letters(16 * 64, 1001);
  shared->calib_text = Letters(16 * 64, 1002);
  shared->eval_sha = Sha256Hex(shared->eval_text);
  return true;
}

// Lists the models, uploads "eval" and "calib" and runs one audit alone
// (Figures::idle_audit_s). False (after saying why) when any of it fails.
bool WarmUp(Figures* f, Shared* shared) {
  auto channel = NewChannel(f->address);
  auto stub = v1::AuditService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  Authorize(shared->admin_token, &ctx);
  v1::ListModelsResponse resp;
  grpc::Status st = stub->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  if (!st.ok() || resp.models_size() != 3) {
    std::fprintf(stderr, "soak: setup ListModels: %s (%d models)\n", st.error_message().c_str(),
                 resp.models_size());
    return false;
  }
  for (const v1::Model& m : resp.models()) {
    if (m.name() == "fg-a") {
      for (const v1::CoefficientSite& s : m.sites())
        shared->coeff_bytes_per_token += 4 * s.channels();
    }
  }
  if (shared->projects && !SetUpProjects(*stub, *shared)) return false;
  // "eval" and "calib" in every project (without --projects: the caller's).
  std::vector<std::string> projects = {""};
  if (shared->projects) projects.assign(std::begin(kProjects), std::end(kProjects));
  for (const std::string& project : projects) {
    for (const auto& [name, text] : {std::pair<std::string, std::string>{"eval", shared->eval_text},
                                     {"calib", shared->calib_text}}) {
      st = SetupUpload(*stub, shared->admin_token, project, name, text);
      if (!st.ok()) {
        std::fprintf(stderr, "soak: setup upload of %s to '%s': %s\n", name.c_str(),
                     project.c_str(), st.error_message().c_str());
        return false;
      }
    }
  }
  std::string error;
  f->idle_audit_s = IdleAuditSeconds(*stub, shared->admin_token, projects[0], &error);
  if (f->idle_audit_s < 0) {
    std::fprintf(stderr, "soak: %s\n", error.c_str());
    return false;
  }
  // Models' weights hashes are learnt as the load shows them
  // (Shared::CheckWeights): a listing shows one only once the model is
  // loaded in the server's own repository, which the warm-up audit, run
  // by a worker, need not have done.
  shared->max_job_id = 1;
  return true;
}

// Reads /proc/PID/status every --sample_ms into Figures::resources and
// watches for a crash: a server that ends before its SIGTERM stops the
// clients and is recorded in Figures::crashed.
class Sampler {
 public:
  Sampler(ServerProcess* server, Shared* shared, Figures* f)
      : server_(server), shared_(shared), f_(f) {}
  ~Sampler() { Stop(); }

  // One sample now; nullopt once the process is gone.
  std::optional<ResourceSample> SampleNow() const {
    auto s = ReadProcStatus(server_->pid());
    if (!s) return std::nullopt;
    ResourceSample r;
    r.t_s = SecondsBetween(shared_->start, Clock::now());
    r.rss_kb = s->vm_rss_kb;
    r.hwm_kb = s->vm_hwm_kb;
    r.threads = s->threads;
    r.fds = CountOpenFds(server_->pid());
    return r;
  }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void Add(const ResourceSample& s) {
    std::lock_guard<std::mutex> lock(mu_);
    f_->resources.push_back(s);
  }
  ResourceSample Last() const {
    std::lock_guard<std::mutex> lock(mu_);
    return f_->resources.empty() ? ResourceSample() : f_->resources.back();
  }
  bool Crashed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return f_->crashed;
  }

 private:
  void Loop() {
    const auto period = std::chrono::milliseconds(std::max(10, absl::GetFlag(FLAGS_sample_ms)));
    Clock::time_point next = Clock::now();
    while (!stop_.load()) {
      next += period;
      std::this_thread::sleep_until(next);
      const ExitInfo e = server_->Poll();
      if (e.exited) {
        if (!shared_->stop.exchange(true)) {
          std::lock_guard<std::mutex> lock(mu_);
          f_->crashed = true;
          f_->crash = absl::StrFormat("%s at t=%.1f s", e.Describe(),
                                      SecondsBetween(shared_->start, Clock::now()));
        }
        return;
      }
      if (auto s = SampleNow()) Add(*s);
    }
  }

  ServerProcess* server_;
  Shared* shared_;
  Figures* f_;
  mutable std::mutex mu_;  // guards f_->resources, crashed and crash while Loop runs
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs the clients for --duration_s (less when the server crashes), then
// cuts the calls still in flight; what they all saw, merged.
Recorder RunLoad(Figures* f, Shared* shared, const Sampler& sampler,
                 std::vector<std::unique_ptr<Client>>& clients) {
  std::fprintf(stderr, "soak: %d clients for %d s\n", f->clients, f->duration_s);
  std::vector<std::thread> threads;
  std::atomic<int> running{f->clients};
  for (auto& c : clients) {
    threads.emplace_back([&, client = c.get()] {
      client->Run();
      --running;
    });
  }
  // Progress to stderr once a minute (or every tenth of a short run).
  const int progress_every = std::max(10, std::min(60, f->duration_s / 10));
  int next_report = progress_every;
  while (Clock::now() < shared->end && !shared->stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double t = SecondsBetween(shared->start, Clock::now());
    if (t >= next_report) {
      next_report += progress_every;
      const ResourceSample last = sampler.Last();
      std::fprintf(stderr,
                   "soak: t=%.0f s: %lld jobs submitted, server RSS %.1f MB, %lld threads\n", t,
                   static_cast<long long>(shared->submitted.load()), Mb(last.rss_kb),
                   static_cast<long long>(last.threads));
    }
  }
  shared->stop = true;
  f->load_s = SecondsBetween(shared->start, Clock::now());
  // Calls still in flight 2 s after the end (mostly watches of queued jobs)
  // are cut.
  const Clock::time_point grace = Clock::now() + std::chrono::seconds(2);
  while (running.load() > 0 && Clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (running.load() > 0) {
    for (auto& c : clients) c->CutActive();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::thread& t : threads) t.join();
  Recorder all;
  for (auto& c : clients) all.Merge(c->recorder);
  f->submitted = shared->submitted.load();
  f->cancels_accepted = shared->cancels_accepted.load();
  f->watched_to_end = shared->watched_to_end.load();
  return all;
}

// After the load: does it still answer, what became of the jobs, and what
// does it hold once idle.
void AfterLoad(Figures* f, Shared* shared, Sampler& sampler) {
  auto stub = v1::AuditService::NewStub(NewChannel(f->address));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    Authorize(shared->admin_token, &ctx);
    v1::ListModelsResponse resp;
    f->serving_after_load = stub->ListModels(&ctx, v1::ListModelsRequest(), &resp).ok();
  }
  f->sweep_ok = SweepJobs(*stub, shared->admin_token, f);
  if (shared->projects) CheckLedger(*stub, shared, f);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  if (auto s = sampler.SampleNow()) {
    f->at_end = {s->rss_kb, s->hwm_kb, s->threads};
    f->fds_end = s->fds;
    sampler.Add(*s);
  }
}

// SIGTERM: the server drains (a running job is queued again) and exits 0.
// Then the sampler stops; the peaks and the log's last lines are read.
void StopServer(Figures* f, ServerProcess& server, Sampler& sampler) {
  const Clock::time_point term = Clock::now();
  server.Signal(SIGTERM);
  const ExitInfo exit = server.Wait(60, &f->killed_after_sigterm);
  f->shutdown_s = SecondsBetween(term, Clock::now());
  sampler.Stop();
  f->exit_description = exit.Describe();
  f->sigterm_clean = !f->crashed && !f->killed_after_sigterm && !exit.by_signal && exit.code == 0;
  for (const ResourceSample& r : f->resources) {
    f->rss_peak_kb = std::max(f->rss_peak_kb, r.rss_kb);
    f->hwm_kb = std::max(f->hwm_kb, r.hwm_kb);
    f->threads_peak = std::max(f->threads_peak, r.threads);
    f->fds_peak = std::max(f->fds_peak, r.fds);
  }
  const std::string log = ReadFileOrEmpty(server.stderr_path());
  std::vector<std::string> lines = absl::StrSplit(log, '\n', absl::SkipEmpty());
  f->server_log_lines = static_cast<int64_t>(lines.size());
  for (size_t i = lines.size() > 12 ? lines.size() - 12 : 0; i < lines.size(); ++i) {
    f->server_log_tail.push_back(lines[i].substr(0, 300));
  }
}

// The per-RPC summaries, the time series and every problem found.
void Judge(const Recorder& all, Figures* f) {
  f->ops = SummarizeOps(all);
  int bucket = absl::GetFlag(FLAGS_bucket_s);
  if (bucket <= 0) bucket = std::max(10, (f->duration_s + 19) / 20);
  // Calls that end in the grace period after the load count in the last row.
  f->buckets = Buckets(all, f->resources, std::min<double>(f->load_s, f->duration_s), bucket);

  int64_t errors = 0;
  for (const OpSummary& o : f->ops) errors += o.errors;
  if (errors > 0) f->problems.push_back(absl::StrCat(errors, " calls ended in an error"));
  if (f->crashed) f->problems.push_back("the server crashed: " + f->crash);
  if (!f->crashed && !f->serving_after_load) f->problems.push_back("the server stopped answering");
  if (!f->sigterm_clean) f->problems.push_back("SIGTERM: " + f->exit_description);
  if (!f->integrity_ok) f->problems.push_back("database integrity: " + f->integrity);
  if (!f->foreign_keys.empty()) f->problems.push_back("foreign_key_check: " + f->foreign_keys);
  if (f->submitted == 0) f->problems.push_back("no audit was accepted");
  if (f->projects) JudgeProjects(f->project_figures, &f->problems);
  const GatewayFigures& g = f->gateway;
  if (g.healthz_failures > 0) {
    f->problems.push_back(absl::StrCat(g.healthz_failures, " /healthz probes got no 200"));
  }
  if (g.healthz_max_ms >= 1000) {
    f->problems.push_back(
        absl::StrFormat("/healthz took %.0f ms at worst (1 s allowed)", g.healthz_max_ms));
  }
  if (g.cross_site_not_refused > 0) {
    f->problems.push_back(
        absl::StrCat(g.cross_site_not_refused, " cross-site requests were not refused"));
  }
  // Every audit the soak submits is valid: a FAILED job is the server's fault.
  if (f->jobs_by_state.count("FAILED") > 0) {
    f->problems.push_back(absl::StrCat(f->jobs_by_state["FAILED"], " jobs FAILED"));
  }
}

// The report on stdout, the JSON file when asked for; the work folder is
// removed after a clean soak unless asked to keep it.
void Report(Figures* f) {
  PrintFigures(*f);
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_json), std::ios::trunc);
    out << json::Write(FiguresJson(*f), /*pretty=*/true) << "\n";
    if (!out.good()) {
      std::fprintf(stderr, "soak: cannot write %s\n", absl::GetFlag(FLAGS_json).c_str());
      f->problems.push_back("cannot write the JSON file");
    }
  }
  if (f->problems.empty() && !absl::GetFlag(FLAGS_keep) && absl::GetFlag(FLAGS_work_dir).empty()) {
    std::error_code ec;
    fs::remove_all(f->work_dir, ec);
  } else {
    std::printf("work folder kept: %s (server.err is the server's log)\n", f->work_dir.c_str());
  }
}

// ---------------------------------------------------------------- main

int Main() {
  Figures f;
  f.clients = absl::GetFlag(FLAGS_clients);
  f.duration_s = absl::GetFlag(FLAGS_duration_s);
  f.server_binary = absl::GetFlag(FLAGS_server);
  if (!CheckFlags(f)) return 2;
  const Clock::time_point setup_start = Clock::now();
  std::string db;
  Shared shared;
  std::unique_ptr<ServerProcess> server = StartServer(&f, &shared, &db);
  if (server == nullptr) return 2;
  if (!ConfigureClients(f, &shared) || !WarmUp(&f, &shared)) return 2;
  f.projects = shared.projects;
  f.project_figures.users = static_cast<int>(shared.users.size());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < f.clients; ++i) {
    const SoakUser* user = shared.users.empty() ? nullptr : &shared.users[i % shared.users.size()];
    clients.push_back(std::make_unique<Client>(
        i, &shared, DeriveSeed(absl::GetFlag(FLAGS_seed), "soak client", i), user));
  }
  f.setup_s = SecondsBetween(setup_start, Clock::now());

  Sampler sampler(server.get(), &shared, &f);
  shared.start = Clock::now();
  shared.end = shared.start + std::chrono::seconds(f.duration_s);
  if (auto s = sampler.SampleNow()) {
    f.at_start = {s->rss_kb, s->hwm_kb, s->threads};
    f.fds_start = s->fds;
    f.resources.push_back(*s);
  }
  sampler.Start();
  std::unique_ptr<GatewayPressure> gateway;
  if (absl::GetFlag(FLAGS_slow_http_clients) > 0 && server->http_port() > 0) {
    gateway = std::make_unique<GatewayPressure>(server->http_port(),
                                                absl::GetFlag(FLAGS_slow_http_clients),
                                                absl::GetFlag(FLAGS_healthz_ms));
    gateway->Start();
  }
  const Recorder all = RunLoad(&f, &shared, sampler, clients);
  if (gateway != nullptr) f.gateway = gateway->Stop();
  {
    std::lock_guard<std::mutex> lock(shared.probe_mu);
    f.project_figures.probes = shared.probes;
  }
  f.project_figures.cross_project_ok = shared.cross_project_ok.load();
  f.project_figures.reader_writes_ok = shared.reader_writes_ok.load();
  if (!sampler.Crashed()) AfterLoad(&f, &shared, sampler);
  StopServer(&f, *server, sampler);
  CheckDatabase(db, &f);
  Judge(all, &f);
  Report(&f);
  return f.problems.empty() ? 0 : 1;
}

}  // namespace
}  // namespace fca::soak

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fca_soak_bench [--clients=50] [--duration_s=600] [--json=FILE]: soak test of a real "
      "fca-server");
  absl::ParseCommandLine(argc, argv);
  // A peer that goes away mid-write must not kill the bench.
  signal(SIGPIPE, SIG_IGN);
  return fca::soak::Main();
}
