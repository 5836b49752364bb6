#include "common/stream_shares.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace fca {
namespace {

TEST(StreamSharesTest, EachUserHoldsAQuarterAndTheServerItsLimit) {
  int64_t gauge = 0;
  StreamShares shares(16, [&gauge](int64_t delta) { gauge += delta; });
  EXPECT_EQ(shares.per_user(), 4);
  std::vector<std::shared_ptr<StreamShares::Slot>> alice;
  for (int i = 0; i < 4; ++i) {
    auto slot = shares.Acquire("alice", "job streams");
    ASSERT_TRUE(slot.ok()) << slot.status();
    alice.push_back(*slot);
  }
  // alice's fifth is refused, naming her share; bob still gets his.
  const auto fifth = shares.Acquire("alice", "job streams");
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(fifth.status().message().find("alice holds 4 job streams, a user's share"),
            absl::string_view::npos)
      << fifth.status();
  std::vector<std::shared_ptr<StreamShares::Slot>> others;
  for (const char* user : {"bob", "bob", "bob", "bob", "carol", "carol", "carol", "carol", "dan",
                           "dan", "dan", "dan"}) {
    auto slot = shares.Acquire(user, "job streams");
    ASSERT_TRUE(slot.ok()) << user << ": " << slot.status();
    others.push_back(*slot);
  }
  EXPECT_EQ(shares.open(), 16);
  EXPECT_EQ(gauge, 16);
  // The server's limit: erin, who holds none, is refused too.
  const auto full = shares.Acquire("erin", "job streams");
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("serving 16 job streams, its limit"),
            absl::string_view::npos)
      << full.status();
  // A slot given back is alice's to take again.
  alice.pop_back();
  EXPECT_EQ(shares.open(), 15);
  EXPECT_TRUE(shares.Acquire("alice", "job streams").ok());
  alice.clear();
  others.clear();
  EXPECT_EQ(shares.open(), 0);
  EXPECT_EQ(gauge, 0);
}

TEST(StreamSharesTest, ASmallLimitStillGivesEachUserOne) {
  StreamShares shares(2);
  EXPECT_EQ(shares.per_user(), 1);
  auto a = shares.Acquire("a", "streams");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(shares.Acquire("a", "streams").ok());
  EXPECT_TRUE(shares.Acquire("b", "streams").ok());
}

}  // namespace
}  // namespace fca
