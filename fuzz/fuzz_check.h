// FUZZ_CHECK: an invariant of a fuzz target. A violation prints the condition
// and aborts, which libFuzzer and replay_main.cc both report as a crash; it is
// active in every build type (assert is not in RelWithDebInfo).
#ifndef FCA_FUZZ_FUZZ_CHECK_H_
#define FCA_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

#endif  // FCA_FUZZ_FUZZ_CHECK_H_
