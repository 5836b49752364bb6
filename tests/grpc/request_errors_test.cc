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
#include "tests/core/core_env.h"

namespace fca::grpc_server {
namespace {

using ::testing::HasSubstr;

// AuditServiceImpl over a complete core on 127.0.0.1, with or without the
// interceptors fca-server installs.
class Server {
 public:
  explicit Server(bool interceptors) {
    auto authenticator = auth::Authenticator::Create(false, "", core_env_.store());
    EXPECT_TRUE(authenticator.ok()) << authenticator.status();
    service_ = std::make_unique<AuditServiceImpl>(core_env_.core(), std::move(*authenticator));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    if (interceptors) builder.experimental().SetInterceptorCreators(ServerInterceptors());
    server_ = builder.BuildAndStart();
    EXPECT_GT(port, 0);
    stub_ = v1::AuditService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                          grpc::InsecureChannelCredentials()));
  }
  ~Server() {
    service_->Shutdown();
    core_env_.hub()->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
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
  std::unique_ptr<AuditServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::AuditService::Stub> stub_;
};

const std::string kNotUtf8 = "label \xff\xfe end";

TEST(UnparsableRequestTest, WithoutTheInterceptorGrpcSaysInternalAndNothingElse) {
  Server server(/*interceptors=*/false);
  const grpc::Status st = server.SubmitWithLabel(kNotUtf8);
  // The failure this project saw: where it comes from, not what we want.
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(st.error_message(), "");
}

TEST(UnparsableRequestTest, IsInvalidArgumentWithAMessageAndLogged) {
  Server server(/*interceptors=*/true);
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
