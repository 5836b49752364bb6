// ModelRepository (server/runtime/model_repository.h) over a temporary folder of
// tiny models, a broken one and folders that are not models.
#include "server/runtime/model_repository.h"

#include <ATen/ATen.h>  // a Forward on a model the repository has unloaded
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "server/engine/io/weights_hash_cache.h"
#include "server/engine/models/model_loader.h"
#include "tests/core/core_env.h"

namespace fca::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ModelRoot;
using ::testing::Not;

std::unique_ptr<runtime::ModelRepository> OpenRepo(runtime::ModelRepository::Options options = {}) {
  if (options.root.empty()) options.root = ModelRoot();
  auto repo = runtime::ModelRepository::Open(options);
  EXPECT_TRUE(repo.ok()) << repo.status();
  return repo.ok() ? std::move(*repo) : nullptr;
}

TEST(ModelRepositoryTest, OpenRefusesAMissingRoot) {
  runtime::ModelRepository::Options options;
  options.root = ModelRoot() + "/does_not_exist";
  EXPECT_EQ(runtime::ModelRepository::Open(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.root = ModelRoot() + "/stray_file";
  EXPECT_EQ(runtime::ModelRepository::Open(options).status().code(),
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

TEST(ModelRepositoryTest, AnUnknownModelIsAnsweredWithTheModelsThatExist) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  EXPECT_EQ(repo->Get("nope").status().message(),
            "model 'nope' is not in the repository (the repository holds broken, dense, fg_a, "
            "fg_b)");
}

TEST(ModelRepositoryTest, TheModelsAnUnknownNameListsAreCapped) {
  const std::filesystem::path root = ::testing::TempDir() + "fca_repo_many";
  std::filesystem::remove_all(root);
  for (int i = 0; i < 23; ++i) {
    const std::filesystem::path dir = root / absl::StrFormat("m%02d", i);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << "{}";
  }
  runtime::ModelRepository::Options options;
  options.root = root.string();
  auto repo = OpenRepo(options);
  ASSERT_NE(repo, nullptr);
  // 23 models: the first 20 in name order, then the 3 left.
  EXPECT_THAT(std::string(repo->Describe("m99").status().message()),
              ::testing::EndsWith("m17, m18, m19 and 3 more)"));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  auto empty = OpenRepo(options);
  ASSERT_NE(empty, nullptr);
  EXPECT_THAT(std::string(empty->Get("m00").status().message()),
              HasSubstr("(the repository holds no model)"));
}

TEST(ModelRepositoryTest, GetMalformedNameIsInvalidArgument) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  for (const char* bad : {"../fg_a", "fg_a/../fg_a", ".hidden", "", ".", "/etc"}) {
    EXPECT_EQ(repo->Get(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// The request is fine, the folder is not: FAILED_PRECONDITION, and Describe
// and List say the same.
TEST(ModelRepositoryTest, BrokenConfigIsUnavailableNamingTheModelNotThePath) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  auto broken = repo->Get(testing::kBroken);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kFailedPrecondition) << broken.status();
  const std::string message(broken.status().message());
  EXPECT_THAT(message, HasSubstr("model 'broken' is unavailable: "));
  EXPECT_EQ(repo->Describe(testing::kBroken).status(), broken.status());
  EXPECT_THAT(message, Not(HasSubstr(ModelRoot())));
  // A failed load is not cached as a success.
  EXPECT_FALSE(repo->Get(testing::kBroken).ok());
}

TEST(ModelRepositoryTest, AFailedLoadIsRememberedUntilTheFolderChanges) {
  const std::string root = ::testing::TempDir() + "fca_repo_retry";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/m");
  std::ofstream(root + "/m/config.json") << "{not json";
  runtime::ModelRepository::Options options;
  options.root = root;
  auto repo = runtime::ModelRepository::Open(options);
  ASSERT_TRUE(repo.ok());
  const absl::Status first = (*repo)->Get("m").status();
  EXPECT_EQ(first.code(), absl::StatusCode::kFailedPrecondition);
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
  EXPECT_EQ(repo->GetTokenizer(testing::kGateA)->get(), &(*model)->tokenizer());
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

// Listing reads config.json and the safetensors headers only, and says what
// the loaded model says.
TEST(ModelRepositoryTest, ListLoadsNothingAndAgreesWithTheLoadedModels) {
  auto repo = OpenRepo();
  ASSERT_NE(repo, nullptr);
  std::vector<runtime::ModelRepository::UnavailableFolder> unavailable;
  const std::vector<runtime::ModelRepository::Listing> listed = repo->List(&unavailable);
  EXPECT_EQ(repo->loads_attempted(), 0);
  ASSERT_EQ(listed.size(), 3u);  // broken is listed apart, with why
  ASSERT_EQ(unavailable.size(), 1u);
  EXPECT_EQ(unavailable[0].name, testing::kBroken);
  // Describe's reason without the "model 'broken' is unavailable: " before it.
  const std::string described(repo->Describe(testing::kBroken).status().message());
  EXPECT_EQ(described, "model 'broken' is unavailable: " + unavailable[0].reason);
  EXPECT_THAT(unavailable[0].reason, Not(HasSubstr("unavailable")));
  EXPECT_THAT(unavailable[0].reason, HasSubstr("config.json"));
  for (const runtime::ModelRepository::Listing& l : listed) {
    const engine::ModelInfo& info = l.description.info;
    SCOPED_TRACE(info.name);
    EXPECT_FALSE(l.loaded);
    EXPECT_EQ(info.weights_sha256, "");  // not loaded: not hashed
    EXPECT_GT(l.description.weight_file_bytes, 0);
    EXPECT_EQ(l.description.estimated_memory_bytes, info.num_parameters * 4);  // float32
    auto model = repo->Get(info.name);
    ASSERT_TRUE(model.ok()) << model.status();
    const engine::ModelInfo& loaded = (*model)->info();
    EXPECT_EQ(info.family, loaded.family);
    EXPECT_EQ(info.vocab_size, loaded.vocab_size);
    EXPECT_EQ(info.max_seq_len, loaded.max_seq_len);
    EXPECT_EQ(info.num_layers, loaded.num_layers);
    EXPECT_EQ(info.num_parameters, loaded.num_parameters);
    EXPECT_EQ(l.tokenizer->name(), (*model)->tokenizer().name());
    ASSERT_EQ(l.description.sites.size(), (*model)->sites().size());
    for (size_t i = 0; i < l.description.sites.size(); ++i) {
      EXPECT_EQ(l.description.sites[i].name, (*model)->sites()[i].name);
      EXPECT_EQ(l.description.sites[i].family, (*model)->sites()[i].family);
      EXPECT_EQ(l.description.sites[i].layer, (*model)->sites()[i].layer);
      EXPECT_EQ(l.description.sites[i].channels, (*model)->sites()[i].channels);
    }
  }
  EXPECT_THAT(listed[1].description.sites, Not(::testing::IsEmpty()));  // fg_a
  // Once loaded, the listing carries the weights hash.
  for (const runtime::ModelRepository::Listing& l : repo->List()) {
    EXPECT_TRUE(l.loaded);
    EXPECT_EQ(l.description.info.weights_sha256.size(), 64u);
  }
}

// While fg_a loads (its loader blocks), fg_b, its tokenizer and the listing
// answer at once; a second caller of fg_a waits for the one load.
TEST(ModelRepositoryTest, ASlowLoadBlocksNoOtherModel) {
  absl::Notification entered, release;
  std::atomic<int> loads_of_a{0};
  runtime::ModelRepository::Options options;
  options.loader = [&](const std::string& dir, const std::string& name,
                       const engine::ComputeOptions& compute) {
    if (name == testing::kGateA) {
      ++loads_of_a;
      entered.Notify();
      release.WaitForNotification();
    }
    return engine::LoadModel(dir, name, compute);
  };
  auto repo = OpenRepo(options);
  ASSERT_NE(repo, nullptr);
  std::shared_ptr<engine::ControlledModel> a1, a2;
  std::thread first([&] { a1 = repo->Get(testing::kGateA).value_or(nullptr); });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  std::thread second([&] { a2 = repo->Get(testing::kGateA).value_or(nullptr); });
  auto others = std::async(std::launch::async, [&] {
    return repo->Get(testing::kGateB).ok() && repo->GetTokenizer(testing::kGateB).ok() &&
           repo->GetTokenizer(testing::kGateA).ok() && repo->List().size() == 3;
  });
  const bool answered = others.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  release.Notify();  // whatever happened, let the loads end
  first.join();
  second.join();
  ASSERT_TRUE(answered) << "a load of fg_a blocked another model";
  EXPECT_TRUE(others.get());
  ASSERT_NE(a1, nullptr);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(loads_of_a.load(), 1);
  EXPECT_EQ(repo->loads_attempted(), 2);  // fg_a once, fg_b once
}

// Budget for one tiny model: using fg_b unloads fg_a, whose holder keeps a
// working model; a model larger than the whole budget is refused.
TEST(ModelRepositoryTest, TheMemoryBudgetUnloadsTheLeastRecentlyUsed) {
  auto probe = OpenRepo();
  ASSERT_NE(probe, nullptr);
  auto described = probe->Describe(testing::kGateA);
  ASSERT_TRUE(described.ok()) << described.status();
  const int64_t one_model = described->description.estimated_memory_bytes;
  runtime::ModelRepository::Options options;
  options.memory_budget_bytes = one_model;
  auto repo = OpenRepo(options);
  ASSERT_NE(repo, nullptr);
  auto a = repo->Get(testing::kGateA);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = repo->Get(testing::kGateB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(repo->loads_attempted(), 2);
  EXPECT_FALSE(repo->IsLoaded(testing::kGateA));
  EXPECT_TRUE(repo->IsLoaded(testing::kGateB));
  EXPECT_LE(repo->resident_bytes(), one_model);
  // The unloaded fg_a still runs for whoever holds it.
  const at::Tensor ids = at::arange(1, 5, at::kLong).unsqueeze(0);  // [[1, 2, 3, 4]]
  auto logits = (*a)->Forward(ids, engine::CoefficientMode::kLive, nullptr);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(1), 4);
  // Asked for again while still held, it is taken back rather than loaded twice.
  auto again = repo->Get(testing::kGateA);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), a->get());
  EXPECT_EQ(repo->loads_attempted(), 2);
  // Released and unloaded, it is loaded afresh.
  a->reset();
  again->reset();
  ASSERT_TRUE(repo->Get(testing::kGateB).ok());
  ASSERT_TRUE(repo->Get(testing::kGateA).ok());
  EXPECT_EQ(repo->loads_attempted(), 3);

  options.memory_budget_bytes = one_model - 1;
  auto small = OpenRepo(options);
  ASSERT_NE(small, nullptr);
  auto refused = small->Get(testing::kGateA);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("budget"));
  auto listing = small->Describe(testing::kGateA);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(small->CheckFitsBudget(*listing).code(), absl::StatusCode::kResourceExhausted);
}

TEST(ModelRepositoryTest, AChangedFolderIsReloadedOnNextUse) {
  const std::string root = ::testing::TempDir() + "fca_repo_changed";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::filesystem::copy(ModelRoot() + "/" + testing::kGateA, root + "/m");
  runtime::ModelRepository::Options options;
  options.root = root;
  auto repo = OpenRepo(options);
  ASSERT_NE(repo, nullptr);
  auto before = repo->Get("m");
  ASSERT_TRUE(before.ok()) << before.status();
  const std::string weights = root + "/m/model.safetensors";
  std::filesystem::last_write_time(
      weights, std::filesystem::last_write_time(weights) + std::chrono::hours(1));
  auto after = repo->Get("m");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(repo->loads_attempted(), 2);
  EXPECT_NE(after->get(), before->get());
  EXPECT_EQ((*after)->info().weights_sha256, (*before)->info().weights_sha256);
  std::filesystem::remove_all(root);
}

// Loads and WeightsHash of every repository sharing a cache, and a restarted
// server's (a cache opened again from its file), take the hash of unchanged
// weights from it without reading them.
TEST(ModelRepositoryTest, TheWeightsHashCacheSparesHashingUnchangedWeights) {
  const std::string root = ::testing::TempDir() + "fca_repo_hash_cache";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/models");
  std::filesystem::copy(ModelRoot() + "/" + testing::kGateA, root + "/models/m");
  const std::string cache_file = root + "/fca.sqlite.weights-hash-cache";
  // The cache remembers only files that have not changed for a moment.
  std::this_thread::sleep_for(
      std::chrono::nanoseconds(engine::WeightsHashCache::kSettleNanos + 50'000'000));
  const std::string expected = *engine::Sha256OfFiles({root + "/models/m/model.safetensors"});

  std::unique_ptr<engine::WeightsHashCache> cache = engine::WeightsHashCache::Open(cache_file);
  runtime::ModelRepository::Options options;
  options.root = root + "/models";
  options.weights_hash_cache = cache.get();
  auto loader_repo = OpenRepo(options);
  auto other_repo = OpenRepo(options);  // another worker's
  ASSERT_NE(loader_repo, nullptr);
  ASSERT_NE(other_repo, nullptr);
  auto model = loader_repo->Get("m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().weights_sha256, expected);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_EQ(*other_repo->WeightsHash("m"), expected);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_EQ(cache->stats().hits, 1);

  std::unique_ptr<engine::WeightsHashCache> restarted = engine::WeightsHashCache::Open(cache_file);
  options.weights_hash_cache = restarted.get();
  auto restarted_repo = OpenRepo(options);
  ASSERT_NE(restarted_repo, nullptr);
  auto reloaded = restarted_repo->Get("m");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ((*reloaded)->info().weights_sha256, expected);
  EXPECT_EQ(restarted->stats().hits, 1);
  EXPECT_EQ(restarted->stats().bytes_hashed, 0);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace fca::core
