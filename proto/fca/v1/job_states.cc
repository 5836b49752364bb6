#include "proto/fca/v1/job_states.h"

namespace fca::v1 {

bool IsTerminal(JobState state) {
  return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED || state == JOB_STATE_CANCELLED;
}

}  // namespace fca::v1
