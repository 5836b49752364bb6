// fca_soak_bench: what the soak sets up before its load (soak_setup.cc):
// the work folder, the tiny models, the keys and projects of --projects, and
// the warm-up's uploads and audit.
#ifndef FCA_BENCH_SOAK_SETUP_H_
#define FCA_BENCH_SOAK_SETUP_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "bench/soak_client.h"
#include "proto/fca/v1/audit_service.grpc.pb.h"

namespace fca::soak {

// The work folder: --work_dir, or a fresh one under $TMPDIR; "" on failure.
std::string MakeWorkDir();

// A tiny model folder, as tests/e2e writes them: one audit of a few windows
// takes a fraction of a second.
bool InitModel(const std::string& dir, const std::string& name,
               const std::vector<std::string>& flags);

// One dataset uploaded by `token` into `project` in two parts (header, text).
grpc::Status SetupUpload(v1::AuditService::Stub& stub, const std::string& token,
                         const std::string& project, const std::string& name,
                         const std::string& text);

// Submits one small audit and follows it: the idle time of the kind of job
// the soak submits. -1 on failure.
double IdleAuditSeconds(v1::AuditService::Stub& stub, const std::string& token,
                        const std::string& project, std::string* error);

// --projects: the admin's and the users' keys in `dir`/keys (mode 0600, as
// fca-server wants it), and who the users are. "" (after saying why) on
// failure, else the file's path.
std::string WriteKeys(const std::string& dir, Shared* shared);

// --projects: the admin creates the three projects and adds the users as
// writers and readers. False (after saying why) on a refusal; a project or
// member there already (--db of an earlier soak) is fine.
bool SetUpProjects(v1::AuditService::Stub& stub, const Shared& shared);

}  // namespace fca::soak

#endif  // FCA_BENCH_SOAK_SETUP_H_
