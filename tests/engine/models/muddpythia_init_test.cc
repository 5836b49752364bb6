// Random MUDDPythia folders (server/engine/models/muddpythia_init.h): the FFN width
// formula, and a written folder against the reference checkpoint's layout.
#include "server/engine/models/muddpythia_init.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/engine/io/safetensors.h"
#include "server/engine/models/controlled_model.h"
#include "server/engine/models/model_loader.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

MuddPythiaSizes TinySizes() {
  MuddPythiaSizes s;
  s.dim = 64;
  s.n_layer = 4;
  s.n_head = 4;
  s.vocab_size = 512;
  s.intermediate_size = 128;
  return s;
}

TEST(MuddPythiaInitTest, FfnWidthsRoundHalfToEvenAsPython) {
  // The tiny vector's checkpoint: layer 0 is 128 * 0.5 / 128 = 0.5, which
  // Python rounds to 0 (and std::round to 1).
  EXPECT_EQ(MuddPythiaFfnWidths(TinySizes()), (std::vector<int64_t>{0, 128, 128, 256}));
  // The 1.4B table of muddpythia.md section 2.4.
  const std::vector<int64_t> want = {4096, 4480,  4864,  5120,  5504,  5888,  6272,  6528,
                                     6912, 7296,  7680,  8064,  8320,  8704,  9088,  9472,
                                     9856, 10112, 10496, 10880, 11264, 11520, 11904, 12288};
  EXPECT_EQ(MuddPythiaFfnWidths(MuddPythiaSizes{}), want);
}

// Written at the tiny vector's sizes, the folder has exactly the reference
// checkpoint's tensor names and shapes, and it loads and replays bitwise.
TEST(MuddPythiaInitTest, TinyFolderHasTheReferenceLayoutAndRuns) {
  const std::string dir = testing::TempDir("mudd_init") + "/model";
  ASSERT_TRUE(WriteRandomMuddPythiaDir(dir, TinySizes(), 7, DType::kBF16).ok());
  auto mine = TensorSource::OpenDir(dir);
  auto ref = TensorSource::OpenDir(FCA_TEST_DATA_DIR "/muddpythia-tiny-fp32");
  ASSERT_TRUE(mine.ok() && ref.ok());
  ASSERT_EQ((*mine)->Names(), (*ref)->Names());
  for (const std::string& name : (*ref)->Names()) {
    auto a = (*mine)->Get(name), b = (*ref)->Get(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(a->shape, b->shape) << name;
    EXPECT_EQ(a->dtype, DType::kBF16) << name;
  }
  ComputeOptions compute = testing::TestCompute();
  compute.dtype = ComputeDType::kBFloat16;
  auto model = LoadModel(dir, "random", compute);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().family, "muddpythia");
  const at::Tensor ids = at::randint(0, 512, {2, 16}, at::kLong);
  std::vector<at::Tensor> a;
  auto live = (*model)->Forward(ids, CoefficientMode::kLiveRecord, &a);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(live->isfinite().all().item<bool>());
  // The controller's output varies by token around the identity pattern.
  // (at::IntArrayRef: a bare 1 would pick std(bool unbiased), the whole tensor.)
  EXPECT_GT(a.back().to(at::kFloat).std(at::IntArrayRef{1}).max().item<double>(), 0.0);
  auto replay = (*model)->Forward(ids, CoefficientMode::kReplay, &a);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(at::equal(*live, *replay));
}

// Same seed, same bytes; and the static bias is the identity-to-newest
// pattern (last column ~1, the others ~0) the reference training starts from.
TEST(MuddPythiaInitTest, SeededAndStartsFromTheIdentityPattern) {
  const std::string a = testing::TempDir("mudd_seed_a"), b = testing::TempDir("mudd_seed_b");
  ASSERT_TRUE(WriteRandomMuddPythiaDir(a, TinySizes(), 3, DType::kF32).ok());
  ASSERT_TRUE(WriteRandomMuddPythiaDir(b, TinySizes(), 3, DType::kF32).ok());
  auto sa = TensorSource::OpenDir(a), sb = TensorSource::OpenDir(b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(*(*sa)->ContentSha256(), *(*sb)->ContentSha256());
  auto bias = (*sa)->Get("dense_bs.2");  // [4 streams, 4 channels]
  ASSERT_TRUE(bias.ok());
  ASSERT_EQ(bias->shape, (std::vector<int64_t>{4, 4}));
  const float* v = reinterpret_cast<const float*>(bias->data);
  for (int c = 0; c < 4; ++c) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(v[c * 4 + j], j == 3 ? 1.0 : 0.0, 0.1) << c << j;
  }
}

TEST(MuddPythiaInitTest, OtherDtypesAreRefused) {
  EXPECT_EQ(WriteRandomMuddPythiaDir(testing::TempDir("mudd_init_f16"), TinySizes(), 1, DType::kF16)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fca::engine
