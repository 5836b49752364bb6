#include "client/report_routing.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/report_cells.h"
#include "common/vocabulary.h"
#include "proto/fca/v1/result_keys.h"

namespace fca::client {
namespace {

namespace v1 = fca::v1;
using Align = TextTable::Align;

// One row of a keyed routing metric with its key.
struct KeyedRow {
  ResultKey key;
  const v1::Result* row;
};

// The rows of `metric` (execution) per model, in the server's order.
std::map<std::string, std::vector<KeyedRow>> RowsOf(const ReportView& r, const char* metric) {
  std::map<std::string, std::vector<KeyedRow>> out;
  for (const v1::ReportMetric& m : r.report().metrics()) {
    if (m.intervention() != kExecution) continue;
    const ResultKey key = v1::KeyOfRow(m);
    if (key.metric != metric || !key.layer) continue;
    for (const v1::Result& row : m.per_model()) out[row.model()].push_back({key, &row});
  }
  return out;
}

// Per model and layer, the kTopPairsShown pairs chosen together most often
// ("1+5 0.3120"; ties to the lower pair).
TextTable CoactivationTable(const ReportView& r) {
  TextTable t(
      {{"MODEL"}, {"LAYER", Align::kRight}, {"MOST CO-ACTIVATED PAIRS"}, {"N", Align::kRight}});
  t.set_key_columns(2);
  const auto rows = RowsOf(r, kExpertCoactivation);
  for (const std::string& model : r.models()) {
    auto it = rows.find(model);
    if (it == rows.end()) continue;
    std::map<int64_t, std::vector<KeyedRow>> layers;
    for (const KeyedRow& k : it->second) layers[*k.key.layer].push_back(k);
    for (auto& [layer, pairs] : layers) {
      std::stable_sort(pairs.begin(), pairs.end(), [](const KeyedRow& a, const KeyedRow& b) {
        return std::make_tuple(-a.row->value(), a.key.expert, a.key.partner) <
               std::make_tuple(-b.row->value(), b.key.expert, b.key.partner);
      });
      std::string cell;
      for (size_t p = 0; p < pairs.size() && p < kTopPairsShown; ++p) {
        absl::StrAppend(&cell, p > 0 ? ", " : "", pairs[p].key.expert.value_or(0), "+",
                        pairs[p].key.partner.value_or(0), " ", Fixed(pairs[p].row->value(), 4));
      }
      t.AddRow({model, absl::StrCat(layer), cell, absl::StrCat(pairs.front().row->n())});
    }
  }
  return t;
}

// Per model, layer and frequent token id (most frequent first): its
// positions and its most chosen experts with their shares ("3 0.5000").
TextTable TokenExpertsTable(const ReportView& r) {
  TextTable t({{"MODEL"},
               {"LAYER", Align::kRight},
               {"TOKEN ID", Align::kRight},
               {"POSITIONS", Align::kRight},
               {"EXPERTS (share)"}});
  t.set_key_columns(3);
  const auto rows = RowsOf(r, kTokenExpertShare);
  for (const std::string& model : r.models()) {
    auto it = rows.find(model);
    if (it == rows.end()) continue;
    // layer -> (token -> its rows), tokens kept in order of their positions.
    std::map<int64_t, std::map<int64_t, std::vector<KeyedRow>>> layers;
    for (const KeyedRow& k : it->second) layers[*k.key.layer][k.key.token.value_or(0)].push_back(k);
    for (auto& [layer, tokens] : layers) {
      std::vector<std::pair<int64_t, std::vector<KeyedRow>>> order(tokens.begin(), tokens.end());
      std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.second.front().row->n() > b.second.front().row->n();
      });
      for (auto& [token, experts] : order) {
        std::stable_sort(experts.begin(), experts.end(), [](const KeyedRow& a, const KeyedRow& b) {
          return a.row->value() > b.row->value();
        });
        std::string cell;
        for (const KeyedRow& e : experts) {
          absl::StrAppend(&cell, cell.empty() ? "" : ", ", e.key.expert.value_or(0), " ",
                          Fixed(e.row->value(), 4));
        }
        t.AddRow({model, absl::StrCat(layer), absl::StrCat(token),
                  absl::StrCat(experts.front().row->n()), cell});
      }
    }
  }
  return t;
}

}  // namespace

std::vector<ReportSection> RoutingStatisticsSections(const ReportView& r) {
  std::vector<ReportSection> out;
  TextTable pairs = CoactivationTable(r);
  if (!pairs.empty()) {
    out.push_back({"EXPERT CO-ACTIVATION",
                   "per router layer, over every evaluation token (LIVE): the pairs of experts "
                   "whose top-k holds both most often, as the fraction of tokens (the pairs of a "
                   "layer sum to k(k-1)/2); N = tokens. Every pair is a row "
                   "expert_coactivation.<layer>.<expert>.<partner> of fca results",
                   std::move(pairs)});
  }
  TextTable tokens = TokenExpertsTable(r);
  if (!tokens.empty()) {
    out.push_back({"EXPERTS PER TOKEN ID",
                   "the most frequent token ids of the evaluation windows (up to 16) and, per "
                   "router layer, the k experts LIVE chose most for them, with each one's share "
                   "of the id's (token, expert) assignments (1/k each when the id always routes "
                   "the same way)",
                   std::move(tokens)});
  }
  return out;
}

}  // namespace fca::client
