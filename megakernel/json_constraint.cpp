// Constrained decoding of a JSON reply (tilefire/json_constraint.h): the byte automaton, the token trie,
// one reply's constraint.
#include "tilefire/json_constraint.h"

#include <algorithm>
#include <atomic>

#include "tilefire/errors.h"

namespace tilefire {

namespace {

std::atomic<uint64_t> next_trie_serial{1};

bool is_whitespace(uint8_t byte) { return byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r'; }
bool is_digit(uint8_t byte) { return byte >= '0' && byte <= '9'; }
int hex_value(uint8_t byte) {
  return is_digit(byte) ? byte - '0' : byte >= 'a' && byte <= 'f' ? byte - 'a' + 10 : byte >= 'A' && byte <= 'F' ? byte - 'A' + 10 : -1;
}
constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

}  // namespace

JsonBytes::JsonBytes(JsonTop top, uint32_t most_whitespace)
    : mode_(top == JsonTop::object ? Mode::start_object : Mode::value),
      most_whitespace_(uint8_t(std::min(most_whitespace, kMostJsonWhitespace))) {}

uint32_t checked_whitespace(uint32_t most_whitespace) {
  if (most_whitespace > kMostJsonWhitespace)
    throw InputError("a JSON reply's whitespace runs may be at most " + std::to_string(kMostJsonWhitespace) + " bytes long, not " +
                     std::to_string(most_whitespace));
  return most_whitespace;
}

bool JsonBytes::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonBytes::feed(uint8_t byte) {
  const JsonBytes before = *this;
  bool taken = false;
  switch (mode_) {
    case Mode::string: taken = string_byte(byte); break;
    case Mode::escape:
      if (byte == 'u') {
        mode_ = Mode::unicode;
        matched_ = 0;
        escape_value_ = 0;
        taken = true;
      } else if (std::string_view("\"\\/bfnrt").find(char(byte)) != std::string_view::npos) {
        mode_ = Mode::string;
        taken = true;
      }
      break;
    case Mode::unicode: taken = unicode_digit(byte); break;
    case Mode::low_backslash:
      mode_ = Mode::low_u;
      taken = byte == '\\';
      break;
    case Mode::low_u:
      mode_ = Mode::unicode;
      matched_ = 0;
      escape_value_ = 0;
      taken = byte == 'u';
      break;
    case Mode::literal: {
      const std::string_view word = kLiterals[literal_];
      taken = byte == uint8_t(word[matched_]);
      if (taken && ++matched_ == word.size()) value_done();
      break;
    }
    case Mode::minus: case Mode::zero: case Mode::integer: case Mode::fraction_start: case Mode::fraction:
    case Mode::exponent_start: case Mode::exponent_sign: case Mode::exponent:
      taken = number_byte(byte);
      break;
    default: taken = structural(byte); break;
  }
  if (!taken) *this = before;
  return taken;
}

// Between tokens: whitespace (a bounded run of it), then what the mode expects.
bool JsonBytes::structural(uint8_t byte) {
  if (is_whitespace(byte)) {
    if (whitespace_ >= most_whitespace_) return false;
    ++whitespace_;
    return true;
  }
  whitespace_ = 0;
  switch (mode_) {
    case Mode::start_object: return byte == '{' && open(true);
    case Mode::value: return begin_value(byte);
    case Mode::array_first: return byte == ']' ? close(false) : begin_value(byte);
    case Mode::object_first:
      if (byte == '}') return close(true);
      [[fallthrough]];
    case Mode::object_key:
      if (byte != '"') return false;
      mode_ = Mode::string;
      in_key_ = true;
      return true;
    case Mode::colon:
      mode_ = Mode::value;
      return byte == ':';
    case Mode::after_value: return after_value(byte);
    default: return false;  // done: only whitespace may follow
  }
}

bool JsonBytes::begin_value(uint8_t byte) {
  switch (byte) {
    case '{': return open(true);
    case '[': return open(false);
    case '"':
      mode_ = Mode::string;
      in_key_ = false;
      return true;
    case 't': case 'f': case 'n':
      mode_ = Mode::literal;
      literal_ = byte == 't' ? 0 : byte == 'f' ? 1 : 2;
      matched_ = 1;
      return true;
    case '-': mode_ = Mode::minus; return true;
    case '0': mode_ = Mode::zero; return true;
    default:
      if (byte < '1' || byte > '9') return false;
      mode_ = Mode::integer;
      matched_ = 1;  // the integer part's digits
      return true;
  }
}

bool JsonBytes::after_value(uint8_t byte) {  // inside a container (a value at depth 0 is done)
  const bool object = is_object(depth_ - 1u);
  if (byte == ',') {
    mode_ = object ? Mode::object_key : Mode::value;
    return true;
  }
  return byte == (object ? '}' : ']') && close(object);
}

bool JsonBytes::open(bool object) {
  if (depth_ >= kMostJsonDepth) return false;
  uint64_t& word = containers_[depth_ / 64];
  const uint64_t bit = uint64_t(1) << (depth_ % 64);
  word = object ? word | bit : word & ~bit;
  ++depth_;
  mode_ = object ? Mode::object_first : Mode::array_first;
  return true;
}

bool JsonBytes::close(bool object) {
  if (depth_ == 0 || is_object(depth_ - 1u) != object) return false;
  --depth_;
  value_done();
  return true;
}

// A string's bytes: UTF-8 as RFC 3629 has it (no overlong forms, no surrogates, nothing past U+10FFFF),
// no control characters, escapes.
bool JsonBytes::string_byte(uint8_t byte) {
  if (utf8_left_ > 0) {
    if (byte < next_low_ || byte > next_high_) return false;
    --utf8_left_;
    next_low_ = 0x80;
    next_high_ = 0xBF;
    return true;
  }
  if (byte == '"') {
    if (in_key_) mode_ = Mode::colon;
    else value_done();
    return true;
  }
  if (byte == '\\') {
    mode_ = Mode::escape;
    return true;
  }
  if (byte < 0x20) return false;
  if (byte < 0x80) return true;
  if (byte >= 0xC2 && byte <= 0xDF) utf8_left_ = 1;
  else if (byte >= 0xE0 && byte <= 0xEF) utf8_left_ = 2, next_low_ = byte == 0xE0 ? 0xA0 : 0x80, next_high_ = byte == 0xED ? 0x9F : 0xBF;
  else if (byte >= 0xF0 && byte <= 0xF4) utf8_left_ = 3, next_low_ = byte == 0xF0 ? 0x90 : 0x80, next_high_ = byte == 0xF4 ? 0x8F : 0xBF;
  else return false;
  return true;
}

// \uXXXX: a high surrogate (D800 to DBFF) must be followed by \u and a low one (DC00 to DFFF), and a low
// one must follow a high one. The first two hex digits decide it, so a lone surrogate is rejected there,
// before its escape is over.
bool JsonBytes::unicode_digit(uint8_t byte) {
  const int digit = hex_value(byte);
  if (digit < 0) return false;
  if (low_surrogate_ && ((matched_ == 0 && digit != 0xD) || (matched_ == 1 && digit < 0xC))) return false;
  if (!low_surrogate_ && matched_ == 1 && escape_value_ == 0xD && digit >= 0xC) return false;
  escape_value_ = uint16_t(escape_value_ * 16 + digit);
  if (++matched_ < 4) return true;
  if (low_surrogate_) {
    low_surrogate_ = false;
    mode_ = Mode::string;
  } else if (escape_value_ >= 0xD800 && escape_value_ <= 0xDBFF) {
    low_surrogate_ = true;
    mode_ = Mode::low_backslash;
  } else {
    mode_ = Mode::string;
  }
  return true;
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, ended by the first byte that cannot go on with it; the
// integer part at most kMostJsonIntegerDigits digits and the exponent kMostJsonExponentDigits, so that the
// number is a finite double.
bool JsonBytes::number_byte(uint8_t byte) {
  const bool digit = is_digit(byte), exponent_mark = byte == 'e' || byte == 'E';
  switch (mode_) {
    case Mode::minus:
      if (!digit) return false;
      mode_ = byte == '0' ? Mode::zero : Mode::integer;
      matched_ = 1;
      return true;
    case Mode::fraction_start:
      mode_ = Mode::fraction;
      return digit;
    case Mode::exponent_start:
      if (byte == '+' || byte == '-') {
        mode_ = Mode::exponent_sign;
        return true;
      }
      [[fallthrough]];
    case Mode::exponent_sign:
      mode_ = Mode::exponent;
      matched_ = 1;  // the exponent's digits
      return digit;
    case Mode::integer:
      if (digit && matched_ < kMostJsonIntegerDigits) {
        ++matched_;
        return true;
      }
      [[fallthrough]];
    case Mode::zero:
      if (byte == '.') {
        mode_ = Mode::fraction_start;
        return true;
      }
      [[fallthrough]];
    case Mode::fraction:
      if (digit && mode_ == Mode::fraction) return true;
      if (exponent_mark) {
        mode_ = Mode::exponent_start;
        return true;
      }
      [[fallthrough]];
    default:  // exponent
      if (digit && mode_ == Mode::exponent && matched_ < kMostJsonExponentDigits) {
        ++matched_;
        return true;
      }
      value_done();  // the number is whole; the byte is what follows it (a digit past a bound is refused there)
      if (depth_ == 0 && is_whitespace(byte)) {
        // A top-level number ends only at a byte that cannot go on with it: one byte of whitespace is taken
        // for that even in compact JSON, where "1e99" would otherwise be a dead end.
        whitespace_ = 1;
        return true;
      }
      return structural(byte);
  }
}

bool JsonBytes::complete() const {
  const bool whole_number = mode_ == Mode::zero || mode_ == Mode::integer || mode_ == Mode::fraction || mode_ == Mode::exponent;
  return mode_ == Mode::done || (depth_ == 0 && whole_number);
}

uint64_t TokenTrie::Serial::fresh() { return next_trie_serial.fetch_add(1, std::memory_order_relaxed); }

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : token_bytes_(token_bytes) {
  // The tokens with bytes, by their bytes. One of 65,535 bytes or more (no real vocabulary has one: a node's
  // depth is 16 bits) is left out, so never allowed.
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (!token_bytes[id].empty() && token_bytes[id].size() < UINT16_MAX) order.push_back(int32_t(id));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return token_bytes[size_t(a)] < token_bytes[size_t(b)]; });
  // In sorted order each token shares with the one before it the path of their common prefix: its own
  // nodes begin below that. `open` holds the nodes of the path to the last token, by depth.
  std::vector<uint32_t> open;
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& bytes = token_bytes[size_t(id)];
    size_t shared = 0;
    if (previous)
      while (shared < previous->size() && shared < bytes.size() && (*previous)[shared] == bytes[shared]) ++shared;
    for (size_t depth = open.size(); depth > shared; --depth) subtree_end_[open[depth - 1]] = uint32_t(node_byte_.size());
    open.resize(shared);
    for (size_t depth = shared; depth < bytes.size(); ++depth) {
      open.push_back(uint32_t(node_byte_.size()));
      node_byte_.push_back(uint8_t(bytes[depth]));
      node_depth_.push_back(uint16_t(depth + 1));
      subtree_end_.push_back(0);
      ids_begin_.push_back(uint32_t(ids_.size()));
    }
    ids_.push_back(id);  // ends at the last node of its path (a duplicate's path is the one before's)
    previous = &bytes;
  }
  for (uint32_t node : open) subtree_end_[node] = uint32_t(node_byte_.size());
  ids_begin_.push_back(uint32_t(ids_.size()));

  // A string's own tokens, once: walked from inside a top-level string by an automaton that refuses the
  // closing quote (from there the only way to end the text).
  JsonBytes in_string(JsonTop::any_value);
  in_string.feed(uint8_t('"'));
  struct StaysInString {
    JsonBytes state;
    bool feed(uint8_t byte) {
      const JsonBytes before = state;
      if (!state.feed(byte)) return false;
      if (!state.ended()) return true;
      state = before;
      return false;
    }
  };
  inside_string_.assign(token_bytes_.size(), 0);
  walk(StaysInString{in_string}, [&](int32_t token, const StaysInString&) { inside_string_[size_t(token)] = 1; });
  // The characters a string's own token adds: its bytes that begin one (from a plain state: an ASCII
  // byte, a UTF-8 lead byte, the backslash of an escape, but not that of a surrogate pair's second half).
  inside_characters_.assign(token_bytes_.size(), 0);
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    if (token_bytes_[id].empty() || token_bytes_[id].size() >= UINT16_MAX) continue;
    JsonBytes lexed = in_string;
    uint16_t characters = 0;
    for (char c : token_bytes_[id]) {
      if (lexed.in_plain_string()) ++characters;
      if (!lexed.feed(uint8_t(c))) break;
      if (lexed.ended()) {
        closing_string_.push_back(int32_t(id));
        break;
      }
    }
    if (inside_string_[id]) inside_characters_[id] = characters;
  }
}

const std::string& TokenTrie::bytes(int32_t token) const {
  static const std::string none;
  return token >= 0 && size_t(token) < token_bytes_.size() ? token_bytes_[size_t(token)] : none;
}

std::vector<std::string> vocabulary_bytes(const Tokenizer* tokenizer, uint32_t vocab) {
  std::vector<std::string> bytes;
  if (tokenizer) {
    bytes = tokenizer->token_bytes();
  } else {
    for (int byte = 0; byte < 256; ++byte) bytes.push_back(std::string(1, char(byte)));
  }
  if (bytes.size() > vocab) bytes.resize(vocab);
  return bytes;
}

void constrain_to_json(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, JsonTop top, uint32_t most_whitespace) {
  constrain_request(request, std::make_shared<JsonReplyConstraint>(std::move(tokens), top, most_whitespace), request.stop_tokens);
}

}  // namespace tilefire
