// fca-web-fixtures: writes the canned responses of tests/web/mock_server.js
// from a real fca-server, in the HTTP/JSON gateway's format (fca's one JSON,
// common/proto_json.h).
//
//   fca-web-fixtures --server=127.0.0.1:7400 --out=DIR --jobs=1,2,3
//     [--watch_seconds=5]
//
// Writes ListModels.json, ListJobs.json and, per job, GetJob-<id>.json,
// GetReport-<id>.json and events-<id>.json (the WatchJob responses from the
// start, for at most --watch_seconds when the job is still running).
// tests/web/make_fixtures.sh runs it; the default build builds it, so that
// it compiles against the client it records.
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
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
  Write(dir + "/ListModels.json", Json(*models));
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

    auto report = (*client)->GetReport(id);
    Check(report.status());
    Write(dir + "/GetReport" + suffix, Json(*report));

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
