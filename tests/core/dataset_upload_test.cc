// DatasetUpload (server/core/service.h): the header comes first, limits are
// checked as bytes arrive, the checksum is verified and identical bytes are
// reported as deduplicated.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "absl/strings/ascii.h"
#include "common/sha256.h"
#include "server/core/service.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using testing::Alice;
using testing::Bob;
using testing::CoreEnv;
using ::testing::HasSubstr;

v1::UploadDatasetHeader Header(const std::string& name, int64_t size,
                               v1::DatasetKind kind = v1::DATASET_KIND_TEXT) {
  v1::UploadDatasetHeader h;
  h.set_name(name);
  h.set_kind(kind);
  h.set_size_bytes(size);
  return h;
}

ServiceLimits Limit(int64_t max_dataset_bytes) {
  ServiceLimits limits;
  limits.max_dataset_bytes = max_dataset_bytes;
  return limits;
}

size_t StoredDatasets(CoreEnv* env) {
  auto all = env->store()->ListDatasets(std::nullopt);
  EXPECT_TRUE(all.ok()) << all.status();
  return all.ok() ? all->size() : 0;
}

TEST(DatasetUploadTest, HeaderMustComeFirstAndOnlyOnce) {
  CoreEnv env;
  DatasetUpload upload(Alice(), env.store(), Limit(1000));
  EXPECT_EQ(upload.Append("abc").code(), absl::StatusCode::kInvalidArgument);
  DatasetUpload empty(Alice(), env.store(), Limit(1000));
  EXPECT_EQ(empty.Finish().status().code(), absl::StatusCode::kInvalidArgument);
  DatasetUpload twice(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(twice.Start(Header("d", 3)).ok());
  EXPECT_EQ(twice.Start(Header("d", 3)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoredDatasets(&env), 0u);
}

TEST(DatasetUploadTest, HeaderFieldsAreChecked) {
  CoreEnv env;
  EXPECT_EQ(DatasetUpload(Alice(), env.store(), Limit(1000)).Start(Header("../x", 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DatasetUpload(Alice(), env.store(), Limit(1000)).Start(Header("", 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DatasetUpload(Alice(), env.store(), Limit(1000))
                .Start(Header("d", 3, v1::DATASET_KIND_UNSPECIFIED))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DatasetUpload(Alice(), env.store(), Limit(1000)).Start(Header("d", -1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetUploadTest, OversizeAnnouncedIsResourceExhaustedWithTheLimit) {
  CoreEnv env;
  DatasetUpload upload(Alice(), env.store(), Limit(1000));
  const absl::Status st = upload.Start(Header("big", 1001));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("1000"));
  EXPECT_TRUE(DatasetUpload(Alice(), env.store(), Limit(1000)).Start(Header("fits", 1000)).ok());
}

TEST(DatasetUploadTest, MoreBytesThanAnnouncedIsInvalidArgument) {
  CoreEnv env;
  DatasetUpload upload(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(upload.Start(Header("d", 5)).ok());
  ASSERT_TRUE(upload.Append("abc").ok());
  EXPECT_EQ(upload.Append("def").code(), absl::StatusCode::kInvalidArgument);
}

TEST(DatasetUploadTest, FewerBytesThanAnnouncedIsInvalidArgument) {
  CoreEnv env;
  DatasetUpload upload(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(upload.Start(Header("d", 5)).ok());
  ASSERT_TRUE(upload.Append("abc").ok());
  EXPECT_EQ(upload.Finish().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoredDatasets(&env), 0u);
}

TEST(DatasetUploadTest, ChunksOverOneMebibyteAreRefused) {
  CoreEnv env;
  DatasetUpload upload(Alice(), env.store(), Limit(4 << 20));
  ASSERT_TRUE(upload.Start(Header("d", 2 << 20)).ok());
  EXPECT_EQ(upload.Append(std::string((1 << 20) + 1, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetUploadTest, ChecksumIsVerified) {
  CoreEnv env;
  const std::string bytes = "hello world";
  v1::UploadDatasetHeader header = Header("d", bytes.size());
  header.set_sha256(Sha256Hex("something else"));
  DatasetUpload bad(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(bad.Start(header).ok());
  ASSERT_TRUE(bad.Append(bytes).ok());
  auto refused = bad.Finish();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("checksum"));
  EXPECT_EQ(StoredDatasets(&env), 0u);

  header.set_sha256(Sha256Hex(bytes));
  DatasetUpload good(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(good.Start(header).ok());
  ASSERT_TRUE(good.Append(bytes).ok());
  auto stored = good.Finish();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->dataset().sha256(), Sha256Hex(bytes));
  EXPECT_EQ(stored->dataset().size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(stored->dataset().owner(), "alice");
  EXPECT_EQ(stored->dataset().name(), "d");
}

TEST(DatasetUploadTest, TokensMustBeWholeInt32s) {
  CoreEnv env;
  const absl::Status st = DatasetUpload(Alice(), env.store(), Limit(1000))
                              .Start(Header("t", 6, v1::DATASET_KIND_TOKENS_INT32));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  auto ok = env.Upload(Alice(), "t", std::string(8, '\1'), v1::DATASET_KIND_TOKENS_INT32);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->dataset().kind(), v1::DATASET_KIND_TOKENS_INT32);
}

TEST(DatasetUploadTest, SameBytesUnderAnotherNameAreDeduplicated) {
  CoreEnv env;
  auto first = env.Upload(Alice(), "one", "same bytes");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->deduplicated());
  auto second = env.Upload(Alice(), "two", "same bytes");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->deduplicated());
  EXPECT_EQ(second->dataset().sha256(), first->dataset().sha256());
  EXPECT_NE(second->dataset().id(), first->dataset().id());
  auto other = env.Upload(Alice(), "three", "other bytes");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->deduplicated());
  // Issue 9: another user's upload of the same bytes is not disclosed.
  auto bobs = env.Upload(Bob(), "one", "same bytes");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_FALSE(bobs->deduplicated());
}

// Issue 9: an upper-case hex checksum is the same checksum.
TEST(DatasetUploadTest, ChecksumIsCaseInsensitive) {
  CoreEnv env;
  const std::string bytes = "hello world";
  v1::UploadDatasetHeader header = Header("d", bytes.size());
  header.set_sha256(absl::AsciiStrToUpper(Sha256Hex(bytes)));
  DatasetUpload upload(Alice(), env.store(), Limit(1000));
  ASSERT_TRUE(upload.Start(header).ok());
  ASSERT_TRUE(upload.Append(bytes).ok());
  auto stored = upload.Finish();
  EXPECT_TRUE(stored.ok()) << stored.status();
}

// Issue 9: chunks go to the store as they arrive; an upload abandoned
// midway (the client went away) leaves nothing behind.
TEST(DatasetUploadTest, ChunksAreStagedInTheStoreAndDroppedWhenAbandoned) {
  CoreEnv env;
  {
    DatasetUpload upload(Alice(), env.store(), Limit(1000));
    ASSERT_TRUE(upload.Start(Header("d", 10)).ok());
    ASSERT_TRUE(upload.Append("abcde").ok());
    auto staged = env.store()->UserBytes("alice");
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_EQ(*staged, 5);  // in the store, not in this object
  }
  auto left = env.store()->UserBytes("alice");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0);
  EXPECT_EQ(StoredDatasets(&env), 0u);
}

// Issue 9: a per-user quota on stored bytes, checked before any byte is
// taken; deleting a dataset makes room again.
TEST(DatasetUploadTest, StorageQuotaIsPerUserAndFreedByDeletion) {
  ServiceLimits limits;
  limits.max_user_bytes = 100;
  CoreEnv env(limits);
  ASSERT_TRUE(env.Upload(Alice(), "a", std::string(60, 'a')).ok());
  auto over = env.Upload(Alice(), "b", std::string(60, 'b'));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("quota"));
  EXPECT_TRUE(env.Upload(Bob(), "b", std::string(60, 'b')).ok());  // Bob's own quota
  v1::DeleteDatasetRequest del;
  del.set_name("a");
  auto freed = env.core()->DeleteDataset(Alice(), del);
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(freed->bytes_freed(), 60);
  EXPECT_TRUE(env.Upload(Alice(), "b", std::string(60, 'b')).ok());
}

TEST(DatasetUploadTest, SameNameWithOtherBytesIsAlreadyExists) {
  CoreEnv env;
  ASSERT_TRUE(env.Upload(Alice(), "d", "first").ok());
  auto again = env.Upload(Alice(), "d", "first");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->deduplicated());
  EXPECT_EQ(env.Upload(Alice(), "d", "second").status().code(), absl::StatusCode::kAlreadyExists);
  // Names are per owner.
  EXPECT_TRUE(env.Upload(Bob(), "d", "second").ok());
}

TEST(DatasetUploadTest, ListDatasetsShowsOwnNewestFirstAndAdminSeesAll) {
  CoreEnv env;
  ASSERT_TRUE(env.Upload(Alice(), "a1", "x1").ok());
  ASSERT_TRUE(env.Upload(Bob(), "b1", "y1").ok());
  ASSERT_TRUE(env.Upload(Alice(), "a2", "x2").ok());
  auto mine = env.core()->ListDatasets(Alice(), {});
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->datasets_size(), 2);
  EXPECT_EQ(mine->datasets(0).name(), "a2");
  EXPECT_EQ(mine->datasets(1).name(), "a1");
  auto all = env.core()->ListDatasets(testing::Admin(), {});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->datasets_size(), 3);
}

}  // namespace
}  // namespace fca::core

namespace fca::core {
namespace {

// Uploads in flight reserve their announced size from the shared budget
// (ServiceLimits::max_upload_bytes_in_flight) from Start() until they are
// destroyed: beyond it RESOURCE_EXHAUSTED, and nothing is staged.
TEST(DatasetUploadTest, UploadsInFlightShareABudget) {
  CoreEnv env;
  ByteBudget budget(1000, 1000);
  auto first = std::make_unique<DatasetUpload>(Alice(), env.store(), Limit(1000), &budget);
  ASSERT_TRUE(first->Start(Header("first", 600)).ok());
  EXPECT_EQ(budget.held(), 600);
  {
    DatasetUpload second(Bob(), env.store(), Limit(1000), &budget);
    const absl::Status refused = second.Start(Header("second", 600));
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(refused.message()), HasSubstr("--max_upload_bytes_in_flight"));
  }
  EXPECT_EQ(budget.held(), 600);
  first.reset();
  EXPECT_EQ(budget.held(), 0);
  DatasetUpload third(Bob(), env.store(), Limit(1000), &budget);
  ASSERT_TRUE(third.Start(Header("third", 600)).ok());
  ASSERT_TRUE(third.Append(std::string(600, 'a')).ok());
  EXPECT_TRUE(third.Finish().ok());
}

// Each client holds at most its share of the budget: a user on any
// address, and an address for any user (--max_upload_bytes_per_client), so
// that one of them cannot take it all; a client within its share is served
// while another holds its whole share.
TEST(DatasetUploadTest, AClientHoldsOnlyItsShare) {
  CoreEnv env;
  ByteBudget budget(1000, 500);
  auto from = [](Caller caller, const std::string& peer) {
    caller.peer = peer;
    return caller;
  };
  DatasetUpload first(from(Alice(), "ipv4:10.0.0.7:5001"), env.store(), Limit(1000), &budget);
  ASSERT_TRUE(first.Start(Header("first", 400)).ok());
  EXPECT_EQ(budget.held_by("user alice"), 400);
  EXPECT_EQ(budget.held_by("address 10.0.0.7"), 400);
  // Alice again, from another address: her own share is spent.
  DatasetUpload again(from(Alice(), "ipv6:[::1]:5002"), env.store(), Limit(1000), &budget);
  const absl::Status user_refused = again.Start(Header("again", 200));
  EXPECT_EQ(user_refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(user_refused.message()), HasSubstr("user alice"));
  EXPECT_THAT(std::string(user_refused.message()), HasSubstr("--max_upload_bytes_per_client"));
  // Bob from alice's address: the address's share is spent.
  DatasetUpload shared(from(Bob(), "ipv4:10.0.0.7:5003"), env.store(), Limit(1000), &budget);
  const absl::Status address_refused = shared.Start(Header("shared", 200));
  EXPECT_EQ(address_refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(address_refused.message()), HasSubstr("address 10.0.0.7"));
  // Bob from elsewhere: within his share and the budget.
  {
    DatasetUpload bob(from(Bob(), "ipv4:10.0.0.8:5004"), env.store(), Limit(1000), &budget);
    ASSERT_TRUE(bob.Start(Header("bob", 500)).ok());
    EXPECT_EQ(budget.held(), 900);
    ASSERT_TRUE(bob.Append(std::string(500, 'b')).ok());
    EXPECT_TRUE(bob.Finish().ok());
  }
  // Each client's bytes go back with its upload.
  EXPECT_EQ(budget.held_by("user bob"), 0);
  EXPECT_EQ(budget.held_by("address 10.0.0.8"), 0);
  EXPECT_EQ(budget.held(), 400);
}

}  // namespace
}  // namespace fca::core
