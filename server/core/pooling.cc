#include "server/core/pooling.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_json.h"
#include "server/core/report_assembly.h"

namespace fca::core {
namespace {

using google::protobuf::FieldDescriptor;

// One field's value as text: repeated fields as "[a, b]", strings quoted.
std::string FieldText(const v1::AuditSpec& spec, const FieldDescriptor& field) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  const google::protobuf::Reflection& r = *spec.GetReflection();
  std::string out;
  if (!field.is_repeated()) {
    printer.PrintFieldValueToString(spec, &field, -1, &out);
    return out;
  }
  std::vector<std::string> values;
  for (int i = 0; i < r.FieldSize(spec, &field); ++i) {
    printer.PrintFieldValueToString(spec, &field, i, &out);
    values.push_back(out);
  }
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// The dense twin's weights as its tasks loaded them ("" when none says).
std::string TwinWeights(const v1::Job& job) {
  for (const v1::JobTask& t : job.tasks()) {
    if (!t.provenance().dense_twin_weights_sha256().empty()) {
      return t.provenance().dense_twin_weights_sha256();
    }
  }
  return "";
}

// A fact of a job that pooled jobs must share, by name.
struct Fact {
  std::string name;
  std::string (*of)(const v1::Job&);
};

const std::vector<Fact>& JobFacts() {
  static const auto* const facts = new std::vector<Fact>{
      {"eval dataset sha256", [](const v1::Job& j) { return j.provenance().eval_sha256(); }},
      {"calib dataset sha256", [](const v1::Job& j) { return j.provenance().calib_sha256(); }},
      {"dense twin weights sha256", TwinWeights},
  };
  return *facts;
}

// "<what> (job 3: x; job 5: y)" when the values are not all the same.
std::optional<std::string> Differs(const std::string& what, const std::vector<v1::Job>& jobs,
                                   const std::vector<std::string>& values) {
  if (std::set<std::string>(values.begin(), values.end()).size() <= 1) return std::nullopt;
  std::vector<std::string> each;
  for (size_t i = 0; i < jobs.size(); ++i) {
    each.push_back(
        absl::StrCat("job ", jobs[i].id(), ": ", values[i].empty() ? "(none)" : values[i]));
  }
  return absl::StrCat(what, " (", absl::StrJoin(each, "; "), ")");
}

// A model audited twice, by name or by weights; "" when none is.
std::string TwiceAudited(const std::vector<v1::PooledModel>& models) {
  std::map<std::string, const v1::PooledModel*> by_name, by_weights;
  for (const v1::PooledModel& m : models) {
    auto [named, fresh] = by_name.emplace(m.model(), &m);
    if (!fresh) {
      return absl::StrFormat("model '%s' is audited in job %d and in job %d", m.model(),
                             named->second->job_id(), m.job_id());
    }
    if (m.weights_sha256().empty()) continue;
    auto [same, unique] = by_weights.emplace(m.weights_sha256(), &m);
    if (!unique) {
      return absl::StrFormat("model '%s' (job %d) and model '%s' (job %d) have the same weights %s",
                             same->second->model(), same->second->job_id(), m.model(), m.job_id(),
                             m.weights_sha256());
    }
  }
  return "";
}

// Every audited model of `job` with the weights its task loaded.
std::vector<v1::PooledModel> ModelsOf(const v1::Job& job) {
  std::vector<v1::PooledModel> out;
  for (const std::string& name : job.spec().models()) {
    v1::PooledModel m;
    m.set_model(name);
    m.set_job_id(job.id());
    for (const v1::JobTask& t : job.tasks()) {
      if (t.model() == name) m.set_weights_sha256(t.provenance().weights_sha256());
    }
    out.push_back(std::move(m));
  }
  return out;
}

// The report's job: the first job's spec with every pooled model, every
// job's tasks, id 0 (no job is this report's).
v1::Job MergedJob(const std::vector<v1::Job>& jobs, const std::vector<v1::PooledModel>& models) {
  v1::Job out = jobs.front();
  out.set_id(0);
  out.clear_tasks();
  out.mutable_spec()->clear_models();
  for (const v1::PooledModel& m : models) out.mutable_spec()->add_models(m.model());
  for (const v1::Job& j : jobs) {
    for (const v1::JobTask& t : j.tasks()) *out.add_tasks() = t;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& PoolAgreeSpecFields() {
  static const auto* const fields = new std::vector<std::string>{
      // The windows (the datasets themselves: JobFacts' SHA-256).
      "window_length", "max_eval_windows", "max_calib_windows",
      // What is replayed, and every setting that changes its numbers.
      "interventions", "seed", "per_site_shuffle", "bootstrap_resamples", "bootstrap_block_length",
      "ci_level", "retention_baseline", "per_layer_interventions", "per_layer_scope",
      "fidelity_check_every", "static_token_min_count", "calib_resamples",
      // The dense twin (its weights: JobFacts).
      "dense_twin"};
  return *fields;
}

const std::vector<std::string>& PoolFreeSpecFields() {
  static const auto* const fields = new std::vector<std::string>{
      // What is pooled.
      "models",
      // Names of the datasets in each job's project: their bytes are compared.
      "eval_dataset", "calib_dataset",
      // Windows per forward pass: throughput, not the numbers.
      "batch_size",
      // Only refuses overlapping windows; the windows are the agree fields'.
      "allow_overlap",
      // Free text: the job's label, and why its dense twin may differ in
      // size (the twin itself must agree).
      "label", "dense_twin_mismatch",
      // How long execution is timed against the twin.
      "timing_repeats", "timing_max_repeats", "timing_budget_seconds"};
  return *fields;
}

absl::Status CheckPoolRequest(const v1::PoolJobsRequest& request) {
  const int n = request.job_ids_size();
  if (n < kMinPoolJobs || n > kMaxPoolJobs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool %d to %d jobs; the request names %d", kMinPoolJobs, kMaxPoolJobs, n));
  }
  std::set<int64_t> seen;
  for (int64_t id : request.job_ids()) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrFormat("job %d is named twice", id));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> PoolDisagreements(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> out;
  const google::protobuf::Descriptor& spec = *v1::AuditSpec::descriptor();
  for (const std::string& name : PoolAgreeSpecFields()) {
    const FieldDescriptor* field = spec.FindFieldByName(name);
    std::vector<std::string> values;
    for (const v1::Job& j : jobs) values.push_back(FieldText(j.spec(), *field));
    if (auto d = Differs(name, jobs, values)) out.push_back(*d);
  }
  for (const Fact& fact : JobFacts()) {
    std::vector<std::string> values;
    for (const v1::Job& j : jobs) values.push_back(fact.of(j));
    if (auto d = Differs(fact.name, jobs, values)) out.push_back(*d);
  }
  return out;
}

absl::StatusOr<v1::PoolJobsResponse> PoolReports(
    const std::vector<std::pair<v1::Job, std::vector<v1::Result>>>& jobs) {
  std::vector<v1::Job> specs;
  v1::PoolJobsResponse out;
  for (const auto& [job, rows] : jobs) {
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      const auto* state = v1::JobState_descriptor()->FindValueByNumber(job.state());
      return absl::FailedPreconditionError(
          absl::StrFormat("job %d is %s: only SUCCEEDED jobs are pooled", job.id(),
                          state == nullptr ? absl::StrCat(job.state()) : ShortEnumName(*state)));
    }
    specs.push_back(job);
    for (v1::PooledModel& m : ModelsOf(job)) *out.add_models() = std::move(m);
  }
  const std::vector<std::string> differ = PoolDisagreements(specs);
  if (!differ.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the jobs' specs differ in what changes the numbers: ", absl::StrJoin(differ, "; ")));
  }
  const std::string twice = TwiceAudited({out.models().begin(), out.models().end()});
  if (!twice.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(twice, ": pooled it would count twice"));
  }
  std::vector<JobInput> inputs;
  for (const auto& [job, rows] : jobs) inputs.push_back({&job, &rows});
  const v1::Job merged = MergedJob(specs, {out.models().begin(), out.models().end()});
  *out.mutable_report() = BuildReportOver(inputs, merged);
  return out;
}

}  // namespace fca::core
