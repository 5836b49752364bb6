// Issue 25 item 4: what an operator's Prometheus sees while a job runs. A
// worker runs a real audit through a broker that scrapes the process's
// registry (what GET /metrics serves) at every progress report: the job's
// progress gauge and the forward-token counter move during the job, not
// only at its end, and the gauge's series goes when the job ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/metrics.h"
#include "server/runtime/worker.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Alice;
using testing::CoreEnv;
using testing::SmallSpec;

// The value of the sample `series` ("name{labels}", as exposed) in the
// default registry's exposition; -1 when absent.
double Scraped(const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics::Registry::Default().Expose(), '\n')) {
    if (absl::ConsumePrefix(&line, series + " ")) {
      double value = 0;
      if (absl::SimpleAtod(line, &value)) return value;
    }
  }
  return -1;
}

// The coordinator, with a scrape after every progress report.
class ScrapingBroker : public runtime::TaskBroker {
 public:
  ScrapingBroker(runtime::TaskBroker* inner, std::string tokens_series)
      : inner_(inner), tokens_series_(std::move(tokens_series)) {}

  struct Seen {
    double fraction;      // the reported progress
    double job_progress;  // fca_job_progress{job_id} after it
    double tokens;        // the forward-token counter after it
  };
  std::vector<Seen> seen;
  int64_t job_id = 0;

  absl::StatusOr<std::optional<runtime::TaskAssignment>> Claim(const std::string& worker,
                                                               int64_t task_id) override {
    return inner_->Claim(worker, task_id);
  }
  absl::StatusOr<bool> Renew(const runtime::Lease& lease) override { return inner_->Renew(lease); }
  absl::Status ReportProgress(const runtime::Lease& lease,
                              const engine::AuditProgress& p) override {
    absl::Status status = inner_->ReportProgress(lease, p);
    // A counter's series appears with its first increment: absent is 0.
    seen.push_back({p.fraction, Scraped(absl::StrCat("fca_job_progress{job_id=\"", job_id, "\"}")),
                    std::max(0.0, Scraped(tokens_series_))});
    return status;
  }
  absl::Status ReportNote(const runtime::Lease& lease, const std::string& text) override {
    return inner_->ReportNote(lease, text);
  }
  absl::Status ReportRows(const runtime::Lease& lease, const std::string& model,
                          const std::string& weights_sha256,
                          const std::vector<engine::ResultRow>& rows) override {
    return inner_->ReportRows(lease, model, weights_sha256, rows);
  }
  absl::Status Finish(const runtime::Lease& lease, const absl::Status& outcome,
                      const v1::TaskProvenance& provenance) override {
    return inner_->Finish(lease, outcome, provenance);
  }
  absl::Status Release(const runtime::Lease& lease, const absl::Status& reason,
                       bool refund) override {
    return inner_->Release(lease, reason, refund);
  }
  absl::Status Refuse(const runtime::Lease& lease, const absl::Status& reason) override {
    return inner_->Refuse(lease, reason);
  }
  absl::StatusOr<runtime::DatasetBytes> ReadDataset(const runtime::Lease& lease,
                                                    bool calibration) override {
    return inner_->ReadDataset(lease, calibration);
  }
  std::optional<std::string> GetCoefficients(const runtime::Lease& lease,
                                             const engine::CoefficientCacheKey& key) override {
    return inner_->GetCoefficients(lease, key);
  }
  void PutCoefficients(const runtime::Lease& lease, const engine::CoefficientCacheKey& key,
                       const std::string& bytes) override {
    inner_->PutCoefficients(lease, key, bytes);
  }

 private:
  runtime::TaskBroker* const inner_;
  const std::string tokens_series_;
};

TEST(MonitoringTest, ProgressGaugeAndForwardCountersMoveDuringAJob) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  auto queued = env.Submit(Alice(), SmallSpec({"fg_a"}, "eval", "calib"));
  ASSERT_TRUE(queued.ok()) << queued.status();
  const std::string tokens = "fca_forward_tokens_total{model=\"fg_a\"}";
  const double tokens_before = std::max(0.0, Scraped(tokens));

  ScrapingBroker broker(env.coordinator(), tokens);
  broker.job_id = queued->id();
  runtime::Worker::Options options = testing::FastRunOptions().worker;
  options.name = "local/scraped";
  runtime::Worker worker(&broker, env.models(), options);
  auto claimed = broker.Claim(options.name, 0);
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
  worker.RunTask(**claimed);
  env.coordinator()->SweepOnce();
  auto job = env.Get(Alice(), queued->id());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->error();
  const double tokens_after = Scraped(tokens);

  ASSERT_GE(broker.seen.size(), 3u);
  int between = 0;  // scrapes that saw part of the job's forwards
  for (const ScrapingBroker::Seen& s : broker.seen) {
    // One model: the job's progress is the task's.
    EXPECT_DOUBLE_EQ(s.job_progress, s.fraction);
    EXPECT_GE(s.tokens, tokens_before);
    EXPECT_LE(s.tokens, tokens_after);
    if (s.tokens > tokens_before && s.tokens < tokens_after) ++between;
  }
  EXPECT_GT(between, 0) << "the forward counter moved only at the job's end";
  for (size_t i = 1; i < broker.seen.size(); ++i) {
    EXPECT_GE(broker.seen[i].tokens, broker.seen[i - 1].tokens);
  }
  EXPECT_GT(tokens_after, tokens_before);
  // The job has ended: its series is gone.
  EXPECT_EQ(Scraped(absl::StrCat("fca_job_progress{job_id=\"", queued->id(), "\"}")), -1);
}

}  // namespace
}  // namespace fca::core
