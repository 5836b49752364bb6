// Progress rendering (client/format_progress.h) and the watch printer's TTY and
// plain modes (client/watch.h).
#include <sstream>
#include <string>

#include "client/format.h"
#include "client/format_progress.h"
#include "client/watch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Progress MakeProgress(const std::string& phase, double fraction, double eta_seconds = 0) {
  v1::Progress p;
  p.set_phase(phase);
  p.set_model("fg-s1");
  p.set_model_index(1);
  p.set_model_count(7);
  p.set_windows_done(12);
  p.set_windows_total(40);
  p.set_fraction(fraction);
  p.set_eta_seconds(eta_seconds);
  return p;
}

TEST(HumanDurationTest, Forms) {
  EXPECT_EQ(HumanDuration(absl::ZeroDuration()), "0s");
  EXPECT_EQ(HumanDuration(absl::Seconds(-5)), "0s");
  EXPECT_EQ(HumanDuration(absl::Seconds(42)), "42s");
  EXPECT_EQ(HumanDuration(absl::Milliseconds(59600)), "1m00s");  // rounds
  EXPECT_EQ(HumanDuration(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(HumanDuration(absl::Seconds(3720)), "1h02m");
  EXPECT_EQ(HumanDuration(absl::Hours(101)), "101h00m");
}

TEST(EtaTest, ServerEstimateWins) {
  EXPECT_EQ(FormatEta(MakeProgress("live", 0.5, 185), absl::Seconds(10)), "3m05s");
}

TEST(EtaTest, ExtrapolatesWhenServerDoesNotKnow) {
  // 25% done in 60 s: 180 s to go.
  EXPECT_EQ(FormatEta(MakeProgress("live", 0.25), absl::Seconds(60)), "3m00s");
}

TEST(EtaTest, UnknownTooEarlyAndZeroWhenDone) {
  EXPECT_EQ(FormatEta(MakeProgress("live", 0.001), absl::Seconds(60)), "--");
  EXPECT_EQ(FormatEta(MakeProgress("live", 0.5), absl::ZeroDuration()), "--");
  EXPECT_EQ(FormatEta(MakeProgress("done", 1.0, 99), absl::Seconds(1)), "0s");
}

TEST(ProgressBarTest, ExactLayoutAtWidth80) {
  const std::string bar =
      RenderProgressBar(MakeProgress("replay:cross_input", 0.452, 185), 80, absl::Seconds(1));
  EXPECT_EQ(bar.size(), 79u);  // width - 1: never wraps
  const std::string prefix = "replay:cross_input 2/7 fg-s1 [";
  ASSERT_EQ(bar.substr(0, prefix.size()), prefix);
  const std::string suffix = "]  45.2% ETA  3m05s";
  EXPECT_EQ(bar.substr(bar.size() - suffix.size()), suffix);
  // 30 bar cells, floor(0.452 * 30) = 13 filled.
  const std::string cells = bar.substr(prefix.size(), 30);
  EXPECT_EQ(cells, std::string(13, '#') + std::string(17, '.'));
}

TEST(ProgressBarTest, FractionIsClampedAndNeverRoundsUpToDone) {
  const std::string over = RenderProgressBar(MakeProgress("x", 1.7), 60, absl::Seconds(1));
  EXPECT_THAT(over, HasSubstr("100.0%"));
  EXPECT_THAT(over, Not(HasSubstr(".]")));
  const std::string almost = RenderProgressBar(MakeProgress("x", 0.99999), 60, absl::Seconds(1));
  EXPECT_THAT(almost, HasSubstr(" 99.9%"));
  const std::string negative = RenderProgressBar(MakeProgress("x", -1), 60, absl::Seconds(1));
  EXPECT_THAT(negative, HasSubstr("[...."));
  EXPECT_THAT(negative, HasSubstr("  0.0%"));
}

TEST(ProgressBarTest, NarrowTerminalsShortenLabelThenDropBar) {
  v1::Progress p = MakeProgress("replay:static_layer_position", 0.5, 60);
  p.set_model("a-very-long-model-name-for-testing");
  for (int width : {120, 80, 60, 45, 30, 20, 8, 1, 0}) {
    const std::string bar = RenderProgressBar(p, width, absl::Seconds(1));
    EXPECT_LE(bar.size(), static_cast<size_t>(std::max(width - 1, 0))) << width;
  }
  EXPECT_THAT(RenderProgressBar(p, 60, absl::Seconds(1)), HasSubstr("posit... [#####"));
  const std::string tiny = RenderProgressBar(p, 30, absl::Seconds(1));
  EXPECT_THAT(tiny, Not(HasSubstr("[")));
}

TEST(ProgressLineTest, PlainLineHasEverything) {
  EXPECT_EQ(RenderProgressLine(MakeProgress("replay:cross_input", 0.456), absl::Seconds(62)),
            "[ 45%] replay:cross_input model 2/7 fg-s1 windows 12/40 "
            "elapsed 1m02s ETA 1m14s");
  v1::Progress empty;
  EXPECT_EQ(RenderProgressLine(empty, absl::ZeroDuration()), "[  0%] waiting elapsed 0s ETA --");
}

// The timing phase counts (model, dense twin) pairs, not windows.
TEST(ProgressLineTest, TimingCountsPairs) {
  v1::Progress timing = MakeProgress("timing", 0.9, 50);
  timing.set_windows_done(12);
  timing.set_windows_total(200);
  EXPECT_EQ(RenderProgressLine(timing, absl::Seconds(10)),
            "[ 90%] timing model 2/7 fg-s1 pairs 12/200 elapsed 10s ETA 50s");
}

TEST(ProgressThrottleTest, PhaseModelDecileOrInterval) {
  ProgressThrottle throttle(absl::Seconds(60));
  absl::Time t = absl::UnixEpoch();
  EXPECT_TRUE(throttle.ShouldPrint(MakeProgress("live", 0.01), t));
  EXPECT_FALSE(throttle.ShouldPrint(MakeProgress("live", 0.05), t));
  EXPECT_TRUE(throttle.ShouldPrint(MakeProgress("live", 0.10), t));
  EXPECT_FALSE(throttle.ShouldPrint(MakeProgress("live", 0.19), t));
  EXPECT_TRUE(throttle.ShouldPrint(MakeProgress("calibration", 0.19), t));
  v1::Progress next_model = MakeProgress("calibration", 0.19);
  next_model.set_model_index(2);
  EXPECT_TRUE(throttle.ShouldPrint(next_model, t));
  EXPECT_FALSE(throttle.ShouldPrint(next_model, t + absl::Seconds(59)));
  EXPECT_TRUE(throttle.ShouldPrint(next_model, t + absl::Seconds(61)));
}

v1::WatchJobResponse Event(int64_t seq) {
  v1::WatchJobResponse r;
  r.mutable_event()->set_seq(seq);
  r.mutable_job()->set_id(12);
  return r;
}

struct PrinterFixture {
  std::ostringstream out, err;
  absl::Time now = absl::UnixEpoch();
  WatchPrinter MakePrinter(bool tty) {
    WatchPrinter::Options options;
    options.tty = tty;
    options.width = 60;
    options.now = [this] { return now; };
    return WatchPrinter(out, err, options);
  }
};

TEST(WatchPrinterTest, PlainModePrintsThrottledLinesAndResults) {
  PrinterFixture f;
  WatchPrinter printer = f.MakePrinter(/*tty=*/false);
  v1::WatchJobResponse running = Event(1);
  running.mutable_event()->set_state(v1::JOB_STATE_RUNNING);
  printer.OnEvent(running);
  for (int i = 0; i <= 20; ++i) {
    v1::WatchJobResponse p = Event(2 + i);
    *p.mutable_event()->mutable_progress() = MakeProgress("live", i / 20.0);
    printer.OnEvent(p);
  }
  v1::WatchJobResponse results = Event(30);
  auto* batch = results.mutable_event()->mutable_results();
  batch->set_model("fg-s1");
  v1::Result* r = batch->add_results();
  r->set_model("fg-s1");
  r->set_metric("retention_pct");
  r->set_defined(false);
  printer.OnEvent(results);
  v1::WatchJobResponse done = Event(31);
  done.mutable_event()->set_state(v1::JOB_STATE_SUCCEEDED);
  printer.OnEvent(done);
  printer.Finish();

  const std::string err = f.err.str();
  EXPECT_THAT(err, Not(HasSubstr("\r")));  // no redraws in a log
  EXPECT_THAT(err, HasSubstr("job 12: RUNNING\n"));
  EXPECT_THAT(err, Not(HasSubstr("SUCCEEDED")));  // the command reports it
  // One line per 10%: 0, 10, ..., 100.
  size_t lines = 0;
  for (size_t pos = 0; (pos = err.find("] live", pos)) != std::string::npos; ++pos) {
    ++lines;
  }
  EXPECT_EQ(lines, 11u);
  EXPECT_THAT(f.out.str(), HasSubstr("results for fg-s1 (1 rows):\n"));
  EXPECT_THAT(f.out.str(), HasSubstr("undefined"));
}

// The rows carry no typed key here, as a server older than typed keys
// sends them: their stored names are read by the one decoder.
TEST(WatchPrinterTest, PerSiteRowsAreCountedNotPrinted) {
  PrinterFixture f;
  WatchPrinter printer = f.MakePrinter(/*tty=*/false);
  v1::WatchJobResponse results = Event(1);
  auto* batch = results.mutable_event()->mutable_results();
  batch->set_model("fg-s1");
  for (const char* metric : {"penalty", "site_mean.attn_gate.0", "site_variance.attn_gate.0"}) {
    v1::Result* r = batch->add_results();
    r->set_model("fg-s1");
    r->set_metric(metric);
    r->set_defined(true);
  }
  printer.OnEvent(results);
  EXPECT_THAT(f.out.str(), HasSubstr("results for fg-s1 (3 rows; 2 per-site rows not shown):\n"));
  EXPECT_THAT(f.out.str(), HasSubstr("penalty"));
  EXPECT_THAT(f.out.str(), Not(HasSubstr("site_mean")));
}

TEST(WatchPrinterTest, TtyModeRedrawsInPlaceAndClearsBeforeRows) {
  PrinterFixture f;
  WatchPrinter printer = f.MakePrinter(/*tty=*/true);
  v1::WatchJobResponse p1 = Event(1);
  *p1.mutable_event()->mutable_progress() = MakeProgress("live", 0.1);
  printer.OnEvent(p1);
  v1::WatchJobResponse p2 = Event(2);
  *p2.mutable_event()->mutable_progress() = MakeProgress("live", 0.2);
  printer.OnEvent(p2);
  const std::string before_note = f.err.str();
  EXPECT_EQ(before_note.find('\n'), std::string::npos);
  EXPECT_EQ(before_note[0], '\r');
  EXPECT_THAT(before_note, HasSubstr(" 20.0%"));

  v1::WatchJobResponse note = Event(3);
  note.mutable_event()->set_message("coefficient cache hit");
  printer.OnEvent(note);
  const std::string after = f.err.str().substr(before_note.size());
  // Bar erased (spaces between carriage returns), note, bar redrawn.
  EXPECT_EQ(after.substr(0, 1), "\r");
  EXPECT_THAT(after, HasSubstr("\rnote: coefficient cache hit\n\r"));
  EXPECT_THAT(after, HasSubstr(" 20.0%"));

  printer.Finish();
  const std::string cleared = f.err.str();
  EXPECT_EQ(cleared.back(), '\r');  // ends on a blank line for what follows
}

}  // namespace
}  // namespace fca::client
