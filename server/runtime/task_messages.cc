#include "server/runtime/task_messages.h"

namespace fca::runtime {

v1::TaskLease ToProto(const Lease& lease) {
  v1::TaskLease out;
  out.set_task_id(lease.task_id);
  out.set_lease_seq(lease.lease_seq);
  return out;
}

Lease FromProto(const v1::TaskLease& lease) { return Lease{lease.task_id(), lease.lease_seq()}; }

v1::TaskAssignment ToProto(const TaskAssignment& task) {
  v1::TaskAssignment out;
  *out.mutable_lease() = ToProto(task.lease);
  out.set_job_id(task.job_id);
  out.set_index(task.index);
  out.set_task_count(task.task_count);
  out.set_attempt(task.attempt);
  out.set_model(task.model);
  *out.mutable_spec() = task.spec;
  out.set_weights_sha256(task.weights_sha256);
  out.set_dense_twin_weights_sha256(task.dense_twin_weights_sha256);
  out.set_lease_ms(task.lease_duration.count());
  return out;
}

TaskAssignment FromProto(const v1::TaskAssignment& task) {
  TaskAssignment out;
  out.lease = FromProto(task.lease());
  out.job_id = task.job_id();
  out.index = task.index();
  out.task_count = task.task_count();
  out.attempt = task.attempt();
  out.model = task.model();
  out.spec = task.spec();
  out.weights_sha256 = task.weights_sha256();
  out.dense_twin_weights_sha256 = task.dense_twin_weights_sha256();
  out.lease_duration = std::chrono::milliseconds(task.lease_ms());
  return out;
}

}  // namespace fca::runtime
