// Status helpers missing from Abseil 20220623.
#ifndef FCA_COMMON_STATUS_MACROS_H_
#define FCA_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FCA_STATUS_CONCAT_INNER_(a, b) a##b
#define FCA_STATUS_CONCAT_(a, b) FCA_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define FCA_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status fca_status_ = (expr);       \
    if (!fca_status_.ok()) return fca_status_; \
  } while (false)

// `lhs = value` of the absl::StatusOr `rexpr`, or returns its status.
// `lhs` may be a declaration: FCA_ASSIGN_OR_RETURN(auto x, MakeX());
#define FCA_ASSIGN_OR_RETURN(lhs, rexpr) \
  FCA_ASSIGN_OR_RETURN_IMPL_(FCA_STATUS_CONCAT_(fca_statusor_, __LINE__), lhs, rexpr)

// `statusor` names a variable and `lhs` may declare one: neither can be
// parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define FCA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // FCA_COMMON_STATUS_MACROS_H_
