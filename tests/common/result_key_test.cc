// common/result_key.h: the typed key of a result row and the one encoder and
// decoder of its stored name (docs/fca.md "Stored rows and their units").
#include "common/result_key.h"

#include <gtest/gtest.h>

#include <string>

#include "common/vocabulary.h"

namespace fca {
namespace {

// A key of `def`'s scope with every field its scope has.
ResultKey SampleKey(const MetricDef& def) {
  switch (def.scope) {
    case MetricScope::kModel:
      return ModelKey(def.name);
    case MetricScope::kLayer:
      return LayerKey(def.name, 11);
    case MetricScope::kSite:
      return SiteKey(def.name, "attn_gate.4");
    case MetricScope::kFamily:
      return FamilyKey(def.name, "dense_ws");
    case MetricScope::kBaseline:
      return BaselineKey(def.name, kNeutral);
    case MetricScope::kExpert:
      return ExpertKey(def.name, 3, 17);
    case MetricScope::kExpertPair:
      return ExpertPairKey(def.name, 3, 1, 17);
    case MetricScope::kTokenExpert:
      return TokenExpertKey(def.name, 3, 101, 17);
    case MetricScope::kUnknown:
      break;
  }
  return ResultKey();
}

TEST(ResultKeyTest, EveryMetricsKeyIsStoredAndReadBackAsItself) {
  for (const MetricDef& def : MetricDefs()) {
    const ResultKey key = SampleKey(def);
    ASSERT_NE(key.scope, MetricScope::kUnknown) << def.name;
    const std::string stored = StoredMetricName(key);
    EXPECT_EQ(ResultKeyOf(stored), key) << stored;
    EXPECT_EQ(StoredMetricName(ResultKeyOf(stored)), stored);
  }
}

TEST(ResultKeyTest, StoredNamesAsZeroPointTwoWroteThem) {
  ResultKey k = ResultKeyOf("layer_penalty.3");
  EXPECT_EQ(k.metric, kLayerPenalty);
  EXPECT_EQ(k.scope, MetricScope::kLayer);
  EXPECT_EQ(k.layer, 3);
  EXPECT_FALSE(k.expert.has_value());

  k = ResultKeyOf("expert_share.3.17");
  EXPECT_EQ(k.metric, kExpertShare);
  EXPECT_EQ(k.scope, MetricScope::kExpert);
  EXPECT_EQ(k.layer, 3);
  EXPECT_EQ(k.expert, 17);

  // A site's name has a dot; its family and layer come with it.
  k = ResultKeyOf("site_mean.attn_gate.3");
  EXPECT_EQ(k.metric, kSiteMean);
  EXPECT_EQ(k.scope, MetricScope::kSite);
  EXPECT_EQ(k.site, "attn_gate.3");
  EXPECT_EQ(k.family, "attn_gate");
  EXPECT_EQ(k.layer, 3);

  k = ResultKeyOf("eta2.dense_ws");
  EXPECT_EQ(k.metric, kEta2);
  EXPECT_EQ(k.scope, MetricScope::kFamily);
  EXPECT_EQ(k.family, "dense_ws");
  EXPECT_FALSE(k.layer.has_value());

  k = ResultKeyOf("retention_vs.neutral");
  EXPECT_EQ(k.scope, MetricScope::kBaseline);
  EXPECT_EQ(k.baseline, "neutral");

  k = ResultKeyOf("expert_coactivation.3.1.5");
  EXPECT_EQ(k.scope, MetricScope::kExpertPair);
  EXPECT_EQ(k.layer, 3);
  EXPECT_EQ(k.expert, 1);
  EXPECT_EQ(k.partner, 5);

  k = ResultKeyOf("token_expert_share.3.101.5");
  EXPECT_EQ(k.scope, MetricScope::kTokenExpert);
  EXPECT_EQ(k.layer, 3);
  EXPECT_EQ(k.token, 101);
  EXPECT_EQ(k.expert, 5);

  k = ResultKeyOf("penalty");
  EXPECT_EQ(k.metric, kPenalty);
  EXPECT_EQ(k.scope, MetricScope::kModel);
}

TEST(ResultKeyTest, ASiteNamedWithoutALayerKeepsItsName) {
  const ResultKey k = ResultKeyOf("site_variance.router");
  EXPECT_EQ(k.scope, MetricScope::kSite);
  EXPECT_EQ(k.site, "router");
  EXPECT_EQ(k.family, "");
  EXPECT_FALSE(k.layer.has_value());
  EXPECT_EQ(StoredMetricName(k), "site_variance.router");
}

TEST(ResultKeyTest, NamesThatFitNoScopeAreUnknownAndKeptWhole) {
  for (const char* name :
       {"zz_new_metric", "penalty.3", "layer_nll.x", "layer_nll.03", "layer_nll.-1", "layer_nll.+1",
        "expert_share.3", "expert_share.3.x", "expert_share.3.", "eta2.", "layer_nll",
        "expert_coactivation.3.1", "token_expert_share.3.x.1"}) {
    const ResultKey k = ResultKeyOf(name);
    EXPECT_EQ(k.scope, MetricScope::kUnknown) << name;
    EXPECT_EQ(k.metric, name);
    EXPECT_EQ(StoredMetricName(k), name) << "served as it was stored";
  }
}

TEST(ResultKeyTest, PatternsNameEachFieldOfTheScope) {
  EXPECT_EQ(MetricPattern(MetricDefOf(MetricId::kExpertShare)), "expert_share.<layer>.<expert>");
  EXPECT_EQ(MetricPattern(MetricDefOf(MetricId::kSiteMean)), "site_mean.<site>");
  EXPECT_EQ(MetricPattern(MetricDefOf(MetricId::kPenalty)), "penalty");
  EXPECT_EQ(MetricUnit(kLayerPenalty), "nats/token");
  EXPECT_EQ(MetricUnit("layer_penalty.3"), "") << "a unit is looked up by the key's name";
}

TEST(ResultKeyTest, KeysOrderLayersByNumber) {
  EXPECT_LT(LayerKey(kLayerPenalty, 2), LayerKey(kLayerPenalty, 10));
  EXPECT_LT(ExpertKey(kExpertShare, 1, 9), ExpertKey(kExpertShare, 1, 10));
  EXPECT_EQ(MetricScopeDefOf(MetricScope::kExpert).fields.size(), 2u);
  EXPECT_STREQ(MetricScopeDefOf(MetricScope::kUnknown).name, "unknown");
}

}  // namespace
}  // namespace fca
