// The audit log (server/core/audit_log.h) over a real store with an
// injected clock: refused authentications are rate limited per address
// and overall, with every refusal counted; old rows are purged in
// batches; the core records each state-changing call with its outcome,
// and a failing audit log write leaves the call's outcome alone.
#include "server/core/audit_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/core/core_env.h"
#include "tests/testing/test_util.h"

namespace fca::core {
namespace {

using ::fca::test_util::kSecond;

using testing::Admin;
using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;

// One clock for the store and the log.
struct Clock {
  std::atomic<int64_t> us{1'700'000'000 * kSecond};
  absl::Time Now() const { return absl::FromUnixMicros(us.load()); }
};

storage::StoreOptions StoreOn(Clock* clock) {
  storage::StoreOptions options;
  options.now_us = [clock] { return clock->us.load(); };
  return options;
}

std::vector<storage::AuditLogRow> AllRows(storage::Store* store,
                                          const storage::AuditLogFilter& filter = {}) {
  std::vector<storage::AuditLogRow> rows;
  std::string token;
  do {
    auto page = store->QueryAuditLog(filter, 1000, token);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    rows.insert(rows.end(), page->rows.begin(), page->rows.end());
    token = page->next_page_token;
  } while (!token.empty());
  return rows;
}

// The refusals a row stands for ("refusals=N: reason").
int64_t RefusalCount(const storage::AuditLogRow& row) {
  absl::string_view detail = row.detail;
  int64_t n = 0;
  if (!absl::ConsumePrefix(&detail, "refusals=")) return -1;
  if (!absl::SimpleAtoi(detail.substr(0, detail.find(':')), &n)) return -1;
  return n;
}

storage::AuditLogFilter Refusals() {
  storage::AuditLogFilter filter;
  filter.action = audit_action::kAuthRefused;
  return filter;
}

TEST(AuditLogTest, AFloodFromOneAddressWritesOneRowPerIntervalAndCountsTheRest) {
  Clock clock;
  CoreEnv env({}, testing::FastRunOptions(), StoreOn(&clock));
  AuditLog::Options options;
  options.now = [&] { return clock.Now(); };
  AuditLog log(env.store(), options);
  // 1000 bad calls from one client over many connections (ports).
  int written = 0;
  for (int i = 0; i < 1000; ++i) {
    written += log.RecordRefusal(absl::StrCat("ipv4:192.0.2.7:", 40000 + i), "unknown API key");
  }
  EXPECT_EQ(written, 1);
  std::vector<storage::AuditLogRow> rows = AllRows(env.store(), Refusals());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].peer, "ipv4:192.0.2.7");
  EXPECT_EQ(RefusalCount(rows[0]), 1);
  // Within the interval nothing more is written; after it, the count.
  clock.us += 59 * kSecond;
  ASSERT_TRUE(log.Sweep().ok());
  EXPECT_EQ(AllRows(env.store(), Refusals()).size(), 1u);
  clock.us += kSecond;
  ASSERT_TRUE(log.Sweep().ok());
  rows = AllRows(env.store(), Refusals());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(RefusalCount(rows[0]) + RefusalCount(rows[1]), 1000);
  EXPECT_THAT(rows[0].detail, HasSubstr("unknown API key"));
  EXPECT_EQ(rows[0].outcome, "UNAUTHENTICATED");
}

TEST(AuditLogTest, AFloodFromManyAddressesIsBoundedOverallAndEveryRefusalCounted) {
  Clock clock;
  CoreEnv env({}, testing::FastRunOptions(), StoreOn(&clock));
  AuditLog::Options options;
  options.now = [&] { return clock.Now(); };
  options.max_refusal_rows = 10;
  options.max_tracked_peers = 200;
  AuditLog log(env.store(), options);
  // 300 addresses, 3 refusals each: 100 of them beyond the tracked ones.
  for (int round = 0; round < 3; ++round) {
    for (int peer = 0; peer < 300; ++peer) {
      log.RecordRefusal(absl::StrCat("ipv4:198.51.", peer / 256, ".", peer % 256, ":1"), "bad");
    }
  }
  EXPECT_EQ(AllRows(env.store(), Refusals()).size(), 10u);
  clock.us += 60 * kSecond;
  ASSERT_TRUE(log.Sweep().ok());
  const std::vector<storage::AuditLogRow> rows = AllRows(env.store(), Refusals());
  EXPECT_LE(rows.size(), 2u * (10 + 1));
  int64_t total = 0;
  for (const storage::AuditLogRow& row : rows) total += RefusalCount(row);
  EXPECT_EQ(total, 900);
  // Stop() writes what is left: nothing here.
  log.Stop();
  EXPECT_EQ(AllRows(env.store(), Refusals()).size(), rows.size());
}

TEST(AuditLogTest, StopWritesTheCountsNotWrittenYet) {
  Clock clock;
  CoreEnv env({}, testing::FastRunOptions(), StoreOn(&clock));
  AuditLog::Options options;
  options.now = [&] { return clock.Now(); };
  {
    AuditLog log(env.store(), options);
    for (int i = 0; i < 5; ++i) log.RecordRefusal("http 203.0.113.9:5555", "missing");
  }
  const std::vector<storage::AuditLogRow> rows = AllRows(env.store(), Refusals());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(RefusalCount(rows[0]) + RefusalCount(rows[1]), 5);
  EXPECT_EQ(rows[0].peer, "http 203.0.113.9");
}

TEST(AuditLogTest, AddressesLoseTheirPortOnly) {
  EXPECT_EQ(AuditLog::Address("ipv4:192.0.2.7:40000"), "ipv4:192.0.2.7");
  EXPECT_EQ(AuditLog::Address("ipv6:[::1]:40000"), "ipv6:[::1]");
  EXPECT_EQ(AuditLog::Address("http 10.0.0.1:80"), "http 10.0.0.1");
  EXPECT_EQ(AuditLog::Address("unix:/tmp/fca.sock"), "unix:/tmp/fca.sock");
  EXPECT_EQ(AuditLog::Address(""), "");
}

TEST(AuditLogTest, RowsOlderThanKeepArePurgedInBatches) {
  Clock clock;
  CoreEnv env({}, testing::FastRunOptions(), StoreOn(&clock));
  AuditLog::Options options;
  options.now = [&] { return clock.Now(); };
  options.keep = absl::Hours(24);
  options.purge_batch = 7;
  AuditLog log(env.store(), options);
  for (int i = 0; i < 30; ++i) log.RecordServer(audit_action::kServerStart, "old");
  clock.us += 12 * 3600 * kSecond;
  for (int i = 0; i < 5; ++i) log.RecordServer(audit_action::kServerStart, "new");
  clock.us += 12 * 3600 * kSecond + 1;  // the first 30 are over 24 h old now
  const absl::StatusOr<int64_t> purged = log.Sweep();
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 30);
  const std::vector<storage::AuditLogRow> left = AllRows(env.store());
  ASSERT_EQ(left.size(), 5u);
  for (const storage::AuditLogRow& row : left) EXPECT_EQ(row.detail, "new");
}

// ---- the core's recording

class RecordedCallsTest : public ::testing::Test {
 protected:
  RecordedCallsTest() : env_({}, testing::FastRunOptions(), StoreOn(&clock_)) {
    AuditLog::Options options;
    options.now = [this] { return clock_.Now(); };
    log_ = std::make_unique<AuditLog>(env_.store(), options);
    env_.core()->set_audit_log(log_.get());
  }
  std::vector<storage::AuditLogRow> Rows(const std::string& action) {
    storage::AuditLogFilter filter;
    filter.action = action;
    return AllRows(env_.store(), filter);
  }
  Caller WithPeer(Caller caller) {
    caller.peer = "ipv4:192.0.2.1:1234";
    caller.key_id = 7;
    return caller;
  }

  Clock clock_;
  CoreEnv env_;
  std::unique_ptr<AuditLog> log_;
};

TEST_F(RecordedCallsTest, EveryStateChangeIsRecordedWithWhoWhereAndTheOutcome) {
  const Caller alice = WithPeer(Alice());
  v1::UploadDatasetRequest header;
  header.mutable_header()->set_name("eval");
  header.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
  header.mutable_header()->set_size_bytes(static_cast<int64_t>(testing::EvalText().size()));
  v1::UploadDatasetRequest chunk;
  chunk.set_chunk(testing::EvalText());
  int read = 0;
  ASSERT_TRUE(env_.core()
                  ->UploadDataset(alice,
                                  [&](v1::UploadDatasetRequest* part) {
                                    if (read == 2) return false;
                                    *part = read++ == 0 ? header : chunk;
                                    return true;
                                  })
                  .ok());
  ASSERT_TRUE(env_.Upload(alice, "calib", testing::CalibText()).ok());
  v1::SubmitAuditRequest submit;
  *submit.mutable_spec() = SmallSpec({testing::kGateA}, "eval", "calib");
  auto job = env_.core()->SubmitAudit(alice, submit);
  ASSERT_TRUE(job.ok()) << job.status();
  const int64_t id = job->job().id();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  ASSERT_TRUE(env_.core()->CancelJob(alice, cancel).ok());
  // bob may not see it: refused, and recorded so.
  v1::DeleteJobRequest del;
  del.set_job_id(id);
  EXPECT_TRUE(absl::IsNotFound(env_.core()->DeleteJob(WithPeer(Bob()), del).status()));
  ASSERT_TRUE(env_.core()->DeleteJob(alice, del).ok());
  v1::DeleteDatasetRequest drop;
  drop.set_name("calib");
  ASSERT_TRUE(env_.core()->DeleteDataset(alice, drop).ok());

  const std::vector<storage::AuditLogRow> uploads = Rows("dataset.upload");
  ASSERT_EQ(uploads.size(), 1u);  // env_.Upload bypasses the core's recorder
  EXPECT_EQ(uploads[0].user, "alice");
  EXPECT_EQ(uploads[0].key_id, 7);
  EXPECT_EQ(uploads[0].peer, "ipv4:192.0.2.1:1234");
  EXPECT_EQ(uploads[0].object_kind, "dataset");
  EXPECT_EQ(uploads[0].object_id, "eval");
  EXPECT_EQ(uploads[0].outcome, "OK");
  const std::vector<storage::AuditLogRow> submits = Rows("job.submit");
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].object_id, absl::StrCat(id));
  EXPECT_EQ(Rows("job.cancel").size(), 1u);
  const std::vector<storage::AuditLogRow> deletes = Rows("job.delete");
  ASSERT_EQ(deletes.size(), 2u);  // newest first
  EXPECT_EQ(deletes[0].user, "alice");
  EXPECT_EQ(deletes[0].outcome, "OK");
  EXPECT_EQ(deletes[1].user, "bob");
  EXPECT_EQ(deletes[1].outcome, "NOT_FOUND");
  const std::vector<storage::AuditLogRow> drops = Rows("dataset.delete");
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].object_id, "calib");
  EXPECT_EQ(drops[0].at_us, clock_.us.load());
}

TEST_F(RecordedCallsTest, QueryAuditLogIsForAdminsAndChecksItsFilters) {
  v1::QueryAuditLogRequest request;
  EXPECT_TRUE(absl::IsPermissionDenied(env_.core()->QueryAuditLog(Alice(), request).status()));
  request.set_action("job.explode");
  const auto unknown = env_.core()->QueryAuditLog(Admin(), request);
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_THAT(unknown.status().message(), HasSubstr("job.submit"));
  request.clear_action();
  request.mutable_since()->set_seconds(200);
  request.mutable_until()->set_seconds(100);
  EXPECT_TRUE(absl::IsInvalidArgument(env_.core()->QueryAuditLog(Admin(), request).status()));
  request.clear_until();
  request.mutable_since()->set_nanos(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(env_.core()->QueryAuditLog(Admin(), request).status()));
  request.clear_since();
  request.set_page_token("x1");
  EXPECT_TRUE(absl::IsInvalidArgument(env_.core()->QueryAuditLog(Admin(), request).status()));
}

TEST(RecordedCallsFaultTest, AFailedAuditWriteLeavesTheCallsOutcomeAlone) {
  bool failing = false;
  storage::StoreOptions store;
  store.fault_injector = [&](std::string_view op) {
    return failing && op == "append_audit_log" ? absl::UnavailableError("injected")
                                               : absl::OkStatus();
  };
  CoreEnv env({}, testing::FastRunOptions(), store);
  AuditLog log(env.store(), {});
  env.core()->set_audit_log(&log);
  ASSERT_TRUE(env.UploadEvalAndCalib(Alice()).ok());
  failing = true;
  v1::SubmitAuditRequest submit;
  *submit.mutable_spec() = SmallSpec({testing::kGateA}, "eval", "calib");
  const auto job = env.core()->SubmitAudit(Alice(), submit);
  ASSERT_TRUE(job.ok()) << job.status();
  failing = false;
  EXPECT_TRUE(AllRows(env.store()).empty());
  auto stored = env.store()->GetJob(job->job().id());
  EXPECT_TRUE(stored.ok());
}

}  // namespace
}  // namespace fca::core
