// The JSON Schema automaton (tilefire/json_schema.h) against Ajv, a JSON Schema validator (the
// independent reference, tests/common/schema_oracle.h):
// - random byte walks through the automaton (whitespace runs bounded at 32 bytes, and compact) never reach
//   a dead end, and every text a walk completes is valid under the schema, by Ajv (and JSON, by
//   nlohmann::json);
// - texts mutated from those are, whenever the automaton takes them whole, valid by Ajv too;
// - hand-written valid texts in the subset are taken whole; invalid ones (by Ajv) are refused;
// - a TokenTrie's masks over schema states equal the automaton's verdict token by token;
// - schemas outside the subset are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/schema_oracle.h"
#include "tests/common/tokenizer_files.h"
#include "tilefire/errors.h"
#include "tilefire/json_schema.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// Schemas that reach every part of the automaton: bounded strings and arrays, enums of every kind,
// nullable types, recursion through $defs and through the root, anyOf of objects told apart by a const,
// additionalProperties, values of any kind, keys that JSON escapes, top-level scalars.
const std::vector<json>& schemas() {
  static const std::vector<json> all = {
      json::parse(R"({"type": "object", "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 8}, "age": {"type": "integer"},
          "email": {"type": ["string", "null"]},
          "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c\"d"]}, "minItems": 1, "maxItems": 3}},
        "required": ["name", "age"]})"),
      json::parse(R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "number"},
          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}},
        "$ref": "#/$defs/node"})"),
      json::parse(R"({"anyOf": [
          {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
          {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "integer"}},
           "required": ["kind", "w", "h"]}]})"),
      json::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})"),
      json::parse(R"({"type": "array", "items": {"enum": [1, 10, 2.5, "x", null, true, {"a": [1]}, [], "é"]}, "maxItems": 6})"),
      json::parse(R"({"type": "object", "properties": {"data": {}, "meta": true}, "required": ["data"]})"),
      json::parse(R"({"type": "array", "items": {"$ref": "#"}})"),
      json::parse(R"({"type": "object", "properties": {"a\"b": {"type": "null"}, "é\\": {"type": "boolean"}, "ab": {"type": "string"}},
        "required": ["a\"b"]})"),
      json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"),
      json::parse(R"({"type": ["number", "boolean"]})"),
      json::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"anyOf": [{"type": "integer"}, {"type": "number"}]}},
        "required": ["x", "y"], "title": "point", "description": "annotations are read and left alone"})"),
      // Bounded integers: a range, exclusive bounds, one bound past int64's end, a range below zero.
      json::parse(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 130},
          "delta": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 1000000},
          "big": {"type": ["integer", "null"], "minimum": -1e300}, "low": {"type": "integer", "minimum": -120.5, "maximum": -7.5}},
        "required": ["age", "delta", "big", "low"]})"),
      // Pydantic's discriminated union, and a oneOf of types.
      json::parse(R"({"$defs": {
          "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat"}, "meows": {"type": "integer"}}, "required": ["pet_type", "meows"]},
          "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog"}, "barks": {"type": "number"}}, "required": ["pet_type", "barks"]}},
        "type": "object", "properties": {
          "pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "pet_type"}},
          "n": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}, {"enum": [true]}]}},
        "required": ["pet"]})"),
      // Numbers within bounds (json_schema_numbers.cpp): a confidence, a nullable reading above an exclusive
      // bound, a ratio between two exclusive ones.
      json::parse(R"j({"type": "object", "properties": {
          "confidence": {"type": "number", "minimum": 0, "maximum": 1},
          "temp": {"type": ["number", "null"], "exclusiveMinimum": -273.15, "maximum": 1e4},
          "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}},
        "required": ["confidence", "temp", "ratio"]})j"),
      // Patterns: anchored and not, beside maxLength and minLength, on a nullable string, with characters
      // JSON must escape; and a top-level string whose pattern and minLength meet only in longer strings.
      // One class counted (odd, word, pin, mail, name) is held as its star with lengths (string_pattern.h):
      // the counts alone, inside minLength and maxLength, across them, beside a format, and between parts
      // of one length.
      json::parse(R"j({"type": "object", "properties": {
          "word": {"type": "string", "pattern": "^(?:[a-c]){2,6}$", "minLength": 3, "maxLength": 9},
          "pin": {"type": "string", "pattern": "^[0-9]{4}$", "maxLength": 4},
          "mail": {"type": "string", "format": "email", "pattern": "^.{6,9}$"},
          "name": {"type": "string", "pattern": "^[A-C](?:[a-c]){1,8}!$", "maxLength": 7}},
        "required": ["word", "pin", "mail", "name"]})j"),
      json::parse(R"j({"type": "object", "properties": {
          "date": {"type": "string", "pattern": "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$"},
          "code": {"type": "string", "pattern": "^[A-Z]{2}\\d+$", "maxLength": 5},
          "email": {"type": ["string", "null"], "pattern": "^[a-z.]+@[a-z]+\\.(com|org)$"},
          "note": {"type": "string", "pattern": "x", "maxLength": 6},
          "odd": {"type": "string", "pattern": "^[\"\\\\/\\n\\t\\u0001é😀]{1,4}$"},
          "even": {"type": "string", "pattern": "^(ab)+$", "minLength": 3, "maxLength": 7}},
        "required": ["date", "code", "email", "note", "odd", "even"]})j"),
      json::parse(R"j({"type": "string", "pattern": "^[a-c]*b", "minLength": 4})j"),
      // The formats a reply is held to, one beside a pattern and one beside maxLength, and one that stays
      // an annotation.
      json::parse(R"j({"type": "object", "properties": {
          "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
          "clock": {"type": "string", "format": "time"}, "span": {"type": "string", "format": "duration"},
          "leap": {"type": "string", "format": "date", "pattern": "-02-29$"}},
        "required": ["day", "at", "clock", "span", "leap"]})j"),
      json::parse(R"j({"type": "object", "properties": {
          "host": {"type": "string", "format": "hostname"}, "v4": {"type": "string", "format": "ipv4"},
          "v6": {"type": "string", "format": "ipv6"}, "id": {"type": "string", "format": "uuid"},
          "other": {"type": "string", "format": "color"}},
        "required": ["host", "v4", "v6", "id", "other"]})j"),
      json::parse(R"j({"type": "object", "properties": {
          "mail": {"type": "string", "format": "email", "maxLength": 40}, "link": {"type": "string", "format": "uri"},
          "short": {"type": "string", "format": "email", "maxLength": 12}},
        "required": ["mail", "link", "short"]})j"),
  };
  return all;
}

// The bytes `state` takes next.
std::vector<uint8_t> accepted_bytes(const JsonSchemaBytes& state) {
  std::vector<uint8_t> bytes;
  for (int byte = 0; byte < 256; ++byte) {
    JsonSchemaBytes next = state;
    if (next.feed(uint8_t(byte))) bytes.push_back(uint8_t(byte));
  }
  return bytes;
}

// A random walk: each byte one the state takes, leaning towards the bytes that end things so that most
// walks end; a text that is whole may also stop there (a top-level number has no end of its own).
struct Walk {
  std::string text;
  bool whole = false;
};
Walk random_walk(JsonSchemaMatcher& matcher, std::mt19937& rng, size_t most_bytes) {
  JsonSchemaBytes state = matcher.start();
  Walk walk;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::string enders = "\"}],0123456789ltn";
  while (walk.text.size() < most_bytes) {
    if (state.ended() || (state.complete() && unit(rng) < 0.2)) {
      walk.whole = true;
      return walk;
    }
    const std::vector<uint8_t> bytes = accepted_bytes(state);
    EXPECT_FALSE(bytes.empty()) << "a dead end after " << json(walk.text).dump();
    if (bytes.empty()) return walk;
    std::vector<uint8_t> leaning;
    for (uint8_t byte : bytes)
      if (enders.find(char(byte)) != std::string::npos) leaning.push_back(byte);
    const std::vector<uint8_t>& from = !leaning.empty() && unit(rng) < 0.6 ? leaning : bytes;
    const uint8_t byte = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    EXPECT_TRUE(state.feed(byte));
    walk.text += char(byte);
  }
  return walk;
}

// JSON by nlohmann::json's parser; a number past a double's range (1e999) is JSON still (RFC 8259 leaves
// the range to implementations), which the parser refuses with out_of_range, not a parse error.
bool is_json(const std::string& text) {
  try {
    [[maybe_unused]] const json value = json::parse(text);
    return true;
  } catch (const json::out_of_range&) {
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// Ajv finds every document of every case valid.
void expect_all_valid(const std::vector<SchemaCase>& cases) {
  const auto verdicts = validate_with_ajv(cases);
  for (size_t c = 0; c < cases.size(); ++c)
    for (size_t d = 0; d < cases[c].documents.size(); ++d)
      EXPECT_EQ(verdicts[c][d], std::optional<bool>(true)) << cases[c].schema.dump() << "\n" << json(cases[c].documents[d]).dump();
}

bool takes_whole(JsonSchemaMatcher& matcher, const std::string& text) {
  JsonSchemaBytes state = matcher.start();
  return state.feed(text) && state.complete();
}

TEST(JsonSchemaBytes, RandomWalksEndInValidTextsAndNeverAtADeadEnd) {
  REQUIRE_SCHEMA_ORACLE();
  std::mt19937 rng(20261205);
  std::vector<SchemaCase> cases;
  for (const json& schema : schemas()) {
    // Half the walks with whitespace runs as long as they may be, half compact.
    JsonSchemaMatcher matcher(JsonSchema::compile(schema.dump())), compact(JsonSchema::compile(schema.dump()), 0);
    SchemaCase walked{schema, {}};
    size_t ended = 0;
    for (int i = 0; i < 60; ++i) {
      const Walk walk = random_walk(i % 2 ? compact : matcher, rng, 2000);
      if (!walk.whole) continue;
      ++ended;
      EXPECT_TRUE(is_json(walk.text)) << schema.dump() << "\n" << json(walk.text).dump();
      walked.documents.push_back(walk.text);
    }
    EXPECT_GE(ended, 30u) << "most walks should end: " << schema.dump();
    cases.push_back(std::move(walked));
  }
  expect_all_valid(cases);
}

TEST(JsonSchemaBytes, MutatedTextsItTakesAreValid) {
  REQUIRE_SCHEMA_ORACLE();
  std::mt19937 rng(77);
  std::vector<SchemaCase> cases;
  size_t taken = 0;
  for (const json& schema : schemas()) {
    JsonSchemaMatcher matcher(JsonSchema::compile(schema.dump()));
    SchemaCase mutated{schema, {}};
    for (int i = 0; i < 40; ++i) {
      const Walk walk = random_walk(matcher, rng, 400);
      if (!walk.whole || walk.text.empty()) continue;
      for (int m = 0; m < 20; ++m) {
        std::string text = walk.text;
        const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
        const char byte = "{}[]\",:0123456789-.eEtrufalsn \\ax"[std::uniform_int_distribution<int>(0, 33)(rng)];
        switch (m % 3) {
          case 0: text[at] = byte; break;
          case 1: text.insert(at, 1, byte); break;
          default: text.erase(at, 1); break;
        }
        if (takes_whole(matcher, text)) mutated.documents.push_back(text);
      }
    }
    taken += mutated.documents.size();
    cases.push_back(std::move(mutated));
  }
  EXPECT_GT(taken, 200u) << "too few mutations taken to say much";
  expect_all_valid(cases);
}

TEST(JsonSchemaBytes, TakesValidTextsAndRefusesInvalidOnes) {
  REQUIRE_SCHEMA_ORACLE();
  const json& person = schemas()[0];
  const std::vector<std::string> valid = {
      R"({"name":"Ann","age":30})",
      "{\n  \"age\": -0,\n  \"name\": \"\\u00e9\\ud83d\\ude00\",\n  \"tags\": [\"a\", \"c\\\"d\"],\n  \"email\": null\n}",
      R"({"name":"12345678","age":7,"email":"a@b","tags":["b","b","b"]})",
      R"({"name":"日本","age":1})",
  };
  const std::vector<std::string> invalid = {
      R"({"name":"Ann"})",                                 // age required
      R"({"name":"","age":1})",                            // minLength
      R"({"name":"123456789","age":1})",                   // maxLength
      R"({"name":"Ann","age":1.5})",                       // not an integer
      R"({"name":"Ann","age":1,"tags":[]})",               // minItems
      R"({"name":"Ann","age":1,"tags":["a","a","a","a"]})",  // maxItems
      R"({"name":"Ann","age":1,"tags":["d"]})",            // not in the enum
      R"({"name":"Ann","age":1,"email":3})",               // neither string nor null
      R"(["name"])",
  };
  const auto verdicts = validate_with_ajv({{person, valid}, {person, invalid}});
  JsonSchemaMatcher matcher(JsonSchema::compile(person.dump()));
  for (size_t i = 0; i < valid.size(); ++i) {
    ASSERT_EQ(verdicts[0][i], std::optional<bool>(true)) << valid[i];
    JsonSchemaBytes state = matcher.start();
    EXPECT_TRUE(state.feed(valid[i])) << valid[i];
    EXPECT_TRUE(state.ended()) << valid[i];
  }
  for (size_t i = 0; i < invalid.size(); ++i) {
    ASSERT_EQ(verdicts[1][i], std::optional<bool>(false)) << invalid[i];
    EXPECT_FALSE(takes_whole(matcher, invalid[i])) << invalid[i];
  }
}

// Where the automaton is stricter than JSON Schema (docs/ARCHITECTURE.md, "Constrained decoding"): keys not
// declared (additionalProperties absent reads as false), integers written with a fraction, a declared key
// spelled with an escape beside additionalProperties, whitespace runs past kMostJsonWhitespace.
TEST(JsonSchemaBytes, IsStricterThanTheSchemaWhereItSaysSo) {
  JsonSchemaMatcher person(JsonSchema::compile(schemas()[0].dump()));
  EXPECT_FALSE(takes_whole(person, R"({"name":"Ann","age":1,"extra":1})"));
  EXPECT_FALSE(takes_whole(person, R"({"name":"Ann","age":1.0})"));
  EXPECT_FALSE(takes_whole(person, "{" + std::string(kMostJsonWhitespace + 1, ' ') + R"("name":"Ann","age":1})"));
  EXPECT_TRUE(takes_whole(person, "{" + std::string(kMostJsonWhitespace, ' ') + R"("name":"Ann","age":1})"));
  JsonSchemaMatcher map(JsonSchema::compile(schemas()[3].dump()));
  EXPECT_TRUE(takes_whole(map, R"({"id":1,"x":true,"y":false})"));
  EXPECT_FALSE(takes_whole(map, R"({"\u0069d":1})"));    // "id" in disguise
  EXPECT_FALSE(takes_whole(map, R"({"id":1,"id":2})"));  // a declared key twice
  EXPECT_FALSE(takes_whole(map, R"({"x":1})"));          // additional values are booleans
  // A string held to a pattern takes only the escapes JSON needs: its characters otherwise as UTF-8.
  JsonSchemaMatcher accented(JsonSchema::compile(R"({"type": "string", "pattern": "^[é\\u0001\"]+$"})"));
  EXPECT_TRUE(takes_whole(accented, "\"é\\u0001\\\"\""));
  EXPECT_FALSE(takes_whole(accented, R"("\u00e9")"));
  EXPECT_FALSE(takes_whole(accented, R"("\u0022")"));
}

// Formats: each spelling of a value the automaton takes is one Ajv with ajv-formats finds valid, and the
// values it refuses are invalid or outside the one spelling it writes (an upper-case T, an offset, ...).
TEST(JsonSchemaBytes, StringsAreHeldToTheirFormats) {
  REQUIRE_SCHEMA_ORACLE();
  const std::vector<std::tuple<std::string, std::string, bool>> values = {
      {"date", "2024-02-29", true}, {"date", "2000-02-29", true}, {"date", "2023-02-29", false}, {"date", "1900-02-29", false},
      {"date", "2024-04-31", false}, {"date", "2024-12-31", true}, {"date", "2024-13-01", false},
      {"time", "23:59:59Z", true}, {"time", "00:00:00.125+05:30", true}, {"time", "24:00:00Z", false}, {"time", "12:00:00", false},
      {"date-time", "2024-01-02T03:04:05Z", true}, {"date-time", "2024-01-02t03:04:05z", false},
      {"duration", "P1Y2M3DT4H5M6S", true}, {"duration", "P2W", true}, {"duration", "PT0S", true}, {"duration", "P", false},
      {"duration", "P1DT", false}, {"email", "ada.lovelace@example.com", true}, {"email", "a..b@example.com", false},
      {"email", "ada@localhost", false}, {"hostname", "db-1.internal.example", true}, {"hostname", "-db", false},
      {"hostname", std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." + std::string(61, 'd'), true},
      {"hostname", std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." + std::string(62, 'd'), false},
      {"ipv4", "192.168.0.1", true}, {"ipv4", "256.1.1.1", false}, {"ipv4", "01.2.3.4", false},
      {"ipv6", "::1", true}, {"ipv6", "::", true}, {"ipv6", "2001:db8::8a2e:370:7334", true}, {"ipv6", "1:2:3:4:5:6:7:8", true},
      {"ipv6", "1:2:3:4:5:6:7:8:9", false}, {"ipv6", "1::2::3", false},
      {"uuid", "123e4567-e89b-12d3-a456-426614174000", true}, {"uuid", "123e4567e89b12d3a456426614174000", false},
      {"uri", "https://example.com:8080/a/b%20c?x=1&y=2#top", true}, {"uri", "example.com/a", false},
      {"color", "not a format Tilefire holds: any string", true},
  };
  std::vector<SchemaCase> cases;
  for (const auto& [format, value, taken] : values) {
    const json schema = {{"type", "string"}, {"format", format}};
    JsonSchemaMatcher matcher(JsonSchema::compile(schema.dump()));
    EXPECT_EQ(takes_whole(matcher, json(value).dump()), taken) << format << ": " << value;
    if (taken) cases.push_back({schema, {json(value).dump()}});
  }
  expect_all_valid(cases);
  // An enum's strings outside the format are not among the values a reply may take.
  JsonSchemaMatcher dates(JsonSchema::compile(R"({"type": "string", "format": "date", "enum": ["2024-01-01", "soon"]})"));
  EXPECT_TRUE(takes_whole(dates, R"("2024-01-01")"));
  EXPECT_FALSE(takes_whole(dates, R"("soon")"));
  const std::string long_host = std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." + std::string(63, 'd');
  JsonSchemaMatcher hosts(JsonSchema::compile(json{{"format", "hostname"}, {"enum", {long_host, "db.example"}}}.dump()));
  EXPECT_FALSE(takes_whole(hosts, json(long_host).dump()));  // 255 characters: past the format's 253
  EXPECT_TRUE(takes_whole(hosts, R"("db.example")"));
  // A format without a type makes the schema a string's (as pattern does).
  JsonSchemaMatcher untyped(JsonSchema::compile(R"({"format": "date"})"));
  EXPECT_FALSE(takes_whole(untyped, R"("hello")"));
  EXPECT_FALSE(takes_whole(untyped, "12"));
  EXPECT_TRUE(takes_whole(untyped, R"("2024-01-01")"));
}

// The automaton never lets a reply nest deeper than it can close: a recursive schema walked deep,
// choosing '[' whenever it may, still ends.
TEST(JsonSchemaBytes, NestingStopsWhereTheReplyCanStillClose) {
  JsonSchemaMatcher matcher(JsonSchema::compile(R"({"type": "array", "items": {"$ref": "#"}})"));
  JsonSchemaBytes state = matcher.start();
  size_t opened = 0;
  while (state.feed(uint8_t('['))) ++opened;
  EXPECT_EQ(opened, kMostJsonDepth);
  for (size_t i = 0; i < opened; ++i) ASSERT_TRUE(state.feed(uint8_t(']'))) << i;
  EXPECT_TRUE(state.ended());
  // A required property of the same kind needs another frame: the deepest object still closes.
  JsonSchemaMatcher chain(JsonSchema::compile(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                                                  "required": ["next"]})"));
  JsonSchemaBytes linked = chain.start();
  std::string text;
  while (true) {
    JsonSchemaBytes next = linked;
    if (!next.feed(std::string_view(R"({"next":)"))) break;
    linked = next;
    text += R"({"next":)";
  }
  EXPECT_EQ(text.size() / 8, kMostJsonDepth);
  ASSERT_TRUE(linked.feed(std::string_view("null")));
  for (size_t i = 0; i < kMostJsonDepth; ++i) ASSERT_TRUE(linked.feed(uint8_t('}'))) << i;
  EXPECT_TRUE(linked.ended());
}

// Compact JSON (most_whitespace 0) takes no whitespace between tokens, but a top-level number still ends:
// one byte of whitespace after it, where "1e99" can go on with nothing else.
TEST(JsonSchemaBytes, CompactRepliesTakeNoWhitespaceButATopLevelNumberStillEnds) {
  JsonSchemaMatcher compact(JsonSchema::compile(schemas()[0].dump()), 0);
  EXPECT_TRUE(takes_whole(compact, R"({"name":"a b","age":1})"));
  EXPECT_FALSE(takes_whole(compact, R"({"name":"a","age":1 })"));
  EXPECT_FALSE(takes_whole(compact, R"( {"name":"a","age":1})"));
  JsonSchemaMatcher number(JsonSchema::compile(R"({"type": "number"})"), 0);
  JsonSchemaBytes state = number.start();
  ASSERT_TRUE(state.feed(std::string_view("-1.5e99")));
  EXPECT_EQ(accepted_bytes(state), (std::vector<uint8_t>{'\t', '\n', '\r', ' '}));
  ASSERT_TRUE(state.feed(uint8_t('\n')));
  EXPECT_TRUE(state.ended());
  EXPECT_FALSE(state.feed(uint8_t(' ')));
  JsonBytes any(JsonTop::any_value, 0);
  ASSERT_TRUE(any.feed(std::string_view("12e34")));
  EXPECT_FALSE(any.feed(uint8_t('5')));
  EXPECT_TRUE(any.feed(uint8_t(' ')));
  EXPECT_TRUE(any.ended());
  EXPECT_THROW(JsonSchemaMatcher(JsonSchema::compile("{}"), kMostJsonWhitespace + 1), InputError);
  // Nor after a whole object, nor after a number inside a value of any kind.
  JsonSchemaMatcher anything(JsonSchema::compile(R"({"type": "object", "properties": {"x": {}}})"), 0);
  EXPECT_TRUE(takes_whole(anything, R"({"x":1})"));
  EXPECT_FALSE(takes_whole(anything, R"({"x":1 })"));
  EXPECT_FALSE(takes_whole(anything, "{\"x\":1}\n"));
  JsonSchemaMatcher padded(JsonSchema::compile(R"({"type": "object", "properties": {"x": {}}})"));
  EXPECT_TRUE(takes_whole(padded, R"({"x":1 })"));
  JsonSchemaMatcher enums(JsonSchema::compile(R"({"enum": [1, 10]})"), 0);
  JsonSchemaBytes one = enums.start();
  ASSERT_TRUE(one.feed(std::string_view("1 ")));  // "1" may end a compact reply too
  EXPECT_TRUE(one.ended());
}

// An integer's bounds: every digit one that a value within them can have, and the value ends only there.
TEST(JsonSchemaBytes, BoundedIntegers) {
  JsonSchemaMatcher range(JsonSchema::compile(R"({"type": "integer", "minimum": -5, "maximum": 12})"));
  for (const char* inside : {"-5", "-0", "0", "7", "12", "-1"}) EXPECT_TRUE(takes_whole(range, inside)) << inside;
  for (const char* outside : {"-6", "13", "120", "-10", "1.0", "99"}) EXPECT_FALSE(takes_whole(range, outside)) << outside;
  JsonSchemaBytes one = range.start();
  ASSERT_TRUE(one.feed(uint8_t('1')));
  EXPECT_EQ(accepted_bytes(one), (std::vector<uint8_t>{'\t', '\n', '\r', ' ', '0', '1', '2'}));
  JsonSchemaMatcher above(JsonSchema::compile(R"({"type": "integer", "exclusiveMinimum": 99.5})"));
  JsonSchemaBytes start = above.start();
  EXPECT_FALSE(JsonSchemaBytes(start).feed(uint8_t('-')));
  EXPECT_FALSE(JsonSchemaBytes(start).feed(uint8_t('0')));
  ASSERT_TRUE(start.feed(std::string_view("9")));
  EXPECT_FALSE(start.complete());  // 9 is below; 99 too; 100 and 9xx are not
  EXPECT_FALSE(takes_whole(above, "99"));
  EXPECT_TRUE(takes_whole(above, "100"));
  EXPECT_TRUE(takes_whole(above, "9223372036854775807"));
  EXPECT_FALSE(takes_whole(above, "9223372036854775808"));
}

TEST(JsonSchemaBytes, TopLevelScalarsAndLiterals) {
  JsonSchemaMatcher number(JsonSchema::compile(R"({"type": ["number", "boolean"]})"));
  JsonSchemaBytes state = number.start();
  ASSERT_TRUE(state.feed(std::string_view("-12.5e")));
  EXPECT_FALSE(state.complete());
  ASSERT_TRUE(state.feed(std::string_view("+3")));
  EXPECT_TRUE(state.complete());
  EXPECT_FALSE(state.ended());  // "-12.5e+34" may still come
  ASSERT_TRUE(state.feed(uint8_t(' ')));
  EXPECT_TRUE(state.ended());
  EXPECT_TRUE(takes_whole(number, "false"));
  EXPECT_FALSE(takes_whole(number, "null"));
  JsonSchemaMatcher enums(JsonSchema::compile(R"({"enum": [1, 10, "x"]})"));
  EXPECT_TRUE(takes_whole(enums, "1"));
  EXPECT_TRUE(takes_whole(enums, "10"));
  EXPECT_FALSE(takes_whole(enums, "100"));
  EXPECT_FALSE(takes_whole(enums, "2"));
  JsonSchemaBytes x = enums.start();
  ASSERT_TRUE(x.feed(std::string_view("\"x\"")));
  EXPECT_TRUE(x.ended());  // nothing can extend it: the reply ends there
  JsonSchemaMatcher integer(JsonSchema::compile(R"({"type": "integer"})"));
  EXPECT_TRUE(takes_whole(integer, "-0"));
  EXPECT_FALSE(takes_whole(integer, "01"));
  EXPECT_FALSE(takes_whole(integer, "1e3"));
}

// TokenTrie::allow_tokens over schema states: the tokens it allows are exactly those whose bytes the state
// takes whole, from the states along random walks.
TEST(JsonSchemaBytes, TrieMasksAreTheAutomatonsVerdicts) {
  std::vector<std::string> vocabulary;
  for (int byte = 0; byte < 256; ++byte) vocabulary.push_back(std::string(1, char(byte)));
  for (const char* token : {"{\"", "\":", "\",", "\"}", "name", "age", "\"name\"", "tags", "[\"", "\"]", "null", "true", "12", "0.",
                            ", ", "\n  ", "kind", "circle", "rect", "\":\"", "\\u00", "é", "\xE6\x97", "ab\"", "a\\\"b", "{}", "[]",
                            "2024", "-0", "@", ".com\"", "\\n", "\\u0001", "AB12", "abab"})
    vocabulary.push_back(token);
  const TokenTrie trie(vocabulary);
  std::mt19937 rng(5);
  for (const json& schema : schemas()) {
    JsonSchemaMatcher matcher(JsonSchema::compile(schema.dump()));
    for (int i = 0; i < 6; ++i) {
      const Walk walk = random_walk(matcher, rng, 60);
      JsonSchemaBytes state = matcher.start();
      for (size_t cut = 0; cut <= walk.text.size(); cut += 3) {
        state = matcher.start();
        ASSERT_TRUE(state.feed(std::string_view(walk.text).substr(0, cut)));
        std::vector<uint8_t> allowed(vocabulary.size(), 0);
        trie.allow_tokens(state, allowed);
        for (size_t t = 0; t < vocabulary.size(); ++t) {
          JsonSchemaBytes next = state;
          ASSERT_EQ(allowed[t] != 0, next.feed(std::string_view(vocabulary[t])))
              << schema.dump() << " after " << json(walk.text.substr(0, cut)).dump() << " token " << json(vocabulary[t]).dump();
        }
      }
    }
  }
}

// Inside a string TokenTrie takes the string's own tokens from the mask it worked out once and asks the
// state about the tokens that reach the closing quote: on real vocabularies, from strings of both
// automata in several places, exactly the tokens each state takes whole.
TEST(TokenTrie, AStringsOwnTokensAreThoseItsStateTakes) {
  REQUIRE_TOKENIZER_FILES();
  const auto expect_walks_verdicts = [](const TokenTrie& trie, const std::vector<std::string>& vocabulary, const auto& state,
                                        const std::string& where) {
    ASSERT_TRUE(state.in_plain_string()) << where;
    std::vector<uint8_t> allowed(vocabulary.size(), 0);
    trie.allow_tokens(state, allowed);
    size_t differing = 0;
    for (size_t t = 0; t < vocabulary.size(); ++t) {
      auto next = state;
      const bool taken = !vocabulary[t].empty() && next.feed(std::string_view(vocabulary[t]));
      if ((allowed[t] != 0) != taken && ++differing <= 3) ADD_FAILURE() << where << ": token " << json(vocabulary[t]).dump();
    }
    EXPECT_EQ(differing, 0u) << where;
  };
  for (const char* model : {"gpt2", "llama3"}) {
    const std::vector<std::string> vocabulary = Tokenizer(model_tokenizer(model).string()).token_bytes();
    const TokenTrie trie(vocabulary);
    EXPECT_GT(trie.string_closing_tokens().size(), 100u) << model;
    for (const char* prefix : {"{\"ke", "{\"a\": \"val", "[\"x\\n", "{\"a\": [\"\xC3\xA9", "\"\\u00e9", "[[\"\\ud83d\\ude00"}) {
      JsonBytes state(JsonTop::any_value);
      ASSERT_TRUE(state.feed(std::string_view(prefix))) << prefix;
      expect_walks_verdicts(trie, vocabulary, state, std::string(model) + " JsonBytes after " + json(prefix).dump());
    }
    // A string without bounds, and the person's name (1 to 8 characters) with 8, 5, 1 and 0 left to take.
    JsonSchemaMatcher matcher(JsonSchema::compile(schemas()[0].dump()));
    for (const char* prefix : {"{\"email\": \"Ada", "{\"age\": 1, \"email\": \"a\\\"b", "{\"name\": \"", "{\"name\": \"A\\u00e9\xC3\xA9",
                               "{\"name\": \"1234567", "{\"name\": \"\\ud83d\\ude00234567\\n"}) {
      JsonSchemaBytes state = matcher.start();
      ASSERT_TRUE(state.feed(std::string_view(prefix))) << prefix;
      expect_walks_verdicts(trie, vocabulary, state, std::string(model) + " JsonSchemaBytes after " + json(prefix).dump());
    }
    JsonSchemaMatcher at_least(JsonSchema::compile(R"({"type": "string", "minLength": 3})"));
    JsonSchemaBytes state = at_least.start();
    ASSERT_TRUE(state.feed(std::string_view("\"a")));
    expect_walks_verdicts(trie, vocabulary, state, std::string(model) + " a string of at least 3 characters after \"a");
  }
}

// Inside a string held to a pattern, the second time a reply is in a pattern state its mask comes from
// the state's table (JsonSchemaBytes::allow_tokens_itself) with the lengths checked as it is read: it is
// exactly the tokens the state takes whole, from the states along random walks of the pattern schemas,
// over a vocabulary of escapes, quotes, multi-byte characters and their pieces (and on real vocabularies
// from a few places).
TEST(JsonSchemaBytes, PatternStateTablesAreTheAutomatonsVerdicts) {
  const auto quoted = [](const std::string& bytes) { return json(bytes).dump(-1, ' ', false, json::error_handler_t::replace); };
  const auto expect_table_verdicts = [&](const TokenTrie& trie, const std::vector<std::string>& vocabulary, const JsonSchemaBytes& state,
                                        const std::string& where) {
    std::vector<uint8_t> first(vocabulary.size(), 0), again(vocabulary.size(), 0);
    const bool first_from_table = state.allow_tokens_itself(trie, first);
    if (!state.allow_tokens_itself(trie, again)) return false;  // not inside a pattern string
    size_t differing = 0;
    for (size_t t = 0; t < vocabulary.size(); ++t) {
      JsonSchemaBytes next = state;
      const bool taken = !vocabulary[t].empty() && next.feed(std::string_view(vocabulary[t]));
      if (((again[t] != 0) != taken || (first_from_table && (first[t] != 0) != taken)) && ++differing <= 3)
        ADD_FAILURE() << where << ": token " << quoted(vocabulary[t]) << (taken ? " taken" : " refused");
    }
    EXPECT_EQ(differing, 0u) << where;
    return true;
  };
  std::vector<std::string> vocabulary;
  for (int byte = 0; byte < 256; ++byte) vocabulary.push_back(std::string(1, char(byte)));
  const std::vector<std::string> pieces = {"a", "b", "x", "Z", "AB", "12", "-", "@", ".", ":", "T", "\"", "\",", "\"}", "\\", "\\n",
                                           "\\\"", "\\/", "\\u00", "\\u001", "\\u0001", "\\u0041", "é", "\xC3", "\xA9", "日",
                                           "\xE6\x97", "\xA5", "😀", "\xF0\x9F", "\x98\x80", " ", "\n", "0", "9"};
  std::mt19937 rng(11);
  for (int i = 0; i < 1500; ++i) {  // tokens of 1 to 4 pieces
    std::string token;
    for (int n = std::uniform_int_distribution<int>(1, 4)(rng); n > 0; --n)
      token += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    vocabulary.push_back(token);
  }
  // The same tokens in the opposite order: one matcher asked about both tries keeps a table for each.
  const std::vector<std::string> reversed(vocabulary.rbegin(), vocabulary.rend());
  const TokenTrie trie(vocabulary), reversed_trie(reversed);
  // Besides the schemas' patterns: lengths that leave one way to end (a match of exactly 5 characters,
  // one that is 1 or 6 long), lengths on both sides, and five states in turn (the tables' eviction).
  std::vector<std::string> pattern_schemas = {
      R"j({"type": "string", "pattern": "^a{5}$", "minLength": 5})j", R"j({"type": "string", "pattern": "^(?:a|bbbbbb)$", "minLength": 3})j",
      R"j({"type": "string", "pattern": "^[ab]*$", "minLength": 6, "maxLength": 9})j",
      R"j({"type": "string", "pattern": "^(?:[^;][^,][^.][^:][^!])*$", "maxLength": 40})j"};
  for (const json& schema : schemas()) {
    const std::string text = schema.dump();
    if (text.find("pattern") != std::string::npos || text.find("format") != std::string::npos) pattern_schemas.push_back(text);
  }
  size_t from_tables = 0;
  for (const std::string& text : pattern_schemas) {
    JsonSchemaMatcher matcher(JsonSchema::compile(text));
    for (int i = 0; i < 8; ++i) {
      const Walk walk = random_walk(matcher, rng, 120);
      for (size_t cut = 0; cut <= walk.text.size(); ++cut) {
        JsonSchemaBytes state = matcher.start();
        ASSERT_TRUE(state.feed(std::string_view(walk.text).substr(0, cut)));
        const std::string where = text + " after " + quoted(walk.text.substr(0, cut));
        from_tables += expect_table_verdicts(trie, vocabulary, state, where);
        expect_table_verdicts(reversed_trie, reversed, state, where + " (the reversed vocabulary)");
      }
    }
    // Through the public path: replies of random allowed tokens, each mask against the verdicts.
    auto shared_trie = std::make_shared<const TokenTrie>(vocabulary);
    for (int reply = 0; reply < 4; ++reply) {
      JsonSchemaReplyConstraint constraint(shared_trie, JsonSchema::compile(text));
      JsonSchemaMatcher follower(JsonSchema::compile(text));
      JsonSchemaBytes state = follower.start();
      std::vector<int32_t> generated;
      while (generated.size() < 40 && !state.ended()) {
        std::vector<uint8_t> allowed(vocabulary.size(), 0);
        constraint.allowed(generated, allowed);
        std::vector<int32_t> choices;
        for (size_t t = 0; t < vocabulary.size(); ++t) {
          JsonSchemaBytes next = state;
          const bool taken = next.feed(std::string_view(vocabulary[t]));
          ASSERT_EQ(allowed[t] != 0, taken) << text << " after " << generated.size() << " tokens, token " << quoted(vocabulary[t]);
          if (taken) choices.push_back(int32_t(t));
        }
        ASSERT_FALSE(choices.empty()) << text;
        generated.push_back(choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)]);
        ASSERT_TRUE(state.feed(std::string_view(vocabulary[size_t(generated.back())])));
      }
    }
  }
  EXPECT_GT(from_tables, 200u);  // the walks were inside pattern strings often enough to test the tables
  REQUIRE_TOKENIZER_FILES();  // the real vocabularies' half: skipped, saying so, without the fetched files
  for (const char* model : {"gpt2", "llama3"}) {
    const std::vector<std::string> real = Tokenizer(model_tokenizer(model).string()).token_bytes();
    const TokenTrie real_trie(real);
    const auto patterns = std::find_if(schemas().begin(), schemas().end(), [](const json& schema) { return schema.dump().find("\"odd\"") != std::string::npos; });
    ASSERT_NE(patterns, schemas().end());
    JsonSchemaMatcher matcher(JsonSchema::compile(patterns->dump()));
    for (const char* prefix : {"{\"date\": \"2024-0", "{\"date\": \"2024-01-01\", \"code\": \"AB1", "{\"date\": \"2024-01-01\", \"code\": \"AB",
                               "{\"date\": \"2024-01-01\", \"code\": \"AB1\", \"email\": \"ada", "{\"date\": \"2024-01-01\", \"code\": \"AB1\", "
                               "\"email\": null, \"note\": \"ab\\n", "{\"date\": \"2024-01-01\", \"code\": \"AB1\", \"email\": null, "
                               "\"note\": \"x\", \"odd\": \"\\u0001\\\"", "{\"date\": \"2024-01-01\", \"code\": \"AB1\", \"email\": null, "
                               "\"note\": \"x\", \"odd\": \"é\", \"even\": \"abab"}) {
      JsonSchemaBytes state = matcher.start();
      ASSERT_TRUE(state.feed(std::string_view(prefix))) << prefix;
      EXPECT_TRUE(expect_table_verdicts(real_trie, real, state, std::string(model) + " after " + quoted(prefix))) << prefix;
    }
  }
}

// The reply's constraint follows tokens, rolls back, and its cached masks are the trie's.
TEST(JsonSchemaReplyConstraint, FollowsTheReplyAndEndsWhereTheValueIsWhole) {
  std::vector<std::string> vocabulary;
  for (int byte = 0; byte < 256; ++byte) vocabulary.push_back(std::string(1, char(byte)));
  auto trie = std::make_shared<const TokenTrie>(vocabulary);
  JsonSchemaReplyConstraint constraint(trie, JsonSchema::compile(schemas()[2].dump()));
  std::vector<int32_t> reply;
  for (char c : std::string(R"({"kind":"rect","w":1,"h":2})")) reply.push_back(uint8_t(c));
  std::vector<uint8_t> allowed(256, 0);
  constraint.allowed({}, allowed);
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), 1), 5);  // '{' and whitespace
  EXPECT_FALSE(constraint.ended(std::vector<int32_t>(reply.begin(), reply.end() - 1)));
  EXPECT_TRUE(constraint.ended(reply));
  std::vector<int32_t> wrong(reply.begin(), reply.begin() + 10);  // {"kind":"r
  wrong.push_back('x');
  EXPECT_THROW(constraint.ended(wrong), InputError);
  std::fill(allowed.begin(), allowed.end(), 0);
  constraint.allowed(std::vector<int32_t>(reply.begin(), reply.begin() + 10), allowed);  // rolled back to {"kind":"r
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), 1), 1);
  EXPECT_EQ(allowed['e'], 1);
}

// What a review found (each a crash, a hang or a dead end before its fix): an anyOf that refers back to
// itself is its other branches; anyOf branches that meet again are followed once each, not once per path;
// a chain of $ref through thousands of $defs compiles without recursing along it; a key beside an
// additionalProperties with no room left is held to the declared keys.
TEST(JsonSchema, ReferencesThatLoopChainOrMeetAgain) {
  JsonSchemaMatcher self(JsonSchema::compile(R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})"));
  EXPECT_TRUE(takes_whole(self, "\"a\""));
  EXPECT_FALSE(takes_whole(self, "1"));
  JsonSchemaMatcher loop(JsonSchema::compile(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "string"}]},
                                                 "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})"));
  EXPECT_TRUE(takes_whole(loop, "null"));
  EXPECT_TRUE(takes_whole(loop, "\"x\""));
  EXPECT_FALSE(takes_whole(loop, "true"));
  // 60 levels of anyOf whose two branches are the same next level: 2^60 paths, one string.
  json meeting = {{"$defs", json::object()}, {"$ref", "#/$defs/a0"}};
  for (int i = 0; i < 60; ++i) {
    const std::string next = "#/$defs/a" + std::to_string(i + 1);
    meeting["$defs"]["a" + std::to_string(i)] = {{"anyOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  meeting["$defs"]["a60"] = {{"type", "string"}};
  JsonSchemaMatcher met(JsonSchema::compile(meeting.dump()));
  EXPECT_TRUE(takes_whole(met, "\"abc\""));
  // A chain of 4,000 objects, each's "x" the next: compiles, and nests as deep as a reply may.
  const auto chain = [](int links) {
    json schema = {{"$defs", json::object()}, {"$ref", "#/$defs/o0"}};
    for (int i = 0; i < links; ++i)
      schema["$defs"]["o" + std::to_string(i)] = {{"type", "object"}, {"properties", {{"x", {{"$ref", "#/$defs/o" + std::to_string(i + 1)}}}}}};
    schema["$defs"]["o" + std::to_string(links)] = {{"type", "integer"}};
    return schema.dump();
  };
  JsonSchemaMatcher chained(JsonSchema::compile(chain(4000)));
  JsonSchemaBytes deep = chained.start();
  size_t opened = 0;
  while (deep.feed(std::string_view(opened == 0 ? "{" : "\"x\":{"))) ++opened;
  EXPECT_EQ(opened, kMostJsonDepth);
  for (size_t i = 0; i < opened; ++i) ASSERT_TRUE(deep.feed(uint8_t('}'))) << i;
  EXPECT_TRUE(deep.ended());
  try {
    JsonSchema::compile(chain(6000));
    ADD_FAILURE() << "a schema of 12,000 subschemas was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 10000 subschemas"), std::string::npos) << e.what();
  }
  // Another key's value could never close (it needs itself again): only the declared key may be written.
  JsonSchemaMatcher no_room(JsonSchema::compile(R"({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties":
      {"type": "object", "required": ["r"], "properties": {"r": {"$ref": "#/additionalProperties"}}}})"));
  JsonSchemaBytes key = no_room.start();
  ASSERT_TRUE(key.feed(std::string_view("{\"")));
  EXPECT_EQ(accepted_bytes(key), std::vector<uint8_t>{'a'});
  EXPECT_TRUE(takes_whole(no_room, R"({"a":"b"})"));
}

TEST(JsonSchema, RefusesWhatItCannotHoldARepliesTo) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"not json", "the JSON schema: not valid JSON"},
      {"false", "matches no value"},
      {"3", "must be an object or a boolean"},
      {R"j({"type": "string", "pattern": "(?=a)"})j", "#/pattern: lookahead"},
      {R"({"type": "object", "properties": {"p": {"pattern": "a\\1"}}})", "#/properties/p/pattern: backreferences"},
      {R"({"type": "string", "pattern": 3})", "#/pattern: must be a string"},
      {R"({"type": "string", "pattern": "^a{3}$", "maxLength": 2})", "#/pattern: no string of minLength to maxLength characters"},
      {R"j({"type": "string", "pattern": "^(aa)+$", "minLength": 3, "maxLength": 3})j", "no string of minLength to maxLength"},
      {R"({"type": "string", "pattern": "[]"})", "#/pattern: no string matches the pattern"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "'patternProperties' is not supported"},
      {R"({"type": "string", "format": "date", "pattern": "^x"})", "#/pattern: no string matches both the pattern and the format"},
      {R"({"type": "string", "format": "hostname", "minLength": 300})", "minLength is more than the 253 characters the format allows"},
      {R"({"type": "string", "format": "uuid", "maxLength": 35})", "#/format: no string of minLength to maxLength characters matches the format"},
      {R"({"type": "string", "format": "date", "enum": ["soon"]})", "none of the enum's values is of the schema's type (and format)"},
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}], "format": "date"})", "'format' beside 'anyOf' is not supported: put it inside"},
      {R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "format": "email"})", "'format' beside '$ref' is not supported"},
      // Without the format, "soon" is in both branches: a validator that reads format as an annotation says so.
      {R"({"oneOf": [{"type": "string", "format": "date", "enum": ["2024-01-01", "soon"]}, {"const": "soon"}]})", "branches 0 and 1 may both match"},
      {R"({"type": "string", "pattern": "^[a-z]{100000000}$"})", "#/pattern: the string's lengths (minLength, maxLength, or the pattern's own count of a class) look 100000000 characters ahead"},
      {R"({"type": "number", "minimum": 1e15})", "#: no number of at most 15 digits (what a bounded number's reply may write) is within"},
      {R"({"type": "number", "minimum": 1e-16, "maximum": 1.5e-16})", "no number of at most 15 digits"},
      {R"({"type": "number", "exclusiveMinimum": 0.5, "maximum": 0.5})", "no number of at most 15 digits"},
      {R"({"type": "number", "maximum": "1"})", "#/maximum: must be a number"},
      {R"({"minimum": 0})", "'minimum' bounds a number here: give \"type\": \"number\" or \"integer\""},
      {R"({"type": "integer", "minimum": 3, "exclusiveMaximum": 3})", "no integer is within its minimum and maximum"},
      {R"({"type": "integer", "exclusiveMinimum": true})", "#/exclusiveMinimum: must be a number"},
      {R"({"type": "integer", "multipleOf": 2})", "'multipleOf' is not supported"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})", "#/oneOf: branches 0 and 1 may both match one value"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "branches 0 and 1 may both match"},
      {R"({"oneOf": [{"const": 1}, {"enum": [2, 1.0]}]})", "branches 0 and 1 may both match"},
      {R"({"oneOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"const": 1}}}, {"type": "object",
          "properties": {"a": {"const": 2}}, "required": ["a"]}]})", "branches 1 and 2 may both match"},
      {R"({"oneOf": [{}, {"type": "null"}]})", "branches 0 and 1 may both match"},
      // A type keywords only imply lets other types through under JSON Schema: 5 matches both here.
      {R"({"oneOf": [{"type": "number"}, {"minLength": 1}]})", "branches 0 and 1 may both match"},
      {R"({"oneOf": [{"properties": {"a": {}}}, {"type": "null"}]})", "branches 0 and 1 may both match"},
      {R"({"oneOf": [{"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]},
                     {"type": "object", "properties": {"k": {"minItems": 1}}, "required": ["k"]}]})", "branches 0 and 1 may both match"},
      {R"({"type": "integer", "minimum": 1e300})", "#/minimum: leaves no integer Tilefire bounds (int64)"},
      {R"({"type": "integer", "exclusiveMinimum": 9223372036854775807})", "#/exclusiveMinimum: leaves no integer"},
      {R"({"type": "integer", "exclusiveMinimum": 9223372036854775800})", "#/exclusiveMinimum: leaves no integer Tilefire bounds (int64) beyond it as a double too"},
      {R"({"type": "integer", "exclusiveMinimum": 4611686018427387904, "exclusiveMaximum": 4611686018427388905})",
       "no integer is within its minimum and maximum (compared as doubles too, past 2^53)"},
      {R"({"type": "integer", "maximum": -1e300})", "#/maximum: leaves no integer"},
      {R"({"type": "integer", "exclusiveMaximum": -9223372036854775807})", "#/exclusiveMaximum: leaves no integer"},
      {R"({"anyOf": [{}], "oneOf": [{}]})", "give anyOf or oneOf, not both"},
      {R"({"type": "objekt"})", "#/type: must be one of"},
      {R"({"type": "object", "propertys": {}})", "'propertys' is not a keyword"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "format": "email", "maxLength": -1}}})",
       "#/properties/a/maxLength: must be a whole number"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems is more than maxItems"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "names \"b\", which is not in 'properties'"},
      {R"({"$ref": "https://example.com/schema"})", "only a reference into the same schema"},
      {R"({"$ref": "#/$defs/missing"})", "#/$defs/missing is not a place in the schema"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "no finite JSON value matches"},
      {R"({"type": "object", "properties": {"me": {"$ref": "#"}}, "required": ["me"]})", "no finite JSON value matches"},
      {R"({"type": "string", "enum": [1, 2]})", "none of the enum's values is of the schema's type"},
      {R"({"type": "string", "enum": ["a"], "minLength": 3})", "'minLength' beside enum or const"},
      {R"({"type": "object", "anyOf": [{}]})", "'type' beside 'anyOf' is not supported"},
      {R"({"allOf": [{}, {}]})", "only an allOf of one schema"},
      {R"({"minItems": 1, "minLength": 1})", "without a 'type'"},
      {R"({"type": "object", "properties": {"a\u0001": {}}, "additionalProperties": true})", "control character"},
      {R"({"$id": "https://e.x/a", "type": "object", "properties": {"p": {"$id": "https://e.x/b", "type": "string"}}})",
       "#/properties/p: '$id' below the schema's root is not supported"},
      {R"({"$ref": "#"})", "no finite JSON value matches"},
  };
  for (const auto& [schema, message] : refused) {
    try {
      JsonSchema::compile(schema);
      ADD_FAILURE() << "not refused: " << schema;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << schema << "\n" << e.what();
    }
  }
  // Objects that hold themselves in each of 64 required properties: the proof that two such branches
  // overlap meets the same pairs again and again, and must not take exponential time to refuse them.
  json recursive = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
  for (int i = 0; i < 64; ++i) {
    recursive["properties"]["p" + std::to_string(i)] = {{"anyOf", {{{"$ref", "#/$defs/S"}}, {{"type", "null"}}}}};
    recursive["required"].push_back("p" + std::to_string(i));
  }
  const json overlapping = {{"$defs", {{"S", recursive}}}, {"oneOf", {{{"$ref", "#/$defs/S"}}, {{"$ref", "#/$defs/S"}}}}};
  EXPECT_THROW(JsonSchema::compile(overlapping.dump()), InputError);
  EXPECT_NO_THROW(JsonSchema::compile(R"({"type": "integer", "maximum": 1e300, "minimum": -1e300})"));
  std::string many = R"({"type": "object", "properties": {)";
  for (uint32_t i = 0; i <= kMostSchemaProperties; ++i) many += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": {}";
  EXPECT_THROW(JsonSchema::compile(many + "}}"), InputError);
}

}  // namespace
}  // namespace tilefire::testing
