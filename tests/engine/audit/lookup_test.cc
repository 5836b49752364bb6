// Lookup-table diagnostics (fca.md "Lookup tables") on coefficients built as
// known functions of the token ids.
#include "server/engine/audit/lookup.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

namespace fca::engine {
namespace {

constexpr int64_t kN = 12, kT = 6, kD = 2, kVocab = 5;

at::Tensor Ids(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(kVocab, {kN, kT}, gen, at::kLong);
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

}  // namespace
}  // namespace fca::engine
