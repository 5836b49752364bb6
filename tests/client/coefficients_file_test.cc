// fca export's files (client/coefficients_file.h): the NPY format 1.0 and
// safetensors layouts checked byte by byte against their specifications.
#include "client/coefficients_file.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "client/exit_codes.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fca::client {
namespace {

namespace v1 = ::fca::v1;
using ::testing::HasSubstr;

// T = 3; site "a.0" with 2 channels, "b.0" with 1: 9 elements.
v1::CoefficientsHeader Header(const std::string& dtype) {
  v1::CoefficientsHeader h;
  h.set_model("fg");
  h.set_weights_sha256("ab12");
  h.set_window_hash("cd34");
  h.set_dtype(dtype);
  h.set_window_length(3);
  auto* a = h.add_sites();
  a->set_name("a.0");
  a->set_channels(2);
  auto* b = h.add_sites();
  b->set_name("b.0");
  b->set_channels(1);
  return h;
}

// Site-major stream: a's [3, 2] block (values 0..5), then b's [3, 1] (10..12).
std::string RawFloat32() {
  const std::vector<float> v = {0, 1, 2, 3, 4, 5, 10, 11, 12};
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST(CoefficientsFileTest, NpyHeaderFollowsTheFormatSpecAndRowsAreTokens) {
  auto file = EncodeCoefficients(Header("float32"), RawFloat32(), CoefficientsFormat::kNpy);
  ASSERT_TRUE(file.ok()) << file.status();
  // Magic "\x93NUMPY", version 1.0, little-endian uint16 header length.
  ASSERT_GT(file->size(), 10u);
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<uint8_t>((*file)[8]) | static_cast<uint8_t>((*file)[9])
                                                                   << 8;
  const size_t data_start = 10 + header_len;
  EXPECT_EQ(data_start % 64, 0u);  // aligned, as the spec asks
  const std::string dict = file->substr(10, header_len);
  EXPECT_EQ(dict.back(), '\n');
  EXPECT_THAT(dict, HasSubstr("'descr': '<f4'"));
  EXPECT_THAT(dict, HasSubstr("'fortran_order': False"));
  EXPECT_THAT(dict, HasSubstr("'shape': (3, 3)"));
  // Row t: a's row t, then b's row t.
  EXPECT_EQ(Floats(file->substr(data_start)), (std::vector<float>{0, 1, 10, 2, 3, 11, 4, 5, 12}));
}

TEST(CoefficientsFileTest, NpyWidensBfloat16Exactly) {
  // bfloat16 of 1.5 is 0x3FC0, of -2 is 0xC000: the upper halves of floats.
  std::string raw;
  const uint16_t values[9] = {0x3FC0, 0xC000, 0x3FC0, 0xC000, 0x3FC0, 0xC000, 0, 0x3F80, 0x4000};
  for (uint16_t v : values)
    raw += std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
  auto file = EncodeCoefficients(Header("bfloat16"), raw, CoefficientsFormat::kNpy);
  ASSERT_TRUE(file.ok()) << file.status();
  const size_t data_start =
      10 + (static_cast<uint8_t>((*file)[8]) | static_cast<uint8_t>((*file)[9]) << 8);
  EXPECT_THAT(file->substr(10, data_start - 10), HasSubstr("'descr': '<f4'"));
  EXPECT_EQ(Floats(file->substr(data_start)),
            (std::vector<float>{1.5f, -2.0f, 0.0f, 1.5f, -2.0f, 1.0f, 1.5f, -2.0f, 2.0f}));
}

TEST(CoefficientsFileTest, SafetensorsHasATensorPerSite) {
  const std::string raw = RawFloat32();
  auto file = EncodeCoefficients(Header("float32"), raw, CoefficientsFormat::kSafetensors);
  ASSERT_TRUE(file.ok()) << file.status();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>((*file)[i]);
  EXPECT_EQ(n % 8, 0u);
  auto header = json::Parse(file->substr(8, n));
  ASSERT_TRUE(header.ok()) << header.status();
  const json::Value* a = header->Find("a.0");
  const json::Value* b = header->Find("b.0");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->Find("dtype")->as_string(), "F32");
  EXPECT_EQ(json::Write(*a->Find("shape")), "[3,2]");
  EXPECT_EQ(json::Write(*a->Find("data_offsets")), "[0,24]");
  EXPECT_EQ(json::Write(*b->Find("shape")), "[3,1]");
  EXPECT_EQ(json::Write(*b->Find("data_offsets")), "[24,36]");
  EXPECT_EQ(header->Find("__metadata__")->Find("weights_sha256")->as_string(), "ab12");
  EXPECT_EQ(file->substr(8 + n), raw);
}

TEST(CoefficientsFileTest, WrongSizeOrDtypeIsRefused) {
  const std::string raw = RawFloat32();
  EXPECT_FALSE(EncodeCoefficients(Header("float32"), raw.substr(4), CoefficientsFormat::kNpy).ok());
  EXPECT_FALSE(EncodeCoefficients(Header("int8"), raw, CoefficientsFormat::kSafetensors).ok());
  // Raw takes the bytes as they came.
  EXPECT_EQ(*EncodeCoefficients(Header("int8"), "xyz", CoefficientsFormat::kRaw), "xyz");
}

TEST(CoefficientsFileTest, FormatFromFlagOrExtension) {
  EXPECT_EQ(*ChooseCoefficientsFormat("", "c.npy"), CoefficientsFormat::kNpy);
  EXPECT_EQ(*ChooseCoefficientsFormat("", "dir/c.safetensors"), CoefficientsFormat::kSafetensors);
  EXPECT_EQ(*ChooseCoefficientsFormat("", "c.bin"), CoefficientsFormat::kRaw);
  EXPECT_EQ(*ChooseCoefficientsFormat("npy", "c.bin"), CoefficientsFormat::kNpy);
  EXPECT_EQ(*ChooseCoefficientsFormat("raw", "c.npy"), CoefficientsFormat::kRaw);
  auto bad = ChooseCoefficientsFormat("csv", "c.npy");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(IsUsageError(bad.status()));
}

// Two windows: the first as RawFloat32, the second with every value + 100.
std::vector<CoefficientsWindow> TwoWindows() {
  CoefficientsWindow first{Header("float32"), RawFloat32()};
  CoefficientsWindow second{Header("float32"), ""};
  second.header.set_window_hash("ef56");
  std::vector<float> v = Floats(first.raw);
  for (float& x : v) x += 100;
  second.raw.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return {first, second};
}

TEST(CoefficientsFileTest, StackedNpyIsEachWindowsTokenMajorArrayInOrder) {
  auto file = EncodeStackedCoefficients(TwoWindows(), CoefficientsFormat::kNpy);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t data_start =
      10 + (static_cast<uint8_t>((*file)[8]) | static_cast<uint8_t>((*file)[9]) << 8);
  EXPECT_EQ(data_start % 64, 0u);
  EXPECT_THAT(file->substr(10, data_start - 10), HasSubstr("'shape': (2, 3, 3)"));
  // [n][t][c]: window 0 as the one-window npy's rows, then window 1's.
  EXPECT_EQ(Floats(file->substr(data_start)),
            (std::vector<float>{0, 1, 10, 2, 3, 11, 4, 5, 12, 100, 101, 110, 102, 103, 111, 104,
                                105, 112}));
}

TEST(CoefficientsFileTest, StackedSafetensorsIsOneTensorWithTheWindowHashes) {
  auto file = EncodeStackedCoefficients(TwoWindows(), CoefficientsFormat::kSafetensors);
  ASSERT_TRUE(file.ok()) << file.status();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>((*file)[i]);
  EXPECT_EQ(n % 8, 0u);
  auto header = json::Parse(file->substr(8, n));
  ASSERT_TRUE(header.ok()) << header.status();
  const json::Value* t = header->Find("coefficients");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Find("dtype")->as_string(), "F32");
  EXPECT_EQ(json::Write(*t->Find("shape")), "[2,3,3]");
  EXPECT_EQ(json::Write(*t->Find("data_offsets")), "[0,72]");
  const json::Value* meta = header->Find("__metadata__");
  EXPECT_EQ(meta->Find("window_hashes")->as_string(), "[\"cd34\",\"ef56\"]");
  EXPECT_EQ(meta->Find("sites")->as_string(), "[[\"a.0\",2],[\"b.0\",1]]");
  EXPECT_EQ(Floats(file->substr(8 + n)).at(9), 100.0f);  // window 1, t 0, a's channel 0
}

TEST(CoefficientsFileTest, StackRefusesMismatchedWindowsNoWindowsAndRaw) {
  std::vector<CoefficientsWindow> windows = TwoWindows();
  windows[1].header.mutable_sites(1)->set_name("c.0");
  auto mismatched = EncodeStackedCoefficients(windows, CoefficientsFormat::kNpy);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(mismatched.status().message(), HasSubstr("cannot be stacked"));
  EXPECT_FALSE(EncodeStackedCoefficients({}, CoefficientsFormat::kNpy).ok());
  auto raw = EncodeStackedCoefficients(TwoWindows(), CoefficientsFormat::kRaw);
  ASSERT_FALSE(raw.ok());
  EXPECT_TRUE(IsUsageError(raw.status()));
}

}  // namespace
}  // namespace fca::client
