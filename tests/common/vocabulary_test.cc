// common/vocabulary.h: each table names its entries once, in the order of
// its enum, and every name reads back as the entry it came from.
#include "common/vocabulary.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fca {
namespace {

TEST(VocabularyTest, InterventionsAreInEnumOrderAndRoundTrip) {
  std::set<std::string> names;
  for (size_t i = 0; i < InterventionDefs().size(); ++i) {
    const InterventionDef& d = InterventionDefs()[i];
    EXPECT_EQ(static_cast<size_t>(d.id), i) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_EQ(ParseIntervention(d.name), d.id);
    EXPECT_STREQ(InterventionName(d.id), d.name);
    EXPECT_EQ(&InterventionDefOf(d.id), &d);
    EXPECT_FALSE(std::string(d.description).empty()) << d.name;
  }
  // The last enumerator has its entry: none was left out of the table.
  EXPECT_EQ(InterventionDefs().back().id, InterventionId::kRandomRoute);
}

// fca.md "Interventions" lists them in this order.
TEST(VocabularyTest, InterventionsAreFcaMdsInReportOrder) {
  EXPECT_EQ(InterventionNameList(),
            "correct, cross_input, token_shuffle, static_layer, static_layer_position, "
            "global_mean, static_token, static_token_position, neutral, random_route");
  EXPECT_EQ(InterventionNameList("|"),
            "correct|cross_input|token_shuffle|static_layer|static_layer_position|global_mean|"
            "static_token|static_token_position|neutral|random_route");
  EXPECT_EQ(InterventionNames().size(), InterventionDefs().size());
  EXPECT_EQ(StaticProfileNames(),
            (std::vector<std::string>{"static_layer", "static_layer_position", "static_token",
                                      "static_token_position"}));
}

// fca.md "Reading the interventions in groups": the reports' groups come
// from the table, and only the token-keyed retention is read as explained
// by the current token.
TEST(VocabularyTest, InterventionsFallIntoTheReportsGroups) {
  std::vector<std::vector<std::string>> members(InterventionGroupDefs().size());
  for (const InterventionDef& d : InterventionDefs()) {
    members[static_cast<size_t>(d.group)].push_back(d.name);
    EXPECT_EQ(FindInterventionGroup(d.name), &InterventionGroupDefOf(d.group)) << d.name;
  }
  EXPECT_EQ(members[static_cast<size_t>(InterventionGroup::kInputDependent)],
            (std::vector<std::string>{"correct", "cross_input", "token_shuffle"}));
  EXPECT_EQ(members[static_cast<size_t>(InterventionGroup::kInputIndependent)],
            (std::vector<std::string>{"static_layer", "static_layer_position", "global_mean",
                                      "neutral", "random_route"}));
  EXPECT_EQ(members[static_cast<size_t>(InterventionGroup::kTokenKeyed)],
            (std::vector<std::string>{"static_token", "static_token_position"}));
  for (size_t i = 0; i < InterventionGroupDefs().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(InterventionGroupDefs()[i].id), i);
  }
  EXPECT_STREQ(InterventionGroupDefOf(InterventionGroup::kTokenKeyed).retention_reading,
               " (explained by the current token)");
  EXPECT_STREQ(InterventionGroupDefOf(InterventionGroup::kInputIndependent).retention_reading, "");
  EXPECT_EQ(FindInterventionGroup("variation"), nullptr);
}

// fca.md "Calibration uncertainty": the interventions estimated on C, which
// calibration resampling re-estimates.
TEST(VocabularyTest, CalibratedInterventionsAreThoseEstimatedOnC) {
  std::vector<std::string> names;
  for (InterventionId id : CalibratedInterventions()) names.push_back(InterventionName(id));
  EXPECT_EQ(names, (std::vector<std::string>{"static_layer", "static_layer_position", "global_mean",
                                             "static_token", "static_token_position"}));
}

TEST(VocabularyTest, UnknownNamesParseToNothing) {
  for (const char* bad : {"", "Correct", "correct ", "static", "variation", "nll"}) {
    EXPECT_FALSE(ParseIntervention(bad).has_value()) << bad;
  }
  EXPECT_EQ(FindScope("layers"), nullptr);
  EXPECT_EQ(FindScope(""), nullptr);
}

TEST(VocabularyTest, ScopesNameTheirMetrics) {
  EXPECT_EQ(ScopeNameList(), "layer, site, family");
  EXPECT_EQ(ScopeNames(), (std::vector<std::string>{"layer", "site", "family"}));
  for (size_t i = 0; i < ScopeDefs().size(); ++i) {
    const ScopeDef& d = ScopeDefs()[i];
    EXPECT_EQ(static_cast<size_t>(d.id), i) << d.name;
    EXPECT_EQ(FindScope(d.name), &d);
    // Its metrics are keyed metrics of the vocabulary, keyed by the group.
    for (const char* metric : {d.nll_metric, d.penalty_metric}) {
      const MetricDef* m = FindMetricByName(metric);
      ASSERT_NE(m, nullptr) << metric;
      EXPECT_NE(m->scope, MetricScope::kModel) << metric;
      EXPECT_STREQ(m->stored_under, "") << metric;  // under the intervention replayed
    }
  }
  EXPECT_STREQ(FindScope("layer")->nll_metric, "layer_nll");
  EXPECT_STREQ(FindScope("family")->penalty_metric, "family_penalty");
}

TEST(VocabularyTest, MetricsAreInEnumOrderAndRoundTrip) {
  std::set<std::string> names;
  for (size_t i = 0; i < MetricDefs().size(); ++i) {
    const MetricDef& d = MetricDefs()[i];
    EXPECT_EQ(static_cast<size_t>(d.id), i) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_EQ(&MetricDefOf(d.id), &d);
    EXPECT_EQ(ParseMetric(MetricPattern(d)), d.id) << MetricPattern(d);
    EXPECT_EQ(FindMetricByName(d.name), &d);
    const std::string name = d.name;
    if (d.scope == MetricScope::kModel) {
      EXPECT_EQ(ParseMetric(name), d.id) << name;
      EXPECT_FALSE(ParseMetric(name + ".x").has_value()) << name;
    } else {
      EXPECT_EQ(ParseMetric(name + ".attn_gate.3"), d.id) << name;
      EXPECT_FALSE(ParseMetric(name).has_value()) << name;  // a key is needed
      EXPECT_FALSE(ParseMetric(name + ".").has_value()) << name;
    }
    for (const char* text : {d.unit, d.label, d.description}) {
      EXPECT_FALSE(std::string(text).empty()) << d.name;
    }
  }
  EXPECT_EQ(MetricDefs().back().id, MetricId::kLayerRoutingFlipRate);
}

// Rows are stored under each intervention, one intervention, or one of the
// three pseudo-interventions.
TEST(VocabularyTest, MetricsAreStoredUnderKnownNames) {
  for (const MetricDef& d : MetricDefs()) {
    const std::string under = d.stored_under;
    EXPECT_TRUE(under.empty() || ParseIntervention(under).has_value() || under == kVariation ||
                under == kExecution || under == kReplay)
        << d.name << " under " << under;
  }
}

TEST(VocabularyTest, KeyedNamesMatchByPrefixOnly) {
  EXPECT_EQ(ParseMetric("eta2.mlp_gate"), MetricId::kEta2);
  EXPECT_EQ(ParseMetric("eta2_layer.mlp_gate"), MetricId::kEta2Layer);
  EXPECT_EQ(ParseMetric("within_input_variance.q"), MetricId::kWithinInputVariance);
  EXPECT_FALSE(ParseMetric("eta2.").has_value());  // no family
  EXPECT_FALSE(ParseMetric("eta2").has_value());
  EXPECT_FALSE(ParseMetric("eta2x.q").has_value());
  EXPECT_EQ(ParseMetric("penalty"), MetricId::kPenalty);
  EXPECT_FALSE(ParseMetric("penalty.x").has_value());
  EXPECT_FALSE(ParseMetric("no_such_metric").has_value());
  // Units go by the name alone (the key's metric).
  EXPECT_EQ(MetricUnit("eta2"), "1");
  EXPECT_EQ(MetricUnit("within_input_variance"), "coef^2");
  EXPECT_EQ(MetricUnit("no_such_metric"), "");
  EXPECT_EQ(MetricPattern(MetricDefOf(MetricId::kEta2Layer)), "eta2_layer.<family>");
  EXPECT_EQ(StoredMetricName(SiteKey(kSiteMean, "attn_gate.0")), "site_mean.attn_gate.0");
}

}  // namespace
}  // namespace fca
