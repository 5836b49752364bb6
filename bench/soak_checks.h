// fca_soak_bench: what the soak checks once its load has ended
// (soak_checks.cc): the jobs the server lists, each project's listing
// against the clients' ledger, and the database after the server has gone.
#ifndef FCA_BENCH_SOAK_CHECKS_H_
#define FCA_BENCH_SOAK_CHECKS_H_

#include <string>

#include "bench/soak_client.h"
#include "bench/soak_report.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

namespace fca::soak {

// Every job the server lists, counted by state; FAILED ones grouped by
// their error. False when a page could not be read.
bool SweepJobs(v1::AuditService::Stub& stub, const std::string& token, Figures* f);

// --projects: each project's jobs and datasets as the admin lists them
// against the ledger of what the clients were told was stored: lost (told,
// not listed), duplicated (listed twice, or in two projects), misplaced
// (listed in another project than the one it was stored in).
void CheckLedger(v1::AuditService::Stub& stub, Shared* shared, Figures* f);

// The database after the server has gone: integrity, foreign keys, rows
// per table and file sizes.
void CheckDatabase(const std::string& db, Figures* f);

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_CHECKS_H_
