// ParseProtoJson's fast path (common/proto_json.h) against protobuf's own
// parser: the stored messages (a spec with every field set, provenance)
// take the fast path and read back exactly; for every document below, the
// outcome of ParseProtoJson (the message, or the error and its text) is
// protobuf's, whichever path read it.
#include "common/proto_json.h"

#include <google/protobuf/util/json_util.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "proto/fca/v1/audit_service.pb.h"

namespace fca {
namespace {

// What protobuf's parser alone makes of `json`: the serialized message, or
// the error as ParseProtoJson words it.
struct Outcome {
  bool ok = false;
  std::string bytes_or_error;
  bool operator==(const Outcome& o) const {
    return ok == o.ok && bytes_or_error == o.bytes_or_error;
  }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << (o.ok ? "ok " : "error ") << o.bytes_or_error;
}

Outcome Reference(const std::string& json, google::protobuf::Message* m, UnknownFields unknown) {
  m->Clear();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = unknown == UnknownFields::kIgnore;
  const auto status = google::protobuf::util::JsonStringToMessage(json, m, options);
  if (status.ok()) return {true, m->SerializeAsString()};
  std::string why(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  absl::StripAsciiWhitespace(&why);
  return {false, why.empty() ? "malformed JSON" : why};
}

Outcome Ours(const std::string& json, google::protobuf::Message* m, UnknownFields unknown) {
  const absl::Status status = ParseProtoJson(json, m, unknown);
  if (status.ok()) return {true, m->SerializeAsString()};
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return {false, std::string(status.message())};
}

v1::AuditSpec FullSpec() {
  v1::AuditSpec spec;
  spec.add_models("featuregate-small");
  spec.add_models("fg_b\xc3\xa9");  // UTF-8
  spec.set_dense_twin("dense-small");
  spec.set_eval_dataset("sha256:00ff");
  spec.set_calib_dataset("calib \"quoted\" \\ \n tab\t");
  spec.add_interventions("correct");
  spec.add_interventions("cross_input");
  spec.set_window_length(int64_t{1} << 40);
  spec.set_max_eval_windows(-3);
  spec.set_max_calib_windows(12);
  spec.set_batch_size(8);
  spec.set_seed(18446744073709551615u);  // above 2^63: a string in JSON
  spec.set_per_site_shuffle(true);
  spec.set_bootstrap_resamples(1000);
  spec.set_ci_level(0.95);
  spec.set_allow_overlap(true);
  spec.set_timing_repeats(0);  // explicit presence: an explicit 0 is kept
  spec.set_label("run 7");
  spec.set_timing_max_repeats(200);
  spec.set_timing_budget_seconds(1e-7);
  spec.add_per_layer_interventions("static_layer");
  spec.set_per_layer_scope("attn_gate");
  spec.set_fidelity_check_every(3);
  spec.set_retention_baseline("global_mean");
  spec.set_bootstrap_block_length(5);
  spec.set_static_token_min_count(2);
  spec.set_calib_resamples(100);
  return spec;
}

TEST(ProtoJsonTest, StoredMessagesTakeTheFastPathAndReadBackExactly) {
  const v1::AuditSpec spec = FullSpec();
  v1::Provenance provenance;
  provenance.set_eval_dataset("eval");
  provenance.set_eval_sha256(std::string(64, 'a'));
  provenance.set_calib_dataset("calib");
  provenance.set_calib_sha256(std::string(64, 'b'));
  provenance.set_server_version("v0.2.0-17-gabc");
  provenance.set_seed(7);
  v1::AuditSpec empty_spec;
  for (const google::protobuf::Message* m :
       std::vector<const google::protobuf::Message*>{&spec, &provenance, &empty_spec}) {
    for (bool pretty : {false, true}) {
      absl::StatusOr<std::string> json = PrintProtoJson(*m, pretty);
      ASSERT_TRUE(json.ok()) << json.status();
      std::unique_ptr<google::protobuf::Message> fast(m->New());
      ASSERT_TRUE(internal::ReadProtoJsonFast(*json, fast.get())) << *json;
      EXPECT_EQ(fast->SerializeAsString(), m->SerializeAsString()) << *json;
      std::unique_ptr<google::protobuf::Message> parsed(m->New());
      ASSERT_TRUE(ParseProtoJson(*json, parsed.get()).ok());
      EXPECT_EQ(parsed->SerializeAsString(), m->SerializeAsString()) << *json;
    }
  }
  // The explicit 0 stays present; an absent optional stays absent.
  v1::AuditSpec read;
  ASSERT_TRUE(internal::ReadProtoJsonFast(R"({"timing_repeats": 0})", &read));
  EXPECT_TRUE(read.has_timing_repeats());
  ASSERT_TRUE(internal::ReadProtoJsonFast(R"({"label": "x"})", &read));
  EXPECT_FALSE(read.has_timing_repeats());
}

TEST(ProtoJsonTest, EveryDocumentReadsAsProtobufReadsIt) {
  // Into an AuditSpec: names, integers, floats, strings, unknowns, nulls.
  const std::vector<std::string> specs = {
      R"({"models": ["a"], "windowLength": 64})",      // the camelCase name
      R"({"window_length": "64"})",                    // int64 as a string
      R"({"window_length": 64, "windowLength": 32})",  // both spellings
      R"({"window_length": "-0"})",
      R"({"window_length": "007"})",
      R"({"window_length": " 12"})",
      R"({"window_length": "+12"})",
      R"({"window_length": "12abc"})",
      R"({"window_length": 1.5})",
      R"({"window_length": 1e2})",
      R"({"window_length": 9223372036854775807})",
      R"({"window_length": "9223372036854775808"})",
      R"({"window_length": -9223372036854775808})",
      R"({"window_length": 18446744073709551616})",
      R"({"batch_size": true})",
      R"({"seed": "18446744073709551615"})",
      R"({"seed": "18446744073709551616"})",
      R"({"seed": -1})",
      R"({"seed": "-1"})",
      R"({"bootstrap_resamples": 2147483647})",
      R"({"bootstrap_resamples": 2147483648})",
      R"({"bootstrap_resamples": -2147483649})",
      R"({"bootstrap_resamples": "12"})",
      R"({"bootstrap_resamples": 12.0})",
      R"({"ci_level": 0.95})",
      R"({"ci_level": 1})",
      R"({"ci_level": "0.5"})",
      R"({"ci_level": "NaN"})",
      R"({"ci_level": 1e400})",
      R"({"timing_budget_seconds": 4.9e-324})",
      R"({"per_site_shuffle": "true"})",
      R"({"per_site_shuffle": 1})",
      R"({"label": null})",
      R"({"models": null})",
      R"({"models": ["a", null]})",
      R"({"models": "a"})",
      R"({"label": 5})",
      R"({"label": "\u00e9\ud83d\ude00"})",
      R"({"label": "\ud800"})",
      "{\"label\": \"\xff\"}",
      R"({"timing_repeats": 0})",
      R"({"bogus": 1})",
      R"({"label": "a", "label": "b"})",
      R"({"label": "a"} trailing)",
      R"([1, 2])",
      R"("spec")",
      R"()",
      R"({)",
      R"({"window_length": 64,})",
  };
  for (const std::string& json : specs) {
    for (UnknownFields unknown : {UnknownFields::kRefuse, UnknownFields::kIgnore}) {
      v1::AuditSpec ours, reference;
      EXPECT_EQ(Ours(json, &ours, unknown), Reference(json, &reference, unknown)) << json;
    }
  }
  // Into a Job: nested messages, enums, well-known types (protobuf's).
  const std::vector<std::string> jobs = {
      R"({"id": "5", "state": "JOB_STATE_SUCCEEDED", "spec": {"models": ["a"]}})",
      R"({"state": 3})",
      R"({"state": "JOB_STATE_BOGUS"})",
      R"({"state": null})",
      R"({"spec": {"bogus": 1}})",
      R"({"spec": {}})",
      R"({"spec": null})",
      R"({"spec": []})",
      R"({"provenance": {"evalSha256": "ab", "seed": "3"}})",
      R"({"created_at": "2026-12-04T18:00:00Z"})",
      R"({"created_at": "yesterday"})",
      R"({"tasks": [{"index": 1, "model": "m", "state": "JOB_STATE_RUNNING"}, {}]})",
      R"({"tasks": [{"started_at": "2026-12-04T18:00:00.5Z"}]})",
      R"({"progress": 0.5, "attempts": 2, "cancel_requested": false})",
  };
  for (const std::string& json : jobs) {
    for (UnknownFields unknown : {UnknownFields::kRefuse, UnknownFields::kIgnore}) {
      v1::Job ours, reference;
      EXPECT_EQ(Ours(json, &ours, unknown), Reference(json, &reference, unknown)) << json;
    }
  }
  // A oneof: protobuf's.
  const std::vector<std::string> events = {
      R"({"seq": "1", "state": "JOB_STATE_QUEUED"})",
      R"({"message": "x", "state": "JOB_STATE_QUEUED"})",
  };
  for (const std::string& json : events) {
    v1::JobEvent ours, reference;
    EXPECT_EQ(Ours(json, &ours, UnknownFields::kRefuse),
              Reference(json, &reference, UnknownFields::kRefuse))
        << json;
  }
}

TEST(ProtoJsonTest, WhatTheFastPathLeavesToProtobuf) {
  v1::Job job;
  // A Timestamp has a JSON form of its own; the message is left cleared.
  EXPECT_FALSE(
      internal::ReadProtoJsonFast(R"({"id": "5", "created_at": "2026-12-04T18:00:00Z"})", &job));
  EXPECT_EQ(job.id(), 0);
  v1::AuditSpec spec;
  EXPECT_FALSE(internal::ReadProtoJsonFast(R"({"bogus": 1})", &spec));
  EXPECT_FALSE(internal::ReadProtoJsonFast(R"({"label": null})", &spec));
  EXPECT_FALSE(internal::ReadProtoJsonFast(R"({"window_length": 1.5})", &spec));
  EXPECT_FALSE(internal::ReadProtoJsonFast(R"({"label": "a"} x)", &spec));
  EXPECT_TRUE(internal::ReadProtoJsonFast(R"({"windowLength": "64", "seed": 3})", &spec));
  EXPECT_EQ(spec.window_length(), 64);
  EXPECT_EQ(spec.seed(), 3u);
}

}  // namespace
}  // namespace fca
