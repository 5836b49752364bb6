// Issue 37: a database written by fca 0.2.0 (tests/data/db-0.2.0, made by
// its make.sh with the 0.2.0 server and CLI themselves) is served by today's
// fca-server as it was: every stored row and both reports carry the same
// fields and values as the 0.2.0 CLI printed from it, field for field, in
// the same order; what is new is each row's typed key (Result.key), which
// names the stored metric exactly (docs/fca.md "Stored rows and their
// units").
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/result_key.h"
#include "tests/e2e/process.h"

namespace fca::e2e {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(FCA_TEST_DATA_DIR) + "/db-0.2.0";

json::Value ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<json::Value> v = json::Parse(text.str());
  EXPECT_TRUE(v.ok()) << path << ": " << v.status();
  return v.ok() ? *v : json::Value();
}

// Every member of `old` is in `now` with the same JSON text.
void ExpectSameMembers(const json::Value& old, const json::Value& now, const std::string& where) {
  ASSERT_TRUE(old.is_object() && now.is_object()) << where;
  for (const auto& [name, value] : old.as_object()) {
    const json::Value* got = now.Find(name);
    ASSERT_NE(got, nullptr) << where << ": no " << name;
    EXPECT_EQ(json::Write(*got), json::Write(value)) << where << ": " << name;
  }
}

// The typed key of a served row as common/result_key.h has it.
ResultKey KeyOf(const json::Value& row) {
  ResultKey key;
  const json::Value* k = row.Find("key");
  if (k == nullptr) return ResultKeyOf("");  // kUnknown
  key.metric = StringField(*k, "metric");
  key.scope = MetricScope::kUnknown;
  for (const MetricScopeDef& def : MetricScopeDefs()) {
    std::string name = def.name;
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    // The CLI prints the short name ("LAYER"); 0.2.0's JSON had the full one.
    const std::string scope = StringField(*k, "scope");
    if (scope == name || scope == "METRIC_SCOPE_" + name) key.scope = def.id;
  }
  for (const char* field : {"layer", "expert"}) {
    const std::string text = StringField(*k, field);  // int64: a JSON string
    if (text.empty()) continue;
    (std::string(field) == "layer" ? key.layer : key.expert) = std::stoll(text);
  }
  key.site = StringField(*k, "site");
  key.family = StringField(*k, "family");
  key.baseline = StringField(*k, "baseline");
  return key;
}

// The key names the stored metric exactly, and is one this vocabulary knows.
void ExpectKeyNamesTheMetric(const json::Value& row, const std::string& where) {
  const ResultKey key = KeyOf(row);
  const std::string metric = StringField(row, "metric");
  EXPECT_NE(key.scope, MetricScope::kUnknown) << where << ": " << metric;
  EXPECT_EQ(StoredMetricName(key), metric) << where;
}

class OldDatabaseE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "fca_old_db_e2e_" + std::to_string(getpid());
    fs::create_directories(root_ + "/models");
    fs::copy_file(kFixture + "/fca.sqlite", root_ + "/fca.sqlite",
                  fs::copy_options::overwrite_existing);
    fs::permissions(root_ + "/fca.sqlite", fs::perms::owner_read | fs::perms::owner_write);
    server_ = StartServer(FCA_SERVER_BIN,
                          {"--models=" + root_ + "/models", "--db=" + root_ + "/fca.sqlite"});
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  CommandResult Fca(std::vector<std::string> args) const {
    args.insert(args.begin(), FCA_CLI_BIN);
    return e2e::Run(args, {"FCA_SERVER=" + server_->address()}, 120);
  }

  std::string root_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(OldDatabaseE2ETest, StoredRowsAreServedAsZeroPointTwoServedThem) {
  ASSERT_NE(server_, nullptr);
  for (int job : {1, 2}) {
    SCOPED_TRACE(job);
    const json::Value old = ReadJson(kFixture + "/results-" + std::to_string(job) + ".json");
    CommandResult r = Fca({"results", "--job=" + std::to_string(job), "--format=json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    absl::StatusOr<json::Value> now = json::Parse(r.out);
    ASSERT_TRUE(now.ok()) << r.out;
    ASSERT_GT(old.as_array().size(), 100u);
    ASSERT_EQ(now->as_array().size(), old.as_array().size());
    for (size_t i = 0; i < old.as_array().size(); ++i) {
      const std::string where = "row " + std::to_string(i);
      ExpectSameMembers(old.as_array()[i], now->as_array()[i], where);
      ExpectKeyNamesTheMetric(now->as_array()[i], where);
    }
  }
}

TEST_F(OldDatabaseE2ETest, ReportsAreTheSameAndTheirMetricsTyped) {
  ASSERT_NE(server_, nullptr);
  for (int job : {1, 2}) {
    SCOPED_TRACE(job);
    const json::Value old = ReadJson(kFixture + "/report-" + std::to_string(job) + ".json");
    const std::string saved = root_ + "/report-" + std::to_string(job) + ".json";
    CommandResult r = Fca({"report", std::to_string(job), "--save_json=" + saved});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json::Value now = ReadJson(saved);
    for (const char* list : {"metrics", "sites", "dense_twin_rows"}) {
      const json::Value* a = old.Find(list);
      const json::Value* b = now.Find(list);
      ASSERT_TRUE(a != nullptr && b != nullptr) << list;
      ASSERT_EQ(b->as_array().size(), a->as_array().size()) << list;
      for (size_t i = 0; i < a->as_array().size(); ++i) {
        const std::string where = std::string(list) + " " + std::to_string(i);
        const json::Value& was = a->as_array()[i];
        const json::Value& is = b->as_array()[i];
        if (std::string(list) == "sites") {
          ExpectSameMembers(was, is, where);
          continue;
        }
        if (std::string(list) == "dense_twin_rows") {
          ExpectSameMembers(was, is, where);
          ExpectKeyNamesTheMetric(is, where);
          continue;
        }
        // A metric: its name, unit and summary, and each model's row.
        for (const char* field : {"intervention", "metric", "unit", "across_models"}) {
          ASSERT_NE(is.Find(field), nullptr) << where << " " << field;
          EXPECT_EQ(json::Write(*is.Find(field)), json::Write(*was.Find(field)))
              << where << " " << field;
        }
        ExpectKeyNamesTheMetric(is, where);
        const json::Array& rows_was = was.Find("per_model")->as_array();
        const json::Array& rows_is = is.Find("per_model")->as_array();
        ASSERT_EQ(rows_is.size(), rows_was.size()) << where;
        for (size_t m = 0; m < rows_was.size(); ++m) {
          ExpectSameMembers(rows_was[m], rows_is[m], where);
          ExpectKeyNamesTheMetric(rows_is[m], where);
        }
      }
    }
  }
}

}  // namespace
}  // namespace fca::e2e
