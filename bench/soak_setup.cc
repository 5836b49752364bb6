#include "bench/soak_setup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/soak_process.h"
#include "common/random.h"

// Defined with the others in soak_bench.cc.
ABSL_DECLARE_FLAG(std::string, local_audit);
ABSL_DECLARE_FLAG(int, users);
ABSL_DECLARE_FLAG(std::string, work_dir);

namespace fca::soak {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxSeqLen = 64;

// A fresh random API key.
std::string NewKey(const std::string& user) {
  static Rng rng(static_cast<uint64_t>(WallMicros()) ^ static_cast<uint64_t>(getpid()));
  return absl::StrFormat("soak-%s-%016x%016x", user, rng.Next(), rng.Next());
}

}  // namespace

std::string MakeWorkDir() {
  if (!absl::GetFlag(FLAGS_work_dir).empty()) {
    fs::create_directories(absl::GetFlag(FLAGS_work_dir));
    return fs::absolute(absl::GetFlag(FLAGS_work_dir)).string();
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/fca_soak_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

bool InitModel(const std::string& dir, const std::string& name,
               const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {absl::GetFlag(FLAGS_local_audit),
                                   "init",
                                   "--out=" + dir + "/" + name,
                                   "--d_model=32",
                                   "--n_layers=2",
                                   "--n_heads=2",
                                   "--n_groups=4",
                                   "--d_ff=64",
                                   "--controller_width=16",
                                   absl::StrCat("--max_seq_len=", kMaxSeqLen)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  CommandResult r = Run(argv, {}, 120);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "soak: fca-local-audit init %s failed (%d): %s\n", name.c_str(),
                 r.exit_code, r.err.c_str());
    return false;
  }
  return true;
}

grpc::Status SetupUpload(v1::AuditService::Stub& stub, const std::string& token,
                         const std::string& project, const std::string& name,
                         const std::string& text) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  Authorize(token, &ctx);
  v1::UploadDatasetResponse resp;
  auto writer = stub.UploadDataset(&ctx, &resp);
  v1::UploadDatasetRequest header;
  header.mutable_header()->set_name(name);
  header.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
  header.mutable_header()->set_size_bytes(static_cast<int64_t>(text.size()));
  header.mutable_header()->set_project(project);
  writer->Write(header);
  v1::UploadDatasetRequest chunk;
  chunk.set_chunk(text);
  writer->Write(chunk);
  writer->WritesDone();
  return writer->Finish();
}

double IdleAuditSeconds(v1::AuditService::Stub& stub, const std::string& token,
                        const std::string& project, std::string* error) {
  const Clock::time_point t0 = Clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Authorize(token, &ctx);
  v1::SubmitAuditRequest req;
  req.set_project(project);
  v1::AuditSpec* spec = req.mutable_spec();
  spec->add_models("fg-a");
  spec->add_models("fg-b");
  spec->set_dense_twin(kDenseModel);
  spec->set_eval_dataset("eval");
  spec->set_calib_dataset("calib");
  spec->set_window_length(16);
  spec->set_max_eval_windows(8);
  spec->set_max_calib_windows(8);
  spec->set_batch_size(4);
  spec->set_bootstrap_resamples(200);
  spec->set_timing_repeats(1);
  spec->set_label("soak warm-up");
  v1::SubmitAuditResponse resp;
  grpc::Status st = stub.SubmitAudit(&ctx, req, &resp);
  if (!st.ok()) {
    *error = "warm-up SubmitAudit: " + st.error_message();
    return -1;
  }
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Authorize(token, &watch_ctx);
  v1::WatchJobRequest watch;
  watch.set_job_id(resp.job().id());
  auto reader = stub.WatchJob(&watch_ctx, watch);
  v1::WatchJobResponse msg;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&msg)) {
    if (msg.event().has_state()) state = msg.event().state();
  }
  st = reader->Finish();
  if (!st.ok() || state != v1::JOB_STATE_SUCCEEDED) {
    *error = absl::StrFormat("warm-up audit: %s, state %s, error %s", st.error_message(),
                             v1::JobState_Name(state), msg.job().error());
    return -1;
  }
  return SecondsBetween(t0, Clock::now());
}

std::string WriteKeys(const std::string& dir, Shared* shared) {
  shared->admin_token = NewKey("admin");
  std::string lines = shared->admin_token + " soak-admin admin\n";
  for (int k = 0; k < absl::GetFlag(FLAGS_users); ++k) {
    SoakUser u;
    u.name = absl::StrCat("user", k);
    u.token = NewKey(u.name);
    u.write = k % kNumProjects;
    u.read = (k + 1) % kNumProjects;
    u.stranger = (k + 2) % kNumProjects;
    lines += u.token + " " + u.name + " user\n";
    shared->users.push_back(u);
  }
  const std::string path = dir + "/keys";
  std::ofstream out(path, std::ios::trunc);
  out << lines;
  out.close();
  if (!out.good() || chmod(path.c_str(), 0600) != 0) {
    std::fprintf(stderr, "soak: cannot write %s\n", path.c_str());
    return "";
  }
  return path;
}

bool SetUpProjects(v1::AuditService::Stub& stub, const Shared& shared) {
  auto ok = [](const grpc::Status& st, const std::string& what) {
    if (st.ok() || st.error_code() == grpc::StatusCode::ALREADY_EXISTS) return true;
    std::fprintf(stderr, "soak: setup %s: %s\n", what.c_str(), st.error_message().c_str());
    return false;
  };
  for (const char* project : kProjects) {
    grpc::ClientContext ctx;
    Authorize(shared.admin_token, &ctx);
    v1::CreateProjectRequest req;
    req.set_name(project);
    v1::CreateProjectResponse resp;
    if (!ok(stub.CreateProject(&ctx, req, &resp), absl::StrCat("CreateProject ", project))) {
      return false;
    }
  }
  for (const SoakUser& u : shared.users) {
    for (const auto& [project, role] : {std::pair{u.write, v1::PROJECT_ROLE_WRITER},
                                        std::pair{u.read, v1::PROJECT_ROLE_READER}}) {
      grpc::ClientContext ctx;
      Authorize(shared.admin_token, &ctx);
      v1::AddProjectMemberRequest req;
      req.set_project(kProjects[project]);
      req.set_user(u.name);
      req.set_role(role);
      v1::AddProjectMemberResponse resp;
      if (!ok(stub.AddProjectMember(&ctx, req, &resp),
              absl::StrCat("AddProjectMember ", u.name, " to ", kProjects[project]))) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace fca::soak
