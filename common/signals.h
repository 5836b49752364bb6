// The shutdown signals of the long-running binaries (fca-server,
// fca-worker).
#ifndef FCA_COMMON_SIGNALS_H_
#define FCA_COMMON_SIGNALS_H_

#include <signal.h>

namespace fca {

// Blocks SIGTERM and SIGINT in the calling thread and so in every thread it
// starts later, so that one thread can wait for them with sigwait. Call it
// before any thread starts. Returns the set.
sigset_t BlockShutdownSignals();

}  // namespace fca

#endif  // FCA_COMMON_SIGNALS_H_
