// The coefficient cache in whole audits: cached windows skip their LIVE pass,
// a cache that disagrees is ignored, entries serve any batch layout; and
// the token stream's prefix that the windows read.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/engine/audit/auditor.h"
#include "server/engine/text/bpe_tokenizer.h"
#include "tests/engine/audit/auditor_fixture.h"
#include "tests/testing/test_models.h"

namespace fca::engine {
namespace {

using testing::MapCache;
using testing::RandomModel;
using testing::RandomText;
using testing::Request;
using testing::Text;
using testing::TinyConfig;
using testing::Varying;

TEST(AuditorCacheTest, SecondAuditSkipsLiveForCachedWindowsWithIdenticalResults) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(8));
  MapCache cache;
  AuditRequest req = Request({model.get()}, RandomText(16 * 10, 1), RandomText(16 * 6, 2));
  req.cache = &cache;
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto first = RunAudit(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cache.puts, 10 + 6);
  EXPECT_EQ(first->models[0].cached_eval_windows, 0);
  notes.clear();
  auto second = RunAudit(req);
  ASSERT_TRUE(second.ok()) << second.status();
  // The first batch (4 windows) always runs LIVE to check fidelity.
  EXPECT_EQ(second->models[0].cached_eval_windows, 10 - 4);
  EXPECT_EQ(second->models[0].cached_calib_windows, 6);
  EXPECT_EQ(cache.puts, 16);
  for (size_t i = 0; i < first->models[0].interventions.size(); ++i) {
    EXPECT_EQ(first->models[0].interventions[i].nll, second->models[0].interventions[i].nll);
  }
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("6 of 10 evaluation windows came from the coefficient cache"),
            std::string::npos)
      << notes[0];
}

// Issue 9: a cache that disagrees with a fresh recording (corrupt, or a
// model that is not deterministic) must not fail the audit: it is ignored
// for that model, rewritten, and the numbers are those of a fresh audit.
TEST(AuditorCacheTest, ACacheThatDisagreesIsIgnoredAndRewritten) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(8));
  MapCache cache;
  AuditRequest req = Request({model.get()}, RandomText(16 * 8, 1), RandomText(16 * 4, 2));
  auto fresh = RunAudit(req);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  req.cache = &cache;
  ASSERT_TRUE(RunAudit(req).ok());
  cache.CorruptAll();
  std::vector<std::string> notes;
  req.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto after = RunAudit(req);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->models[0].cached_eval_windows, 0);
  EXPECT_EQ(after->models[0].cached_calib_windows, 0);
  for (size_t i = 0; i < fresh->models[0].interventions.size(); ++i) {
    EXPECT_EQ(fresh->models[0].interventions[i].nll, after->models[0].interventions[i].nll);
  }
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("differ from a fresh LIVE recording"), std::string::npos) << notes[0];
  // Rewritten: the next audit uses the cache again.
  auto again = RunAudit(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->models[0].cached_eval_windows, 8 - 4);
}

// Issue 9: entries recorded with batch 8 serve audits with batches 1, 4 and
// 16 and with fewer windows; every NLL stays within the fidelity tolerance
// of an audit without the cache in the same layout.
TEST(AuditorCacheTest, EntriesServeAnyBatchLayoutAndFewerWindows) {
  auto model = RandomModel(TinyConfig("featuregate"), Varying(9));
  MapCache cache;
  AuditRequest fill = Request({model.get()}, RandomText(16 * 16, 1), RandomText(16 * 8, 2));
  fill.options.batch_size = 8;
  fill.cache = &cache;
  ASSERT_TRUE(RunAudit(fill).ok());
  ASSERT_EQ(cache.puts, 16 + 8);
  for (int64_t batch : {1, 4, 16}) {
    for (int64_t windows : {int64_t{0}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << ", windows " << windows);
      AuditRequest req = fill;
      req.options.batch_size = batch;
      req.options.max_eval_windows = windows;
      req.cache = nullptr;
      auto plain = RunAudit(req);
      ASSERT_TRUE(plain.ok()) << plain.status();
      req.cache = &cache;
      auto cached = RunAudit(req);
      ASSERT_TRUE(cached.ok()) << cached.status();
      const ModelReport& c = cached->models[0];
      EXPECT_EQ(c.cached_calib_windows, 8);
      EXPECT_LE(c.cache_max_abs_diff, 1e-5);
      for (size_t i = 0; i < c.interventions.size(); ++i) {
        EXPECT_NEAR(c.interventions[i].nll, plain->models[0].interventions[i].nll, 1e-5)
            << c.interventions[i].name;
      }
    }
  }
}

TEST(TokenStreamTest, APrefixGivesTheFirstIdsOfTheWholeText) {
  std::string text;
  for (int line = 0; line < 400; ++line) {
    text += "Line " + std::to_string(line) + ": the quick brown fox,  jumps\n";
    if (line % 7 == 0) text += "\n\n  indented\n";
  }
  Dataset d = Text("t", text);
  auto bpe = BpeTokenizer::FromFile(FCA_TEST_DATA_DIR "/tokenizer/tokenizer.json");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  ByteTokenizer bytes;
  for (const Tokenizer* tok :
       {static_cast<const Tokenizer*>(bpe->get()), static_cast<const Tokenizer*>(&bytes)}) {
    auto whole = TokenStream(d, *tok);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int64_t want : {1, 100, 1000, 5000}) {
      auto part = TokenStream(d, *tok, want);
      ASSERT_TRUE(part.ok()) << part.status();
      ASSERT_GE(static_cast<int64_t>(part->size()), std::min<int64_t>(want, whole->size()));
      if (want * 3 < static_cast<int64_t>(whole->size())) {
        EXPECT_LT(part->size(), whole->size()) << tok->name() << " read everything for " << want;
      }
      EXPECT_TRUE(std::equal(part->begin(), part->end(), whole->begin())) << tok->name();
    }
  }
}

}  // namespace
}  // namespace fca::engine
