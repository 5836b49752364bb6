// task_broker.h's lease and assignment as the worker protocol's messages
// (worker_service.proto), both ways. WorkerServiceImpl (the coordinator's
// side) writes what RemoteBroker (fca-worker's side) reads, so a field added
// to either is mapped here once, for both.
#ifndef FCA_SERVER_RUNTIME_TASK_MESSAGES_H_
#define FCA_SERVER_RUNTIME_TASK_MESSAGES_H_

#include "proto/fca/v1/worker_service.pb.h"
#include "server/runtime/task_broker.h"

namespace fca::runtime {

v1::TaskLease ToProto(const Lease& lease);
Lease FromProto(const v1::TaskLease& lease);

// Every field, the lease's duration as lease_ms. Neither checks what it
// maps: the service checks what a worker sends, RemoteBroker what it gets.
v1::TaskAssignment ToProto(const TaskAssignment& task);
TaskAssignment FromProto(const v1::TaskAssignment& task);

}  // namespace fca::runtime

#endif  // FCA_SERVER_RUNTIME_TASK_MESSAGES_H_
