// Projects and members in the store: creation (names taken by projects and
// by API keys' users), personal projects, roles, the last owner, deletion
// (refused while a job is active; everything of the project goes, nothing
// of another), datasets' and jobs' project, and the fault injection of the
// membership writes.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/storage/store_fixture.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class StoreProjectsTest : public StoreFixture {};

INSTANTIATE_TEST_SUITE_P(Backends, StoreProjectsTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile), BackendName);

std::vector<std::string> Names(const std::vector<ProjectRecord>& projects) {
  std::vector<std::string> names;
  for (const ProjectRecord& p : projects) names.push_back(p.name);
  return names;
}

TEST_P(StoreProjectsTest, CreateSharedProjectWithItsOwner) {
  ASSERT_OK_AND_ASSIGN(const ProjectRecord lab, store_->CreateProject("lab", "root", "ann"));
  EXPECT_EQ(lab.name, "lab");
  EXPECT_FALSE(lab.personal);
  EXPECT_EQ(lab.created_by, "root");
  EXPECT_EQ(lab.created_at_us, 1'000'000);
  ASSERT_OK_AND_ASSIGN(const auto role, store_->MemberRole("lab", "ann"));
  EXPECT_EQ(role, std::optional<std::string>("owner"));
  ASSERT_OK_AND_ASSIGN(const auto none, store_->MemberRole("lab", "root"));
  EXPECT_FALSE(none.has_value());
  EXPECT_CODE(store_->CreateProject("lab", "root", "bob"), StatusCode::kAlreadyExists);
  EXPECT_CODE(store_->GetProject("nope"), StatusCode::kNotFound);
}

TEST_P(StoreProjectsTest, NamesOfUsersAreTaken) {
  ASSERT_OK(store_->AddApiKey("carl", "user", std::string(32, 'k')));
  EXPECT_CODE(store_->CreateProject("carl", "root", "root"), StatusCode::kAlreadyExists);
  ASSERT_OK_AND_ASSIGN(const bool created, store_->EnsurePersonalProject("dora"));
  EXPECT_TRUE(created);
  EXPECT_CODE(store_->CreateProject("dora", "root", "root"), StatusCode::kAlreadyExists);
}

TEST_P(StoreProjectsTest, NamesOfSharedProjectsAreTakenForUsers) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann").status());
  const absl::Status refused = store_->AddApiKey("lab", "user", std::string(32, 'k'));
  EXPECT_CODE(refused, StatusCode::kAlreadyExists);
  EXPECT_NE(refused.message().find("shared project"), absl::string_view::npos) << refused;
  ASSERT_OK_AND_ASSIGN(const int64_t keys, store_->CountApiKeys());
  EXPECT_EQ(keys, 0);
  // A user's own personal project does not stand in the way of more keys.
  ASSERT_OK(store_->AddApiKey("ann", "user", std::string(32, 'a')));
  ASSERT_OK(store_->EnsurePersonalProject("ann").status());
  ASSERT_OK(store_->AddApiKey("ann", "user", std::string(32, 'b')));
}

TEST_P(StoreProjectsTest, PersonalProjectIsCreatedOnce) {
  ASSERT_OK_AND_ASSIGN(const bool first, store_->EnsurePersonalProject("ann"));
  ASSERT_OK_AND_ASSIGN(const bool second, store_->EnsurePersonalProject("ann"));
  EXPECT_TRUE(first);
  EXPECT_FALSE(second);
  ASSERT_OK_AND_ASSIGN(const ProjectRecord ann, store_->GetProject("ann"));
  EXPECT_TRUE(ann.personal);
  ASSERT_OK_AND_ASSIGN(const auto members, store_->ListMembers("ann"));
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].user, "ann");
  EXPECT_EQ(members[0].role, "owner");
  // A shared project of that name keeps its members: no personal row.
  ASSERT_OK(store_->CreateProject("lab", "root", "root"));
  ASSERT_OK_AND_ASSIGN(const bool shadowed, store_->EnsurePersonalProject("lab"));
  EXPECT_FALSE(shadowed);
  ASSERT_OK_AND_ASSIGN(const auto lab_role, store_->MemberRole("lab", "lab"));
  EXPECT_FALSE(lab_role.has_value());
}

TEST_P(StoreProjectsTest, MembersAndRoles) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann"));
  ASSERT_OK(store_->SetMember("lab", "bob", "reader"));
  ASSERT_OK(store_->SetMember("lab", "cy", "writer"));
  ASSERT_OK(store_->SetMember("lab", "bob", "writer"));  // a change of role
  ASSERT_OK_AND_ASSIGN(const auto members, store_->ListMembers("lab"));
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].user, "ann");
  EXPECT_EQ(members[1].user, "bob");
  EXPECT_EQ(members[1].role, "writer");
  EXPECT_EQ(members[2].role, "writer");
  EXPECT_CODE(store_->SetMember("lab", "dan", "admin"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->SetMember("lab", "", "reader"), StatusCode::kInvalidArgument);
  EXPECT_CODE(store_->SetMember("nope", "dan", "reader"), StatusCode::kNotFound);

  ASSERT_OK(store_->CreateProject("other", "root", "bob"));
  ASSERT_OK_AND_ASSIGN(const auto bobs, store_->ListProjects(std::string("bob")));
  EXPECT_EQ(Names(bobs), (std::vector<std::string>{"lab", "other"}));
  ASSERT_OK_AND_ASSIGN(const auto cys, store_->ListProjects(std::string("cy")));
  EXPECT_EQ(Names(cys), (std::vector<std::string>{"lab"}));
  ASSERT_OK_AND_ASSIGN(const auto all, store_->ListProjects(std::nullopt));
  EXPECT_EQ(Names(all), (std::vector<std::string>{"lab", "other"}));

  ASSERT_OK(store_->RemoveMember("lab", "bob"));
  ASSERT_OK_AND_ASSIGN(const auto gone, store_->MemberRole("lab", "bob"));
  EXPECT_FALSE(gone.has_value());
  EXPECT_CODE(store_->RemoveMember("lab", "bob"), StatusCode::kNotFound);
}

TEST_P(StoreProjectsTest, TheLastOwnerStays) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann"));
  EXPECT_CODE(store_->RemoveMember("lab", "ann"), StatusCode::kFailedPrecondition);
  EXPECT_CODE(store_->SetMember("lab", "ann", "reader"), StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(const auto still, store_->MemberRole("lab", "ann"));
  EXPECT_EQ(still, std::optional<std::string>("owner"));  // rolled back
  ASSERT_OK(store_->SetMember("lab", "bob", "owner"));
  ASSERT_OK(store_->SetMember("lab", "ann", "reader"));
  ASSERT_OK(store_->RemoveMember("lab", "ann"));
}

TEST_P(StoreProjectsTest, DatasetNamesAreUniquePerProject) {
  ASSERT_OK_AND_ASSIGN(const DatasetRecord mine, store_->PutDataset("eval", "text", "ann", "aaa"));
  EXPECT_EQ(mine.project, "ann");  // the uploader's personal project
  ASSERT_OK_AND_ASSIGN(const DatasetRecord lab,
                       store_->PutDataset("eval", "text", "ann", "bbb", "lab"));
  EXPECT_EQ(lab.project, "lab");
  EXPECT_EQ(lab.owner, "ann");
  EXPECT_CODE(store_->PutDataset("eval", "text", "bob", "ccc", "lab"), StatusCode::kAlreadyExists);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord found, store_->FindDataset("eval", "lab"));
  EXPECT_EQ(found.id, lab.id);
  EXPECT_CODE(store_->FindDataset("eval", "bob"), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const DatasetRecord by_content,
                       store_->FindDatasetByContent(lab.sha256, "lab"));
  EXPECT_EQ(by_content.id, lab.id);
  EXPECT_CODE(store_->FindDatasetByContent(lab.sha256, "ann"), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const auto listed, store_->ListDatasets(std::string("lab")));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, lab.id);
  // The quota counts what a user uploaded, in every project.
  ASSERT_OK_AND_ASSIGN(const int64_t ann_bytes, store_->UserBytes("ann"));
  EXPECT_EQ(ann_bytes, 6);
}

TEST_P(StoreProjectsTest, JobsCarryTheirProject) {
  ASSERT_OK_AND_ASSIGN(const JobRecord personal, store_->CreateJob("ann", "{}", {"m"}));
  EXPECT_EQ(personal.project, "ann");
  ASSERT_OK_AND_ASSIGN(const JobRecord shared, store_->CreateJob("ann", "{}", {"m"}, "", "lab"));
  EXPECT_EQ(shared.project, "lab");
  ASSERT_OK_AND_ASSIGN(const JobRecord again, store_->GetJob(shared.id));
  EXPECT_EQ(again.project, "lab");
  EXPECT_EQ(again.owner, "ann");
  JobFilter filter;
  filter.project = "lab";
  ASSERT_OK_AND_ASSIGN(const JobPage page, store_->ListJobs(filter, 10, ""));
  ASSERT_EQ(page.jobs.size(), 1u);
  EXPECT_EQ(page.jobs[0].id, shared.id);
  ASSERT_OK_AND_ASSIGN(const int64_t count, store_->CountJobs(filter));
  EXPECT_EQ(count, 1);
}

TEST_P(StoreProjectsTest, DeleteRefusedWhileAJobIsActive) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann"));
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("ann", "{}", {"m"}, "", "lab"));
  EXPECT_CODE(store_->DeleteProject("lab"), StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(const auto members, store_->ListMembers("lab"));
  EXPECT_EQ(members.size(), 1u);
  ASSERT_OK(store_->RequestCancel(job.id));
  ASSERT_OK_AND_ASSIGN(const ProjectDeletion deleted, store_->DeleteProject("lab"));
  EXPECT_EQ(deleted.jobs, 1);
  EXPECT_CODE(store_->DeleteProject("lab"), StatusCode::kNotFound);
}

TEST_P(StoreProjectsTest, DeleteTakesEverythingOfTheProjectOnly) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann"));
  ASSERT_OK(store_->SetMember("lab", "bob", "reader"));
  ASSERT_OK(store_->PutDataset("eval", "text", "ann", "shared bytes", "lab"));
  ASSERT_OK(store_->PutDataset("only", "text", "ann", "lab's own bytes", "lab"));
  ASSERT_OK(store_->PutDataset("eval", "text", "ann", "shared bytes"));  // ann's, same content
  ASSERT_OK_AND_ASSIGN(const JobRecord lab_job, store_->CreateJob("ann", "{}", {}, "", "lab"));
  ASSERT_OK_AND_ASSIGN(const JobRecord own_job, store_->CreateJob("ann", "{}", {}));
  for (int64_t id : {lab_job.id, own_job.id}) {
    ASSERT_OK(store_->AppendJobEvent(id, "e"));
    ASSERT_OK_AND_ASSIGN(const auto settled, store_->SettleJob(id, nullptr));
    ASSERT_TRUE(settled.has_value());
    ResultRow row;
    row.model = "m";
    row.weights_sha256 = "w";
    row.dataset_sha256 = "d";
    row.intervention = "zero";
    row.metric = "nll";
    row.n = 1;
    ASSERT_OK(store_->InsertResults(id, {row}));
  }
  ASSERT_OK(store_->PutCoefficients({"lab", "w", "h", "float32", "cpu"}, "", "lab blob"));
  ASSERT_OK(store_->PutCoefficients({"ann", "w", "h", "float32", "cpu"}, "", "ann blob"));

  ASSERT_OK_AND_ASSIGN(const ProjectDeletion deleted, store_->DeleteProject("lab"));
  EXPECT_EQ(deleted.jobs, 1);
  EXPECT_EQ(deleted.datasets, 2);
  EXPECT_CODE(store_->GetProject("lab"), StatusCode::kNotFound);
  EXPECT_CODE(store_->GetJob(lab_job.id), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const auto bob_projects, store_->ListProjects(std::string("bob")));
  EXPECT_TRUE(bob_projects.empty());
  ASSERT_OK_AND_ASSIGN(const auto lab_entry,
                       store_->GetCoefficients({"lab", "w", "h", "float32", "cpu"}));
  EXPECT_FALSE(lab_entry.has_value());
  // Ann's own job, dataset (whose bytes lab's "eval" shared) and entry stay.
  ASSERT_OK(store_->GetJob(own_job.id));
  ASSERT_OK_AND_ASSIGN(const DatasetRecord kept, store_->FindDataset("eval", "ann"));
  ASSERT_OK_AND_ASSIGN(const std::string bytes, store_->ReadDatasetBytes(kept.id));
  EXPECT_EQ(bytes, "shared bytes");
  ASSERT_OK_AND_ASSIGN(const auto ann_entry,
                       store_->GetCoefficients({"ann", "w", "h", "float32", "cpu"}));
  ASSERT_TRUE(ann_entry.has_value());
  EXPECT_EQ(ann_entry->blob, "ann blob");
  ASSERT_OK_AND_ASSIGN(const ResultPage rows, store_->QueryResults({}, 10, ""));
  ASSERT_EQ(rows.rows.size(), 1u);
  EXPECT_EQ(rows.rows[0].job_id, own_job.id);
  ExpectRows("dataset_blobs", 1);  // lab's own bytes are gone
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

// A project's webhooks die with it: a project created later under the same
// name (by someone else) inherits none, so its job ends are not sent to the
// old receiver nor signed with the old secret; another project's stay.
TEST_P(StoreProjectsTest, DeleteTakesTheWebhooksARecreatedNameInheritsNone) {
  ASSERT_OK(store_->CreateProject("lab", "root", "alice"));
  WebhookRecord hook;
  hook.project = "lab";
  hook.url = "http://127.0.0.1:9/alice";
  hook.secret = "alice's secret";
  hook.created_by = "alice";
  ASSERT_OK(store_->AddWebhook(hook).status());
  hook.project = "alice";
  ASSERT_OK_AND_ASSIGN(const WebhookRecord kept, store_->AddWebhook(hook));
  ASSERT_OK_AND_ASSIGN(const JobRecord old_job, store_->CreateJob("alice", "{}", {}, "", "lab"));
  ASSERT_OK_AND_ASSIGN(const int64_t enqueued,
                       store_->EnqueueWebhookDeliveries("lab", old_job.id, "CANCELLED", "{}", 0));
  EXPECT_EQ(enqueued, 1);
  ASSERT_OK(store_->RequestCancel(old_job.id));

  ASSERT_OK_AND_ASSIGN(const ProjectDeletion deleted, store_->DeleteProject("lab"));
  EXPECT_EQ(deleted.webhooks, 1);
  ExpectRows("webhook_deliveries", 0);

  ASSERT_OK(store_->CreateProject("lab", "root", "carol"));
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> inherited, store_->ListWebhooks("lab"));
  EXPECT_TRUE(inherited.empty());
  ASSERT_OK_AND_ASSIGN(const JobRecord job, store_->CreateJob("carol", "{}", {}, "", "lab"));
  ASSERT_OK_AND_ASSIGN(const int64_t sent,
                       store_->EnqueueWebhookDeliveries("lab", job.id, "SUCCEEDED", "{}", 0));
  EXPECT_EQ(sent, 0);
  ASSERT_OK_AND_ASSIGN(const auto due, store_->DueWebhookDeliveries(10, 10));
  EXPECT_TRUE(due.empty());
  ASSERT_OK_AND_ASSIGN(const std::vector<WebhookRecord> alice, store_->ListWebhooks("alice"));
  ASSERT_EQ(alice.size(), 1u);
  EXPECT_EQ(alice[0].id, kept.id);
}

TEST_P(StoreProjectsTest, MembershipWritesAreFaultInjected) {
  ASSERT_OK(store_->CreateProject("lab", "root", "ann"));
  options_.fault_injector = [](std::string_view op) {
    return op == "membership" ? absl::UnavailableError("injected") : absl::OkStatus();
  };
  if (!is_file()) return;  // reopening ":memory:" would start empty
  Open();
  EXPECT_CODE(store_->CreateProject("lab2", "root", "ann"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->SetMember("lab", "bob", "reader"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->RemoveMember("lab", "ann"), StatusCode::kUnavailable);
  ASSERT_OK_AND_ASSIGN(const auto members, store_->ListMembers("lab"));
  EXPECT_EQ(members.size(), 1u);
  EXPECT_CODE(store_->GetProject("lab2"), StatusCode::kNotFound);
}

// Issue 23's fault suite with three projects whose members cross them
// (ann writes in lab and reads alpha, bob writes in alpha and reads beta,
// cid writes in beta and reads lab): a fault on a membership change, a key
// change, an audit-log append or a webhook-delivery enqueue fails that
// write alone. What each project holds (members, jobs and their states,
// datasets, webhooks and their deliveries) and the keys stay as they were;
// a job ended in the same transaction as a refused enqueue stays ended in
// its project. Once healed, each write lands exactly once.
constexpr const char* kThree[] = {"lab", "alpha", "beta"};
constexpr const char* kCrossing[] = {"ann", "bob", "cid"};

// What every project shows, and the keys, as one text to compare.
std::string Visible(Store& store) {
  std::string out;
  for (const char* project : kThree) {
    absl::StrAppend(&out, project, ":");
    auto members = store.ListMembers(project);
    EXPECT_TRUE(members.ok()) << members.status();
    if (members.ok()) {
      for (const ProjectMember& m : *members) absl::StrAppend(&out, " ", m.user, "=", m.role);
    }
    JobFilter filter;
    filter.project = project;
    auto jobs = store.ListJobs(filter, 100, "");
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    if (jobs.ok()) {
      for (const JobRecord& j : jobs->jobs) {
        EXPECT_EQ(j.project, project) << "job " << j.id;
        absl::StrAppend(&out, " job", j.id, "/", JobStateName(j.state));
      }
    }
    auto datasets = store.ListDatasets(std::string(project));
    EXPECT_TRUE(datasets.ok()) << datasets.status();
    if (datasets.ok()) {
      for (const DatasetRecord& d : *datasets) absl::StrAppend(&out, " set ", d.name);
    }
    auto hooks = store.ListWebhooks(project);
    EXPECT_TRUE(hooks.ok()) << hooks.status();
    if (!hooks.ok()) continue;
    for (const WebhookRecord& h : *hooks) {
      auto deliveries = store.ListWebhookDeliveries(h.id, 100);
      EXPECT_TRUE(deliveries.ok()) << deliveries.status();
      if (!deliveries.ok()) continue;
      for (const WebhookDelivery& d : *deliveries) {
        absl::StrAppend(&out, " hook", h.id, "<-job", d.job_id, "/", d.job_state);
      }
    }
    absl::StrAppend(&out, "\n");
  }
  auto keys = store.ListApiKeys(std::nullopt);
  EXPECT_TRUE(keys.ok()) << keys.status();
  if (keys.ok()) {
    for (const ApiKeyRecord& k : *keys) {
      absl::StrAppend(&out, "key", k.id, " ", k.user, k.revoked_at_us != 0 ? " revoked" : "", "\n");
    }
  }
  return out;
}

int64_t AuditRows(Store& store) {
  auto page = store.QueryAuditLog({}, Store::kMaxPageSize, "");
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? static_cast<int64_t>(page->rows.size()) : -1;
}

// Ends QUEUED job `job` (cancelled) and, nested in the same transaction as
// the coordinator does (Coordinator::ObserveEnd), enqueues its notices: a
// refused enqueue undoes only itself, and the end is marked unobserved.
absl::Status EndWithNotices(Store& store, const JobRecord& job, absl::Status* enqueued) {
  return store.Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(store.RequestCancel(job.id).status());
    *enqueued = store.Transaction([&] {
      return store.EnqueueWebhookDeliveries(job.project, job.id, "CANCELLED", "{}", 0).status();
    });
    return enqueued->ok() ? absl::OkStatus() : store.MarkEndUnobserved(job.id);
  });
}

// What the coordinator's sweep does with the marked ends: enqueues each
// one's notices and unmarks it in one transaction. Returns the deliveries
// added.
absl::StatusOr<int64_t> ObserveMarkedEnds(Store& store) {
  FCA_ASSIGN_OR_RETURN(const std::vector<int64_t> ids, store.UnobservedEnds(100));
  int64_t added = 0;
  for (int64_t id : ids) {
    FCA_RETURN_IF_ERROR(store.Transaction([&]() -> absl::Status {
      FCA_ASSIGN_OR_RETURN(const JobRecord job, store.GetJob(id));
      FCA_ASSIGN_OR_RETURN(const int64_t n, store.EnqueueWebhookDeliveries(
                                                job.project, id, JobStateName(job.state), "{}", 0));
      added += n;
      return store.MarkEndObserved(id);
    }));
  }
  return added;
}

TEST_P(StoreProjectsTest, ThreeCrossedProjectsStayAsTheyWereUnderFaults) {
  std::string failing, also_failing;
  options_.fault_injector = [&](std::string_view op) {
    return op == failing || op == also_failing ? absl::UnavailableError("injected")
                                               : absl::OkStatus();
  };
  Open();
  std::vector<int64_t> key_ids;
  std::vector<JobRecord> queued;
  for (int k = 0; k < 3; ++k) {
    ASSERT_OK(store_->CreateProject(kThree[k], "root", "root"));
    ASSERT_OK_AND_ASSIGN(
        const ApiKeyRecord key,
        store_->CreateApiKey({kCrossing[k], "user", std::string(40, 'a' + k), 0, "root"}));
    key_ids.push_back(key.id);
  }
  for (int k = 0; k < 3; ++k) {
    ASSERT_OK(store_->SetMember(kThree[k], kCrossing[k], "writer"));
    ASSERT_OK(store_->SetMember(kThree[(k + 1) % 3], kCrossing[k], "reader"));
    ASSERT_OK(store_
                  ->PutDataset("eval", "text", kCrossing[k], std::string("bytes of ") + kThree[k],
                               kThree[k])
                  .status());
    ASSERT_OK(store_
                  ->AddWebhook({0, kThree[k], std::string("http://h/") + kThree[k],
                                std::string(32, 's'), "root", 0})
                  .status());
    // Two queued jobs per project; one ends now, with its notice.
    for (int n = 0; n < 2; ++n) {
      ASSERT_OK_AND_ASSIGN(const JobRecord job,
                           store_->CreateJob(kCrossing[k], "{}", {"m"}, "", kThree[k]));
      queued.push_back(job);
    }
    absl::Status enqueued;
    ASSERT_OK(EndWithNotices(*store_, queued[2 * k], &enqueued));
    ASSERT_OK(enqueued);
  }
  ASSERT_OK(
      store_->AppendAuditLog({0, 0, "root", 0, "", "setup", "project", "lab", "OK", ""}).status());
  const std::string before = Visible(*store_);
  const int64_t audit_before = AuditRows(*store_);
  EXPECT_NE(before.find("lab: ann=writer cid=reader root=owner"), std::string::npos) << before;

  // Each write refused: nothing of it is stored, nothing else moves.
  failing = "membership";
  EXPECT_CODE(store_->SetMember("lab", "bob", "reader"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->SetMember("alpha", "ann", "owner"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->RemoveMember("beta", "cid"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->CreateProject("gamma", "root", "ann"), StatusCode::kUnavailable);
  EXPECT_CODE(store_->GetProject("gamma"), StatusCode::kNotFound);
  failing = "add_api_key";
  EXPECT_CODE(store_->CreateApiKey({"bob", "user", std::string(40, 'z'), 0, "root"}),
              StatusCode::kUnavailable);
  failing = "revoke_api_key";
  EXPECT_CODE(store_->RevokeApiKey(key_ids[0]), StatusCode::kUnavailable);
  failing = "rotate_api_key";
  EXPECT_CODE(store_->RotateApiKey(key_ids[1], std::string(40, 'y'), 0, "root"),
              StatusCode::kUnavailable);
  failing = "append_audit_log";
  EXPECT_CODE(store_->AppendAuditLog({0, 0, "ann", 0, "", "x", "job", "1", "OK", ""}),
              StatusCode::kUnavailable);
  EXPECT_EQ(Visible(*store_), before);
  EXPECT_EQ(AuditRows(*store_), audit_before);
  ASSERT_OK_AND_ASSIGN(const auto still, store_->LookupApiKey(std::string(40, 'a')));
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->user, "ann");

  // A refused enqueue whose end cannot be marked either: the job does not
  // end (the coordinator ends it at a later sweep), nothing moves.
  failing = "enqueue_webhook";
  also_failing = "mark_end_unobserved";
  absl::Status enqueued;
  EXPECT_CODE(EndWithNotices(*store_, queued[3], &enqueued), StatusCode::kUnavailable);
  EXPECT_CODE(enqueued, StatusCode::kUnavailable);
  EXPECT_EQ(Visible(*store_), before);
  also_failing = "";

  // A refused enqueue while a job of beta ends: the end stays, in beta,
  // marked unobserved, and no project gains or loses a delivery.
  ASSERT_OK(EndWithNotices(*store_, queued[5], &enqueued));
  EXPECT_CODE(enqueued, StatusCode::kUnavailable);
  ASSERT_OK_AND_ASSIGN(const auto marked, store_->UnobservedEnds(100));
  EXPECT_EQ(marked, std::vector<int64_t>{queued[5].id});
  ASSERT_OK_AND_ASSIGN(const JobRecord ended, store_->GetJob(queued[5].id));
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.project, "beta");
  std::string expected = before;
  const std::string was = absl::StrCat(" job", queued[5].id, "/QUEUED");
  ASSERT_NE(expected.find(was), std::string::npos) << expected;
  expected.replace(expected.find(was), was.size(),
                   absl::StrCat(" job", queued[5].id, "/CANCELLED"));
  EXPECT_EQ(Visible(*store_), expected);

  // Healed: each write lands once, where it was aimed.
  failing = "";
  ASSERT_OK(store_->SetMember("lab", "bob", "reader"));
  ASSERT_OK(store_->RemoveMember("beta", "cid"));
  ASSERT_OK(store_->RevokeApiKey(key_ids[0]).status());
  ASSERT_OK(store_->AppendAuditLog({0, 0, "ann", 0, "", "x", "job", "1", "OK", ""}).status());
  // The refused end's delivery comes once, from the mark; the mark goes.
  ASSERT_OK_AND_ASSIGN(const int64_t added, ObserveMarkedEnds(*store_));
  EXPECT_EQ(added, 1);
  ASSERT_OK_AND_ASSIGN(const int64_t again, ObserveMarkedEnds(*store_));
  EXPECT_EQ(again, 0);
  ASSERT_OK_AND_ASSIGN(const auto unmarked, store_->UnobservedEnds(100));
  EXPECT_TRUE(unmarked.empty());
  ASSERT_OK_AND_ASSIGN(const int64_t repeated, store_->EnqueueWebhookDeliveries(
                                                   "beta", queued[5].id, "CANCELLED", "{}", 0));
  EXPECT_EQ(repeated, 0);  // a job ends once
  const std::string after = Visible(*store_);
  EXPECT_NE(after.find("lab: ann=writer bob=reader cid=reader root=owner"), std::string::npos)
      << after;
  EXPECT_NE(after.find("beta: bob=reader root=owner job"), std::string::npos) << after;
  EXPECT_NE(after.find(absl::StrCat("<-job", queued[5].id, "/CANCELLED")), std::string::npos)
      << after;
  EXPECT_NE(after.find(absl::StrCat("key", key_ids[0], " ann revoked")), std::string::npos);
  EXPECT_EQ(AuditRows(*store_), audit_before + 1);
  for (const JobRecord& job : queued) {
    ASSERT_OK_AND_ASSIGN(const JobRecord now, store_->GetJob(job.id));
    EXPECT_EQ(now.project, job.project) << "job " << job.id;
  }
  ASSERT_OK_AND_ASSIGN(const std::string integrity, store_->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

}  // namespace
}  // namespace fca::storage
