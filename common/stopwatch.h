// Durations on the steady clock, the clock fca times its work with (wall
// time that never jumps with the system clock).
#ifndef FCA_COMMON_STOPWATCH_H_
#define FCA_COMMON_STOPWATCH_H_

#include <chrono>

namespace fca {

// Seconds elapsed since `start`, a std::chrono::steady_clock::now().
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace fca

#endif  // FCA_COMMON_STOPWATCH_H_
