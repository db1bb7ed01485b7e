#pragma once
// Constrained decoding to a JSON Schema (OpenAI's response_format {"type": "json_schema"}): at each step
// only the tokens that keep the reply a prefix of a JSON text the schema accepts may be chosen.
// - JsonSchema: a schema read once (the subset of JSON Schema 2020-12 in docs/ARCHITECTURE.md,
//   "Constrained decoding"; a keyword outside it is refused by name, never ignored), shared by every reply.
// - JsonSchemaMatcher and JsonSchemaBytes: a pushdown automaton over bytes for one reply. A state is a few
//   alternatives (anyOf branches not told apart yet), each the frame being read over an interned stack of
//   the frames around it, so a state copies in a few dozen bytes, as TokenTrie's walk needs.
// The automaton accepts a subset of what the schema accepts (see the docs: object keys as written, no
// unneeded escapes in them, integers without fraction or exponent, numbers held to bounds with at most 15
// digits and no exponent, whitespace runs bounded) and never
// reaches a dead end: a byte is refused as soon as no accepted text can follow, nesting included.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tilefire/json_constraint.h"

namespace tilefire {

constexpr uint32_t kMostSchemaProperties = 64;    // declared properties of one object
constexpr uint32_t kMostSchemaNodes = 10000;      // subschemas of one schema ($ref targets included)
constexpr uint32_t kMostSchemaAlternatives = 32;  // anyOf branches followed at once (past it, the first kept)
// Frames on a reply's stack below a scalar being read: the document and at most kMostJsonDepth arrays and
// objects. (A value of any kind, schema true or {}, may nest kMostJsonDepth more inside itself.)
constexpr uint32_t kMostSchemaFrames = kMostJsonDepth + 1;

// A JSON Schema read into nodes. Immutable once compiled: replies on many threads share one.
class JsonSchema {
 public:
  // Reads the schema's JSON text. A schema outside the supported subset, one no finite JSON value can
  // match, or not JSON at all, is an InputError naming the keyword and where it is (a JSON pointer).
  static std::shared_ptr<const JsonSchema> compile(std::string_view schema_text);
  // compile, but the same object for a text among the last 8 compiled this way (byte for byte), so that
  // requests sending one schema share the tables its replies make (a server's way; thread-safe).
  static std::shared_ptr<const JsonSchema> compile_cached(std::string_view schema_text);

  struct Node;     // megakernel/json_schema_node.h
  struct Compiled;
  // The tables of the tokens from each state of its pattern strings, made by and for every reply to it
  // (megakernel/json_schema_node.h; thread-safe).
  struct PatternTables;
  ~JsonSchema();
  const Compiled& compiled() const { return *compiled_; }
  PatternTables& pattern_tables() const { return *pattern_tables_; }

 private:
  explicit JsonSchema(std::unique_ptr<const Compiled> compiled);
  std::unique_ptr<const Compiled> compiled_;
  std::unique_ptr<PatternTables> pattern_tables_;
};

class JsonSchemaMatcher;

// The state of a reply read so far against a schema (copied freely; valid while its matcher lives).
class JsonSchemaBytes {
 public:
  // Takes the next byte: false (and the state as it was) when no text the schema accepts begins with the
  // bytes so far and this one.
  bool feed(uint8_t byte);
  // Every byte of `bytes` in turn; false when one is refused (the state is then unspecified).
  bool feed(std::string_view bytes);
  // The bytes so far are a whole accepted text (a top-level number could still go on).
  bool complete() const;
  // The value is whole and nothing but whitespace may follow: where a reply ends.
  bool ended() const;
  // Inside a string value, no character cut, no escape open, no other alternative (JsonBytes::
  // in_plain_string: TokenTrie's shortcut for a string's own tokens), and the characters it may still
  // take (UINT32_MAX: no maxLength).
  bool in_plain_string() const { return plain_string_node() != nullptr; }
  uint32_t string_budget() const;
  // TokenTrie::allow_tokens' question first: inside a string held to a pattern (no character cut, no other
  // alternative) from the second time a reply to the schema is in that pattern state, it allows the
  // tokens from the state's table (worked out once for every reply to the schema, lengths checked as it is
  // read) and those that reach the closing quote, and says true; elsewhere, and the first time, false (the
  // trie is walked).
  bool allow_tokens_itself(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  bool operator==(const JsonSchemaBytes&) const = default;

  // What a frame is reading, and how far (JsonSchemaMatcher's business; public for its hash).
  struct Frame {
    int32_t node = -1;            // the schema node read (-1: the document around the value)
    uint8_t phase = 0;            // where in it (a container's punctuation, a number's part)
    uint8_t utf8_left = 0;        // a string's character: continuation bytes still to come
    uint8_t next_low = 0x80, next_high = 0xBF;  // the range of the next one
    uint8_t escape = 0;           // 0, or after '\' (1), or hex digits of \u matched + 2
    bool low_surrogate = false;   // the \u escape read must be a low surrogate
    bool negative = false;        // a bounded integer's sign
    uint16_t escape_value = 0;    // its hex digits so far
    uint32_t count = 0;           // items of an array, characters of a string (kept only where bounded)
    int32_t position = 0;         // an object's property (or its key's node in the key trie); a literal's node;
                                  // a pattern string's state
    uint64_t seen = 0;            // an object's properties present; a bounded integer's digits as a number;
                                  // a pattern string's character so far (its bits, or its \u00 escape's digits)
    JsonBytes any{JsonTop::any_value};  // a value of any kind (schema true or {})
    bool operator==(const Frame&) const = default;
  };
  struct StackCell {  // interned: equal stacks are one cell
    Frame frame;
    const StackCell* below;
    bool operator==(const StackCell&) const = default;
  };
  struct Alternative {
    Frame top;
    const StackCell* below = nullptr;
    uint16_t frames = 1;     // top and those below it
    uint8_t whitespace = 0;  // whitespace bytes in a row just before
    bool operator==(const Alternative&) const = default;
  };

 private:
  friend class JsonSchemaMatcher;
  explicit JsonSchemaBytes(JsonSchemaMatcher* matcher);
  const JsonSchema::Node* plain_string_node() const;  // the string's node in a plain string state, or null
  JsonSchemaMatcher* matcher_;
  std::vector<Alternative> alternatives_;  // at most kMostSchemaAlternatives, no two equal
};

// One reply's automaton: the schema and the stack cells its states share. States from start() stay valid
// while the matcher lives. Not thread-safe: one reply's states are fed one at a time.
class JsonSchemaMatcher {
 public:
  // most_whitespace: the longest whitespace run a reply may hold (at most kMostJsonWhitespace; 0: compact).
  explicit JsonSchemaMatcher(std::shared_ptr<const JsonSchema> schema, uint32_t most_whitespace = kMostJsonWhitespace);
  JsonSchemaMatcher(const JsonSchemaMatcher&) = delete;
  JsonSchemaMatcher& operator=(const JsonSchemaMatcher&) = delete;
  JsonSchemaBytes start();
  size_t stack_cells() const { return cells_.size(); }

 private:
  friend class JsonSchemaBytes;
  using Frame = JsonSchemaBytes::Frame;
  using Alternative = JsonSchemaBytes::Alternative;
  using StackCell = JsonSchemaBytes::StackCell;
  struct CellHash {
    size_t operator()(const StackCell* cell) const;
  };
  struct CellEqual {
    bool operator()(const StackCell* a, const StackCell* b) const { return *a == *b; }
  };
  void step(const Alternative& from, uint8_t byte, std::vector<Alternative>& out);
  void begin_value(const Alternative& from, int32_t node, uint8_t byte, std::vector<Alternative>& out);
  void push(const Alternative& from, const Frame& frame, std::vector<Alternative>& out);
  void pop(const Alternative& from, uint8_t byte, bool hand_on, std::vector<Alternative>& out);
  void value_done(Frame& frame) const;
  void pattern_string_byte(const Alternative& from, const JsonSchema::Node& node, uint8_t byte, std::vector<Alternative>& out);
  void structural(const Alternative& from, uint8_t byte, std::vector<Alternative>& out);
  void object_byte(const Alternative& from, uint8_t byte, std::vector<Alternative>& out);
  void array_byte(const Alternative& from, uint8_t byte, std::vector<Alternative>& out);
  bool fits(const Alternative& from, int32_t node) const;
  // Whether a bounded integer written so far (its sign, and `digits` of magnitude `magnitude`; none: only
  // the sign) can still be one within its bounds, by more digits or as it is.
  static bool integer_reachable(const JsonSchema::Node& node, bool negative, uint32_t digits, uint64_t magnitude);
  uint64_t open_properties(const Alternative& object) const;
  bool additional_fits(const Alternative& object) const;
  bool poppable(const Alternative& alternative) const;
  const StackCell* intern(const Frame& frame, const StackCell* below);

  std::shared_ptr<const JsonSchema> schema_;
  uint8_t most_whitespace_;
  std::deque<StackCell> cells_;
  std::unordered_set<const StackCell*, CellHash, CellEqual> interned_;
  std::vector<Alternative> next_;  // feed's scratch
};

// One reply's constraint to a schema, for GenerateRequest::allowed_tokens and stop_when.
class JsonSchemaReplyConstraint {
 public:
  JsonSchemaReplyConstraint(std::shared_ptr<const TokenTrie> tokens, std::shared_ptr<const JsonSchema> schema,
                            uint32_t most_whitespace = kMostJsonWhitespace);
  void allowed(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) { constraint_.allowed(generated, allowed); }
  bool ended(const std::vector<int32_t>& generated) { return constraint_.ended(generated); }

 private:
  JsonSchemaMatcher matcher_;  // before the constraint, whose states point into it
  ByteReplyConstraint<JsonSchemaBytes> constraint_;
};

// Makes `request`'s reply a JSON text the schema accepts, as constrain_to_json does for any JSON object:
// the reply stops where its value is whole ("stopped"); cut before (max_new_tokens, the context, an earlier
// stop_when) it is a prefix of one. request.stop_tokens are never chosen (set them first).
void constrain_to_json_schema(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens,
                              std::shared_ptr<const JsonSchema> schema, uint32_t most_whitespace = kMostJsonWhitespace);

}  // namespace tilefire
