// Uploading a text dataset through the gRPC API in a test: the header, then
// the whole file as one chunk (the tests' datasets are small).
#ifndef FCA_TESTS_E2E_UPLOAD_H_
#define FCA_TESTS_E2E_UPLOAD_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "proto/fca/v1/audit_service.grpc.pb.h"

namespace fca::testing {

// The server's answer (a failed write shows in it: Finish reports why).
inline grpc::Status UploadText(v1::AuditService::StubInterface& stub, grpc::ClientContext* context,
                               const std::string& name, const std::string& bytes) {
  v1::UploadDatasetResponse response;
  auto writer = stub.UploadDataset(context, &response);
  v1::UploadDatasetRequest part;
  part.mutable_header()->set_name(name);
  part.mutable_header()->set_kind(v1::DATASET_KIND_TEXT);
  part.mutable_header()->set_size_bytes(static_cast<int64_t>(bytes.size()));
  if (writer->Write(part)) {
    part.set_chunk(bytes);
    writer->Write(part);
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace fca::testing

#endif  // FCA_TESTS_E2E_UPLOAD_H_
