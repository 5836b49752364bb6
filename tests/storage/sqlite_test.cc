// The SQLite wrapper: statements, error mapping, the transaction helper.
#include "storage/sqlite.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "tests/storage/test_util.h"

namespace fca::storage {
namespace {

using ::absl::StatusCode;

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = Database::Open(":memory:", 0);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    ASSERT_OK(
        db_->Execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB, x REAL, "
                     "n INTEGER CHECK (n >= 0))",
                     "create"));
  }

  int64_t Count() {
    auto stmt = db_->Prepare("SELECT COUNT(*) FROM t", "count");
    EXPECT_TRUE(stmt.ok());
    EXPECT_TRUE(stmt->Step().ok());
    return stmt->ColumnInt(0);
  }

  absl::Status Insert(const std::string& k) {
    FCA_ASSIGN_OR_RETURN(Statement stmt,
                         db_->Prepare("INSERT INTO t (k, n) VALUES (?1, 0)", "insert row"));
    stmt.BindText(1, k);
    return stmt.Run();
  }

  std::unique_ptr<Database> db_;
};

TEST_F(SqliteTest, BindsAndReadsEveryType) {
  ASSERT_OK_AND_ASSIGN(Statement insert,
                       db_->Prepare("INSERT INTO t (k, v, x, n) VALUES (?1, ?2, ?3, ?4)", "ins"));
  const std::string blob("a\0b\xff", 4);
  insert.BindText(1, "key");
  insert.BindBlob(2, blob);
  insert.BindDouble(3, std::numeric_limits<double>::quiet_NaN());
  insert.BindInt(4, int64_t{1} << 40);
  ASSERT_OK(insert.Run());
  ASSERT_OK(insert.Reset());
  insert.BindText(1, "empty");
  insert.BindBlob(2, "");
  insert.BindDouble(3, -0.5);
  insert.BindInt(4, 0);
  ASSERT_OK(insert.Run());

  ASSERT_OK_AND_ASSIGN(Statement select,
                       db_->Prepare("SELECT k, v, x, n FROM t ORDER BY k DESC", "sel"));
  ASSERT_OK_AND_ASSIGN(bool row, select.Step());
  ASSERT_TRUE(row);
  EXPECT_EQ(select.ColumnText(0), "key");
  EXPECT_EQ(select.ColumnBlob(1), blob);
  EXPECT_TRUE(select.ColumnIsNull(2));  // NaN is stored as NULL
  EXPECT_TRUE(std::isnan(select.ColumnDouble(2)));
  EXPECT_EQ(select.ColumnInt(3), int64_t{1} << 40);
  ASSERT_OK_AND_ASSIGN(row, select.Step());
  ASSERT_TRUE(row);
  EXPECT_FALSE(select.ColumnIsNull(1));  // an empty blob is not NULL
  EXPECT_EQ(select.ColumnBlob(1), "");
  EXPECT_EQ(select.ColumnDouble(2), -0.5);
  ASSERT_OK_AND_ASSIGN(row, select.Step());
  EXPECT_FALSE(row);
}

TEST_F(SqliteTest, ErrorsAreMappedAndSanitized) {
  ASSERT_OK(Insert("a"));
  const absl::Status duplicate = Insert("a");
  EXPECT_CODE(duplicate, StatusCode::kAlreadyExists);
  EXPECT_EQ(duplicate.message().find("INSERT"), absl::string_view::npos);
  EXPECT_NE(duplicate.message().find("insert row"), absl::string_view::npos);

  ASSERT_OK_AND_ASSIGN(Statement negative,
                       db_->Prepare("INSERT INTO t (k, n) VALUES ('b', -1)", "check"));
  EXPECT_CODE(negative.Run(), StatusCode::kInvalidArgument);

  const auto syntax = db_->Prepare("SELEKT nonsense", "bad sql");
  EXPECT_CODE(syntax, StatusCode::kInternal);
  EXPECT_EQ(syntax.status().message().find("SELEKT"), absl::string_view::npos);

  // Exactly one statement per Prepare: no piggy-backed second statement.
  EXPECT_CODE(db_->Prepare("SELECT 1; DROP TABLE t", "two"), StatusCode::kInternal);
  EXPECT_EQ(Count(), 1);

  // An out-of-range parameter index is reported by the next step.
  ASSERT_OK_AND_ASSIGN(Statement stmt, db_->Prepare("SELECT ?1", "range"));
  stmt.BindInt(5, 1);
  EXPECT_CODE(stmt.Step(), StatusCode::kInternal);
}

// SQLite's busy codes, extended ones included, are all UNAVAILABLE (retry);
// the numbers are sqlite3.h's, which only storage/*.cc include.
TEST_F(SqliteTest, EveryBusyCodeIsUnavailable) {
  const struct {
    int rc;
    const char* name;
  } busy[] = {
      {5, "SQLITE_BUSY"},
      {261, "SQLITE_BUSY_RECOVERY"},
      {517, "SQLITE_BUSY_SNAPSHOT"},
      {773, "SQLITE_BUSY_TIMEOUT"},
      {6, "SQLITE_LOCKED"},
      {262, "SQLITE_LOCKED_SHAREDCACHE"},
      {15, "SQLITE_PROTOCOL"},  // WAL's locking race lost for seconds on end
  };
  for (const auto& b : busy) {
    const absl::Status status = db_->Error(b.rc, "look up API key");
    EXPECT_CODE(status, StatusCode::kUnavailable) << b.name;
    EXPECT_EQ(status.message(), "storage: look up API key: database is busy, retry") << b.name;
  }
  EXPECT_CODE(db_->Error(10 /*SQLITE_IOERR*/, "look up API key"), StatusCode::kInternal);
}

TEST_F(SqliteTest, TransactionCommitsRollsBackAndNests) {
  ASSERT_OK(db_->Transaction([&] { return Insert("committed"); }));
  EXPECT_EQ(Count(), 1);
  EXPECT_FALSE(db_->in_transaction());

  EXPECT_CODE(db_->Transaction([&]() -> absl::Status {
    EXPECT_TRUE(db_->in_transaction());
    FCA_RETURN_IF_ERROR(Insert("gone"));
    return absl::NotFoundError("no");
  }),
              StatusCode::kNotFound);
  EXPECT_EQ(Count(), 1);

  ASSERT_OK(db_->Transaction([&]() -> absl::Status {
    FCA_RETURN_IF_ERROR(Insert("outer"));
    EXPECT_CODE(db_->Transaction([&]() -> absl::Status {
      FCA_RETURN_IF_ERROR(Insert("inner"));
      // A deeper level, committed into "inner"...
      FCA_RETURN_IF_ERROR(db_->Transaction([&] { return Insert("deepest"); }));
      // ...and undone with it.
      return absl::AbortedError("inner fails");
    }),
                StatusCode::kAborted);
    return db_->Transaction([&] { return Insert("second inner"); });
  }));
  EXPECT_EQ(Count(), 3);  // committed, outer, second inner
  EXPECT_FALSE(db_->in_transaction());

  // A failing statement does not poison the transaction it ran in.
  ASSERT_OK(db_->Transaction([&]() -> absl::Status {
    EXPECT_CODE(Insert("outer"), StatusCode::kAlreadyExists);
    return Insert("after error");
  }));
  EXPECT_EQ(Count(), 4);
}

TEST_F(SqliteTest, BlobReaderAppendsWholeValues) {
  ASSERT_OK_AND_ASSIGN(Statement insert,
                       db_->Prepare("INSERT INTO t (k, v, n) VALUES (?1, ?2, 0)", "ins"));
  const std::string big(100000, 'b');
  insert.BindText(1, "big");
  insert.BindBlob(2, big);
  ASSERT_OK(insert.Run());
  const int64_t big_row = db_->last_insert_rowid();
  ASSERT_OK(insert.Reset());
  insert.BindText(1, "small");
  insert.BindBlob(2, "xyz");
  ASSERT_OK(insert.Run());
  const int64_t small_row = db_->last_insert_rowid();

  BlobReader reader = db_->NewBlobReader("t", "v", "read blob");
  std::string out = "head:";
  ASSERT_OK_AND_ASSIGN(const int64_t n1, reader.AppendTo(small_row, &out));
  ASSERT_OK_AND_ASSIGN(const int64_t n2, reader.AppendTo(big_row, &out));
  EXPECT_EQ(n1, 3);
  EXPECT_EQ(n2, 100000);
  EXPECT_EQ(out, "head:xyz" + big);
  EXPECT_CODE(reader.AppendTo(999, &out), StatusCode::kInternal);
  EXPECT_EQ(out.size(), 5u + 3u + 100000u);  // unchanged by the failure
}

TEST(SqliteOpenTest, UnopenablePathIsFailedPrecondition) {
  EXPECT_CODE(Database::Open("/nonexistent-dir/sub/db.sqlite", 0), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fca::storage
