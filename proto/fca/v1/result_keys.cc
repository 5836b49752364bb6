#include "proto/fca/v1/result_keys.h"

namespace fca::v1 {
namespace {

// Both enums in their one order: common's kUnknown is the proto's
// UNSPECIFIED, and the known scopes follow in FCA_METRIC_SCOPES' order.
#define FCA_CHECK_SCOPE(id, name, ...)                                     \
  static_assert(static_cast<int>(fca::MetricScope::id) <= MetricScope_MAX, \
                "a scope of common/result_key.h has no value in the proto");
FCA_METRIC_SCOPES(FCA_CHECK_SCOPE)
#undef FCA_CHECK_SCOPE

}  // namespace

MetricScope ToProto(fca::MetricScope scope) { return static_cast<MetricScope>(scope); }

ResultKey ToProto(const fca::ResultKey& key) {
  ResultKey out;
  out.set_metric(key.metric);
  out.set_scope(ToProto(key.scope));
  if (key.layer) out.set_layer(*key.layer);
  if (key.expert) out.set_expert(*key.expert);
  if (key.partner) out.set_partner(*key.partner);
  if (key.token) out.set_token(*key.token);
  out.set_site(key.site);
  out.set_family(key.family);
  out.set_baseline(key.baseline);
  return out;
}

fca::ResultKey FromProto(const ResultKey& key) {
  fca::ResultKey out;
  out.metric = key.metric();
  out.scope = key.scope() >= 0 && key.scope() <= MetricScope_MAX
                  ? static_cast<fca::MetricScope>(key.scope())
                  : fca::MetricScope::kUnknown;
  if (key.has_layer()) out.layer = key.layer();
  if (key.has_expert()) out.expert = key.expert();
  if (key.has_partner()) out.partner = key.partner();
  if (key.has_token()) out.token = key.token();
  out.site = key.site();
  out.family = key.family();
  out.baseline = key.baseline();
  return out;
}

}  // namespace fca::v1
