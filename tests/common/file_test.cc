#include "common/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace fca {
namespace {

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fca_file_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (f == nullptr) return path;
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
    return path;
  }

  std::string dir_;
};

TEST_F(FileTest, ReadsEveryByte) {
  std::string bytes(200000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  const absl::StatusOr<std::string> text = ReadFile(Write("a.bin", bytes));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, bytes);
  EXPECT_EQ(ReadFile(Write("empty", "")).value_or("x"), "");
}

TEST_F(FileTest, ErrorsSayWhatWhichAndWhy) {
  const absl::StatusOr<std::string> missing = ReadFile(dir_ + "/nope", "the API key file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot read the API key file '" + dir_ + "/nope': No such file or directory");
  const absl::StatusOr<std::string> dir = ReadFile(dir_, "manifest");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
  if (geteuid() != 0) {  // root reads anything
    const std::string secret = Write("secret", "k");
    ASSERT_EQ(chmod(secret.c_str(), 0), 0);
    EXPECT_EQ(ReadFile(secret).status().code(), absl::StatusCode::kPermissionDenied);
  }
}

TEST_F(FileTest, AFileOverTheLimitIsRefusedBeforeItIsRead) {
  const std::string path = Write("big", std::string(1001, 'x'));
  EXPECT_TRUE(ReadFile(path, "config", 1001).ok());
  const absl::StatusOr<std::string> big = ReadFile(path, "config", 1000);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("1001 bytes; the limit is 1000"), std::string::npos)
      << big.status();
}

TEST_F(FileTest, ReadFileOrEmptyIsEmptyWhenThereIsNoFile) {
  EXPECT_EQ(ReadFileOrEmpty(dir_ + "/nope"), "");
  EXPECT_EQ(ReadFileOrEmpty(Write("log", "line\n")), "line\n");
}

TEST_F(FileTest, WithBaseNameHidesTheFolder) {
  const std::string path = dir_ + "/tokenizer.json";
  const absl::Status hidden = WithBaseName(ReadFile(path, "tokenizer file").status(), path);
  EXPECT_EQ(hidden.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(hidden.message(),
            "cannot read tokenizer file 'tokenizer.json': No such file or directory");
  EXPECT_TRUE(WithBaseName(absl::OkStatus(), path).ok());
}

// The one errno-to-status mapping: the code says what a client can do about
// it, the message says what and why.
TEST(ErrnoStatusTest, MapsMissingAndForbiddenPathsAndKeepsTheReason) {
  const absl::Status missing = ErrnoStatus(ENOENT, "opening 'a.bin'");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "opening 'a.bin': No such file or directory");
  EXPECT_EQ(ErrnoStatus(ENOTDIR, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
  const absl::Status io = ErrnoStatus(EIO, "reading 'a.bin'");
  EXPECT_EQ(io.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(io.message(), "reading 'a.bin': Input/output error");
}

}  // namespace
}  // namespace fca
