// Lookup-table diagnostics (fca.md "Lookup tables") on coefficients built as
// known functions of the token ids.
#include "server/engine/audit/lookup.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

namespace fca::engine {
namespace {

constexpr int64_t kN = 12, kT = 6, kD = 2, kVocab = 5;

at::Tensor Ids(uint64_t seed, int64_t vocab = kVocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {kN, kT}, gen, at::kLong);
}

// One site per family: "table" is a per-token value (a function of the token
// only), "table_pos" a function of (token, position), "noise" independent of
// both.
struct Case {
  std::vector<CoefficientSite> sites = {{"table.0", "table", 0, kD},
                                        {"table_pos.0", "table_pos", 0, kD},
                                        {"noise.0", "noise", 0, kD}};
  at::Tensor ids = Ids(3);
  SiteTensors eval;
  Variation v;

  Case() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const at::Tensor per_token = at::rand({kVocab, kD}, gen);
    const at::Tensor per_position = at::rand({kT, kD}, gen);
    const at::Tensor table = per_token.index_select(0, ids.reshape({-1})).reshape({kN, kT, kD});
    eval = {table, table * per_position.unsqueeze(0), at::rand({kN, kT, kD}, gen)};
    v = ComputeVariation(eval, sites);
    AddLookupDiagnostics(eval, ids, &v);
  }
};

TEST(LookupTest, CoefficientsThatAreAFunctionOfTheTokenHaveEta2TokenOne) {
  Case c;
  const SiteVariation& table = c.v.sites[0];
  ASSERT_TRUE(table.token.eta2.has_value());
  EXPECT_NEAR(*table.token.eta2, 1.0, 1e-12);
  EXPECT_NEAR(*table.token_position.eta2, 1.0, 1e-12);
  EXPECT_EQ(table.lookup_table, std::optional<bool>(true));
  // 5 ids over 72 positions: every id occurs at least twice.
  EXPECT_EQ(table.token.positions, kN * kT);
  ASSERT_TRUE(c.v.families[0].token.eta2.has_value());
  EXPECT_NEAR(*c.v.families[0].token.eta2, 1.0, 1e-12);
}

TEST(LookupTest, AFunctionOfTokenAndPositionIsATableOfThePairOnly) {
  Case c;
  const SiteVariation& pos = c.v.sites[1];
  ASSERT_TRUE(pos.token.eta2.has_value());
  EXPECT_LT(*pos.token.eta2, 0.99);  // the token alone does not explain it
  ASSERT_TRUE(pos.token_position.eta2.has_value());
  EXPECT_NEAR(*pos.token_position.eta2, 1.0, 1e-12);
  EXPECT_EQ(pos.lookup_table, std::optional<bool>(true));
}

// eta2 by hand on the noise site: 1 - SS around each key's per-channel
// means / SS around the per-channel means, over positions whose key occurs
// at least twice; noise is not a table.
TEST(LookupTest, Eta2TokenIsTheFormulaAndNoiseIsNoTable) {
  Case c;
  const at::Tensor a = c.eval[2].to(at::kDouble).reshape({-1, kD});
  const at::Tensor ids = c.ids.reshape({-1});
  double ss_key = 0;
  for (int64_t v = 0; v < kVocab; ++v) {
    const at::Tensor rows = a.index_select(0, (ids == v).nonzero().squeeze(1));
    if (rows.size(0) < 2) continue;
    ss_key += (rows - rows.mean(0, true)).pow(2).sum().item<double>();
  }
  const double ss_site = (a - a.mean(0, true)).pow(2).sum().item<double>();
  const SiteVariation& noise = c.v.sites[2];
  ASSERT_TRUE(noise.token.eta2.has_value());
  EXPECT_NEAR(*noise.token.eta2, 1.0 - ss_key / ss_site, 1e-12);
  EXPECT_LT(*noise.token.eta2, 0.5);
  EXPECT_EQ(noise.lookup_table, std::optional<bool>(false));
  // (token, position) pairs seen once are left out: fewer positions.
  EXPECT_LT(noise.token_position.positions, kN * kT);
}

TEST(LookupTest, AConstantSiteHasNoShareToExplain) {
  std::vector<CoefficientSite> sites = {{"c.0", "c", 0, kD}};
  SiteTensors eval = {at::full({kN, kT, kD}, 0.5)};
  Variation v = ComputeVariation(eval, sites);
  AddLookupDiagnostics(eval, Ids(1), &v);
  EXPECT_FALSE(v.sites[0].token.eta2.has_value());
  EXPECT_FALSE(v.sites[0].lookup_table.has_value());
  EXPECT_FALSE(v.families[0].token_position.eta2.has_value());
}

// --- out of sample: C's tables on E ---

// E and C (ids, coefficients per site) and the context the replays build.
struct OosCase {
  std::vector<CoefficientSite> sites;
  at::Tensor eval_ids, calib_ids;
  SiteTensors eval, calib;
  CalibrationStats stats;
  Variation v;

  OosCase(std::vector<CoefficientSite> s, at::Tensor e_ids, at::Tensor c_ids, SiteTensors e,
          SiteTensors c, int64_t min_count)
      : sites(std::move(s)),
        eval_ids(std::move(e_ids)),
        calib_ids(std::move(c_ids)),
        eval(std::move(e)),
        calib(std::move(c)) {
    stats = *ComputeCalibrationStats(calib, sites);
    v = ComputeVariation(eval, sites);
    AddLookupDiagnostics(eval, eval_ids, &v);
    InterventionContext ctx;
    ctx.eval = &eval;
    ctx.calib = &stats;
    ctx.sites = &sites;
    ctx.eval_ids = &eval_ids;
    ctx.calib_ids = &calib_ids;
    ctx.calib_coeff = &calib;
    ctx.token_min_count = min_count;
    status = AddOutOfSampleLookup(ctx, &v);
  }
  absl::Status status;
};

// A site that is an exact function of the token, with C holding every id:
// C's tables reproduce E (a pair C never saw reads its token's value, which
// is exact too), so both shares are 1. The family pools the sites' sums.
TEST(LookupOosTest, AFunctionOfTheTokenCoveredByCIsExplainedOutOfSample) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor per_token = at::rand({kVocab, kD}, gen);
  const at::Tensor e_ids = Ids(3), c_ids = Ids(4);
  c_ids[0].slice(0, 0, kVocab).copy_(at::arange(kVocab));  // every id in C
  auto of = [&](const at::Tensor& ids) {
    return per_token.index_select(0, ids.reshape({-1})).reshape({ids.size(0), kT, kD});
  };
  const std::vector<CoefficientSite> sites = {{"t.0", "t", 0, kD}, {"t.1", "t", 1, kD}};
  OosCase c(sites, e_ids, c_ids, {of(e_ids), 2 * of(e_ids)}, {of(c_ids), 2 * of(c_ids)}, 5);
  ASSERT_TRUE(c.status.ok()) << c.status;
  for (const SiteVariation& s : c.v.sites) {
    ASSERT_TRUE(s.token_oos.eta2.has_value());
    EXPECT_NEAR(*s.token_oos.eta2, 1.0, 1e-9);
    ASSERT_TRUE(s.token_position_oos.eta2.has_value());
    EXPECT_NEAR(*s.token_position_oos.eta2, 1.0, 1e-9);
    EXPECT_EQ(s.token_oos.positions, kN * (kT - 1));  // E's scored positions
  }
  const FamilyVariation& f = c.v.families[0];
  EXPECT_EQ(f.token_oos.positions, 2 * kN * (kT - 1));
  EXPECT_NEAR(f.token_oos.ss_within_site,
              c.v.sites[0].token_oos.ss_within_site + c.v.sites[1].token_oos.ss_within_site, 1e-9);
  EXPECT_NEAR(*f.token_position_oos.eta2, 1.0, 1e-9);
}

// Noise independent of the token, 20 ids over 72 positions (a few repeats
// per key, the case the in-sample share flatters): in sample the token
// "explains" a share by chance (each key's mean fits its own positions);
// C's table, estimated elsewhere, predicts E worse than E's own mean (its
// cells' noise adds to the error). On several draws, not one lucky seed.
TEST(LookupOosTest, NoiseExplainsAShareInSampleAndNoneOutOfSample) {
  constexpr int64_t kIds = 20;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const std::vector<CoefficientSite> sites = {{"n.0", "n", 0, kD}};
    OosCase c(sites, Ids(10 * seed, kIds), Ids(10 * seed + 1, kIds), {at::rand({kN, kT, kD}, gen)},
              {at::rand({kN, kT, kD}, gen)}, 1);
    ASSERT_TRUE(c.status.ok()) << c.status;
    const SiteVariation& s = c.v.sites[0];
    EXPECT_GT(*s.token.eta2, 0.0) << seed;
    EXPECT_GT(*s.token_position.eta2, 0.0) << seed;
    EXPECT_LE(*s.token_oos.eta2, 0.0) << seed;
    EXPECT_LE(*s.token_position_oos.eta2, 0.0) << seed;
  }
}

// By hand, one site, d = 1, m = 1 (no shrinkage), T = 3 (scored positions
// t = 0, 1). C: ids [0 1 0] [1 0 1], a [1 4 5] [2 3 6]; mu_s = 21/6 = 3.5;
// id 0: (1 + 5 + 3) / 3 = 3, id 1: (4 + 2 + 6) / 3 = 4; each pair once.
// E: ids [0 2 1] [1 0 0], a [2 6 100] [4 4 -50] (the last position is not
// scored, so 100 and -50 count nowhere). Scored a: 2, 6, 4, 4, mean 4:
// SS around it 4 + 4 + 0 + 0 = 8.
// static_token reads 3, 3.5 (id 2 unseen: mu_s), 4, 3: SS 1 + 6.25 + 0 + 1
// = 8.25, share 1 - 8.25 / 8 = -0.03125 (worse than E's mean).
// static_token_position reads (0,0) 1, mu_s 3.5, (1,0) 2, (0,1) 3: SS 1 +
// 6.25 + 4 + 1 = 12.25, share 1 - 12.25 / 8 = -0.53125.
TEST(LookupOosTest, TheShareIsTheFormulaOnAHandWorkedCase) {
  const std::vector<CoefficientSite> sites = {{"h.0", "h", 0, 1}};
  OosCase c(sites, at::tensor({0, 2, 1, 1, 0, 0}, at::kLong).view({2, 3}),
            at::tensor({0, 1, 0, 1, 0, 1}, at::kLong).view({2, 3}),
            {at::tensor({2.f, 6.f, 100.f, 4.f, 4.f, -50.f}).view({2, 3, 1})},
            {at::tensor({1.f, 4.f, 5.f, 2.f, 3.f, 6.f}).view({2, 3, 1})}, 1);
  ASSERT_TRUE(c.status.ok()) << c.status;
  const SiteVariation& s = c.v.sites[0];
  EXPECT_EQ(s.token_oos.positions, 4);
  EXPECT_NEAR(s.token_oos.ss_within_site, 8.0, 1e-9);
  EXPECT_NEAR(s.token_oos.ss_within_key, 8.25, 1e-9);
  EXPECT_NEAR(*s.token_oos.eta2, -0.03125, 1e-9);
  EXPECT_NEAR(s.token_position_oos.ss_within_key, 12.25, 1e-9);
  EXPECT_NEAR(*s.token_position_oos.eta2, -0.53125, 1e-9);
}

// No variance on E's scored positions: undefined, as in sample.
TEST(LookupOosTest, AConstantSiteHasNoShareOutOfSample) {
  const std::vector<CoefficientSite> sites = {{"c.0", "c", 0, kD}};
  OosCase c(sites, Ids(1), Ids(2), {at::full({kN, kT, kD}, 0.5)}, {at::rand({kN, kT, kD})}, 5);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_FALSE(c.v.sites[0].token_oos.eta2.has_value());
  EXPECT_FALSE(c.v.families[0].token_position_oos.eta2.has_value());
}

}  // namespace
}  // namespace fca::engine
