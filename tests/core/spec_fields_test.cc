// common/spec_fields.h against everything that must agree with it, walking
// fca.v1.AuditSpec's descriptor: a field added to the proto alone (or to
// the table, the CLI or the engine alone) fails here.
#include "common/spec_fields.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "client/manifest.h"
#include "client/spec_flags.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "server/core/spec_policy.h"
#include "server/engine/audit/report_rows.h"
#include "server/runtime/task_spec.h"

namespace fca::spec_fields {
namespace {

using google::protobuf::FieldDescriptor;

const google::protobuf::Descriptor& Spec() { return *v1::AuditSpec::descriptor(); }

const SpecField& EntryOf(const FieldDescriptor& field) {
  const SpecField* entry = FindSpecField(field.name());
  if (entry == nullptr) {
    ADD_FAILURE() << "AuditSpec field '" << field.name()
                  << "' has no entry in common/spec_fields.h";
    static const SpecField kNone = Field("", "");
    return kNone;
  }
  return *entry;
}

// A value for the field inside its range and unlike its default, as the
// text a flag parses.
std::string TestValue(const FieldDescriptor& field, const SpecField& entry) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      // Valid wherever a name is checked: an intervention other than
      // correct, a scope other than the default.
      if (field.is_repeated()) return kStaticLayer;
      if (field.name() == kPerLayerScope.name) return kScopeSite;
      return field.name() == kRetentionBaseline.name ? kNeutral : "x";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true";
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Number((entry.min + entry.ServerLimit()) / 2);
    default:
      return Number(entry.min + 1);
  }
}

// The field's value in `spec` as JSON, as the engine's options show it.
json::Value ProtoValue(const v1::AuditSpec& spec, const FieldDescriptor& field) {
  const auto* r = spec.GetReflection();
  if (field.is_repeated()) {
    json::Value out = json::Value::MakeArray();
    for (int i = 0; i < r->FieldSize(spec, &field); ++i) {
      out.mutable_array().push_back(json::Value::String(r->GetRepeatedString(spec, &field, i)));
    }
    return out;
  }
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return json::Value::String(r->GetString(spec, &field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return json::Value::Bool(r->GetBool(spec, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return json::Value::Number(r->GetDouble(spec, &field));
    case FieldDescriptor::CPPTYPE_INT32:
      return json::Value::Int(r->GetInt32(spec, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return json::Value::Int(r->GetInt64(spec, &field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return json::Value::Int(static_cast<int64_t>(r->GetUInt64(spec, &field)));
    default:
      ADD_FAILURE() << field.name() << ": a type this test does not know";
      return json::Value::Null();
  }
}

bool IsNumber(const FieldDescriptor& field) {
  return !field.is_repeated() && field.cpp_type() != FieldDescriptor::CPPTYPE_STRING &&
         field.cpp_type() != FieldDescriptor::CPPTYPE_BOOL;
}

// The fields without defaults, as a manifest gives them.
v1::AuditSpec Minimal() {
  auto spec = client::ParseManifest(R"({"models": ["fg_a"], "eval_dataset": "eval",
                                        "calib_dataset": "calib"})");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::AuditSpec());
}

TEST(SpecFieldsTest, EveryProtoFieldHasOneEntryInProtoOrder) {
  ASSERT_EQ(static_cast<int>(SpecFields().size()), Spec().field_count())
      << "common/spec_fields.h and fca.v1.AuditSpec list different fields";
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    SCOPED_TRACE(field.name());
    EXPECT_EQ(&EntryOf(field), SpecFields()[i]);
  }
}

TEST(SpecFieldsTest, EveryFieldHasTheCliFlagThatSetsIt) {
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    const SpecField& entry = EntryOf(field);
    SCOPED_TRACE(field.name());
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(entry.flag);
    ASSERT_NE(flag, nullptr) << "fca audit has no flag --" << entry.flag;
    EXPECT_EQ(flag->Help(), FlagHelp(entry));
    std::string error;
    ASSERT_TRUE(flag->ParseFrom(TestValue(field, entry), &error)) << error;
    const v1::AuditSpec spec = client::MergeSpec({}, client::OverridesFromFlags({entry.flag}));
    ASSERT_TRUE(flag->ParseFrom(flag->DefaultValue(), &error)) << error;
    const auto* r = spec.GetReflection();
    EXPECT_TRUE(field.is_repeated() ? r->FieldSize(spec, &field) == 1 : r->HasField(spec, &field))
        << "--" << entry.flag << " does not set the field";
  }
}

// What `fca audit --help` prints of a field: the table's help, the server's
// range (unless the help names it) and the default.
TEST(SpecFieldsTest, FieldHelpNamesTheServersRangeAndTheDefault) {
  EXPECT_EQ(FieldHelp(kWindowLength), "tokens per window; range [2, 4096]; default 128");
  EXPECT_EQ(FieldHelp(kCiLevel), "confidence level in (0, 1); default 0.95");
  EXPECT_EQ(FieldHelp(kTimingBudgetSeconds),
            "wall time the adaptive timing may take per model; range (0, 3600]; default 60");
  EXPECT_EQ(FieldHelp(kSeed), "seed; default 0");
  EXPECT_EQ(FieldHelp(kAllowOverlap), "allow eval/calib windows to overlap");
}

TEST(SpecFieldsTest, DefaultsLieInTheirRanges) {
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    const SpecField& entry = EntryOf(field);
    SCOPED_TRACE(field.name());
    EXPECT_LE(entry.ServerLimit(), entry.max);
    EXPECT_LE(entry.min, entry.ServerLimit());
    if (IsNumber(field) && entry.default_value != 0) {
      EXPECT_TRUE(InRange(entry, entry.default_value, entry.min, entry.ServerLimit()))
          << entry.default_value << " outside " << ServerRangeText(entry);
    }
  }
}

TEST(SpecFieldsTest, TheServerAppliesTheDefaults) {
  const core::SpecLimits limits;
  auto spec = core::NormalizeSpec(Minimal(), limits);
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    const SpecField& entry = EntryOf(field);
    SCOPED_TRACE(field.name());
    if (IsNumber(field) && entry.default_value != 0) {
      EXPECT_EQ(ProtoValue(*spec, field).as_double(), entry.default_value);
    }
  }
  EXPECT_EQ(spec->per_layer_scope(), DefaultText(kPerLayerScope));
  EXPECT_EQ(spec->max_eval_windows(), limits.max_windows);
}

// ToEngineOptions carries every engine field to its AuditOptions member
// (named by the table, as the report's options show it), and AuditOptions
// defaults are the table's.
TEST(SpecFieldsTest, EveryEngineFieldReachesItsEngineOption) {
  v1::AuditSpec in = Minimal();
  const auto* r = in.GetReflection();
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    const SpecField& entry = EntryOf(field);
    if (entry.engine == nullptr) continue;
    const std::string value = TestValue(field, entry);
    if (field.is_repeated()) {
      r->AddString(&in, &field, value);
    } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      r->SetString(&in, &field, value);
    } else {
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFieldValueFromString(value, &field, &in))
          << field.name() << " = " << value;
    }
  }
  auto spec = core::NormalizeSpec(in, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto engine_options = runtime::ToEngineOptions(*spec);
  ASSERT_TRUE(engine_options.ok()) << engine_options.status();
  const json::Value options = engine::AuditOptionsToJson(*engine_options);
  const json::Value defaults = engine::AuditOptionsToJson(engine::AuditOptions());
  for (int i = 0; i < Spec().field_count(); ++i) {
    const FieldDescriptor& field = *Spec().field(i);
    const SpecField& entry = EntryOf(field);
    SCOPED_TRACE(field.name());
    if (entry.engine == nullptr) {
      EXPECT_NE(entry.not_engine, nullptr) << "neither an engine option nor a reason why not";
      EXPECT_EQ(options.Find(field.name()), nullptr);
      continue;
    }
    const json::Value* got = options.Find(entry.engine);
    ASSERT_NE(got, nullptr) << "no engine option '" << entry.engine << "'";
    EXPECT_EQ(json::Write(*got), json::Write(ProtoValue(*spec, field)));
    if (IsNumber(field)) {
      EXPECT_EQ(defaults.Find(entry.engine)->as_double(), entry.default_value);
    }
  }
  EXPECT_EQ(defaults.Find(kPerLayerScope.engine)->as_string(), DefaultText(kPerLayerScope));
}

}  // namespace
}  // namespace fca::spec_fields
