// A request gRPC cannot parse (server/grpc/audit_service_impl.h,
// ServerInterceptors): a proto3 `string` field holding invalid UTF-8.
//
// Protobuf serializes such a field anyway (it logs an error on the client);
// the server's parse of the request fails in gRPC's generated handler,
// before AuditServiceImpl runs, and gRPC answers INTERNAL with an empty
// message. The interceptor makes that INVALID_ARGUMENT with a message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "server/grpc/audit_service_impl.h"
#include "server/server.h"
#include "tests/core/core_env.h"
#include "tests/grpc/grpc_env.h"

namespace fca::grpc_server {
namespace {

using ::testing::HasSubstr;

// fca::Server over a complete core on 127.0.0.1, with or without the
// interceptors fca-server installs.
class InterceptedServer {
 public:
  explicit InterceptedServer(bool interceptors) {
    ServerOptions options;
    options.interceptors = interceptors;
    options.existing_core = testing::Served(&core_env_);
    auto server = fca::Server::BuildAndStart(std::move(options));
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::AuditService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  grpc::Status SubmitWithLabel(const std::string& label) {
    grpc::ClientContext ctx;
    v1::SubmitAuditRequest request;
    *request.mutable_spec() = core::testing::SmallSpec({"fg_a"}, "eval", "calib");
    request.mutable_spec()->set_label(label);
    v1::SubmitAuditResponse response;
    return stub_->SubmitAudit(&ctx, request, &response);
  }

  grpc::Status ListModels() {
    grpc::ClientContext ctx;
    v1::ListModelsResponse response;
    return stub_->ListModels(&ctx, {}, &response);
  }

 private:
  core::testing::CoreEnv core_env_;
  std::unique_ptr<fca::Server> server_;
  std::unique_ptr<v1::AuditService::Stub> stub_;
};

const std::string kNotUtf8 = "label \xff\xfe end";

TEST(UnparsableRequestTest, WithoutTheInterceptorGrpcSaysInternalAndNothingElse) {
  InterceptedServer server(/*interceptors=*/false);
  const grpc::Status st = server.SubmitWithLabel(kNotUtf8);
  // The failure this project saw: where it comes from, not what we want.
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(st.error_message(), "");
}

TEST(UnparsableRequestTest, IsInvalidArgumentWithAMessageAndLogged) {
  InterceptedServer server(/*interceptors=*/true);
  ::testing::internal::CaptureStderr();
  const grpc::Status st = server.SubmitWithLabel(kNotUtf8);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("UTF-8"));
  EXPECT_THAT(
      log, HasSubstr("unparsable /fca.v1.AuditService/SubmitAudit request from ipv4:127.0.0.1:"));
  // The server keeps serving, and well-formed requests are untouched.
  EXPECT_TRUE(server.ListModels().ok());
  const grpc::Status valid = server.SubmitWithLabel("ünïcödé label");
  EXPECT_NE(valid.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << valid.error_message();
  EXPECT_NE(valid.error_code(), grpc::StatusCode::INTERNAL) << valid.error_message();
}

}  // namespace
}  // namespace fca::grpc_server
