#include "common/sha256.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace fca {
namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                      "hijklmnoijklmnop"
                      "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, OneMillionA) {
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same message fed 1000 bytes at a time.
  Sha256 hasher;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) hasher.Update(chunk);
  EXPECT_EQ(hasher.FinishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The "extremely long message" vector (16,777,216 repetitions of a 64-byte
// string, 1 GiB: a bit length past 2^32), fed in pieces that straddle block
// boundaries.
TEST(Sha256Test, OneGibibyteInPieces) {
  const std::string unit = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno";
  std::string block;
  for (int i = 0; i < 4096; ++i) block += unit;  // 256 KiB
  const size_t total = size_t{1} << 30;
  Sha256 hasher;
  size_t fed = 0;
  size_t offset = 0;  // where in `block` the next piece starts
  size_t piece = 1;
  while (fed < total) {
    const size_t n = std::min({piece, block.size() - offset, total - fed});
    hasher.Update(block.data() + offset, n);
    fed += n;
    offset = (offset + n) % block.size();
    piece = piece * 7 % 300007 + 13;  // sizes from bytes to ~300 KB, unaligned
  }
  EXPECT_EQ(hasher.FinishHex(), "50e72a0e26442fe2552dc3938ac58658228c0cbfb1d2ca872ae435266fcd055e");
  EXPECT_TRUE(hasher.status().ok()) << hasher.status();
}

TEST(Sha256Test, PaddingBoundaries) {
  // Lengths around the 55/56/64-byte padding edges, checked against the
  // incremental path fed byte by byte.
  for (size_t len : {55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u}) {
    const std::string msg(len, 'x');
    Sha256 hasher;
    for (char c : msg) hasher.Update(&c, 1);
    EXPECT_EQ(hasher.FinishHex(), Sha256Hex(msg)) << len;
  }
  // Known value for a 64-byte message (one full block plus a padding block).
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  std::string msg;
  for (int i = 0; i < 5000; ++i) msg.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  const std::string expected = Sha256Hex(msg);
  for (size_t split : {1u, 3u, 7u, 63u, 64u, 65u, 127u, 1000u, 4999u}) {
    Sha256 hasher;
    size_t pos = 0;
    size_t step = split;
    while (pos < msg.size()) {
      const size_t n = std::min(step, msg.size() - pos);
      hasher.Update(msg.data() + pos, n);
      pos += n;
      step = step * 3 % 101 + 1;  // vary the chunk sizes
    }
    EXPECT_EQ(hasher.FinishHex(), expected) << split;
  }
  Sha256 with_empty;
  with_empty.Update("", 0);
  with_empty.Update("ab");
  with_empty.Update(nullptr, 0);
  with_empty.Update("c");
  EXPECT_EQ(with_empty.FinishHex(), Sha256Hex("abc"));
}

TEST(Sha256Test, FinishBytesMatchHex) {
  Sha256 hasher;
  hasher.Update("abc");
  const std::array<uint8_t, 32> digest = hasher.Finish();
  EXPECT_EQ(digest[0], 0xba);
  EXPECT_EQ(digest[1], 0x78);
  EXPECT_EQ(digest[31], 0xad);
}

// An OpenSSL whose configuration loads no provider that offers SHA-256 (only
// the null provider): every digest is refused as an error, none is returned
// as if valid. In a fresh process, since OpenSSL reads its configuration once.
TEST(Sha256DeathTest, NoSha256ProviderIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string conf = ::testing::TempDir() + "sha256_test_null_provider.cnf";
  FILE* f = std::fopen(conf.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(
      "openssl_conf = init\n[init]\nproviders = providers\n"
      "[providers]\nnull = null\n[null]\nactivate = 1\n",
      f);
  ASSERT_EQ(std::fclose(f), 0);
  EXPECT_EXIT(
      {
        ::setenv("OPENSSL_CONF", conf.c_str(), 1);
        Sha256 hasher;
        hasher.Update("abc");
        const bool zeros = hasher.FinishHex() == std::string(64, '0');
        const bool refused = hasher.status().code() == absl::StatusCode::kInternal;
        const absl::StatusOr<std::string> file = Sha256FileHex(conf);
        const bool file_refused = file.status().code() == absl::StatusCode::kInternal;
        std::fprintf(stderr, "%s | %s\n", hasher.status().ToString().c_str(),
                     file.status().ToString().c_str());
        std::exit(zeros && refused && file_refused ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "OpenSSL has no SHA-256");
  std::remove(conf.c_str());
}

TEST(Sha256Test, FileHashing) {
  std::string dir = ::testing::TempDir() + "sha256_test_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/data.bin";
  // Larger than the 1 MiB read chunk so the streaming loop runs twice.
  std::string contents((1 << 20) + 12345, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 7);
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
  ASSERT_EQ(std::fclose(f), 0);

  absl::StatusOr<std::string> hex = Sha256FileHex(path);
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(*hex, Sha256Hex(contents));

  const std::string empty_path = dir + "/empty.bin";
  f = std::fopen(empty_path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_EQ(*Sha256FileHex(empty_path),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

  absl::StatusOr<std::string> missing = Sha256FileHex(dir + "/nope.bin");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
  EXPECT_EQ(missing.status().message().find(dir),
            std::string::npos);  // base name only

  std::remove(path.c_str());
  std::remove(empty_path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace fca
