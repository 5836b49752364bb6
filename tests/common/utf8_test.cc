// common/utf8.h against the Unicode Standard's chapter 3.9: every boundary of
// table 3-7 (well-formed byte sequences), the ill-formed forms around them,
// and the section's maximal-subpart examples (table 3-8 and those after it).
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace fca::utf8 {
namespace {

struct WellFormed {
  std::string bytes;
  char32_t code_point;
};

// Each row of table 3-7 at its lowest and highest sequence.
const WellFormed kTable37[] = {
    {std::string("\x00", 1), 0x0000},
    {"\x7F", 0x007F},
    {"\xC2\x80", 0x0080},
    {"\xDF\xBF", 0x07FF},
    {"\xE0\xA0\x80", 0x0800},
    {"\xE0\xBF\xBF", 0x0FFF},
    {"\xE1\x80\x80", 0x1000},
    {"\xEC\xBF\xBF", 0xCFFF},
    {"\xED\x80\x80", 0xD000},
    {"\xED\x9F\xBF", 0xD7FF},
    {"\xEE\x80\x80", 0xE000},
    {"\xEF\xBF\xBF", 0xFFFF},
    {"\xF0\x90\x80\x80", 0x10000},
    {"\xF0\xBF\xBF\xBF", 0x3FFFF},
    {"\xF1\x80\x80\x80", 0x40000},
    {"\xF3\xBF\xBF\xBF", 0xFFFFF},
    {"\xF4\x80\x80\x80", 0x100000},
    {"\xF4\x8F\xBF\xBF", 0x10FFFF},
};

TEST(Utf8DecodeTest, EveryRowOfTable37AtBothEnds) {
  for (const WellFormed& row : kTable37) {
    const Sequence s = DecodeAt(row.bytes + "z", 0);
    EXPECT_TRUE(s.well_formed) << std::hex << row.code_point;
    EXPECT_EQ(s.code_point, row.code_point);
    EXPECT_EQ(s.length, row.bytes.size()) << std::hex << row.code_point;
    std::string encoded;
    AppendUtf8(row.code_point, &encoded);
    EXPECT_EQ(encoded, row.bytes);
    EXPECT_EQ(FindIllFormed(row.bytes), std::string_view::npos);
  }
}

TEST(Utf8DecodeTest, DecodesAtAPositionInsideText) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC";  // "a", U+00E9, U+20AC
  EXPECT_EQ(DecodeAt(text, 1).code_point, 0xE9u);
  EXPECT_EQ(DecodeAt(text, 3).code_point, 0x20ACu);
  EXPECT_EQ(DecodeAt(text, 3).length, 3u);
}

struct IllFormed {
  const char* what;
  std::string bytes;
  size_t maximal_subpart;
};

const IllFormed kIllFormed[] = {
    // Bytes that start nothing.
    {"continuation 80", "\x80\x80", 1},
    {"continuation BF", "\xBF", 1},
    {"C0 (only overlongs)", "\xC0\x80", 1},
    {"C1 (only overlongs)", "\xC1\xBF", 1},
    {"F5 (above U+10FFFF)", "\xF5\x80\x80\x80", 1},
    {"F8 (five-byte form)", "\xF8\x88\x80\x80\x80", 1},
    {"FF", "\xFF", 1},
    // A lead byte whose next byte is outside its range in table 3-7.
    {"C2 then ASCII", "\xC2\x7F", 1},
    {"C2 then a lead", "\xC2\xC0", 1},
    {"DF then ASCII", "\xDF\x41", 1},
    {"overlong E0 9F", "\xE0\x9F\xBF", 1},
    {"overlong E0 80", "\xE0\x80\xAF", 1},
    {"surrogate ED A0 (U+D800)", "\xED\xA0\x80", 1},
    {"surrogate ED BF (U+DFFF)", "\xED\xBF\xBF", 1},
    {"overlong F0 8F", "\xF0\x8F\xBF\xBF", 1},
    {"overlong F0 80", "\xF0\x80\x80\xAF", 1},
    {"above U+10FFFF: F4 90", "\xF4\x90\x80\x80", 1},
    {"above U+10FFFF: F4 BF", "\xF4\xBF\xBF\xBF", 1},
    // A good start whose third or fourth byte is outside 80..BF.
    {"E0 A0 then ASCII", "\xE0\xA0\x41", 2},
    {"E1 80 then C0", "\xE1\x80\xC0", 2},
    {"ED 9F then ASCII", "\xED\x9F\x41", 2},
    {"F0 90 80 then ASCII", "\xF0\x90\x80\x41", 3},
    {"F4 8F BF then C0", "\xF4\x8F\xBF\xC0", 3},
    {"F1 80 then ASCII", "\xF1\x80\x41\x80", 2},
    // Cut short by the end of the text.
    {"truncated C2", "\xC2", 1},
    {"truncated E0", "\xE0", 1},
    {"truncated E0 A0", "\xE0\xA0", 2},
    {"truncated ED 9F", "\xED\x9F", 2},
    {"truncated F0 90", "\xF0\x90", 2},
    {"truncated F3 BF BF", "\xF3\xBF\xBF", 3},
    {"truncated F4 8F BF", "\xF4\x8F\xBF", 3},
};

TEST(Utf8DecodeTest, IllFormedGivesItsMaximalSubpart) {
  for (const IllFormed& c : kIllFormed) {
    const Sequence s = DecodeAt(c.bytes, 0);
    EXPECT_FALSE(s.well_formed) << c.what;
    EXPECT_EQ(s.length, c.maximal_subpart) << c.what;
    EXPECT_EQ(s.code_point, kReplacementCharacter) << c.what;
    EXPECT_EQ(FindIllFormed("ok " + c.bytes), 3u) << c.what;
  }
}

TEST(Utf8DecodeTest, NeverReadsPastTheView) {
  // The byte after the view would complete the sequence; the view ends first.
  const std::string whole = "\xE2\x82\xAC";
  const Sequence s = DecodeAt(std::string_view(whole).substr(0, 2), 0);
  EXPECT_FALSE(s.well_formed);
  EXPECT_EQ(s.length, 2u);
}

// One U+FFFD per maximal subpart: the Unicode Standard's recommended
// practice, which the tokenizer's lossy decoding follows.
std::u32string Replaced(std::string_view text) {
  std::u32string out;
  for (size_t pos = 0; pos < text.size();) {
    const Sequence s = DecodeAt(text, pos);
    out += s.code_point;
    pos += s.length;
  }
  return out;
}

TEST(Utf8DecodeTest, MaximalSubpartExamplesOfTheStandard) {
  constexpr char32_t R = kReplacementCharacter;
  // Table 3-8 (use of U+FFFD in UTF-8 conversion).
  EXPECT_EQ(Replaced("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            (std::u32string{'a', R, R, R, 'b', R, 'c', R, R, 'd'}));
  // The section's further examples: non-shortest forms, surrogates and
  // other bytes that start nothing give a U+FFFD each; a truncated
  // sequence gives one.
  EXPECT_EQ(Replaced("\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41"),
            (std::u32string{R, R, R, R, R, R, R, R, 'A'}));
  EXPECT_EQ(Replaced("\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41"),
            (std::u32string{R, R, R, R, R, R, R, R, 'A'}));
  EXPECT_EQ(Replaced("\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42"),
            (std::u32string{R, R, R, R, R, 'A', R, R, 'B'}));
  EXPECT_EQ(Replaced("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41"), (std::u32string{R, R, R, R, 'A'}));
}

TEST(Utf8MarkTest, EachBadByteBecomesAQuestionMark) {
  EXPECT_EQ(MarkIllFormedBytes("plain \xC3\xA9 \xF0\x9F\x98\x80"),
            "plain \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(MarkIllFormedBytes("\xE1\x80\xC2"), "???");  // a byte each, not a subpart each
  EXPECT_EQ(MarkIllFormedBytes("\xED\xA0\x80x"), "???x");
  EXPECT_EQ(MarkIllFormedBytes(""), "");
}

TEST(Utf8MarkTest, CutsBetweenSequences) {
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(MarkIllFormedBytes("ab" + euro, 4), "ab");
  EXPECT_EQ(MarkIllFormedBytes("ab" + euro, 5), "ab" + euro);
  EXPECT_EQ(MarkIllFormedBytes("a\xFF\xFF", 2), "a?");
  EXPECT_EQ(MarkIllFormedBytes("abc", 0), "");
}

}  // namespace
}  // namespace fca::utf8
