// GetQueue (server/core/queue_view.h): counts per model and per project and
// the places of the caller's jobs, with jobs in three projects; what a
// member, a reader, a non-member and an admin each see (a non-member learns
// no other project's name, owner, model or job id); the models the
// server's own workers hold loaded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "server/jobs/worker_pool.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Admin;
using testing::CoreEnv;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::SmallSpec;

Caller User(const std::string& name) {
  Caller c;
  c.user = name;
  return c;
}

v1::GetQueueResponse Queue(CoreEnv& env, const Caller& caller) {
  auto queue = env.core()->GetQueue(caller);
  EXPECT_TRUE(queue.ok()) << queue.status();
  return queue.ok() ? *queue : v1::GetQueueResponse();
}

// Rows by name, for lookups ("" is the other projects' row).
std::map<std::string, v1::ProjectQueue> ProjectRows(const v1::GetQueueResponse& q) {
  std::map<std::string, v1::ProjectQueue> rows;
  for (const v1::ProjectQueue& p : q.projects()) rows[p.project()] = p;
  return rows;
}

std::map<std::string, v1::ModelQueue> ModelRows(const v1::GetQueueResponse& q) {
  std::map<std::string, v1::ModelQueue> rows;
  for (const v1::ModelQueue& m : q.models()) rows[m.model()] = m;
  return rows;
}

// queued jobs, running jobs, queued tasks, running tasks
std::vector<int64_t> Counts(const v1::ProjectQueue& p) {
  return {p.queued_jobs(), p.running_jobs(), p.queued_tasks(), p.running_tasks()};
}

// Projects "lab" (olga owner, walt writer, rita reader) and "vision" (vera
// owner); nick is in neither and has only his personal project. Before each
// test, oldest first: walt's job 1 in lab auditing fg_a and fg_b, whose
// fg_a task a worker holds; vera's job 2 in vision (fg_a); nick's job 3 in
// his personal project (fg_b); walt's job 4 in lab (fg_a).
class QueueViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Create("lab", "olga").ok());
    ASSERT_TRUE(Create("vision", "vera").ok());
    ASSERT_TRUE(AddMember("lab", "walt", v1::PROJECT_ROLE_WRITER).ok());
    ASSERT_TRUE(AddMember("lab", "rita", v1::PROJECT_ROLE_READER).ok());
    for (const char* project : {"lab", "vision"}) {
      ASSERT_TRUE(
          env_.Upload(Admin(), "eval", testing::EvalText(), v1::DATASET_KIND_TEXT, project).ok());
      ASSERT_TRUE(
          env_.Upload(Admin(), "calib", testing::CalibText(), v1::DATASET_KIND_TEXT, project).ok());
    }
    ASSERT_TRUE(env_.UploadEvalAndCalib(User("nick")).ok());
    jobs_.push_back(Submit(User("walt"), "lab", {testing::kGateA, testing::kGateB}));
    jobs_.push_back(Submit(User("vera"), "vision", {testing::kGateA}));
    jobs_.push_back(Submit(User("nick"), "", {testing::kGateB}));
    jobs_.push_back(Submit(User("walt"), "lab", {testing::kGateA}));
    auto claimed = testing::ClaimAsLocalWorker(env_.store());
    ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
    ASSERT_EQ((*claimed)->task.job_id, jobs_[0]);
    ASSERT_EQ((*claimed)->task.model, testing::kGateA);
  }

  absl::Status Create(const std::string& name, const std::string& owner) {
    v1::CreateProjectRequest r;
    r.set_name(name);
    r.set_owner(owner);
    return env_.core()->CreateProject(Admin(), r).status();
  }

  absl::Status AddMember(const std::string& project, const std::string& user,
                         v1::ProjectRole role) {
    v1::AddProjectMemberRequest r;
    r.set_project(project);
    r.set_user(user);
    r.set_role(role);
    return env_.core()->AddProjectMember(Admin(), r).status();
  }

  int64_t Submit(const Caller& caller, const std::string& project,
                 const std::vector<std::string>& models) {
    v1::SubmitAuditRequest r;
    *r.mutable_spec() = SmallSpec(models, "eval", "calib");
    r.set_project(project);
    auto response = env_.core()->SubmitAudit(caller, r);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->job().id() : 0;
  }

  v1::GetQueueResponse Queue(const Caller& caller) { return core::Queue(env_, caller); }

  CoreEnv env_;
  std::vector<int64_t> jobs_;  // the four jobs, oldest first
};

TEST_F(QueueViewTest, TotalsCountEveryProject) {
  for (const Caller& caller : {User("walt"), User("rita"), User("nick"), Admin()}) {
    const v1::GetQueueResponse q = Queue(caller);
    EXPECT_EQ(q.queued_jobs(), 3) << caller.user;
    EXPECT_EQ(q.running_jobs(), 1) << caller.user;
    EXPECT_EQ(q.queued_tasks(), 4) << caller.user;
    EXPECT_EQ(q.running_tasks(), 1) << caller.user;
  }
}

TEST_F(QueueViewTest, AMemberSeesTheirProjectsByNameAndTheRestSummed) {
  const v1::GetQueueResponse q = Queue(User("walt"));
  auto rows = ProjectRows(q);
  ASSERT_EQ(rows.size(), 2u);  // lab, and the other projects (walt's own has no job)
  EXPECT_THAT(Counts(rows["lab"]), ElementsAre(1, 1, 2, 1));
  EXPECT_THAT(Counts(rows[""]), ElementsAre(2, 0, 2, 0));
  EXPECT_EQ(q.projects(q.projects_size() - 1).project(), "") << "the unnamed row comes last";
  // Models: lab's tasks only (vera's fg_a and nick's fg_b are not counted).
  auto models = ModelRows(q);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[testing::kGateA].queued_tasks(), 1);
  EXPECT_EQ(models[testing::kGateA].running_tasks(), 1);
  EXPECT_THAT(models[testing::kGateA].running_on(), ElementsAre("local/0"));
  EXPECT_EQ(models[testing::kGateB].queued_tasks(), 1);
  EXPECT_EQ(models[testing::kGateB].running_tasks(), 0);
  EXPECT_TRUE(models[testing::kGateB].running_on().empty());
}

TEST_F(QueueViewTest, TheCallersJobsWithTheirPlaces) {
  const v1::GetQueueResponse q = Queue(User("walt"));
  ASSERT_EQ(q.jobs_size(), 2);
  // Job 1 runs its fg_a task and its fg_b task waits first in line.
  EXPECT_EQ(q.jobs(0).job_id(), jobs_[0]);
  EXPECT_EQ(q.jobs(0).project(), "lab");
  EXPECT_EQ(q.jobs(0).owner(), "walt");
  EXPECT_EQ(q.jobs(0).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(q.jobs(0).position(), 1);
  EXPECT_EQ(q.jobs(0).tasks_ahead(), 0);
  EXPECT_EQ(q.jobs(0).queued_tasks(), 1);
  EXPECT_EQ(q.jobs(0).running_tasks(), 1);
  // Job 4 waits behind jobs 1, 2 and 3, one waiting task each.
  EXPECT_EQ(q.jobs(1).job_id(), jobs_[3]);
  EXPECT_EQ(q.jobs(1).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(q.jobs(1).position(), 4);
  EXPECT_EQ(q.jobs(1).tasks_ahead(), 3);
}

TEST_F(QueueViewTest, PlacesMoveUpAsJobsAhead) {
  // nick's job is third; cancelling vera's job ahead of it moves it up.
  EXPECT_EQ(Queue(User("nick")).jobs(0).position(), 3);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(jobs_[1]);
  ASSERT_TRUE(env_.core()->CancelJob(User("vera"), cancel).ok());
  const v1::GetQueueResponse q = Queue(User("nick"));
  ASSERT_EQ(q.jobs_size(), 1);
  EXPECT_EQ(q.jobs(0).position(), 2);
  EXPECT_EQ(q.jobs(0).tasks_ahead(), 1);
  EXPECT_EQ(q.queued_jobs(), 2);
}

TEST_F(QueueViewTest, AReaderSeesTheProjectButHasNoJobs) {
  const v1::GetQueueResponse q = Queue(User("rita"));
  auto rows = ProjectRows(q);
  EXPECT_THAT(Counts(rows["lab"]), ElementsAre(1, 1, 2, 1));
  EXPECT_THAT(Counts(rows[""]), ElementsAre(2, 0, 2, 0));
  EXPECT_TRUE(q.jobs().empty()) << "jobs are the caller's own";
}

TEST_F(QueueViewTest, ANonMemberLearnsNoOtherProjectsNames) {
  const v1::GetQueueResponse q = Queue(User("nick"));
  auto rows = ProjectRows(q);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(Counts(rows["nick"]), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(Counts(rows[""]), ElementsAre(2, 1, 3, 1));
  // Only his own job's model, and no worker running another project's task.
  auto models = ModelRows(q);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[testing::kGateB].queued_tasks(), 1);
  EXPECT_TRUE(models[testing::kGateB].running_on().empty());
  ASSERT_EQ(q.jobs_size(), 1);
  EXPECT_EQ(q.jobs(0).job_id(), jobs_[2]);
  EXPECT_EQ(q.jobs(0).position(), 3);
  EXPECT_EQ(q.jobs(0).tasks_ahead(), 2);
  const std::string all = q.DebugString();
  for (const char* secret : {"lab", "vision", "walt", "vera", "olga", "local/0"}) {
    EXPECT_THAT(all, Not(HasSubstr(secret))) << all;
  }
  EXPECT_THAT(all, Not(HasSubstr(testing::kGateA))) << all;
}

TEST_F(QueueViewTest, AnAdminSeesEveryProjectAndJob) {
  const v1::GetQueueResponse q = Queue(Admin());
  auto rows = ProjectRows(q);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_THAT(Counts(rows["lab"]), ElementsAre(1, 1, 2, 1));
  EXPECT_THAT(Counts(rows["vision"]), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(Counts(rows["nick"]), ElementsAre(1, 0, 1, 0));
  EXPECT_EQ(rows.count(""), 0u);
  std::vector<int64_t> ids;
  std::vector<int64_t> positions;
  for (const v1::QueuedJob& j : q.jobs()) {
    ids.push_back(j.job_id());
    positions.push_back(j.position());
  }
  EXPECT_EQ(ids, jobs_);
  EXPECT_THAT(positions, ElementsAre(1, 2, 3, 4));
  auto models = ModelRows(q);
  EXPECT_EQ(models[testing::kGateA].queued_tasks(), 2);
  EXPECT_EQ(models[testing::kGateB].queued_tasks(), 2);
}

// The models the server's own workers hold: a pool worker that ran a job
// keeps its model loaded, and GetQueue says where.
TEST(QueueLoadedModelsTest, AWorkerThatRanAModelHoldsItLoaded) {
  CoreEnv env;
  ASSERT_TRUE(env.UploadEvalAndCalib(User("walt")).ok());
  auto job = env.Submit(User("walt"), SmallSpec({testing::kGateB}, "eval", "calib"));
  ASSERT_TRUE(job.ok()) << job.status();
  jobs::WorkerPool::Options options;
  options.devices = {"cpu"};
  options.repository.root = testing::ModelRoot();
  options.worker = testing::FastRunOptions().worker;
  auto pool = jobs::WorkerPool::Create(env.coordinator(), options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const jobs::WorkerPool* workers = pool->get();
  env.core()->set_loaded_models([workers] { return workers->LoadedModels(); });
  const v1::GetQueueResponse before = Queue(env, User("walt"));
  ASSERT_EQ(before.models_size(), 1);
  EXPECT_TRUE(before.models(0).loaded_on().empty()) << "nothing is loaded before a task ran";

  ASSERT_TRUE(env.coordinator()->Start().ok());
  (*pool)->Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    auto got = env.Get(Admin(), job->id());
    if (got.ok() && got->state() == v1::JOB_STATE_SUCCEEDED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(env.Get(Admin(), job->id())->state(), v1::JOB_STATE_SUCCEEDED);
  // No task is left; the model is shown because it is loaded, to any caller.
  const v1::GetQueueResponse q = Queue(env, User("nick"));
  EXPECT_EQ(q.queued_jobs() + q.running_jobs(), 0);
  ASSERT_EQ(q.models_size(), 1);
  EXPECT_EQ(q.models(0).model(), testing::kGateB);
  EXPECT_THAT(q.models(0).loaded_on(), ElementsAre("local/0"));
  EXPECT_EQ(q.models(0).queued_tasks() + q.models(0).running_tasks(), 0);
}

}  // namespace
}  // namespace fca::core
