// The byte automaton of a compiled JSON Schema (tilefire/json_schema.h). Each alternative reads one value
// at a time: the frame on top takes the byte, or, when it is a number or literal that may end there, ends
// and hands the byte to the frame below. A container's frame checks, before it lets a key, an item or a
// close through, that what must still come can come within the nesting left, so no byte is taken that
// leaves the reply with nothing to go on with.
#include <cstring>

#include "json_schema_node.h"
#include "pattern_string_lexer.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using Node = JsonSchema::Node;
using Frame = JsonSchemaBytes::Frame;

// Frame phases. The document's frame:
enum : uint8_t { kRootValue, kRootInValue, kRootDone };
// An object's: after '{', after ',', in a key, after a key, after ':', in a value, after a value.
enum : uint8_t { kObjectFirst, kObjectKey, kObjectInKey, kObjectColon, kObjectValue, kObjectInValue, kObjectAfter };
// An array's: after '[', after ',', in an item, after an item.
enum : uint8_t { kArrayFirst, kArrayItem, kArrayInItem, kArrayAfter };
// A number's: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? (an integer's: without fraction and exponent).
enum : uint8_t { kMinus, kZero, kInteger, kFractionStart, kFraction, kExponentStart, kExponentSign, kExponent };
constexpr int32_t kAdditionalKey = -2;  // an object frame's position: the key read is not a declared one

bool is_whitespace(uint8_t byte) { return byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r'; }
bool is_digit(uint8_t byte) { return byte >= '0' && byte <= '9'; }

struct Lexed {
  bool taken = false;
  bool closed = false;    // the string's closing quote
  bool new_char = false;  // the byte begins a character (JSON Schema's lengths count them)
};

// A string's bytes, as JsonBytes reads them: UTF-8 per RFC 3629, no control characters, escapes with
// surrogates paired. A key beside additionalProperties takes only \" and \\ as escapes, so that equal
// bytes are equal names (a declared key cannot come in disguise as another).
Lexed lex_string(Frame& frame, uint8_t byte, bool key) {
  Lexed lexed;
  if (frame.utf8_left > 0) {
    if (byte < frame.next_low || byte > frame.next_high) return lexed;
    --frame.utf8_left;
    frame.next_low = 0x80;
    frame.next_high = 0xBF;
    lexed.taken = true;
    return lexed;
  }
  switch (frame.escape) {
    case kNoEscape: break;
    case kBackslash:
      if (byte == 'u' && !key) {
        frame.escape = kHexDigits;
        frame.escape_value = 0;
      } else if (std::strchr(key ? "\"\\" : "\"\\/bfnrt", byte) && byte != 0) {
        frame.escape = kNoEscape;
      } else {
        return lexed;
      }
      lexed.taken = true;
      return lexed;
    case kLowBackslash:
      if (byte != '\\') return lexed;
      frame.escape = kLowU;
      lexed.taken = true;
      return lexed;
    case kLowU:
      if (byte != 'u') return lexed;
      frame.escape = kHexDigits;
      lexed.taken = true;
      return lexed;
    default: {  // hex digits; the first two decide whether a surrogate is where it may be
      const int digit = hex_digit_value(byte);
      const int matched = frame.escape - kHexDigits;
      if (digit < 0) return lexed;
      if (frame.low_surrogate && ((matched == 0 && digit != 0xD) || (matched == 1 && digit < 0xC))) return lexed;
      if (!frame.low_surrogate && matched == 1 && frame.escape_value == 0xD && digit >= 0xC) return lexed;
      frame.escape_value = uint16_t(frame.escape_value * 16 + digit);
      lexed.taken = true;
      if (matched + 1 < 4) {
        frame.escape = uint8_t(frame.escape + 1);
        return lexed;
      }
      const bool high = !frame.low_surrogate && frame.escape_value >= 0xD800 && frame.escape_value <= 0xDBFF;
      frame.low_surrogate = high;
      frame.escape = high ? kLowBackslash : kNoEscape;
      frame.escape_value = 0;  // equal states compare equal once an escape is over
      return lexed;
    }
  }
  lexed.taken = true;
  if (byte == '"') {
    lexed.closed = true;
  } else if (byte == '\\') {
    frame.escape = kBackslash;
    lexed.new_char = true;
  } else if (byte < 0x20) {
    lexed.taken = false;
  } else if (byte < 0x80) {
    lexed.new_char = true;
  } else if (byte >= 0xC2 && byte <= 0xDF) {
    frame.utf8_left = 1;
    lexed.new_char = true;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    frame.utf8_left = 2, frame.next_low = byte == 0xE0 ? 0xA0 : 0x80, frame.next_high = byte == 0xED ? 0x9F : 0xBF;
    lexed.new_char = true;
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    frame.utf8_left = 3, frame.next_low = byte == 0xF0 ? 0x90 : 0x80, frame.next_high = byte == 0xF4 ? 0x8F : 0xBF;
    lexed.new_char = true;
  } else {
    lexed.taken = false;
  }
  return lexed;
}

void emit(std::vector<JsonSchemaBytes::Alternative>& out, const JsonSchemaBytes::Alternative& alternative) {
  if (out.size() >= kMostSchemaAlternatives) return;  // fewer branches followed: a stricter reply, still valid
  for (const auto& present : out)
    if (present == alternative) return;
  out.push_back(alternative);
}

// The counter a bounded count keeps: past its largest bound it stays there (so equal states compare equal).
uint32_t counted(uint32_t count, uint32_t min, uint32_t max) {
  const uint32_t cap = max != kUnfinishable ? max : min;
  return count < cap ? count + 1 : cap;
}

// A bounded number's frame (json_schema_numbers.cpp): its digits so far in `seen`, how many in `count`,
// how many after the point in `position` (from the point on).
NumberPrefix number_prefix(const JsonSchemaBytes::Frame& frame) {
  NumberPrefix prefix;
  prefix.negative = frame.negative;
  prefix.begun = frame.phase != kMinus;
  prefix.zero = frame.phase == kZero;
  prefix.value = frame.seen;
  prefix.digits = frame.count;
  prefix.fraction_digits = frame.phase == kFractionStart || frame.phase == kFraction ? frame.position : -1;
  return prefix;
}

void set_number_prefix(JsonSchemaBytes::Frame& frame, const NumberPrefix& prefix) {
  frame.seen = prefix.value;
  frame.count = prefix.digits;
  frame.position = prefix.fraction_digits < 0 ? 0 : prefix.fraction_digits;
}

// A string held to a pattern: whether a character within [low, high] may come next, leading to a pattern
// state from which a match can still end within the lengths left (its count: the characters so far,
// capped as counted() caps it).
bool pattern_can_write(const Node& node, const Frame& frame, uint32_t low, uint32_t high) {
  if (frame.count >= node.max_length) return false;
  const uint32_t least_after = node.min_length > frame.count + 1 ? node.min_length - frame.count - 1 : 0;
  const uint32_t most_after = node.max_length == kUnfinishable ? UINT32_MAX : node.max_length - frame.count - 1;
  for (const StringPattern::Transition& transition : node.pattern->transitions(frame.position))
    if (transition.high >= low && transition.low <= high && node.pattern_lengths.can_end(transition.target, least_after, most_after))
      return true;
  return false;
}

// Writes a whole character that pattern_can_write allowed.
void pattern_write(const Node& node, Frame& frame, uint32_t code_point) {
  frame.position = node.pattern->next(frame.position, code_point);
  if (node.min_length > 0 || node.max_length != kUnfinishable) frame.count = counted(frame.count, node.min_length, node.max_length);
  clear_character(frame);
}

}  // namespace

JsonSchemaBytes::JsonSchemaBytes(JsonSchemaMatcher* matcher) : matcher_(matcher) {}

bool JsonSchemaBytes::feed(uint8_t byte) {
  // Most bytes fed are a string's plain ASCII characters: they leave a string's state as it was (one that
  // counts its characters excepted), and move a pattern's string's state in place.
  if (byte >= 0x20 && byte < 0x80 && byte != '"' && byte != '\\' && alternatives_.size() == 1) {
    Frame& top = alternatives_[0].top;
    if (top.node >= 0 && !top.utf8_left && !top.escape) {
      const Node& node = matcher_->schema_->compiled().nodes[size_t(top.node)];
      if (node.kind == Node::Kind::string && node.pattern) {
        if (!pattern_can_write(node, top, byte, byte)) return false;
        pattern_write(node, top, byte);
        return true;
      }
      if (node.kind == Node::Kind::string && node.min_length == 0 && node.max_length == kUnfinishable) return true;
    }
  }
  std::vector<Alternative>& next = matcher_->next_;
  next.clear();
  for (const Alternative& alternative : alternatives_) matcher_->step(alternative, byte, next);
  if (next.empty()) return false;
  alternatives_ = next;  // assigned over: the vector keeps its storage
  return true;
}

bool JsonSchemaBytes::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

bool JsonSchemaBytes::ended() const {
  for (const Alternative& alternative : alternatives_)
    if (alternative.top.node < 0 && alternative.top.phase == kRootDone) return true;
  return false;
}

const JsonSchema::Node* JsonSchemaBytes::plain_string_node() const {
  if (alternatives_.size() != 1) return nullptr;
  const Frame& frame = alternatives_[0].top;
  if (frame.node < 0 || frame.utf8_left || frame.escape) return nullptr;
  const Node& node = matcher_->schema_->compiled().nodes[size_t(frame.node)];
  return node.kind == Node::Kind::string && !node.pattern ? &node : nullptr;  // a pattern's characters are not all alike
}

uint32_t JsonSchemaBytes::string_budget() const {
  const Node* string = plain_string_node();
  if (!string || string->max_length == kUnfinishable) return UINT32_MAX;
  return string->max_length - alternatives_[0].top.count;  // count never passes max_length
}

bool JsonSchemaBytes::complete() const {
  for (const Alternative& alternative : alternatives_)
    if ((alternative.top.node < 0 && alternative.top.phase == kRootDone) ||
        (alternative.frames == 2 && matcher_->poppable(alternative)))
      return true;
  return false;
}

JsonSchemaMatcher::JsonSchemaMatcher(std::shared_ptr<const JsonSchema> schema, uint32_t most_whitespace)
    : schema_(std::move(schema)), most_whitespace_(uint8_t(checked_whitespace(most_whitespace))) {
  if (!schema_) throw InputError("JsonSchemaMatcher: no schema");
}

JsonSchemaBytes JsonSchemaMatcher::start() {
  JsonSchemaBytes state(this);
  Alternative document;
  document.top.node = -1;
  document.top.phase = kRootValue;
  state.alternatives_.push_back(document);
  return state;
}

size_t JsonSchemaMatcher::CellHash::operator()(const StackCell* cell) const {
  const Frame& frame = cell->frame;
  size_t hash = std::hash<const void*>()(cell->below);
  for (uint64_t part : {uint64_t(uint32_t(frame.node)) << 8 | frame.phase, uint64_t(frame.count) << 32 | uint32_t(frame.position), frame.seen})
    hash = hash * 0x9E3779B97F4A7C15ull + part;
  return hash;
}

const JsonSchemaBytes::StackCell* JsonSchemaMatcher::intern(const Frame& frame, const StackCell* below) {
  const StackCell probe{frame, below};
  if (auto found = interned_.find(&probe); found != interned_.end()) return *found;
  cells_.push_back(probe);
  interned_.insert(&cells_.back());
  return &cells_.back();
}

bool JsonSchemaMatcher::integer_reachable(const Node& node, bool negative, uint32_t digits, uint64_t magnitude) {
  const __int128 low = node.min_value, high = node.max_value;
  if (digits == 0) return low <= 0;  // "-": -0, or any negative integer
  // The magnitudes reachable with k more digits: [magnitude * 10^k, magnitude * 10^k + 10^k - 1] (none
  // after a leading 0), as long as they fit int64.
  __int128 first = magnitude, span = 1;
  for (uint32_t more = 0; digits + more <= 19; ++more) {
    const __int128 last = first + span - 1;
    const __int128 from = negative ? -last : first, to = negative ? -first : last;
    if (from <= high && to >= low) return true;
    if (magnitude == 0) break;
    first *= 10;
    span *= 10;
  }
  return false;
}

bool JsonSchemaMatcher::fits(const Alternative& from, int32_t node) const {
  const uint32_t needed = schema_->compiled().nodes[size_t(node)].min_frames;
  return needed != kUnfinishable && from.frames + needed <= kMostSchemaFrames;
}

// The declared properties an object may still take: not present yet, and with room for their value.
uint64_t JsonSchemaMatcher::open_properties(const Alternative& object) const {
  const Node& node = schema_->compiled().nodes[size_t(object.top.node)];
  uint64_t open = 0;
  for (size_t i = 0; i < node.properties.size(); ++i)
    if (!(object.top.seen >> i & 1u) && fits(object, node.properties[i].second)) open |= uint64_t(1) << i;
  return open;
}

bool JsonSchemaMatcher::additional_fits(const Alternative& object) const {
  const Node& node = schema_->compiled().nodes[size_t(object.top.node)];
  return node.additional >= 0 && fits(object, node.additional);
}

bool JsonSchemaMatcher::poppable(const Alternative& alternative) const {
  const Frame& frame = alternative.top;
  if (frame.node < 0) return false;
  const Node& node = schema_->compiled().nodes[size_t(frame.node)];
  switch (node.kind) {
    case Node::Kind::number: case Node::Kind::integer: {
      const bool whole = frame.phase == kZero || frame.phase == kInteger || frame.phase == kFraction || frame.phase == kExponent;
      if (!whole || !node.bounded) return whole;
      if (node.kind == Node::Kind::number) return number_within(node, number_prefix(frame));
      const __int128 value = frame.negative ? -__int128(frame.seen) : __int128(frame.seen);
      return value >= node.min_value && value <= node.max_value;
    }
    case Node::Kind::literals: return node.texts.nodes[size_t(frame.position)].value >= 0;
    case Node::Kind::any: return frame.any.complete();
    default: return false;  // containers and strings end at their closing byte
  }
}

void JsonSchemaMatcher::push(const Alternative& from, const Frame& frame, std::vector<Alternative>& out) {
  Alternative pushed;
  pushed.below = intern(from.top, from.below);
  pushed.top = frame;
  pushed.frames = uint16_t(from.frames + 1);
  emit(out, pushed);
}

// The transition of a frame whose value (a property's, an item, the document's) is whole.
void JsonSchemaMatcher::value_done(Frame& frame) const {
  if (frame.node < 0) {
    frame.phase = kRootDone;
    return;
  }
  const Node& node = schema_->compiled().nodes[size_t(frame.node)];
  if (node.kind == Node::Kind::object) {
    frame.phase = kObjectAfter;
    if (frame.position >= 0) frame.seen |= uint64_t(1) << frame.position;
    frame.position = 0;
  } else {  // an array
    frame.phase = kArrayAfter;
    frame.count = counted(frame.count, node.min_items, node.max_items);
  }
}

// The frame on top is done: the one below takes its value. With `hand_on` (a number or a literal ended
// by the byte after it), the frame below takes that byte too; otherwise the byte was the value's last.
void JsonSchemaMatcher::pop(const Alternative& from, uint8_t byte, bool hand_on, std::vector<Alternative>& out) {
  Alternative below;
  below.top = from.below->frame;
  below.below = from.below->below;
  below.frames = uint16_t(from.frames - 1);
  value_done(below.top);
  if (hand_on && below.top.node < 0 && is_whitespace(byte)) {
    // A top-level number or literal that may go on ends only at a byte that cannot: one byte of
    // whitespace is taken for that even in compact JSON, where "1e99" would otherwise be a dead end.
    below.whitespace = 1;
    emit(out, below);
  } else if (hand_on) {
    step(below, byte, out);
  } else {
    emit(out, below);
  }
}

void JsonSchemaMatcher::step(const Alternative& from, uint8_t byte, std::vector<Alternative>& out) {
  if (from.top.node < 0 || schema_->compiled().nodes[size_t(from.top.node)].kind == Node::Kind::object ||
      schema_->compiled().nodes[size_t(from.top.node)].kind == Node::Kind::array) {
    structural(from, byte, out);
    return;
  }
  const Node& node = schema_->compiled().nodes[size_t(from.top.node)];
  Alternative next = from;
  Frame& frame = next.top;
  const auto end_here = [&] {  // a number or literal that may end: the byte is the frame below's
    if (poppable(from)) pop(from, byte, true, out);
  };
  switch (node.kind) {
    case Node::Kind::string: {
      if (node.pattern) {
        pattern_string_byte(from, node, byte, out);
        return;
      }
      const Lexed lexed = lex_string(frame, byte, false);
      if (!lexed.taken) return;
      const bool counting = node.min_length > 0 || node.max_length != kUnfinishable;
      if (lexed.closed) {
        if (!counting || frame.count >= node.min_length) pop(from, byte, false, out);
        return;
      }
      if (lexed.new_char && counting) {
        if (frame.count >= node.max_length) return;
        frame.count = counted(frame.count, node.min_length, node.max_length);
      }
      emit(out, next);
      return;
    }
    case Node::Kind::number: case Node::Kind::integer: {
      if (node.kind == Node::Kind::number && node.bounded) {  // at most 15 digits, no exponent (json_schema_numbers.cpp)
        NumberPrefix prefix = number_prefix(frame);
        const bool room = prefix.digits < kBoundedNumberDigits, digit = is_digit(byte);
        const uint64_t value = uint64_t(byte - '0');
        uint8_t phase = 0xFF;
        if (frame.phase == kMinus && digit) {
          phase = byte == '0' ? kZero : kInteger;
          prefix.begun = true, prefix.zero = byte == '0', prefix.value = value, prefix.digits = byte == '0' ? 0 : 1;
        } else if (frame.phase == kInteger && digit && room) {
          phase = kInteger;
          prefix.value = prefix.value * 10 + value, ++prefix.digits;
        } else if ((frame.phase == kZero || frame.phase == kInteger) && byte == '.' && room) {
          phase = kFractionStart;
          prefix.zero = false, prefix.fraction_digits = 0;
        } else if ((frame.phase == kFractionStart || frame.phase == kFraction) && digit && room) {
          phase = kFraction;
          prefix.value = prefix.value * 10 + value, ++prefix.digits, ++prefix.fraction_digits;
        }
        if (phase != 0xFF && number_reachable(node, prefix)) {
          frame.phase = phase;
          set_number_prefix(frame, prefix);
          emit(out, next);
        } else {
          end_here();
        }
        return;
      }
      const bool integer = node.kind == Node::Kind::integer, digit = is_digit(byte);
      const bool exponent_mark = !integer && (byte == 'e' || byte == 'E');
      // The phase the byte leads to (0xFF: not a byte of this number); count: the digits of the integer
      // part, then of the exponent, within the bounds that keep the number a finite double.
      uint8_t phase = 0xFF;
      uint32_t digits = frame.count + 1;
      switch (frame.phase) {
        case kMinus:
          if (digit) phase = byte == '0' ? kZero : kInteger, digits = 1;
          break;
        case kZero: case kInteger:
          phase = digit && frame.phase == kInteger && frame.count < kMostJsonIntegerDigits ? kInteger
                  : byte == '.' && !integer                                           ? kFractionStart
                  : exponent_mark                                                     ? kExponentStart
                                                                                      : 0xFF;
          break;
        case kFractionStart: phase = digit ? kFraction : 0xFF; break;
        case kFraction: phase = digit ? kFraction : exponent_mark ? kExponentStart : 0xFF; break;
        case kExponentStart: case kExponentSign:
          if (digit) phase = kExponent, digits = 1;
          else if (frame.phase == kExponentStart && (byte == '+' || byte == '-')) phase = kExponentSign;
          break;
        default: phase = digit && frame.count < kMostJsonExponentDigits ? kExponent : 0xFF; break;  // exponent
      }
      if (phase == kInteger || phase == kExponent) frame.count = digits;
      if (phase != 0xFF && node.bounded) {  // an integer's digit: one a value within the bounds can have
        const uint64_t magnitude = frame.seen * 10 + uint64_t(byte - '0');
        if (frame.seen > UINT64_MAX / 10 || !integer_reachable(node, frame.negative, digits, magnitude)) phase = 0xFF;
        else frame.seen = magnitude;
      }
      if (phase != 0xFF) {
        frame.phase = phase;
        emit(out, next);
      } else {
        end_here();
      }
      return;
    }
    case Node::Kind::literals: {
      const int32_t child = node.texts.child(frame.position, byte);
      if (child >= 0) {
        const SchemaByteTrie::Node& reached = node.texts.nodes[size_t(child)];
        if (reached.value >= 0 && reached.children.empty()) {
          pop(from, byte, false, out);  // a whole literal nothing can extend
        } else {
          frame.position = child;
          emit(out, next);
        }
      }
      end_here();  // "1" of enum [1, 10] may end at the byte after it
      return;
    }
    case Node::Kind::any: {
      // A number at the value's own top ends at whitespace: the frame below takes the whitespace, under its
      // bound (a nested value's JsonBytes would take one byte of it even in compact JSON).
      if (is_whitespace(byte) && frame.any.complete() && !frame.any.ended()) {
        end_here();
        return;
      }
      if (frame.any.feed(byte)) {
        if (frame.any.ended()) pop(from, byte, false, out);
        else emit(out, next);
      } else {
        end_here();  // a number ended by the byte after it
      }
      return;
    }
    default: throw std::logic_error("JsonSchemaMatcher: an anyOf node became a frame");
  }
}

// A byte of a string held to a pattern (pattern_string_lexer.h: how it is written): taken when some
// character the byte may begin or go on leads to a pattern state from which a match can still end within
// the lengths left; the closing quote where the pattern matches and minLength is met.
void JsonSchemaMatcher::pattern_string_byte(const Alternative& from, const Node& node, uint8_t byte, std::vector<Alternative>& out) {
  Alternative next = from;
  Frame& frame = next.top;
  const PatternByte lexed = lex_pattern_string_byte(
      frame, byte, [&](uint32_t low, uint32_t high) { return pattern_can_write(node, frame, low, high); },
      [&](uint32_t code_point) { pattern_write(node, frame, code_point); });
  if (lexed == PatternByte::taken) emit(out, next);
  if (lexed == PatternByte::closing_quote && node.pattern->accepting(frame.position) && frame.count >= node.min_length)
    pop(from, byte, false, out);
}

// The first byte of a value of `node`, below which `from` waits (its phase already "in a value").
void JsonSchemaMatcher::begin_value(const Alternative& from, int32_t node_index, uint8_t byte, std::vector<Alternative>& out) {
  if (!fits(from, node_index)) return;
  const Node& node = schema_->compiled().nodes[size_t(node_index)];
  Frame frame;
  frame.node = node_index;
  switch (node.kind) {
    case Node::Kind::any_of:  // each node it may be, once (the choices are no anyOfs)
      for (int32_t choice : node.choices) begin_value(from, choice, byte, out);
      return;
    case Node::Kind::object:
      if (byte != '{') return;
      frame.phase = kObjectFirst;
      break;
    case Node::Kind::array:
      if (byte != '[') return;
      frame.phase = kArrayFirst;
      break;
    case Node::Kind::string:
      if (byte != '"') return;
      break;
    case Node::Kind::number: case Node::Kind::integer:
      if (byte != '-' && !is_digit(byte)) return;
      frame.phase = byte == '-' ? kMinus : byte == '0' ? kZero : kInteger;
      frame.count = frame.phase == kInteger ? 1 : 0;  // the integer part's digits
      if (node.bounded) {
        frame.negative = byte == '-';
        frame.seen = byte == '-' ? 0 : uint64_t(byte - '0');
        if (node.kind == Node::Kind::number ? !number_reachable(node, number_prefix(frame))
                                            : !integer_reachable(node, frame.negative, byte == '-' ? 0 : 1, frame.seen))
          return;
      }
      break;
    case Node::Kind::literals: {
      const int32_t child = node.texts.child(0, byte);
      if (child < 0) return;
      frame.position = child;
      break;
    }
    case Node::Kind::any:
      frame.any = JsonBytes(JsonTop::any_value, most_whitespace_);
      if (!frame.any.feed(byte)) return;
      break;
  }
  if (node.kind == Node::Kind::literals) {  // a one-byte literal (enum [1]) is whole at once
    const SchemaByteTrie::Node& reached = node.texts.nodes[size_t(frame.position)];
    if (reached.value >= 0 && reached.children.empty()) {
      Alternative whole = from;
      value_done(whole.top);
      emit(out, whole);
      return;
    }
  }
  push(from, frame, out);
}

// Whitespace, then what the document, an object or an array expects.
void JsonSchemaMatcher::structural(const Alternative& from, uint8_t byte, std::vector<Alternative>& out) {
  const Frame& frame = from.top;
  const bool in_key = frame.node >= 0 && frame.phase == kObjectInKey &&
                      schema_->compiled().nodes[size_t(frame.node)].kind == Node::Kind::object;
  if (!in_key && is_whitespace(byte)) {
    if (from.whitespace >= most_whitespace_) return;
    Alternative next = from;
    ++next.whitespace;
    emit(out, next);
    return;
  }
  Alternative next = from;
  next.whitespace = 0;
  if (frame.node < 0) {
    if (frame.phase != kRootValue) return;  // done: only whitespace may follow
    next.top.phase = kRootInValue;
    begin_value(next, schema_->compiled().root, byte, out);
    return;
  }
  if (schema_->compiled().nodes[size_t(frame.node)].kind == Node::Kind::object) object_byte(next, byte, out);
  else array_byte(next, byte, out);
}

void JsonSchemaMatcher::object_byte(const Alternative& from, uint8_t byte, std::vector<Alternative>& out) {
  const Node& node = schema_->compiled().nodes[size_t(from.top.node)];
  Alternative next = from;
  Frame& frame = next.top;
  const auto start_key = [&] {
    if (byte != '"' || (open_properties(from) == 0 && !additional_fits(from))) return;
    frame.phase = kObjectInKey;
    frame.position = 0;  // the key trie's root
    emit(out, next);
  };
  const auto close = [&] {
    if (byte == '}' && (node.required & ~frame.seen) == 0) pop(from, byte, false, out);
  };
  switch (frame.phase) {
    case kObjectFirst:
      close();
      start_key();
      return;
    case kObjectKey: start_key(); return;
    case kObjectInKey: {
      const int32_t child = frame.position >= 0 ? node.keys.child(frame.position, byte) : -1;
      // Declared keys only (no other keys, or no room for another key's value): the key trie says which
      // bytes may come.
      if (node.additional < 0 || !additional_fits(from)) {
        if (child < 0 || (node.keys.nodes[size_t(child)].marks & open_properties(from)) == 0) return;
        const int32_t property = node.keys.nodes[size_t(child)].value;
        frame.phase = property >= 0 ? kObjectColon : kObjectInKey;
        frame.position = property >= 0 ? property : child;
        emit(out, next);
        return;
      }
      const Lexed lexed = lex_string(frame, byte, true);
      if (!lexed.taken) return;
      if (!lexed.closed) {
        frame.position = child;  // -1 once the key has left every declared one
        emit(out, next);
        return;
      }
      const int32_t property = child >= 0 ? node.keys.nodes[size_t(child)].value : -1;
      if (property >= 0) {  // a declared key: once, and with room for its value
        if ((open_properties(from) >> property & 1u) == 0) return;
        frame.position = property;
      } else {
        if (!additional_fits(from)) return;
        frame.position = kAdditionalKey;
      }
      frame.phase = kObjectColon;
      emit(out, next);
      return;
    }
    case kObjectColon:
      if (byte != ':') return;
      frame.phase = kObjectValue;
      emit(out, next);
      return;
    case kObjectValue:
      frame.phase = kObjectInValue;
      begin_value(next, frame.position >= 0 ? node.properties[size_t(frame.position)].second : node.additional, byte, out);
      return;
    case kObjectAfter:
      close();
      if (byte == ',' && (open_properties(from) != 0 || additional_fits(from))) {
        frame.phase = kObjectKey;
        emit(out, next);
      }
      return;
    default: return;  // in a value: the value's frame is on top
  }
}

void JsonSchemaMatcher::array_byte(const Alternative& from, uint8_t byte, std::vector<Alternative>& out) {
  const Node& node = schema_->compiled().nodes[size_t(from.top.node)];
  Alternative next = from;
  Frame& frame = next.top;
  switch (frame.phase) {
    case kArrayFirst:
      if (byte == ']') {
        if (node.min_items == 0) pop(from, byte, false, out);
        return;
      }
      if (node.max_items == 0) return;
      [[fallthrough]];
    case kArrayItem:
      frame.phase = kArrayInItem;
      begin_value(next, node.items, byte, out);
      return;
    case kArrayAfter:
      if (byte == ']' && frame.count >= node.min_items) pop(from, byte, false, out);
      if (byte == ',' && frame.count < node.max_items && fits(from, node.items)) {
        frame.phase = kArrayItem;
        emit(out, next);
      }
      return;
    default: return;
  }
}

JsonSchemaReplyConstraint::JsonSchemaReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const JsonSchema> schema,
                                                     uint32_t most_whitespace)
    : matcher_(std::move(schema), most_whitespace), constraint_(std::move(tokens), matcher_.start()) {}

void constrain_to_json_schema(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const JsonSchema> schema,
                              uint32_t most_whitespace) {
  constrain_request(request, std::make_shared<JsonSchemaReplyConstraint>(std::move(tokens), std::move(schema), most_whitespace),
                    request.stop_tokens);
}

}  // namespace tilefire
