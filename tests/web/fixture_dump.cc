// fca-web-fixtures: writes the canned responses of tests/web/mock_server.js
// from a real fca-server, in the HTTP/JSON gateway's format (fca's one JSON,
// common/proto_json.h). GetReport is not served by
// every server yet, so it is assembled here from the job and its stored
// rows with client::ReportView, the way `fca report` assembles it.
//
//   fca-web-fixtures --server=127.0.0.1:7400 --out=DIR --jobs=1,2,3
//     [--watch_seconds=5]
//
// Writes ListModels.json, ListJobs.json and, per job, GetJob-<id>.json,
// GetReport-<id>.json and events-<id>.json (the WatchJob responses from the
// start, for at most --watch_seconds when the job is still running).
// tests/web/make_fixtures.sh runs it; it is built only on request
// (ninja -C build fca-web-fixtures).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/report_format.h"
#include "common/proto_json.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7400", "fca-server address");
ABSL_FLAG(std::string, out, "", "folder for the JSON files");
ABSL_FLAG(std::string, jobs, "1", "job ids, comma-separated");
ABSL_FLAG(int, watch_seconds, 5, "how long to record the events of a running job");

namespace v1 = fca::v1;

namespace {

std::string Json(const google::protobuf::Message& m) {
  absl::StatusOr<std::string> out = fca::PrintProtoJson(m, /*pretty=*/true);
  if (!out.ok()) std::abort();
  return *std::move(out);
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  std::cerr << "wrote " << path << "\n";
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::cerr << s << "\n";
    std::exit(1);
  }
}

const char* Unit(const std::string& metric) {
  if (metric == "nll" || metric == "penalty" || metric == "live_nll") return "nats/token";
  if (metric == "retention_pct") return "%";
  if (metric == "blocks_per_token") return "blocks/token";
  if (metric == "flops_per_token" || metric == "replay_flops_per_token") return "FLOPs/token";
  if (metric.find("latency_us_per_token") != std::string::npos) return "us/token";
  return "1";
}

// The report the GetReport RPC describes, from the job and its rows.
v1::GetReportResponse Report(const v1::Job& job, const std::vector<v1::Result>& rows) {
  const fca::client::ReportView view(job, rows);
  v1::GetReportResponse r;
  *r.mutable_job() = job;
  for (const auto& m : view.models()) r.add_models(m);
  r.set_dense_twin(view.dense_twin());
  for (const auto& i : view.interventions()) r.add_interventions(i);
  for (const auto& f : view.families()) r.add_families(f);
  r.set_eval_sha256(view.eval_sha256());
  // Every (intervention, metric) stored for the audited models, in report
  // order: interventions (nll, penalty), retention, variation, execution,
  // replay; sorted by metric within each.
  std::vector<std::pair<std::string, std::string>> keys;
  auto add = [&](const std::string& i, const std::string& m) {
    if (std::find(keys.begin(), keys.end(), std::make_pair(i, m)) == keys.end()) {
      keys.emplace_back(i, m);
    }
  };
  for (const auto& i : view.interventions()) {
    add(i, "nll");
    for (const auto& m : view.models()) {
      if (view.Find(m, i, "penalty")) add(i, "penalty");
    }
  }
  for (const auto& i : view.interventions()) {
    for (const auto& m : view.models()) {
      if (view.Find(m, i, "retention_pct")) add(i, "retention_pct");
    }
  }
  for (const char* pseudo : {"variation", "execution", "replay"}) {
    std::vector<std::string> metrics;
    for (const v1::Result& x : rows) {
      if (x.intervention() == pseudo && x.model() != view.dense_twin())
        metrics.push_back(x.metric());
    }
    std::sort(metrics.begin(), metrics.end());
    for (const auto& m : metrics) add(pseudo, m);
  }
  for (const auto& [i, metric] : keys) {
    v1::ReportMetric* rm = r.add_metrics();
    rm->set_intervention(i);
    rm->set_metric(metric);
    rm->set_unit(Unit(metric));
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& m : view.models()) {
      const v1::Result* x = view.Find(m, i, metric);
      if (x == nullptr) continue;
      *rm->add_per_model() = *x;
      if (x->defined()) {
        lo = std::min(lo, x->value());
        hi = std::max(hi, x->value());
      }
    }
    const fca::client::AcrossModels a = view.Across(i, metric);
    v1::AcrossModels* out = rm->mutable_across_models();
    out->set_n(a.n);
    out->set_undefined(a.undefined);
    if (a.n > 0) {
      out->set_mean(a.mean);
      out->set_sd(a.sd);
      out->set_min(lo);
      out->set_max(hi);
    }
  }
  for (const auto& m : view.models()) {
    for (const fca::client::SitePoint& p : view.Sites(m)) {
      v1::SiteRow* s = r.add_sites();
      s->set_model(m);
      s->set_site(p.site);
      s->set_family(p.family);
      s->set_layer(p.layer);
      s->set_mean(p.mean);
      s->set_variance(p.variance);
    }
  }
  for (const v1::Result& x : rows) {
    if (!view.dense_twin().empty() && x.model() == view.dense_twin()) {
      *r.add_dense_twin_rows() = x;
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_out);
  if (dir.empty()) {
    std::cerr << "--out is required\n";
    return 2;
  }
  fca::client::ClientOptions options;
  options.address = absl::GetFlag(FLAGS_server);
  auto client = fca::client::AuditClient::Open(options);
  Check(client.status());
  auto models = (*client)->ListModels();
  Check(models.status());
  v1::ListModelsResponse lm;
  for (auto& m : *models) *lm.add_models() = m;
  Write(dir + "/ListModels.json", Json(lm));
  v1::ListJobsRequest lj;
  lj.set_page_size(500);
  auto jobs = (*client)->ListJobs(lj);
  Check(jobs.status());
  jobs->set_total_count(jobs->jobs_size());
  Write(dir + "/ListJobs.json", Json(*jobs));

  for (absl::string_view id_text : absl::StrSplit(absl::GetFlag(FLAGS_jobs), ',')) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(id_text, &id)) return 2;
    const std::string suffix = "-" + std::to_string(id) + ".json";
    auto job = (*client)->GetJob(id);
    Check(job.status());
    v1::GetJobResponse gj;
    *gj.mutable_job() = *job;
    Write(dir + "/GetJob" + suffix, Json(gj));

    std::vector<v1::Result> rows;
    Check(fca::client::FollowPages([&](const std::string& token) -> absl::StatusOr<std::string> {
      v1::QueryResultsRequest q;
      q.mutable_filter()->set_job_id(id);
      q.set_page_size(1000);
      q.set_page_token(token);
      auto page = (*client)->QueryResults(q);
      if (!page.ok()) return page.status();
      rows.insert(rows.end(), page->results().begin(), page->results().end());
      return page->next_page_token();
    }));
    Write(dir + "/GetReport" + suffix, Json(Report(*job, rows)));

    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_watch_seconds));
    std::string events = "[\n";
    bool first = true;
    Check((*client)->WatchJob(id, 0, [&](const v1::WatchJobResponse& e) {
      if (!first) events += ",\n";
      first = false;
      events += Json(e);
      return std::chrono::steady_clock::now() < deadline;
    }));
    Write(dir + "/events" + suffix, events + "]\n");
  }
  return 0;
}
