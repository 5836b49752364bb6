// server/core/metric_catalog.h: the vocabulary's tables as GetServerInfo
// serves them. Names travel as strings; each one read back from the proto
// must be the entry it was made from.
#include "server/core/metric_catalog.h"

#include <gtest/gtest.h>

#include <cctype>
#include <optional>
#include <set>
#include <string>

#include "common/result_key.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::core {
namespace {

v1::GetServerInfoResponse Served() {
  v1::GetServerInfoResponse info;
  AddVocabulary(&info);
  return info;
}

TEST(MetricCatalogTest, EveryInterventionIsServedOnceInOrderAndReadsBack) {
  const v1::GetServerInfoResponse info = Served();
  ASSERT_EQ(info.interventions_size(), static_cast<int>(InterventionDefs().size()));
  for (int i = 0; i < info.interventions_size(); ++i) {
    const InterventionDef& def = InterventionDefs()[i];
    const v1::InterventionInfo& served = info.interventions(i);
    // enum -> name -> proto -> name -> enum
    const std::optional<InterventionId> back = ParseIntervention(served.name());
    ASSERT_TRUE(back.has_value()) << served.name();
    EXPECT_EQ(*back, def.id) << served.name();
    EXPECT_EQ(served.description(), def.description);
    EXPECT_EQ(served.static_profile(), def.static_profile) << served.name();
    EXPECT_EQ(served.group(), InterventionGroupDefOf(def.group).name) << served.name();
    EXPECT_EQ(served.retention_reading(), InterventionGroupDefOf(def.group).retention_reading);
  }
  // The dashboard labels the token-keyed retention from these fields.
  for (const v1::InterventionInfo& served : info.interventions()) {
    const bool keyed = served.name() == "static_token" || served.name() == "static_token_position";
    EXPECT_EQ(served.group(), keyed ? "token-keyed" : served.group()) << served.name();
    EXPECT_EQ(served.retention_reading().empty(), !keyed) << served.name();
  }
}

TEST(MetricCatalogTest, EveryMetricIsServedOnceInOrderAndReadsBack) {
  const v1::GetServerInfoResponse info = Served();
  ASSERT_EQ(info.metrics_size(), static_cast<int>(MetricDefs().size()));
  std::set<std::string> names;
  for (int i = 0; i < info.metrics_size(); ++i) {
    const MetricDef& def = MetricDefs()[i];
    const v1::MetricInfo& served = info.metrics(i);
    EXPECT_TRUE(names.insert(served.name()).second) << served.name();
    const std::optional<MetricId> back = ParseMetric(served.name());
    ASSERT_TRUE(back.has_value()) << served.name();
    EXPECT_EQ(*back, def.id) << served.name();
    EXPECT_EQ(served.unit(), def.unit);
    EXPECT_EQ(served.label(), def.label);
    EXPECT_EQ(served.description(), def.description);
    EXPECT_EQ(served.intervention(), def.stored_under);
  }
}

// The verdict words have one home (common/vocabulary.h): the CLI prints
// SlowdownVerdictName, the dashboard the words GetServerInfo serves.
TEST(MetricCatalogTest, VerdictWordsAreServedAsTheCliPrintsThem) {
  const v1::MetricInfo verdict = MetricInfoOf(MetricDefOf(MetricId::kSlowdownVerdict));
  ASSERT_EQ(verdict.value_words_size(), 3);
  std::set<std::string> words;
  for (const v1::ValueWord& w : verdict.value_words()) {
    EXPECT_EQ(w.word(), SlowdownVerdictName(w.value())) << w.value();
    words.insert(w.word());
  }
  EXPECT_EQ(words, (std::set<std::string>{"slower", "faster", "no detectable difference"}));
  EXPECT_STREQ(SlowdownVerdictName(0.0), "no detectable difference");
  EXPECT_STREQ(SlowdownVerdictName(-1.0), "faster");
  // A numeric metric has no words.
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kSlowdown)).value_words_size(), 0);
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kPenalty)).value_words_size(), 0);
}

// The names GetServerInfo gives a keyed metric are the documented patterns.
TEST(MetricCatalogTest, KeyedMetricsAreServedAsPatterns) {
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kEta2)).name(), "eta2.<family>");
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kSiteMean)).name(), "site_mean.<site>");
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kLayerPenalty)).name(), "layer_penalty.<layer>");
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kPenalty)).name(), "penalty");
}

// Each metric's scope is served in the proto's enum, whose value names are
// the scopes' names (the one mapping: proto/fca/v1/result_keys.h).
TEST(MetricCatalogTest, EachMetricsScopeAndNameAloneAreServed) {
  const v1::GetServerInfoResponse info = Served();
  for (int i = 0; i < info.metrics_size(); ++i) {
    const MetricDef& def = MetricDefs()[i];
    const v1::MetricInfo& served = info.metrics(i);
    EXPECT_EQ(served.metric(), def.name);
    std::string scope = MetricScopeDefOf(def.scope).name;
    for (char& c : scope) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(v1::MetricScope_Name(served.scope()), "METRIC_SCOPE_" + scope) << served.name();
  }
  EXPECT_EQ(MetricInfoOf(MetricDefOf(MetricId::kExpertShare)).scope(), v1::METRIC_SCOPE_EXPERT);
  EXPECT_EQ(v1::ToProto(MetricScope::kUnknown), v1::METRIC_SCOPE_UNSPECIFIED);
  ASSERT_EQ(info.group_scopes_size(), static_cast<int>(ScopeDefs().size()));
  for (int i = 0; i < info.group_scopes_size(); ++i) {
    EXPECT_EQ(info.group_scopes(i).name(), ScopeDefs()[i].name);
    EXPECT_EQ(info.group_scopes(i).nll_metric(), ScopeDefs()[i].nll_metric);
    EXPECT_EQ(info.group_scopes(i).penalty_metric(), ScopeDefs()[i].penalty_metric);
  }
}

// A key goes to the proto and back unchanged, unset fields staying unset.
TEST(MetricCatalogTest, AKeyRoundTripsThroughTheProto) {
  for (const ResultKey& key :
       {ExpertKey(kExpertShare, 0, 7), SiteKey(kSiteMean, "attn_gate.0"),
        BaselineKey(kRetentionVs, kGlobalMean), ModelKey(kPenalty), ResultKeyOf("zz_new")}) {
    const v1::ResultKey proto = v1::ToProto(key);
    EXPECT_EQ(v1::FromProto(proto), key) << StoredMetricName(key);
    EXPECT_EQ(proto.has_layer(), key.layer.has_value());
    EXPECT_EQ(proto.has_expert(), key.expert.has_value());
  }
}

}  // namespace
}  // namespace fca::core
