// The model-shape flags shared by fca-local-audit and fca-train
// (server/tools/model_flags.h), set the way a command line sets them.
#include "server/tools/model_flags.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

namespace fca::tools {
namespace {

constexpr const char* kShapeFlags[] = {"family",  "d_ff",     "d_model",         "n_layers",
                                       "n_heads", "n_groups", "controller_width"};

class ModelFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : kShapeFlags) Set(name, "");
  }

  // As `--name=value` would.
  static void Set(const char* name, const std::string& value) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    std::string error;
    ASSERT_TRUE(flag->ParseFrom(value, &error)) << name << ": " << error;
  }

  // A tool's shape, unlike any flag value below.
  static engine::TransformerConfig Shape() {
    engine::TransformerConfig c;
    c.family = "featuregate";
    c.d_model = 40;
    c.n_layers = 3;
    c.n_heads = 5;
    c.n_groups = 2;
    c.d_ff = 80;
    c.controller_width = 24;
    c.vocab_size = 300;
    c.max_seq_len = 77;
    return c;
  }
};

void ExpectSame(const engine::TransformerConfig& a, const engine::TransformerConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_groups, b.n_groups);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.controller_width, b.controller_width);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
}

TEST_F(ModelFlagsTest, UnsetFlagsKeepTheToolsShape) {
  ExpectSame(ModelConfigFromFlags(Shape()), Shape());
}

// One flag at a time: it replaces its own field and no other.
TEST_F(ModelFlagsTest, EachGivenFlagReplacesItsFieldOnly) {
  using C = engine::TransformerConfig;
  const std::pair<const char*, int64_t C::*> sizes[] = {
      {"d_model", &C::d_model}, {"n_layers", &C::n_layers},
      {"n_heads", &C::n_heads}, {"n_groups", &C::n_groups},
      {"d_ff", &C::d_ff},       {"controller_width", &C::controller_width}};
  for (const auto& [flag, field] : sizes) {
    Set(flag, "7");
    C want = Shape();
    want.*field = 7;
    ExpectSame(ModelConfigFromFlags(Shape()), want);
    Set(flag, "");
  }
  Set("family", "dense");
  C want = Shape();
  want.family = "dense";
  ExpectSame(ModelConfigFromFlags(Shape()), want);
}

TEST_F(ModelFlagsTest, AFlagGivenEmptyIsUnset) {
  Set("d_model", "32");
  Set("d_model", "");
  ExpectSame(ModelConfigFromFlags(Shape()), Shape());
}

TEST_F(ModelFlagsTest, ZeroIsAValueNotUnset) {
  Set("n_groups", "0");
  EXPECT_EQ(ModelConfigFromFlags(Shape()).n_groups, 0);
}

TEST_F(ModelFlagsTest, ShapeTextNamesEveryShapeFlag) {
  EXPECT_EQ(ModelShapeText(Shape()),
            "featuregate d_model=40 n_layers=3 n_heads=5 n_groups=2 d_ff=80 controller_width=24");
}

TEST_F(ModelFlagsTest, HelpFilterAcceptsTheDefiningFileOnly) {
  EXPECT_TRUE(DefinesModelFlags("/src/fca/server/tools/model_flags.cc"));
  EXPECT_FALSE(DefinesModelFlags("/src/fca/server/tools/local_audit_main.cc"));
  // Each flag is defined in that file (what --help goes by).
  for (const char* name : kShapeFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_TRUE(DefinesModelFlags(flag->Filename())) << name << " in " << flag->Filename();
  }
}

}  // namespace
}  // namespace fca::tools
