#include "client/format_progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "client/format.h"
#include "client/text_safety.h"

namespace fca::client {

namespace v1 = ::fca::v1;
namespace {

constexpr int kMinBarWidth = 10;  // narrower bars carry no information
constexpr double kMinFractionForEstimate = 0.01;

double ClampedFraction(const v1::Progress& p) {
  const double f = p.fraction();
  if (!(f > 0)) return 0;  // also NaN
  return std::min(f, 1.0);
}

// Percent rounded down to 1/`steps` of a percent, so "100%" means done
// rather than 99.96%.
double FlooredPercent(double fraction, int steps) {
  return std::floor(fraction * 100 * steps) / steps;
}

// "replay:cross_input 2/7 featuregate-s1": what is running, for both renderings.
std::string Label(const v1::Progress& p) {
  std::string label = p.phase().empty() ? "waiting" : SanitizeForTerminal(p.phase());
  if (p.model_count() > 0) {
    absl::StrAppendFormat(&label, " %d/%d", p.model_index() + 1, p.model_count());
  }
  if (!p.model().empty()) absl::StrAppendFormat(&label, " %s", SanitizeForTerminal(p.model()));
  return label;
}

// What a phase counts: the timing phase times (model, dense twin) pairs,
// every other phase runs windows.
const char* CountedUnit(const std::string& phase) {
  return phase == "timing" ? "pairs" : "windows";
}

std::string Truncate(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  if (width <= 3) return text.substr(0, width);
  return text.substr(0, width - 3) + "...";
}

}  // namespace

std::string HumanDuration(absl::Duration duration) {
  const int64_t total =
      std::max<int64_t>(0, absl::ToInt64Seconds(duration + absl::Milliseconds(500)));
  const int64_t hours = total / 3600;
  const int64_t minutes = (total % 3600) / 60;
  const int64_t seconds = total % 60;
  if (hours > 0) return absl::StrFormat("%dh%02dm", hours, minutes);
  if (minutes > 0) return absl::StrFormat("%dm%02ds", minutes, seconds);
  return absl::StrFormat("%ds", seconds);
}

std::string FormatEta(const v1::Progress& progress, absl::Duration elapsed) {
  const double fraction = ClampedFraction(progress);
  if (fraction >= 1) return "0s";
  if (progress.eta_seconds() > 0) {
    return HumanDuration(absl::Seconds(progress.eta_seconds()));
  }
  // The server may not estimate (eta 0 = unknown); a linear extrapolation
  // is rough but better than nothing once a little work is done.
  if (fraction >= kMinFractionForEstimate && elapsed > absl::ZeroDuration()) {
    return HumanDuration(elapsed * ((1 - fraction) / fraction));
  }
  return "--";
}

std::string RenderProgressBar(const v1::Progress& progress, int width, absl::Duration elapsed) {
  const double fraction = ClampedFraction(progress);
  const size_t avail = static_cast<size_t>(std::max(width - 1, 0));
  // Fixed-width numbers keep the bar from jittering as the ETA shrinks.
  const std::string right = absl::StrFormat(" %5.1f%% ETA %6s", FlooredPercent(fraction, 10),
                                            FormatEta(progress, elapsed));
  std::string label = Label(progress);
  // Layout: label + " [" + bar + "]" + right.
  const size_t frame = 3 + right.size();
  if (label.size() + frame + kMinBarWidth > avail) {
    const size_t room = avail > frame + kMinBarWidth ? avail - frame - kMinBarWidth : 0;
    if (room < 8) {
      // Too narrow for a bar: keep the numbers, which matter most.
      return Truncate(Label(progress) + right, avail);
    }
    label = Truncate(label, room);
  }
  const size_t bar_width = avail - label.size() - frame;
  const size_t filled = static_cast<size_t>(std::floor(fraction * bar_width));
  return absl::StrFormat("%s [%s%s]%s", label, std::string(filled, '#'),
                         std::string(bar_width - filled, '.'), right);
}

std::string RenderProgressLine(const v1::Progress& progress, absl::Duration elapsed) {
  const double fraction = ClampedFraction(progress);
  std::string line = absl::StrFormat(
      "[%3.0f%%] %s", FlooredPercent(fraction, 1),
      progress.phase().empty() ? std::string("waiting") : SanitizeForTerminal(progress.phase()));
  if (progress.model_count() > 0) {
    absl::StrAppendFormat(&line, " model %d/%d", progress.model_index() + 1,
                          progress.model_count());
  }
  if (!progress.model().empty()) {
    absl::StrAppendFormat(&line, " %s", SanitizeForTerminal(progress.model()));
  }
  if (progress.windows_total() > 0) {
    absl::StrAppendFormat(&line, " %s %d/%d", CountedUnit(progress.phase()),
                          progress.windows_done(), progress.windows_total());
  }
  absl::StrAppendFormat(&line, " elapsed %s ETA %s", HumanDuration(elapsed),
                        FormatEta(progress, elapsed));
  return line;
}

}  // namespace fca::client
