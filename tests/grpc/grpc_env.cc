#include "tests/grpc/grpc_env.h"

#include <chrono>
#include <fstream>

#include "tests/testing/test_models.h"

namespace fca::grpc_server::testing {

ExistingCore Served(core::testing::CoreEnv* env) {
  return {env->store(), env->hub(), env->coordinator(), env->core()};
}

GrpcEnv::GrpcEnv(const ServerConfig& config) : core_env_(config.limits, config.run, config.store) {
  ServerOptions options;
  options.auth = config.auth;
  options.api_keys_file = config.key_file;
  options.existing_core = Served(&core_env_);
  auto server = fca::Server::BuildAndStart(std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "GrpcEnv: %s\n", server.status().ToString().c_str());
    return;
  }
  server_ = std::move(*server);
  port_ = server_->grpc_port();
  stub_ = v1::AuditService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                        grpc::InsecureChannelCredentials()));
}

GrpcEnv::~GrpcEnv() {
  if (server_) server_->Shutdown();
}

std::unique_ptr<grpc::ClientContext> GrpcEnv::Context(const std::string& key) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
  return ctx;
}

grpc::Status GrpcEnv::Upload(const std::string& key, const std::string& name,
                             const std::string& bytes, v1::UploadDatasetResponse* response,
                             int64_t announced, const std::string& sha256) {
  auto ctx = Context(key);
  v1::UploadDatasetResponse ignored;
  auto writer = stub_->UploadDataset(ctx.get(), response ? response : &ignored);
  v1::UploadDatasetRequest header;
  header.mutable_header()->set_name(name);
  header.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
  header.mutable_header()->set_size_bytes(announced < 0 ? static_cast<int64_t>(bytes.size())
                                                        : announced);
  header.mutable_header()->set_sha256(sha256);
  bool open = writer->Write(header);
  constexpr size_t kChunk = 1 << 20;
  for (size_t off = 0; open && off < bytes.size(); off += kChunk) {
    v1::UploadDatasetRequest chunk;
    chunk.set_chunk(bytes.substr(off, kChunk));
    open = writer->Write(chunk);
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status GrpcEnv::UploadEvalAndCalib(const std::string& key) {
  grpc::Status st = Upload(key, "eval", core::testing::EvalText());
  if (!st.ok()) return st;
  return Upload(key, "calib", core::testing::CalibText());
}

grpc::Status GrpcEnv::Submit(const std::string& key, const v1::AuditSpec& spec, v1::Job* job) {
  auto ctx = Context(key);
  v1::SubmitAuditRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitAuditResponse response;
  grpc::Status st = stub_->SubmitAudit(ctx.get(), request, &response);
  if (job != nullptr) *job = response.job();
  return st;
}

grpc::Status GrpcEnv::ListModels(const std::string& key, v1::ListModelsResponse* response) {
  auto ctx = Context(key);
  v1::ListModelsResponse ignored;
  return stub_->ListModels(ctx.get(), {}, response ? response : &ignored);
}

grpc::Status GrpcEnv::ListJobs(const std::string& key, v1::ListJobsResponse* response) {
  auto ctx = Context(key);
  return stub_->ListJobs(ctx.get(), {}, response);
}

grpc::Status GrpcEnv::Watch(const std::string& key, int64_t job_id, int64_t after_seq,
                            std::vector<v1::WatchJobResponse>* out) {
  auto ctx = Context(key);
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  auto reader = stub_->WatchJob(ctx.get(), request);
  v1::WatchJobResponse response;
  while (reader->Read(&response)) out->push_back(response);
  return reader->Finish();
}

std::string WriteTempFile(const std::string& text) {
  const std::string path = engine::testing::TempDir("grpc_keys") + "/keys.txt";
  std::ofstream(path) << text;
  return path;
}

}  // namespace fca::grpc_server::testing
