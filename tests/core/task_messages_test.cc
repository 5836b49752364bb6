// The worker protocol's lease and assignment (server/runtime/task_messages.h):
// every field of the message is written, and comes back as it went.
#include "server/runtime/task_messages.h"

#include <gtest/gtest.h>

#include <vector>

namespace fca::core {
namespace {

runtime::TaskAssignment EveryFieldSet() {
  runtime::TaskAssignment task;
  task.lease = runtime::Lease{7, 3};
  task.job_id = 11;
  task.index = 1;
  task.task_count = 2;
  task.attempt = 4;
  task.model = "fg_b";
  task.spec.add_models("fg_a");
  task.spec.add_models("fg_b");
  task.weights_sha256 = "ab12";
  task.dense_twin_weights_sha256 = "cd34";
  task.lease_duration = std::chrono::milliseconds(30000);
  return task;
}

TEST(TaskMessagesTest, AssignmentWritesEveryField) {
  const v1::TaskAssignment proto = runtime::ToProto(EveryFieldSet());
  // A field the message gains and ToProto leaves out shows here.
  std::vector<const google::protobuf::FieldDescriptor*> set;
  proto.GetReflection()->ListFields(proto, &set);
  EXPECT_EQ(static_cast<int>(set.size()), v1::TaskAssignment::descriptor()->field_count());
  EXPECT_EQ(proto.lease().task_id(), 7);
  EXPECT_EQ(proto.lease().lease_seq(), 3);
  EXPECT_EQ(proto.lease_ms(), 30000);
}

TEST(TaskMessagesTest, AssignmentComesBackAsItWent) {
  const runtime::TaskAssignment task = EveryFieldSet();
  const runtime::TaskAssignment back = runtime::FromProto(runtime::ToProto(task));
  EXPECT_EQ(back.lease.task_id, task.lease.task_id);
  EXPECT_EQ(back.lease.lease_seq, task.lease.lease_seq);
  EXPECT_EQ(back.job_id, task.job_id);
  EXPECT_EQ(back.index, task.index);
  EXPECT_EQ(back.task_count, task.task_count);
  EXPECT_EQ(back.attempt, task.attempt);
  EXPECT_EQ(back.model, task.model);
  EXPECT_EQ(back.spec.SerializeAsString(), task.spec.SerializeAsString());
  EXPECT_EQ(back.weights_sha256, task.weights_sha256);
  EXPECT_EQ(back.dense_twin_weights_sha256, task.dense_twin_weights_sha256);
  EXPECT_EQ(back.lease_duration, task.lease_duration);
}

TEST(TaskMessagesTest, LeaseBothWays) {
  const v1::TaskLease proto = runtime::ToProto(runtime::Lease{5, 9});
  EXPECT_EQ(proto.task_id(), 5);
  EXPECT_EQ(proto.lease_seq(), 9);
  const runtime::Lease back = runtime::FromProto(proto);
  EXPECT_EQ(back.task_id, 5);
  EXPECT_EQ(back.lease_seq, 9);
}

}  // namespace
}  // namespace fca::core
