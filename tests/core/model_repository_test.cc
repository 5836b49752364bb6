// ModelRepository (server/core/model_repository.h) over a temporary folder of
// tiny models, a broken one and folders that are not models.
#include "server/core/model_repository.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ModelRoot;

std::unique_ptr<ModelRepository> OpenRepo() {
  ModelRepository::Options options;
  options.root = ModelRoot();
  auto repo = ModelRepository::Open(options);
  EXPECT_TRUE(repo.ok()) << repo.status();
  return repo.ok() ? std::move(*repo) : nullptr;
}

TEST(ModelRepositoryTest, OpenRefusesAMissingRoot) {
  ModelRepository::Options options;
  options.root = ModelRoot() + "/does_not_exist";
  EXPECT_EQ(ModelRepository::Open(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.root = ModelRoot() + "/stray_file";
  EXPECT_EQ(ModelRepository::Open(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ModelRepositoryTest, NamesListsValidFoldersWithConfigSorted) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  // Not: no_config (no config.json), .hidden and "bad name" (invalid
  // names), stray_file (not a folder).
  EXPECT_THAT(repo->Names(), ElementsAre("broken", "dense", "fg_a", "fg_b"));
}

TEST(ModelRepositoryTest, GetUnknownIsNotFound) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  EXPECT_EQ(repo->Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo->Get(testing::kNoConfig).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo->Get("stray_file").status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelRepositoryTest, GetMalformedNameIsInvalidArgument) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  for (const char* bad : {"../fg_a", "fg_a/../fg_a", ".hidden", "", ".", "/etc"}) {
    EXPECT_EQ(repo->Get(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ModelRepositoryTest, BrokenConfigIsInvalidArgumentNamingTheModelNotThePath) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  auto broken = repo->Get(testing::kBroken);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument) << broken.status();
  const std::string message(broken.status().message());
  EXPECT_THAT(message, HasSubstr("'broken'"));
  EXPECT_THAT(message, Not(HasSubstr(ModelRoot())));
  // A failed load is not cached as a success.
  EXPECT_FALSE(repo->Get(testing::kBroken).ok());
}

TEST(ModelRepositoryTest, AFailedLoadIsRememberedUntilTheFolderChanges) {
  const std::string root = ::testing::TempDir() + "fca_repo_retry";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/m");
  std::ofstream(root + "/m/config.json") << "{not json";
  ModelRepository::Options options;
  options.root = root;
  auto repo = ModelRepository::Open(options);
  ASSERT_TRUE(repo.ok());
  const absl::Status first = (*repo)->Get("m").status();
  EXPECT_EQ(first.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*repo)->Get("m").status(), first);  // the same error, not a new load
  EXPECT_EQ((*repo)->loads_attempted(), 1);
  // A changed folder is loaded again (here: a valid model replaces it).
  std::filesystem::remove_all(root + "/m");
  std::filesystem::copy(ModelRoot() + "/" + testing::kGateA, root + "/m");
  auto fixed = (*repo)->Get("m");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ((*repo)->loads_attempted(), 2);
  std::filesystem::remove_all(root);
}

TEST(ModelRepositoryTest, GetTokenizerLoadsNoWeights) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  auto tokenizer = repo->GetTokenizer(testing::kGateA);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "byte");
  EXPECT_EQ(repo->loads_attempted(), 0);
  EXPECT_EQ(repo->GetTokenizer("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo->GetTokenizer("../x").status().code(), absl::StatusCode::kInvalidArgument);
  // Once the model is loaded, its own tokenizer is the one returned.
  auto model = repo->Get(testing::kGateA);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*repo->GetTokenizer(testing::kGateA), &(*model)->tokenizer());
}

TEST(ModelRepositoryTest, GetLoadsOnceAndReturnsTheSamePointer) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  auto first = repo->Get(testing::kGateA);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = repo->Get(testing::kGateA);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*first, *second);
  EXPECT_EQ((*first)->info().name, "fg_a");
  EXPECT_EQ((*first)->info().family, "featuregate");
  EXPECT_FALSE((*first)->sites().empty());
  auto dense = repo->Get(testing::kDense);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_NE(*dense, *first);
  EXPECT_TRUE((*dense)->sites().empty());
}

}  // namespace
}  // namespace fca::core
