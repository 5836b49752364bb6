// Remote workers end to end: the real fca-server (--workers=0) with real
// fca-worker processes on 127.0.0.1, over gRPC, on a real SQLite file:
// results equal to an in-process worker's, a worker killed with SIGKILL
// (its lease runs out, another worker finishes), a coordinator killed and
// restarted under a running worker (nothing lost), workers with a stale copy
// of a model refusing its task without spending its attempts (a good worker
// runs it; with none, the job fails naming them), and GetQueue showing the
// models remote workers hold loaded until they stop calling. Bad input on
// the worker protocol is remote_worker_protocol_e2e_test.cc's.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/remote_worker_fixture.h"

namespace fca::e2e::remote_worker {
namespace {

// (a) Two remote workers give the numbers an in-process worker gives.
TEST_F(RemoteWorkerE2ETest, RemoteWorkersMatchAnInProcessWorker) {
  const v1::AuditSpec spec = Spec({"fg-a", "fg-b"}, "eval");
  std::map<std::string, double> local;
  {
    auto server = StartServer({"--workers=1"});
    ASSERT_NE(server, nullptr);
    {
      Client c(server->address());
      Upload(c, "eval", "eval.txt");
      Upload(c, "calib", "calib.txt");
      const int64_t job = Submit(c, spec);
      ASSERT_EQ(WaitJob(c, job, 60).state(), v1::JOB_STATE_SUCCEEDED);
      local = Nlls(Results(c, job));
    }
    // (Its connection closed: the drain would wait for it.)
    server->Signal(SIGTERM);
    EXPECT_EQ(server->Wait(20), 0);
  }
  db_ += ".remote";
  auto server = StartServer({"--workers=0"});
  ASSERT_NE(server, nullptr);
  auto w1 = StartWorker(server->address(), "w1");
  auto w2 = StartWorker(server->address(), "w2");
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  const int64_t job = Submit(c, spec);
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("running on worker w"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("local/"), std::string::npos) << notes;
  // Each task's provenance came with FinishTask from the worker that ran
  // it, stored under the lease holder ("w1@<user>").
  ASSERT_EQ(done.tasks_size(), 2);
  for (const v1::JobTask& t : done.tasks()) {
    const v1::TaskProvenance& p = t.provenance();
    EXPECT_EQ(p.worker().rfind("w", 0), 0u) << p.worker();
    EXPECT_NE(p.worker().find('@'), std::string::npos) << p.worker();
    EXPECT_FALSE(p.host().empty());
    EXPECT_FALSE(p.engine_version().empty());
    EXPECT_FALSE(p.torch_version().empty());
    EXPECT_EQ(p.device(), "cpu");
    EXPECT_EQ(p.dtype(), "float32");
    EXPECT_GT(p.threads(), 0);
    EXPECT_EQ(p.weights_sha256().size(), 64u);
    EXPECT_GT(p.eval_windows(), 0);
    EXPECT_TRUE(p.has_finished_at());
  }
  const std::map<std::string, double> remote = Nlls(Results(c, job));
  ASSERT_GE(local.size(), 12u);
  ASSERT_EQ(remote.size(), local.size());
  for (const auto& [key, value] : local) {
    ASSERT_EQ(remote.count(key), 1u) << key;
    // Bitwise: the same engine on the same data, wherever it runs.
    EXPECT_EQ(std::memcmp(&remote.at(key), &value, sizeof(double)), 0)
        << key << ": " << remote.at(key) << " vs " << value;
  }
  for (auto* w : {w1.get(), w2.get()}) {
    EXPECT_TRUE(w->Running()) << w->Stderr();
    w->Signal(SIGTERM);
    EXPECT_EQ(w->Wait(20), 0) << w->Stderr();
  }
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (b) kill -9 of the worker running a task: its lease runs out, another
// worker claims the task and the job succeeds, every row once.
TEST_F(RemoteWorkerE2ETest, KilledWorkerLosesItsLeaseAndAnotherFinishes) {
  auto server = StartServer({"--workers=0", "--lease_seconds=2"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "long", "long.txt");
  Upload(c, "calib", "calib.txt");
  auto doomed = StartWorker(server->address(), "doomed");
  const int64_t job = Submit(c, Spec({"fg-wide"}, "long"));
  // The only worker holds the task once the job runs.
  WaitJob(c, job, 30, [](const v1::Job& j) { return j.state() != v1::JOB_STATE_QUEUED; });
  doomed->Signal(SIGKILL);
  doomed->Wait(10);
  auto rescuer = StartWorker(server->address(), "rescuer");
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("worker doomed@pool lost its lease"), std::string::npos) << notes;
  EXPECT_NE(notes.find("running on worker rescuer@pool (attempt 2)"), std::string::npos) << notes;
  const std::map<std::string, v1::Result> rows = Results(c, job);  // fails on a row twice
  EXPECT_GE(Nlls(rows).size(), 6u);
  rescuer->Signal(SIGTERM);
  EXPECT_EQ(rescuer->Wait(20), 0) << rescuer->Stderr();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

// (c) The coordinator killed and restarted (same database, same port) while
// a remote worker runs: the worker carries on, nothing is redone or lost.
TEST_F(RemoteWorkerE2ETest, CoordinatorRestartLosesNothing) {
  auto server = StartServer({"--workers=0", "--lease_seconds=10"});
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto c = std::make_unique<Client>(address);
  Upload(*c, "long", "long.txt");
  Upload(*c, "calib", "calib.txt");
  auto worker = StartWorker(address, "steady");
  const int64_t job = Submit(*c, Spec({"fg-wide", "fg-a"}, "long"));
  // Progress: the worker has its claim (not only the store) and audits.
  WaitJob(*c, job, 30, [](const v1::Job& j) { return j.progress() > 0; });
  server->Signal(SIGKILL);
  server->Wait(10);
  server = StartServer({"--workers=0", "--lease_seconds=10", "--listen=" + address});
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(server->address(), address);
  c = std::make_unique<Client>(address);
  const v1::Job done = WaitJob(*c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  const std::string notes = Notes(*c, job);
  // Each task ran once: no lease was lost, nothing was queued again.
  EXPECT_EQ(notes.find("queued again"), std::string::npos) << notes << worker->Stderr();
  EXPECT_EQ(notes.find("attempt 2"), std::string::npos) << notes;
  const std::map<std::string, v1::Result> rows = Results(*c, job);
  // 2 models x 9 interventions (all but random_route, for routers only),
  // each once.
  EXPECT_EQ(Nlls(rows).size(), 18u);
  std::set<std::string> models;
  for (const auto& [key, r] : rows) models.insert(r.model());
  EXPECT_EQ(models, (std::set<std::string>{"fg-a", "fg-wide"}));
  EXPECT_TRUE(worker->Running()) << worker->Stderr();
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(20), 0) << worker->Stderr();
  c.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}
// (e) Issue 22: a worker whose fg-a folder holds other weights refuses the
// task without spending its attempts and is backed off, so the good worker,
// busy with another job meanwhile, runs it once free.
TEST_F(RemoteWorkerE2ETest, StaleWorkerRefusesAndAGoodWorkerRunsTheTask) {
  auto server = StartServer({"--workers=0"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "long", "long.txt");
  Upload(c, "calib", "calib.txt");
  auto good = StartWorker(server->address(), "good");
  const int64_t busy = Submit(c, Spec({"fg-wide"}, "long"));
  WaitJob(c, busy, 30, [](const v1::Job& j) { return j.state() != v1::JOB_STATE_QUEUED; });
  // Only the stale worker is idle when the job comes: it claims the task
  // first and refuses it, again and again before the fix.
  auto stale = StartWorker(server->address(), "stale", "other-models");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job done = WaitJob(c, job, 120);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error() << "\n" << Notes(c, job);
  EXPECT_EQ(WaitJob(c, busy, 60).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(done.tasks_size(), 1);
  const v1::TaskProvenance& p = done.tasks(0).provenance();
  EXPECT_EQ(p.worker(), "good@pool");
  EXPECT_EQ(p.attempt(), 1);  // the refusals spent none
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("model fg-a: worker stale@pool refused it: the weights of model 'fg-a' "
                       "on this worker"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("queued again for the other workers"), std::string::npos) << notes;
  EXPECT_GE(Nlls(Results(c, job)).size(), 8u);
  StopAll({good.get(), stale.get()}, &client, server.get());
}

// (f) Only stale workers: once each has refused, the task waits out the
// refusal grace (3 s here), then the job fails naming them and their reasons.
TEST_F(RemoteWorkerE2ETest, OnlyStaleWorkersFailTheJobNamingThem) {
  auto server = StartServer({"--workers=0", "--refusal_grace_seconds=3"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  auto stale1 = StartWorker(server->address(), "stale1", "other-models");
  auto stale2 = StartWorker(server->address(), "stale2", "other-models");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job failed = WaitJob(c, job, 60);
  ASSERT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  const std::string& error = failed.error();
  EXPECT_NE(error.find("no worker can run model fg-a: every live worker refused it: "),
            std::string::npos)
      << error;
  for (const char* name :
       {"stale1@pool (the weights of model 'fg-a'", "stale2@pool (the weights of model 'fg-a'"}) {
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
  const std::string notes = Notes(c, job);
  EXPECT_NE(notes.find("every live worker has refused it; it waits up to 3 s"), std::string::npos)
      << notes;
  EXPECT_TRUE(Results(c, job).empty());
  StopAll({stale1.get(), stale2.get()}, &client, server.get());
}

// GetQueue as `key` sees it; fails the test on an error.
v1::GetQueueResponse Queue(Client& c, const std::string& key) {
  v1::GetQueueResponse response;
  const grpc::Status status = c.audit->GetQueue(Ctx(key).get(), v1::GetQueueRequest(), &response);
  EXPECT_TRUE(status.ok()) << Describe(status);
  return response;
}

// model -> loaded_on, for the models some worker holds.
std::map<std::string, std::vector<std::string>> LoadedOn(const v1::GetQueueResponse& q) {
  std::map<std::string, std::vector<std::string>> out;
  for (const v1::ModelQueue& m : q.models()) {
    if (!m.loaded_on().empty()) out[m.model()] = {m.loaded_on().begin(), m.loaded_on().end()};
  }
  return out;
}

// Polls GetQueue as `key` until `done` or `seconds` pass; returns the last.
v1::GetQueueResponse WaitQueue(Client& c, const std::string& key, int seconds,
                               const std::function<bool(const v1::GetQueueResponse&)>& done) {
  v1::GetQueueResponse q;
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    q = Queue(c, key);
    if (done(q)) return q;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "GetQueue still " << q.ShortDebugString() << " after " << seconds << " s";
  return q;
}

// (g) A remote worker that ran a task holds its model loaded and says so
// with every poll: GetQueue's loaded_on names it ("<worker>@<key user>") to
// every caller, while a non-member learns no project, owner or job through
// the rest. Names the server does not hold show nothing; an overlong list
// is refused. A lease after a worker's last call it is forgotten.
TEST_F(RemoteWorkerE2ETest, GetQueueShowsTheModelsRemoteWorkersHoldLoaded) {
  auto server = StartServer({"--workers=0", "--lease_seconds=2"});
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->address());
  Client& c = *client;
  Upload(c, "eval", "eval.txt");
  Upload(c, "calib", "calib.txt");
  EXPECT_TRUE(LoadedOn(Queue(c, kUserKey)).empty()) << "nothing is loaded before a task ran";

  auto holder = StartWorker(server->address(), "holder");
  const int64_t job = Submit(c, Spec({"fg-a"}, "eval"));
  const v1::Job done = WaitJob(c, job, 60);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error();
  using Loaded = std::map<std::string, std::vector<std::string>>;
  const Loaded after_task = {{"fg-a", {"holder@pool"}}};
  // Its next poll after the task reports the model.
  v1::GetQueueResponse q = WaitQueue(
      c, kUserKey, 30, [&](const v1::GetQueueResponse& r) { return LoadedOn(r) == after_task; });
  EXPECT_EQ(LoadedOn(q), after_task);

  // A raw worker, polling like fca-worker, reports names the server does
  // not hold (a model it lacks, names no folder could have) next to one it
  // does: only that one is shown, once, next to the other worker's.
  v1::ClaimTaskRequest raw;
  raw.set_worker("raw");
  raw.set_task_id(1000000);  // no such task: nothing is claimed
  for (const std::string& name :
       {std::string("no-such-model"), std::string("../models/fg-a"), std::string(5000, 'x'),
        std::string("fg-b"), std::string("fg-b")}) {
    raw.add_loaded_models(name);
  }
  const auto report = [&] {
    v1::ClaimTaskResponse claimed;
    const grpc::Status status = c.worker->ClaimTask(Ctx(kWorkerKey).get(), raw, &claimed);
    EXPECT_TRUE(status.ok()) << Describe(status);
    EXPECT_FALSE(claimed.has_assignment());
  };
  const Loaded both = {{"fg-a", {"holder@pool"}}, {"fg-b", {"raw@pool"}}};
  q = WaitQueue(c, kUserKey, 30, [&](const v1::GetQueueResponse& r) {
    if (LoadedOn(r) == both) return true;
    report();
    return false;
  });
  EXPECT_EQ(LoadedOn(q), both);
  // More names than any worker sends: refused, the server serves on.
  v1::ClaimTaskRequest flood;
  flood.set_worker("flood");
  for (int i = 0; i < 65; ++i) flood.add_loaded_models("fg-a");
  v1::ClaimTaskResponse claimed;
  const grpc::Status refused = c.worker->ClaimTask(Ctx(kWorkerKey).get(), flood, &claimed);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(refused);
  EXPECT_NE(refused.error_message().find("at most 64"), std::string::npos) << Describe(refused);
  holder->Signal(SIGTERM);
  EXPECT_EQ(holder->Wait(20), 0) << holder->Stderr();

  // alice's job waits in her personal project (no worker runs now): carol,
  // no member of it, sees the loaded model but no project name, owner, job
  // or the job's model; alice sees her job and its model.
  const int64_t waiting = Submit(c, Spec({"fg-wide"}, "eval"));
  const v1::GetQueueResponse seen = WaitQueue(c, kCarolKey, 30, [&](const v1::GetQueueResponse& r) {
    if (LoadedOn(r).count("fg-b") > 0) return true;
    report();
    return false;
  });
  EXPECT_EQ(LoadedOn(seen)["fg-b"], std::vector<std::string>{"raw@pool"})
      << seen.ShortDebugString();
  EXPECT_EQ(seen.jobs_size(), 0);
  ASSERT_EQ(seen.projects_size(), 1) << seen.ShortDebugString();
  EXPECT_EQ(seen.projects(0).project(), "");
  EXPECT_EQ(seen.projects(0).queued_jobs(), 1);
  for (const v1::ModelQueue& m : seen.models()) EXPECT_NE(m.model(), "fg-wide");
  EXPECT_EQ(seen.ShortDebugString().find("alice"), std::string::npos) << seen.ShortDebugString();
  q = Queue(c, kUserKey);
  ASSERT_EQ(q.jobs_size(), 1);
  EXPECT_EQ(q.jobs(0).job_id(), waiting);
  EXPECT_EQ(q.jobs(0).position(), 1);

  // Neither worker calls again: a lease (2 s) later both are forgotten.
  q = WaitQueue(c, kUserKey, 30, [](const v1::GetQueueResponse& r) { return LoadedOn(r).empty(); });
  EXPECT_TRUE(LoadedOn(q).empty()) << q.ShortDebugString();
  client.reset();  // the drain would wait for its connection
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(20), 0);
}

}  // namespace
}  // namespace fca::e2e::remote_worker
