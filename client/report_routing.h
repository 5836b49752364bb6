// `fca report`'s routing statistics of a mixture of experts (docs/fca.md
// "Routing statistics"): the most co-activated expert pairs per layer and
// the most chosen experts of the most frequent token ids, read from the
// `execution` rows expert_coactivation and token_expert_share.
#ifndef FCA_CLIENT_REPORT_ROUTING_H_
#define FCA_CLIENT_REPORT_ROUTING_H_

#include <vector>

#include "client/report_format.h"

namespace fca::client {

// How many pairs of a layer the co-activation table names (every stored
// pair is a row of `fca results`).
inline constexpr size_t kTopPairsShown = 4;

// EXPERT CO-ACTIVATION and EXPERTS PER TOKEN ID, each only when the report
// has its rows (none for a model without routers, or a job stored before
// they were written).
std::vector<ReportSection> RoutingStatisticsSections(const ReportView& report);

}  // namespace fca::client

#endif  // FCA_CLIENT_REPORT_ROUTING_H_
