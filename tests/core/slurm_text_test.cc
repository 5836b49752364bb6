// The Slurm executor's commands and its reading of their output
// (server/jobs/slurm_text.h), on recorded text: what slurm-wlm 22.05 on
// Debian 12 printed on the single-node cluster of scripts/slurm_cluster.sh
// (marked "recorded"), and, for states that cluster cannot be made to reach
// on demand (NODE_FAIL, OUT_OF_MEMORY, ...), lines in the same form.
// tests/e2e/slurm_e2e_test.cc runs the executor against a live cluster.
#include "server/jobs/slurm_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fca::jobs::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

CommandOutput Output(int exit_code, const std::string& out, const std::string& err = "") {
  CommandOutput o;
  o.exit_code = exit_code;
  o.out = out;
  o.err = err;
  return o;
}

storage::TaskRecord Task(int64_t id, const std::string& ref,
                         storage::JobState state = storage::JobState::kQueued) {
  storage::TaskRecord t;
  t.id = id;
  t.job_id = 7;
  t.model = "fg_a";
  t.executor_ref = ref;
  t.state = state;
  return t;
}

// ------------------------------------------------------------ commands

TEST(SlurmCommandTest, SbatchRunsTheWorkerCommandWithTheTaskQuotedForSh) {
  Options options;
  options.worker_command = {"/opt/fca/bin/fca-worker", "--coordinator=head:50051",
                            "--models=/shared/models dir", "--note=it's"};
  options.cpus_per_task = 4;
  options.log_dir = "/var/log/fca";
  EXPECT_THAT(
      SbatchCommand(options, Task(42, "")),
      ElementsAre("sbatch", "--parsable", "--job-name=fca-task", "--cpus-per-task=4",
                  "--output=/var/log/fca/fca-task-%j.log", "--comment=fca job 7 task 42 model fg_a",
                  "--wrap=exec '/opt/fca/bin/fca-worker' '--coordinator=head:50051' "
                  "'--models=/shared/models dir' '--note=it'\\''s' '--task=42'"));
}

TEST(SlurmCommandTest, SbatchTakesThePartitionAndExtraArgumentsBeforeTheScript) {
  Options options;
  options.worker_command = {"fca-worker"};
  options.partition = "gpu";
  options.sbatch_args = {"--gres=gpu:1", "--time=02:00:00"};
  options.log_dir = "/logs";
  const std::vector<std::string> argv = SbatchCommand(options, Task(3, ""));
  ASSERT_EQ(argv.size(), 10u);
  EXPECT_THAT(std::vector<std::string>(argv.begin() + 6, argv.end()),
              ElementsAre("--partition=gpu", "--gres=gpu:1", "--time=02:00:00",
                          "--wrap=exec 'fca-worker' '--task=3'"));
}

TEST(SlurmCommandTest, ShellQuoteLeavesNothingForShToInterpret) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$(rm -rf /) `x` \"y\" \\"), "'$(rm -rf /) `x` \"y\" \\'");
  EXPECT_EQ(ShellQuote("'"), "''\\'''");
}

TEST(SlurmCommandTest, SqueueListsOurJobsEndedOnesIncluded) {
  EXPECT_THAT(SqueueCommand(),
              ElementsAre("squeue", "-h", "-t", "all", "--name", "fca-task", "-o", "%i %T"));
  EXPECT_THAT(SqueuePingCommand(), ElementsAre("squeue", "-h", "-o", "%i", "--name", "fca-task"));
}

TEST(SlurmCommandTest, ScancelNamesThePlacementsOfTasksThatAreNotRunning) {
  const std::vector<storage::TaskRecord> tasks = {
      Task(1, "slurm:101"),                               // queued, placed
      Task(2, "slurm:102", storage::JobState::kRunning),  // stops itself
      Task(3, ""),                                        // never placed
      Task(4, "slurm:104", storage::JobState::kSucceeded),
      Task(5, "elsewhere:105"),  // not ours
  };
  EXPECT_THAT(ScancelCommand(tasks), ElementsAre("scancel", "101", "104"));
  EXPECT_THAT(ScancelCommand({Task(2, "slurm:102", storage::JobState::kRunning), Task(3, "")}),
              IsEmpty());
  EXPECT_THAT(ScancelCommand({}), IsEmpty());
}

TEST(SlurmCommandTest, SlurmIdIsTheExecutorRefsIdOrNothing) {
  EXPECT_EQ(SlurmId(Task(1, "slurm:4242")), "4242");
  EXPECT_EQ(SlurmId(Task(1, "")), "");
  EXPECT_EQ(SlurmId(Task(1, "local:4242")), "");
  Options options;
  options.log_dir = "/logs";
  EXPECT_EQ(LogPath(options, "4242"), "/logs/fca-task-4242.log");
}

// ------------------------------------------------------------- sbatch

TEST(SbatchOutputTest, ParsableOutputIsTheJobId) {
  // Recorded: `sbatch --parsable ...` on the test cluster.
  absl::StatusOr<std::string> id = ParseSbatch(Output(0, "1\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "1");
  // A warning on stderr does not matter when sbatch succeeded.
  id = ParseSbatch(Output(0, "4242\n", "sbatch: warning: can't honor --ntasks-per-node\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "4242");
}

TEST(SbatchOutputTest, ParsableOutputOfAMultiClusterSetupNamesTheCluster) {
  // "<id>;<cluster>" when the cluster takes part in a federation.
  absl::StatusOr<std::string> id = ParseSbatch(Output(0, "123456;gpu-cluster\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "123456");
  id = ParseSbatch(Output(0, "  77;c1  \n"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "77");
}

TEST(SbatchOutputTest, AFailedSbatchIsUnavailableWithItsFirstErrorLine) {
  // Recorded: `sbatch --partition=nosuch ...`, exit code 1.
  const absl::StatusOr<std::string> refused =
      ParseSbatch(Output(1, "",
                         "sbatch: error: invalid partition specified: nosuch\n"
                         "sbatch: error: Batch job submission failed: Invalid partition name "
                         "specified\n"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            "sbatch: sbatch: error: invalid partition specified: nosuch");
  // Recorded: slurmctld down.
  const absl::StatusOr<std::string> down = ParseSbatch(
      Output(1, "",
             "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
             "(connect failure)\n"));
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(down.status().message(), HasSubstr("Unable to contact slurm controller"));
}

TEST(SbatchOutputTest, OutputWithoutAJobIdIsInternal) {
  // Recorded: sbatch without --parsable.
  for (const char* out : {"Submitted batch job 9\n", "", "\n", ";cluster\n", "12a\n"}) {
    const absl::StatusOr<std::string> id = ParseSbatch(Output(0, out));
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInternal) << out;
    EXPECT_THAT(id.status().message(), HasSubstr("sbatch printed no job id")) << out;
  }
}

// ------------------------------------------------------------- squeue

// Recorded: `squeue -h -t all --name fca-task -o "%i %T"` on the test
// cluster (2 CPUs) with jobs that completed (1), failed with exit code 3
// (2), ran (3, 4), waited for a CPU (5, 7; 7 with --time=1), were cancelled
// pending (6), asked for 64 CPUs (8) and completed (9)...
constexpr char kSqueueFirst[] =
    "6 CANCELLED\n1 COMPLETED\n2 FAILED\n5 PENDING\n7 PENDING\n8 PENDING\n9 PENDING\n"
    "3 RUNNING\n4 RUNNING\n";
// ... and after scancel of 3, 4 and 5, once 7 had run past its time limit.
constexpr char kSqueueLater[] =
    "3 CANCELLED\n4 CANCELLED\n5 CANCELLED\n6 CANCELLED\n1 COMPLETED\n9 COMPLETED\n"
    "2 FAILED\n8 PENDING\n7 TIMEOUT\n";

TEST(SqueueOutputTest, EveryLineIsAJobAndItsState) {
  const absl::StatusOr<Queue> queue = ParseSqueue(Output(0, kSqueueLater));
  ASSERT_TRUE(queue.ok()) << queue.status();
  EXPECT_EQ(*queue, (Queue{{"1", "COMPLETED"},
                           {"2", "FAILED"},
                           {"3", "CANCELLED"},
                           {"4", "CANCELLED"},
                           {"5", "CANCELLED"},
                           {"6", "CANCELLED"},
                           {"7", "TIMEOUT"},
                           {"8", "PENDING"},
                           {"9", "COMPLETED"}}));
}

// The executor's reading of an answer: which placements may still claim
// their task.
std::vector<std::string> Live(const char* squeue_output) {
  const absl::StatusOr<Queue> queue = ParseSqueue(Output(0, squeue_output));
  EXPECT_TRUE(queue.ok()) << queue.status();
  std::vector<std::string> live;
  if (!queue.ok()) return live;
  for (const auto& [id, state] : *queue) {
    if (!Ended(state)) live.push_back(id);
  }
  return live;
}

TEST(SqueueOutputTest, RecordedAnswersSplitIntoLiveAndEndedJobs) {
  EXPECT_THAT(Live(kSqueueFirst), ElementsAre("3", "4", "5", "7", "8", "9"));
  EXPECT_THAT(Live(kSqueueLater), ElementsAre("8"));
}

TEST(SqueueOutputTest, BlankLinesAndTrailingWhitespaceAreIgnored) {
  const absl::StatusOr<Queue> queue =
      ParseSqueue(Output(0, "\n  101 RUNNING   \n\n102   PENDING\n   \n103 TIMEOUT\t\n"));
  ASSERT_TRUE(queue.ok()) << queue.status();
  EXPECT_EQ(queue->size(), 3u);
  EXPECT_EQ(queue->at("101"), "RUNNING");
  EXPECT_EQ(queue->at("102"), "PENDING");
  // Only spaces separate fields: a tab stays part of the state, which then
  // is unknown (a job that looks alive until the next answer).
  EXPECT_EQ(queue->at("103"), "TIMEOUT\t");
  const absl::StatusOr<Queue> empty = ParseSqueue(Output(0, ""));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

// squeue's %T is one word. Lines in another form (sacct's "CANCELLED by 0",
// a header) are left out: their job counts as gone from the queue.
TEST(SqueueOutputTest, LinesThatAreNotIdAndStateAreLeftOut) {
  const absl::StatusOr<Queue> queue = ParseSqueue(Output(0,
                                                         "JOBID STATE\n"
                                                         "201 CANCELLED by 0\n"
                                                         "202\n"
                                                         "203 RUNNING\n"
                                                         "204_1 PENDING\n"));
  ASSERT_TRUE(queue.ok()) << queue.status();
  EXPECT_EQ(*queue, (Queue{{"JOBID", "STATE"}, {"203", "RUNNING"}, {"204_1", "PENDING"}}));
}

TEST(SqueueOutputTest, AFailedSqueueIsUnavailableWithItsFirstErrorLine) {
  // Recorded: slurmctld down (exit code 1).
  const absl::StatusOr<Queue> down = ParseSqueue(Output(
      1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"));
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(down.status().message(),
            "squeue: slurm_load_jobs error: Unable to contact slurm controller (connect failure)");
  // Recorded: SLURM_CONF naming no file.
  const absl::StatusOr<Queue> no_conf = ParseSqueue(Output(
      1, "",
      "squeue: error: s_p_parse_file: cannot stat file /nonexistent: No such file or directory, "
      "retrying in 1sec up to 60sec\n"
      "squeue: error: ClusterName needs to be specified\n"
      "squeue: fatal: Unable to process configuration file\n"));
  EXPECT_EQ(no_conf.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(no_conf.status().message(), HasSubstr("cannot stat file /nonexistent"));
  EXPECT_THAT(no_conf.status().message(), ::testing::Not(HasSubstr("fatal")));
}

TEST(SqueueOutputTest, FirstLineIsCutAt300Bytes) {
  const std::string line(1000, 'x');
  EXPECT_EQ(FirstLine(line + "\nsecond"), std::string(300, 'x'));
  EXPECT_EQ(FirstLine("one\ntwo"), "one");
  EXPECT_EQ(FirstLine(""), "");
}

// -------------------------------------------------------------- states

TEST(SlurmStateTest, StatesOfAJobThatMayStillRunItsWorkerAreNotEnded) {
  for (const char* state : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                            "REQUEUED", "RESIZING", "REQUEUE_HOLD", "STOPPED", "SIGNALING"}) {
    EXPECT_FALSE(Ended(state)) << state;
  }
}

TEST(SlurmStateTest, StatesAfterWhichTheJobRunsNothingAreEnded) {
  for (const char* state : {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}) {
    EXPECT_TRUE(Ended(state)) << state;
  }
}

TEST(SlurmStateTest, WhatFollowsASpaceDoesNotCount) {
  EXPECT_TRUE(Ended("CANCELLED by 0"));
  EXPECT_TRUE(Ended("COMPLETED  "));
  EXPECT_FALSE(Ended("RUNNING by 0"));
}

// An unknown state (a newer Slurm's, or garbage) keeps the placement: the
// executor waits for the next answer rather than place the task twice.
TEST(SlurmStateTest, AnUnknownStateIsNotEnded) {
  for (const char* state : {"", "WEIRD_NEW_STATE", "cancelled", "CANCELLED+", "TIMEOUT\t"}) {
    EXPECT_FALSE(Ended(state)) << state;
  }
}

}  // namespace
}  // namespace fca::jobs::slurm
