// UTF-8, character classes and NFC over the generated Unicode tables (graph/unicode_tables.inc). The
// tables are sorted arrays searched by binary search: small (about 80 KB of source), no start-up work.
#include "graph/unicode.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <iterator>

namespace tilefire::unicode {
namespace {

struct CodePointRange {
  char32_t first;
  char32_t last;
};

struct CombiningClassRange {
  char32_t first;
  char32_t last;
  uint8_t combining_class;
};

struct Decomposition {
  char32_t code_point;
  char32_t first;
  char32_t second;  // 0 when the code point decomposes to one code point (a singleton)
};

#include "graph/unicode_tables.inc"

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kFirstSurrogate = 0xD800;
constexpr char32_t kLastSurrogate = 0xDFFF;

// Hangul syllables decompose and compose by arithmetic (Unicode chapter 3.12), not through the tables.
constexpr char32_t kHangulSyllableBase = 0xAC00;
constexpr char32_t kHangulLeadingBase = 0x1100;  // L: leading consonant jamo
constexpr char32_t kHangulVowelBase = 0x1161;    // V: vowel jamo
constexpr char32_t kHangulTrailingBase = 0x11A7;  // T: one before the first trailing consonant jamo
constexpr char32_t kHangulLeadingCount = 19;
constexpr char32_t kHangulVowelCount = 21;
constexpr char32_t kHangulTrailingCount = 28;  // including "no trailing consonant"
constexpr char32_t kHangulSyllablesPerLeading = kHangulVowelCount * kHangulTrailingCount;
constexpr char32_t kHangulSyllableCount = kHangulLeadingCount * kHangulSyllablesPerLeading;

template <std::size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t code_point) {
  const CodePointRange* range = std::lower_bound(
      std::begin(ranges), std::end(ranges), code_point,
      [](const CodePointRange& r, char32_t cp) { return r.last < cp; });
  return range != std::end(ranges) && range->first <= code_point;
}

uint8_t combining_class(char32_t code_point) {
  if (code_point < kNfcStableBelow) return 0;
  const CombiningClassRange* range = std::lower_bound(
      std::begin(kCombiningClassRanges), std::end(kCombiningClassRanges), code_point,
      [](const CombiningClassRange& r, char32_t cp) { return r.last < cp; });
  return range != std::end(kCombiningClassRanges) && range->first <= code_point ? range->combining_class : 0;
}

const Decomposition* find_decomposition(char32_t code_point) {
  const Decomposition* entry = std::lower_bound(
      std::begin(kDecompositions), std::end(kDecompositions), code_point,
      [](const Decomposition& d, char32_t cp) { return d.code_point < cp; });
  return entry != std::end(kDecompositions) && entry->code_point == code_point ? entry : nullptr;
}

// The primary composite of a pair, or 0 when there is none (U+0000 composes from nothing).
char32_t find_composite(char32_t first, char32_t second) {
  if (second < kNfcStableBelow) return 0;  // the generator checks that nothing there composes backwards
  if (first - kHangulLeadingBase < kHangulLeadingCount && second - kHangulVowelBase < kHangulVowelCount) {
    return kHangulSyllableBase + ((first - kHangulLeadingBase) * kHangulVowelCount + (second - kHangulVowelBase)) *
                                     kHangulTrailingCount;
  }
  if (first - kHangulSyllableBase < kHangulSyllableCount && (first - kHangulSyllableBase) % kHangulTrailingCount == 0 &&
      second - kHangulTrailingBase - 1 < kHangulTrailingCount - 1) {
    return first + (second - kHangulTrailingBase);
  }
  const uint16_t* index = std::lower_bound(
      std::begin(kCompositionIndexes), std::end(kCompositionIndexes), first, [second](uint16_t i, char32_t f) {
        const Decomposition& d = kDecompositions[i];
        return d.first < f || (d.first == f && d.second < second);
      });
  if (index == std::end(kCompositionIndexes)) return 0;
  const Decomposition& d = kDecompositions[*index];
  return d.first == first && d.second == second ? d.code_point : 0;
}

// While a segment is normalized, each element of the buffer carries its combining class in bits 24..31
// above the code point (21 bits), so ordering and composition look the class up once per code point.
constexpr unsigned kClassShift = 24;
constexpr char32_t kCodePointMask = (char32_t{1} << kClassShift) - 1;

char32_t with_class(char32_t code_point) { return code_point | char32_t{combining_class(code_point)} << kClassShift; }
unsigned class_of(char32_t packed) { return packed >> kClassShift; }

// Appends the full canonical decomposition of `code_point` (not yet in canonical order).
void append_decomposition(char32_t code_point, std::u32string& out) {
  if (char32_t s = code_point - kHangulSyllableBase; s < kHangulSyllableCount) {
    out.push_back(kHangulLeadingBase + s / kHangulSyllablesPerLeading);  // jamo are starters: class 0
    out.push_back(kHangulVowelBase + s % kHangulSyllablesPerLeading / kHangulTrailingCount);
    if (s % kHangulTrailingCount != 0) out.push_back(kHangulTrailingBase + s % kHangulTrailingCount);
    return;
  }
  const Decomposition* d = find_decomposition(code_point);
  if (d == nullptr) {
    out.push_back(with_class(code_point));
    return;
  }
  append_decomposition(d->first, out);  // decompositions nest (U+1E08 -> U+00C7 U+0301 -> C U+0327 U+0301)
  if (d->second != 0) append_decomposition(d->second, out);
}

// Puts each run of non-starters in [first, last) in canonical order: a stable sort by combining class.
void order_marks(char32_t* first, char32_t* last) {
  const auto by_class = [](char32_t a, char32_t b) { return class_of(a) < class_of(b); };
  while (first != last) {
    first = std::find_if(first, last, [](char32_t p) { return class_of(p) != 0; });
    char32_t* run_end = std::find_if(first, last, [](char32_t p) { return class_of(p) == 0; });
    // Runs are short in real text (one to three marks): an insertion sort, with no buffer. Runs as long as
    // a crafted input likes go to std::stable_sort, which keeps them O(n log n).
    if (run_end - first > 32) {
      std::stable_sort(first, run_end, by_class);
    } else {
      for (char32_t* i = first + 1; i < run_end; ++i) {
        const char32_t moving = *i;
        char32_t* j = i;
        for (; j != first && by_class(moving, j[-1]); --j) *j = j[-1];
        *j = moving;
      }
    }
    first = run_end;
  }
}

// Canonical composition (UAX #15, D117) of the ordered decomposition in out[begin..], in place; strips the
// class bits. A code point joins the last starter when nothing between them blocks it: either they are
// adjacent, or every code point left between them has a lower class than it (after ordering, the last one
// left has the highest class).
void compose(std::u32string& out, std::size_t begin) {
  char32_t* text = out.data() + begin;
  const std::size_t length = out.size() - begin;
  std::size_t written = 0;
  std::size_t starter = 0;
  bool have_starter = false;
  unsigned last_class = 0;  // of text[written - 1]
  for (std::size_t read = 0; read < length; ++read) {
    const char32_t packed = text[read];
    const unsigned cls = class_of(packed);
    if (have_starter && (written == starter + 1 || last_class < cls)) {
      // Every primary composite is a starter (the generator checks), so its class bits stay 0.
      if (char32_t composite = find_composite(text[starter], packed & kCodePointMask); composite != 0) {
        text[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = written;
      have_starter = true;
    }
    last_class = cls;
    text[written++] = packed & kCodePointMask;
  }
  out.resize(begin + written);
}

// Appends NFC of a segment that starts at the beginning of the text or at a code point below
// kNfcStableBelow, and ends before one (or at the end): nothing outside a segment can affect it.
void append_nfc_segment(std::u32string_view segment, std::u32string& out) {
  const std::size_t begin = out.size();
  for (char32_t code_point : segment) append_decomposition(code_point, out);
  order_marks(out.data() + begin, out.data() + out.size());
  compose(out, begin);
}

bool nfc_stable(char32_t code_point) { return code_point < kNfcStableBelow; }

}  // namespace

std::optional<std::size_t> decode_utf8(std::string_view bytes, std::u32string& out) {
  out.reserve(out.size() + bytes.size());
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t size = bytes.size();
  std::size_t at = 0;
  while (at < size) {
    const unsigned lead = data[at];
    if (lead < 0x80) {
      out.push_back(lead);
      ++at;
      continue;
    }
    std::size_t length = 0;
    char32_t code_point = 0;
    char32_t shortest = 0;  // the least value that needs this many bytes (less is an overlong form)
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, code_point = lead & 0x1F, shortest = 0x80;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3, code_point = lead & 0x0F, shortest = 0x800;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, code_point = lead & 0x07, shortest = 0x10000;
    } else {
      return at;  // a continuation byte, C0/C1 (always overlong) or F5..FF (always above U+10FFFF)
    }
    if (size - at < length) return at;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned byte = data[at + k];
      if ((byte & 0xC0) != 0x80) return at;
      code_point = code_point << 6 | (byte & 0x3F);
    }
    if (code_point < shortest || code_point > kMaxCodePoint ||
        (code_point >= kFirstSurrogate && code_point <= kLastSurrogate)) {
      return at;
    }
    out.push_back(code_point);
    at += length;
  }
  return std::nullopt;
}

bool code_point_at(std::string_view text, std::size_t at, std::size_t end, char32_t& out) {
  std::u32string points;
  if (decode_utf8(text.substr(at, end - at), points) || points.size() != 1) return false;
  out = points[0];
  return true;
}

void append_utf8(char32_t code_point, std::string& out) {
  assert(code_point <= kMaxCodePoint && !(code_point >= kFirstSurrogate && code_point <= kLastSurrogate));
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | code_point >> 6));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | code_point >> 12));
    out.push_back(static_cast<char>(0x80 | (code_point >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | code_point >> 18));
    out.push_back(static_cast<char>(0x80 | (code_point >> 12 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t code_point : code_points) append_utf8(code_point, out);
  return out;
}

bool is_letter(char32_t code_point) {
  if (code_point < 0x80) return (code_point | 0x20) - U'a' < 26;
  return in_ranges(kLetterRanges, code_point);
}

bool is_number(char32_t code_point) {
  if (code_point < 0x80) return code_point - U'0' < 10;
  return in_ranges(kNumberRanges, code_point);
}

bool is_lowercase_letter(char32_t code_point) {
  if (code_point < 0x80) return code_point - U'a' < 26;
  return in_ranges(kLowercaseLetterRanges, code_point);
}

bool is_upper_or_titlecase_letter(char32_t code_point) {
  if (code_point < 0x80) return code_point - U'A' < 26;
  return in_ranges(kUpperOrTitlecaseLetterRanges, code_point);
}

bool is_mark(char32_t code_point) {
  if (code_point < 0x80) return false;
  return in_ranges(kMarkRanges, code_point);
}

bool is_white_space(char32_t code_point) {
  if (code_point < 0x80) return code_point == U' ' || (code_point >= U'\t' && code_point <= U'\r');
  return in_ranges(kWhiteSpaceRanges, code_point);
}

std::u32string to_nfc(std::u32string_view code_points) {
  const auto end = code_points.end();
  if (std::all_of(code_points.begin(), end, nfc_stable)) return std::u32string(code_points);
  std::u32string out;
  out.reserve(code_points.size() + code_points.size() / 4 + 4);  // decomposition grows the text before composing
  // Runs of code points below kNfcStableBelow are copied as they are, except the last of a run, which may
  // compose with the code point that follows: it opens the segment that goes through the full algorithm.
  auto at = code_points.begin();
  while (at != end) {
    const auto run_end = std::find_if_not(at, end, nfc_stable);
    if (run_end == end) {
      out.append(at, end);
      break;
    }
    const auto segment_begin = run_end == at ? at : run_end - 1;
    out.append(at, segment_begin);
    const auto segment_end = std::find_if(run_end + 1, end, nfc_stable);
    append_nfc_segment(std::u32string_view(segment_begin, segment_end), out);
    at = segment_end;
  }
  return out;
}

}  // namespace tilefire::unicode
