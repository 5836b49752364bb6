// Projects in the core (server/core/projects.h): every RPC that names a
// job, a dataset or a project, called by each kind of caller (owner, the
// writer who made the object, another writer, a reader, a non-member, an
// admin), with the code each must get; the default project; a job reading
// only its own project's datasets; the same NOT_FOUND for a non-member as
// for nothing; a removed member's watch ending; project deletion.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::CoreEnv;
using ::testing::HasSubstr;
using testing::SmallSpec;
using Code = absl::StatusCode;

Caller User(const std::string& name) {
  Caller c;
  c.user = name;
  return c;
}

// The kinds of callers, in the order of an Expect row.
enum Who { kOwner, kMaker, kOtherWriter, kReader, kStranger, kAdmin, kWhoCount };
const char* const kWhoNames[] = {"owner olga",  "writer walt (made it)", "writer wendy",
                                 "reader rita", "non-member nick",       "admin root"};

Caller CallerOf(Who who) {
  switch (who) {
    case kOwner:
      return User("olga");
    case kMaker:
      return User("walt");
    case kOtherWriter:
      return User("wendy");
    case kReader:
      return User("rita");
    case kStranger:
      return User("nick");
    default:
      return Admin();
  }
}

// What each kind of caller gets.
struct Expect {
  Code code[kWhoCount];
};
constexpr Code kOk = Code::kOk;
constexpr Code kDenied = Code::kPermissionDenied;
constexpr Code kAbsent = Code::kNotFound;
// Reading: every member and admins; writing own work: writers; anything:
// owners; managing: owners only.
constexpr Expect kRead{{kOk, kOk, kOk, kOk, kAbsent, kOk}};
constexpr Expect kWrite{{kOk, kOk, kOk, kDenied, kAbsent, kOk}};
constexpr Expect kChangeOwn{{kOk, kOk, kDenied, kDenied, kAbsent, kOk}};
constexpr Expect kManage{{kOk, kDenied, kDenied, kDenied, kAbsent, kOk}};

class ProjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::CreateProjectRequest create;
    create.set_name("lab");
    create.set_owner("olga");
    ASSERT_TRUE(env_.core()->CreateProject(Admin(), create).ok());
    ASSERT_TRUE(AddMember("lab", "walt", v1::PROJECT_ROLE_WRITER).ok());
    ASSERT_TRUE(AddMember("lab", "wendy", v1::PROJECT_ROLE_WRITER).ok());
    ASSERT_TRUE(AddMember("lab", "rita", v1::PROJECT_ROLE_READER).ok());
    ASSERT_TRUE(Upload(User("walt"), "lab", "eval", testing::EvalText()).ok());
    ASSERT_TRUE(Upload(User("walt"), "lab", "calib", testing::CalibText()).ok());
    // Everyone has a dataset "eval" of their own too: names are per project.
    for (Who who : {kOwner, kMaker, kOtherWriter, kReader, kStranger}) {
      ASSERT_TRUE(env_.UploadEvalAndCalib(CallerOf(who)).ok());
    }
    auto job = Submit(User("walt"), "lab");
    ASSERT_TRUE(job.ok()) << job.status();
    auto done = env_.RunNext();
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED);
    finished_ = done->id();
  }

  absl::Status AddMember(const std::string& project, const std::string& user, v1::ProjectRole role,
                         const Caller& caller = Admin()) {
    v1::AddProjectMemberRequest r;
    r.set_project(project);
    r.set_user(user);
    r.set_role(role);
    return env_.core()->AddProjectMember(caller, r).status();
  }

  absl::StatusOr<v1::UploadDatasetResponse> Upload(const Caller& caller, const std::string& project,
                                                   const std::string& name,
                                                   const std::string& bytes) {
    return env_.Upload(caller, name, bytes, v1::DATASET_KIND_TEXT, project);
  }

  absl::StatusOr<v1::Job> Submit(const Caller& caller, const std::string& project,
                                 const std::string& eval = "eval") {
    v1::SubmitAuditRequest r;
    *r.mutable_spec() = SmallSpec({testing::kGateA}, eval, "calib");
    r.set_project(project);
    FCA_ASSIGN_OR_RETURN(v1::SubmitAuditResponse response, env_.core()->SubmitAudit(caller, r));
    return response.job();
  }

  // A queued job of walt's in lab.
  int64_t QueuedJob() {
    auto job = Submit(User("walt"), "lab");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : 0;
  }

  // A finished (cancelled) job of walt's in lab.
  int64_t EndedJob() {
    const int64_t id = QueuedJob();
    v1::CancelJobRequest r;
    r.set_job_id(id);
    EXPECT_TRUE(env_.core()->CancelJob(User("walt"), r).ok());
    return id;
  }

  // Runs `call` once per kind of caller, with a fresh object where `fresh`
  // makes one, and expects each its code.
  void Check(const std::string& rpc, const Expect& expect,
             const std::function<absl::Status(const Caller&, int64_t)>& call,
             const std::function<int64_t()>& fresh = nullptr) {
    for (int w = 0; w < kWhoCount; ++w) {
      const int64_t object = fresh ? fresh() : finished_;
      const absl::Status status = call(CallerOf(static_cast<Who>(w)), object);
      EXPECT_EQ(status.code(), expect.code[w]) << rpc << " by " << kWhoNames[w] << ": " << status;
    }
  }

  CoreEnv env_;
  int64_t finished_ = 0;  // walt's succeeded job in lab
  int fresh_names_ = 0;
};

TEST_F(ProjectsTest, EveryRpcByEveryRole) {
  AuditServiceCore* core = env_.core();
  Check("GetJob", kRead, [&](const Caller& c, int64_t id) {
    v1::GetJobRequest r;
    r.set_job_id(id);
    return core->GetJob(c, r).status();
  });
  Check("ListJobs", kRead, [&](const Caller& c, int64_t) {
    v1::ListJobsRequest r;
    r.set_project("lab");
    return core->ListJobs(c, r).status();
  });
  Check("ListDatasets", kRead, [&](const Caller& c, int64_t) {
    v1::ListDatasetsRequest r;
    r.set_project("lab");
    return core->ListDatasets(c, r).status();
  });
  Check("QueryResults", kRead, [&](const Caller& c, int64_t id) {
    v1::QueryResultsRequest r;
    r.mutable_filter()->set_job_id(id);
    return core->QueryResults(c, r).status();
  });
  Check("GetReport", kRead, [&](const Caller& c, int64_t id) {
    v1::GetReportRequest r;
    r.set_job_id(id);
    return core->GetReport(c, r).status();
  });
  Check("CompareJobs", kRead, [&](const Caller& c, int64_t id) {
    v1::CompareJobsRequest r;
    r.add_job_ids(id);
    return core->CompareJobs(c, r).status();
  });
  // Pooled with a second finished job of lab's (fg_b: another model).
  v1::SubmitAuditRequest other;
  *other.mutable_spec() = SmallSpec({testing::kGateB}, "eval", "calib");
  other.set_project("lab");
  ASSERT_TRUE(core->SubmitAudit(User("walt"), other).ok());
  auto second = env_.RunNext();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->state(), v1::JOB_STATE_SUCCEEDED);
  Check("PoolJobs", kRead, [&](const Caller& c, int64_t id) {
    v1::PoolJobsRequest r;
    r.add_job_ids(id);
    r.add_job_ids(second->id());
    return core->PoolJobs(c, r).status();
  });
  Check("ListJobWindows", kRead, [&](const Caller& c, int64_t id) {
    v1::ListJobWindowsRequest r;
    r.set_job_id(id);
    return core->ListJobWindows(c, r).status();
  });
  Check("WatchJob", kRead, [&](const Caller& c, int64_t id) {
    v1::WatchJobRequest r;
    r.set_job_id(id);
    return core->WatchJob(
        c, r, [](const v1::WatchJobResponse&) { return true; }, [] { return false; });
  });
  Check("GetProject", kRead, [&](const Caller& c, int64_t) {
    v1::GetProjectRequest r;
    r.set_name("lab");
    return core->GetProject(c, r).status();
  });
  // The project's cache entry: members export it, nobody else learns of it.
  auto model = env_.models()->Get(testing::kGateA);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(env_.store()
                  ->PutCoefficients({"lab", (*model)->info().weights_sha256, "abc", "float32",
                                     (*model)->info().compute.device},
                                    "", std::string(64, 'x'))
                  .ok());
  Check("ExportCoefficients", kRead, [&](const Caller& c, int64_t) {
    v1::ExportCoefficientsRequest r;
    r.set_project("lab");
    r.set_model(testing::kGateA);
    r.set_window_hash("abc");
    return core->ExportCoefficients(c, r,
                                    [](const v1::ExportCoefficientsResponse&) { return true; });
  });
  Check("UploadDataset", kWrite, [&](const Caller& c, int64_t) {
    return Upload(c, "lab", absl::StrCat("up", ++fresh_names_), "some text").status();
  });
  Check("SubmitAudit", kWrite, [&](const Caller& c, int64_t) { return Submit(c, "lab").status(); });
  Check(
      "CancelJob", kChangeOwn,
      [&](const Caller& c, int64_t id) {
        v1::CancelJobRequest r;
        r.set_job_id(id);
        return core->CancelJob(c, r).status();
      },
      [&] { return QueuedJob(); });
  Check(
      "DeleteJob", kChangeOwn,
      [&](const Caller& c, int64_t id) {
        v1::DeleteJobRequest r;
        r.set_job_id(id);
        return core->DeleteJob(c, r).status();
      },
      [&] { return EndedJob(); });
  std::string dataset;
  Check(
      "DeleteDataset", kChangeOwn,
      [&](const Caller& c, int64_t) {
        v1::DeleteDatasetRequest r;
        r.set_project("lab");
        r.set_name(dataset);
        return core->DeleteDataset(c, r).status();
      },
      [&]() -> int64_t {
        dataset = absl::StrCat("walts", ++fresh_names_);
        EXPECT_TRUE(Upload(User("walt"), "lab", dataset, "bytes of " + dataset).ok());
        return 0;
      });
  Check("GetRetention", kRead, [&](const Caller& c, int64_t) {
    v1::GetRetentionRequest r;
    r.set_project("lab");
    return core->GetRetention(c, r).status();
  });
  Check("SetRetention", kManage, [&](const Caller& c, int64_t) {
    v1::SetRetentionRequest r;
    r.set_project("lab");
    r.set_keep_jobs_days(30);
    return core->SetRetention(c, r).status();
  });
  Check("AddProjectMember", kManage, [&](const Caller& c, int64_t) {
    return AddMember("lab", "tom", v1::PROJECT_ROLE_READER, c);
  });
  Check(
      "RemoveProjectMember", kManage,
      [&](const Caller& c, int64_t) {
        v1::RemoveProjectMemberRequest r;
        r.set_project("lab");
        r.set_user("tom");
        return core->RemoveProjectMember(c, r).status();
      },
      [&]() -> int64_t {
        EXPECT_TRUE(AddMember("lab", "tom", v1::PROJECT_ROLE_READER).ok());
        return 0;
      });
  std::string project;
  Check(
      "DeleteProject", kManage,
      [&](const Caller& c, int64_t) {
        v1::DeleteProjectRequest r;
        r.set_name(project);
        return core->DeleteProject(c, r).status();
      },
      [&]() -> int64_t {
        project = absl::StrCat("tmp", ++fresh_names_);
        v1::CreateProjectRequest r;
        r.set_name(project);
        r.set_owner("olga");
        EXPECT_TRUE(core->CreateProject(Admin(), r).ok());
        for (const auto& [user, role] :
             std::map<std::string, v1::ProjectRole>{{"walt", v1::PROJECT_ROLE_WRITER},
                                                    {"wendy", v1::PROJECT_ROLE_WRITER},
                                                    {"rita", v1::PROJECT_ROLE_READER}}) {
          EXPECT_TRUE(AddMember(project, user, role).ok());
        }
        return 0;
      });
  const Expect admins_only{{kDenied, kDenied, kDenied, kDenied, kDenied, kOk}};
  Check("CreateProject", admins_only, [&](const Caller& c, int64_t) {
    v1::CreateProjectRequest r;
    r.set_name(absl::StrCat("new", ++fresh_names_));
    return core->CreateProject(c, r).status();
  });
}

TEST_F(ProjectsTest, ANonMemberLearnsNothing) {
  AuditServiceCore* core = env_.core();
  v1::GetJobRequest get;
  get.set_job_id(finished_);
  const absl::Status hidden = core->GetJob(User("nick"), get).status();
  get.set_job_id(finished_ + 1000);
  const absl::Status absent = core->GetJob(User("nick"), get).status();
  EXPECT_EQ(hidden.code(), Code::kNotFound);
  EXPECT_EQ(hidden.message(), absl::StrFormat("job %d does not exist", finished_));
  EXPECT_EQ(absent.message(), absl::StrFormat("job %d does not exist", finished_ + 1000));

  v1::GetProjectRequest project;
  project.set_name("lab");
  EXPECT_EQ(core->GetProject(User("nick"), project).status().message(),
            "project 'lab' does not exist");
  v1::DeleteDatasetRequest dataset;
  dataset.set_project("lab");
  dataset.set_name("eval");
  EXPECT_EQ(core->DeleteDataset(User("nick"), dataset).status().message(),
            "dataset 'eval' does not exist");
  dataset.set_name("never");
  EXPECT_EQ(core->DeleteDataset(User("rita"), dataset).status().message(),
            "dataset 'never' does not exist");

  // Nor through listings without a project: nick's own only.
  v1::ListJobsRequest jobs;
  auto listed = core->ListJobs(User("nick"), jobs);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
  v1::ListProjectsRequest projects;
  auto mine = core->ListProjects(User("nick"), projects);
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->projects_size(), 1);
  EXPECT_EQ(mine->projects(0).name(), "nick");
  EXPECT_TRUE(mine->projects(0).personal());
  EXPECT_EQ(mine->projects(0).role(), v1::PROJECT_ROLE_OWNER);
}

TEST_F(ProjectsTest, DefaultIsThePersonalProject) {
  AuditServiceCore* core = env_.core();
  auto own = Submit(User("walt"), "");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->project(), "walt");
  EXPECT_EQ(own->owner(), "walt");
  auto listed = core->ListJobs(User("walt"), {});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->jobs_size(), 1);  // not lab's jobs
  EXPECT_EQ(listed->jobs(0).id(), own->id());
  v1::ListJobsRequest in_lab;
  in_lab.set_project("lab");
  auto lab = core->ListJobs(User("rita"), in_lab);
  ASSERT_TRUE(lab.ok());
  ASSERT_EQ(lab->jobs_size(), 1);
  EXPECT_EQ(lab->jobs(0).owner(), "walt");  // whose job it is
  EXPECT_EQ(lab->jobs(0).project(), "lab");
  auto datasets = core->ListDatasets(User("walt"), {});
  ASSERT_TRUE(datasets.ok());
  ASSERT_EQ(datasets->datasets_size(), 2);
  for (const v1::Dataset& d : datasets->datasets()) EXPECT_EQ(d.project(), "walt");
  // Admins who name no project still see every project's (as before).
  auto all = core->ListJobs(Admin(), {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs_size(), 2);
}

TEST_F(ProjectsTest, AJobReadsItsOwnProjectsDatasetsOnly) {
  // "personal" exists in walt's personal project only.
  ASSERT_TRUE(Upload(User("walt"), "", "personal", testing::EvalText()).ok());
  auto refused = Submit(User("walt"), "lab", "personal");
  EXPECT_EQ(refused.status().code(), Code::kNotFound) << refused.status();
  // By content: the same bytes are lab's "eval", which the job may read;
  // bytes only another project holds are not found.
  auto other = Upload(User("walt"), "", "only-mine", "bytes lab does not have");
  ASSERT_TRUE(other.ok());
  auto by_hash = Submit(User("walt"), "lab", "sha256:" + other->dataset().sha256());
  EXPECT_EQ(by_hash.status().code(), Code::kNotFound) << by_hash.status();
  EXPECT_THAT(std::string(by_hash.status().message()), HasSubstr("project 'lab'"));
}

TEST_F(ProjectsTest, ARemovedMembersWatchEnds) {
  const int64_t id = QueuedJob();  // never runs: the env's workers are stopped
  std::atomic<bool> watching{false};
  absl::Status watched;
  const absl::Time give_up = absl::Now() + absl::Minutes(2);
  std::thread watcher([&] {
    v1::WatchJobRequest r;
    r.set_job_id(id);
    watched = env_.core()->WatchJob(
        User("rita"), r,
        [&](const v1::WatchJobResponse&) {
          watching = true;
          return true;
        },
        [&] { return absl::Now() > give_up; });
  });
  while (!watching) absl::SleepFor(absl::Milliseconds(10));  // the QUEUED event came
  v1::RemoveProjectMemberRequest remove;
  remove.set_project("lab");
  remove.set_user("rita");
  ASSERT_TRUE(env_.core()->RemoveProjectMember(User("olga"), remove).ok());
  watcher.join();
  EXPECT_EQ(watched.code(), Code::kNotFound) << watched;
}

TEST_F(ProjectsTest, ProjectRules) {
  AuditServiceCore* core = env_.core();
  v1::CreateProjectRequest create;
  create.set_name("walt");  // a user's name
  EXPECT_EQ(core->CreateProject(Admin(), create).status().code(), Code::kAlreadyExists);
  create.set_name("lab");
  EXPECT_EQ(core->CreateProject(Admin(), create).status().code(), Code::kAlreadyExists);
  create.set_name("bad/name");
  EXPECT_EQ(core->CreateProject(Admin(), create).status().code(), Code::kInvalidArgument);

  v1::DeleteProjectRequest del;
  del.set_name("walt");
  EXPECT_EQ(core->DeleteProject(User("walt"), del).status().code(), Code::kFailedPrecondition);
  QueuedJob();
  del.set_name("lab");
  EXPECT_EQ(core->DeleteProject(User("olga"), del).status().code(), Code::kFailedPrecondition);

  v1::RemoveProjectMemberRequest remove;
  remove.set_project("lab");
  remove.set_user("olga");
  EXPECT_EQ(core->RemoveProjectMember(User("olga"), remove).status().code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(AddMember("lab", "x", v1::PROJECT_ROLE_UNSPECIFIED, User("olga")).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(AddMember("lab", "has space", v1::PROJECT_ROLE_READER, User("olga")).code(),
            Code::kInvalidArgument);

  v1::GetProjectRequest get;
  get.set_name("lab");
  auto shown = core->GetProject(User("rita"), get);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(shown->project().role(), v1::PROJECT_ROLE_READER);
  ASSERT_EQ(shown->project().members_size(), 4);
  EXPECT_EQ(shown->project().members(0).user(), "olga");
  EXPECT_EQ(shown->project().members(0).role(), v1::PROJECT_ROLE_OWNER);
}

}  // namespace
}  // namespace fca::core
