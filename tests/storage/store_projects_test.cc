// Projects and members in the store: creation (names taken by projects and
// by API keys' users), personal projects, roles, the last owner, deletion
// (refused while a job is active; everything of the project goes, nothing
// of another), datasets' and jobs' project, and the fault injection of the
// membership writes.
#include <string>
#include <vector>

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

}  // namespace
}  // namespace fca::storage
