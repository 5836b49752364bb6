#include "server/engine/io/weights_hash_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "server/engine/io/safetensors.h"

namespace fca::engine {
namespace {

class WeightsHashCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "weights_hash_cache_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
    cache_path_ = Path("weights.cache");
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Bytes that differ from file to file and from position to position.
  static std::string Contents(size_t size, int seed) {
    std::string s(size, '\0');
    for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + seed * 7919) >> 3);
    return s;
  }

  static void Write(const std::string& path, const std::string& contents) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
    ASSERT_EQ(std::fclose(f), 0);
  }

  static std::string Read(const std::string& path) { return ReadFileOrEmpty(path); }

  // The cache remembers only files whose last change is older than
  // kSettleNanos when hashing begins.
  static void LetFilesSettle() {
    std::this_thread::sleep_for(
        std::chrono::nanoseconds(WeightsHashCache::kSettleNanos + 50'000'000));
  }

  static struct timespec MtimeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st.st_mtim;
  }

  static void SetMtime(const std::string& path, struct timespec mtime) {
    const struct timespec times[2] = {{0, UTIME_OMIT}, mtime};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }

  // The entries of the cache file as written, or -1 when it does not parse.
  int64_t EntriesInCacheFile() const {
    absl::StatusOr<json::Value> doc = json::Parse(Read(cache_path_));
    if (!doc.ok() || doc->Find("entries") == nullptr) return -1;
    return static_cast<int64_t>(doc->Find("entries")->as_array().size());
  }

  std::string dir_;
  std::string cache_path_;
};

TEST_F(WeightsHashCacheTest, DigestIsTheSha256OfTheFilesInOrder) {
  const std::string a = Contents((1 << 20) + 4321, 1), b = Contents(777, 2);
  Write(Path("a.bin"), a);
  Write(Path("b.bin"), b);
  const std::vector<std::string> files = {Path("a.bin"), Path("b.bin")};

  absl::StatusOr<std::string> plain = Sha256OfFiles(files);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, Sha256Hex(a + b));
  EXPECT_NE(*plain, *Sha256OfFiles({Path("b.bin"), Path("a.bin")}));

  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  absl::StatusOr<std::string> cached = cache->Sha256Of(files);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(*cached, *plain);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_EQ(cache->stats().bytes_hashed, static_cast<int64_t>(a.size() + b.size()));
}

TEST_F(WeightsHashCacheTest, ErrorsNameTheFileNotItsFolder) {
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  absl::StatusOr<std::string> missing = cache->Sha256Of({Path("absent.safetensors")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent.safetensors"), std::string::npos);
  EXPECT_EQ(missing.status().message().find(dir_), std::string::npos);

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(Sha256OfFiles({Path("fifo")}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A second process start: the digest comes from the cache file, and the
// weights are not read (a forged digest for the file's exact identity comes
// back, which reading the file could not give).
TEST_F(WeightsHashCacheTest, HitDoesNotReadTheFiles) {
  const std::string contents = Contents(300000, 3);
  Write(Path("model.safetensors"), contents);
  LetFilesSettle();
  const std::vector<std::string> files = {Path("model.safetensors")};
  ASSERT_EQ(*WeightsHashCache::Open(cache_path_)->Sha256Of(files), Sha256Hex(contents));
  ASSERT_EQ(EntriesInCacheFile(), 1);

  std::unique_ptr<WeightsHashCache> restarted = WeightsHashCache::Open(cache_path_);
  EXPECT_EQ(*restarted->Sha256Of(files), Sha256Hex(contents));
  EXPECT_EQ(*restarted->Sha256Of(files), Sha256Hex(contents));
  EXPECT_EQ(restarted->stats().hits, 2);
  EXPECT_EQ(restarted->stats().misses, 0);
  EXPECT_EQ(restarted->stats().bytes_hashed, 0);

  const std::string forged = Sha256Hex("not the file's contents");
  std::string text = Read(cache_path_);
  const size_t at = text.find(Sha256Hex(contents));
  ASSERT_NE(at, std::string::npos);
  text.replace(at, forged.size(), forged);
  Write(cache_path_, text);
  EXPECT_EQ(*WeightsHashCache::Open(cache_path_)->Sha256Of(files), forged);
}

TEST_F(WeightsHashCacheTest, ChangedFilesAreHashedAgain) {
  const std::string path = Path("model.safetensors");
  const std::string before = Contents(200000, 4);
  Write(path, before);
  LetFilesSettle();
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  ASSERT_EQ(*cache->Sha256Of({path}), Sha256Hex(before));

  // touch: same bytes, a new modification time.
  struct timespec mtime = MtimeOf(path);
  mtime.tv_sec -= 3600;
  SetMtime(path, mtime);
  EXPECT_EQ(*cache->Sha256Of({path}), Sha256Hex(before));
  EXPECT_EQ(cache->stats().misses, 2);

  // Rewritten in place, same size, modification time set back as `touch -d`
  // or `rsync -t` would: the status-change time still tells.
  LetFilesSettle();
  ASSERT_EQ(*cache->Sha256Of({path}), Sha256Hex(before));  // remembered again
  const int64_t misses = cache->stats().misses;
  const struct timespec original = MtimeOf(path);
  const std::string after = Contents(before.size(), 5);
  Write(path, after);
  SetMtime(path, original);
  EXPECT_EQ(*cache->Sha256Of({path}), Sha256Hex(after));
  EXPECT_EQ(cache->stats().misses, misses + 1);

  // Replaced by rename with the same size and modification time: a new inode.
  LetFilesSettle();
  ASSERT_EQ(*cache->Sha256Of({path}), Sha256Hex(after));
  const std::string replacement = Contents(before.size(), 6);
  Write(Path("new.tmp"), replacement);
  SetMtime(Path("new.tmp"), MtimeOf(path));
  ASSERT_EQ(std::rename(Path("new.tmp").c_str(), path.c_str()), 0);
  EXPECT_EQ(*WeightsHashCache::Open(cache_path_)->Sha256Of({path}), Sha256Hex(replacement));
}

TEST_F(WeightsHashCacheTest, CorruptCacheFileIsIgnoredAndRewritten) {
  const std::string contents = Contents(5000, 7);
  Write(Path("model.safetensors"), contents);
  LetFilesSettle();
  const std::vector<std::string> files = {Path("model.safetensors")};
  const std::string valid_entry =
      absl::StrCat(R"({"sha256": ")", Sha256Hex("x"), R"(", "files": [{"path": "/p", "size": 1, )",
                   R"("mtime_ns": 1, "ctime_ns": 1, "device": "1", "inode": "1"}]})");
  const std::vector<std::string> corrupt = {
      std::string("\0\0\0garbage", 10),
      R"({"format": "fca weights hash cache 1", "entries": [)",  // truncated
      R"({"format": "another program's cache", "entries": []})",
      R"({"format": "fca weights hash cache 1", "entries": {}})",
      absl::StrCat(R"({"format": "fca weights hash cache 1", "entries": [)", valid_entry,
                   R"(, {"sha256": "NOT HEX", "files": []}]})"),
      "",
  };
  for (const std::string& text : corrupt) {
    Write(cache_path_, text);
    std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
    absl::StatusOr<std::string> digest = cache->Sha256Of(files);
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, Sha256Hex(contents));
    EXPECT_EQ(cache->stats().misses, 1);
    // Rewritten: the next start reads it and hashes nothing.
    EXPECT_EQ(EntriesInCacheFile(), 1) << text;
    std::unique_ptr<WeightsHashCache> next = WeightsHashCache::Open(cache_path_);
    EXPECT_EQ(*next->Sha256Of(files), Sha256Hex(contents));
    EXPECT_EQ(next->stats().misses, 0) << text;
  }
}

TEST_F(WeightsHashCacheTest, EntriesOfGoneFilesAreDroppedAtTheNextWrite) {
  Write(Path("a.safetensors"), Contents(1000, 8));
  Write(Path("b.safetensors"), Contents(1000, 9));
  LetFilesSettle();
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  ASSERT_TRUE(cache->Sha256Of({Path("a.safetensors")}).ok());
  ASSERT_EQ(EntriesInCacheFile(), 1);
  ASSERT_EQ(std::remove(Path("a.safetensors").c_str()), 0);
  ASSERT_TRUE(cache->Sha256Of({Path("b.safetensors")}).ok());
  EXPECT_EQ(EntriesInCacheFile(), 1);
  EXPECT_NE(Read(cache_path_).find("b.safetensors"), std::string::npos);
  EXPECT_EQ(Read(cache_path_).find("a.safetensors"), std::string::npos);
}

// A file changed a moment before it was hashed might change again within
// the same timestamp tick without its identity showing it: not remembered.
TEST_F(WeightsHashCacheTest, FilesChangedJustBeforeHashingAreNotRemembered) {
  const std::string path = Path("model.safetensors");
  const auto written = std::chrono::system_clock::now();
  Write(path, Contents(1000, 10));
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  ASSERT_TRUE(cache->Sha256Of({path}).ok());
  ASSERT_TRUE(cache->Sha256Of({path}).ok());
  if (std::chrono::system_clock::now() - written >=
      std::chrono::nanoseconds(WeightsHashCache::kSettleNanos)) {
    GTEST_SKIP() << "this machine took longer than the settling time to get here";
  }
  EXPECT_EQ(cache->stats().misses, 2);
  EXPECT_NE(::access(cache_path_.c_str(), F_OK), 0);
}

TEST_F(WeightsHashCacheTest, UnwritableCacheStillAnswers) {
  const std::string contents = Contents(1000, 11);
  Write(Path("model.safetensors"), contents);
  LetFilesSettle();
  std::unique_ptr<WeightsHashCache> cache =
      WeightsHashCache::Open(Path("no-such-folder/weights.cache"));
  EXPECT_EQ(*cache->Sha256Of({Path("model.safetensors")}), Sha256Hex(contents));
  // Remembered in memory all the same.
  EXPECT_EQ(*cache->Sha256Of({Path("model.safetensors")}), Sha256Hex(contents));
  EXPECT_EQ(cache->stats().hits, 1);
}

TEST_F(WeightsHashCacheTest, MemoryOnlyCacheWritesNothing) {
  const std::string contents = Contents(1000, 12);
  Write(Path("model.safetensors"), contents);
  LetFilesSettle();
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open("");
  EXPECT_EQ(*cache->Sha256Of({Path("model.safetensors")}), Sha256Hex(contents));
  EXPECT_EQ(*cache->Sha256Of({Path("model.safetensors")}), Sha256Hex(contents));
  EXPECT_EQ(cache->stats().hits, 1);
  EXPECT_EQ(cache->stats().misses, 1);
}

// The weights identity of a sharded checkpoint is the same with or without
// the cache.
TEST_F(WeightsHashCacheTest, TensorSourceContentSha256UsesTheCache) {
  std::vector<TensorData> tensors;
  for (int i = 0; i < 4; ++i) {
    tensors.push_back({absl::StrCat("t", i), DType::kU8, {1000}, Contents(1000, 20 + i)});
  }
  ASSERT_TRUE(WriteShardedSafetensors(dir_, tensors, 2500).ok());
  LetFilesSettle();
  absl::StatusOr<std::unique_ptr<TensorSource>> source = TensorSource::OpenDir(dir_);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_GT((*source)->files().size(), 1u);
  std::unique_ptr<WeightsHashCache> cache = WeightsHashCache::Open(cache_path_);
  const std::string uncached = *(*source)->ContentSha256();
  EXPECT_EQ(*(*source)->ContentSha256(cache.get()), uncached);
  EXPECT_EQ(*(*source)->ContentSha256(cache.get()), uncached);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_EQ(cache->stats().hits, 1);
}

}  // namespace
}  // namespace fca::engine
