// Bounds held exactly (docs/ARCHITECTURE.md, "Constrained decoding"): a number's minimum and maximum
// against Ajv at and around each bound (megakernel/json_schema_numbers.cpp), and a pattern's counted class
// held as its star with lengths, past the counts a pattern's automaton could spell out (string_pattern.h).
// The random walks and mutations of tests/megakernel/json_schema_test.cpp cover both too, in its schemas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/schema_oracle.h"
#include "tilefire/errors.h"
#include "tilefire/json_schema.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

bool takes_whole(JsonSchemaMatcher& matcher, const std::string& text) {
  JsonSchemaBytes state = matcher.start();
  return state.feed(text) && state.complete();
}

// A number held to bounds, against Ajv (which compares doubles) on texts at and around each bound: every
// text the automaton takes is valid, and of those it may write (at most 15 digits, a lone 0 before the
// point not counted, no exponent) it takes exactly the valid ones. Around a bound: the bound written to
// 0 to 17 decimals, one unit of the last decimal either side, negated, and a few fixed texts.
TEST(JsonSchemaBytes, BoundedNumbersAreExactlyTheValidOnesItMayWrite) {
  REQUIRE_SCHEMA_ORACLE();
  const std::vector<std::string> sources = {
      R"({"type": "number", "minimum": 0, "maximum": 1})",
      R"({"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 0.3})",
      R"({"type": "number", "minimum": 0.1, "exclusiveMaximum": 0.7})",
      R"({"type": "number", "maximum": -1234.5678})",
      R"({"type": "number", "exclusiveMinimum": 1e-7, "maximum": 3e-7})",
      R"({"type": "number", "minimum": 123456789.123456, "maximum": 123456789.1234567})",
      R"({"type": "number", "exclusiveMaximum": 0.30000000000000004, "minimum": 0.3})"};
  auto may_write = [](const std::string& text) {  // at most 15 digits, no exponent
    if (text.find_first_of("eE") != std::string::npos) return false;
    const size_t first = text[0] == '-' ? 1 : 0;
    size_t digits = 0;
    for (size_t i = first; i < text.size(); ++i) digits += text[i] >= '0' && text[i] <= '9';
    if (text.compare(first, 2, "0.") == 0 || text.substr(first) == "0") --digits;  // a lone 0 before the point
    return digits <= 15;
  };
  std::vector<SchemaCase> cases;
  for (const std::string& source : sources) {
    const json schema = json::parse(source);
    SchemaCase near{schema, {"0", "-0", "1", "-1", "0.5", "1e-7", "2e-7", "0.0000002", "-1234.5678", "-1234.56780", "-1234.5679", "10",
                             "0.3", "0.30000000000000004", "0.2999999999999999", "123456789.123456", "123456789.12345"}};
    for (const char* keyword : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!schema.contains(keyword)) continue;
      const double bound = schema[keyword].get<double>();
      for (int decimals = 0; decimals <= 17; ++decimals) {
        const double step = std::pow(10.0, -decimals);
        for (double value : {bound, bound - step, bound + step, -bound}) {
          char text[64];
          std::snprintf(text, sizeof text, "%.*f", decimals, value);
          near.documents.push_back(text);
        }
      }
    }
    cases.push_back(std::move(near));
  }
  const auto verdicts = validate_with_ajv(cases);
  size_t taken = 0, written = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    JsonSchemaMatcher matcher(JsonSchema::compile(cases[c].schema.dump()));
    for (size_t i = 0; i < cases[c].documents.size(); ++i) {
      const std::string& text = cases[c].documents[i];
      ASSERT_TRUE(verdicts[c][i].has_value()) << text;
      const bool takes = takes_whole(matcher, text), valid = *verdicts[c][i];
      if (takes) {
        EXPECT_TRUE(valid) << sources[c] << " took " << text;
      }
      if (may_write(text)) {
        EXPECT_EQ(takes, valid) << sources[c] << " on " << text;
        ++written;
      }
      taken += takes;
    }
  }
  EXPECT_GT(taken, 50u);
  EXPECT_GT(written, 200u);
}

// An integer held to bounds past 2^53, where validators differ: Python's compare the integers exactly,
// Ajv compares the doubles they round to, so an integer just beyond an exclusive bound can round onto
// it. Texts around each bound (within a double's spacing there, ties included) are taken exactly when
// both would accept them.
TEST(JsonSchemaBytes, BoundedIntegersPast2To53AreValidBothExactlyAndAsDoubles) {
  REQUIRE_SCHEMA_ORACLE();
  const std::vector<std::string> sources = {
      R"({"type": "integer", "exclusiveMinimum": -9223372036854775807})",
      R"({"type": "integer", "exclusiveMaximum": 9007199254740993})",
      R"({"type": "integer", "exclusiveMinimum": 9007199254740992, "maximum": 9007199254741100})",
      R"({"type": "integer", "minimum": 9007199254740993, "exclusiveMaximum": 18014398509481985})",
      R"({"type": "integer", "exclusiveMaximum": 9223372036854775000})",
      R"({"type": "integer", "exclusiveMinimum": 4611686018427387904, "exclusiveMaximum": 4611686018427390905})",
      R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 10})"};
  const __int128 kInt64Max = INT64_MAX;
  auto decimal = [](__int128 value) {
    std::string text;
    const bool negative = value < 0;
    for (unsigned __int128 magnitude = negative ? -(unsigned __int128)value : (unsigned __int128)value; text.empty() || magnitude > 0;
         magnitude /= 10)
      text.insert(text.begin(), char('0' + int(magnitude % 10)));
    return negative ? "-" + text : text;
  };
  auto exact = [](const json& bound) { return bound.is_number_unsigned() ? __int128(bound.get<uint64_t>()) : __int128(bound.get<int64_t>()); };
  std::vector<SchemaCase> cases;
  std::vector<std::vector<bool>> exactly_valid;
  for (const std::string& source : sources) {
    const json schema = json::parse(source);
    SchemaCase around{schema, {}};
    std::vector<bool> valid;
    for (const auto& [keyword, bound] : schema.items()) {
      if (keyword == "type") continue;
      for (__int128 offset = -1100; offset <= 1100; offset += (offset > -40 && offset < 40) || std::abs(int(offset) % 512) <= 2 ? 1 : 37) {
        const __int128 value = exact(bound) + offset;
        if (value < -kInt64Max || value > kInt64Max) continue;
        bool within = true;
        for (const auto& [other, limit] : schema.items()) {
          if (other == "minimum") within = within && value >= exact(limit);
          if (other == "exclusiveMinimum") within = within && value > exact(limit);
          if (other == "maximum") within = within && value <= exact(limit);
          if (other == "exclusiveMaximum") within = within && value < exact(limit);
        }
        around.documents.push_back(decimal(value));
        valid.push_back(within);
      }
    }
    cases.push_back(std::move(around));
    exactly_valid.push_back(std::move(valid));
  }
  const auto verdicts = validate_with_ajv(cases);
  size_t taken = 0, differ = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    JsonSchemaMatcher matcher(JsonSchema::compile(cases[c].schema.dump()));
    for (size_t i = 0; i < cases[c].documents.size(); ++i) {
      const std::string& text = cases[c].documents[i];
      ASSERT_TRUE(verdicts[c][i].has_value()) << text;
      const bool takes = takes_whole(matcher, text), as_doubles = *verdicts[c][i], exactly = exactly_valid[c][i];
      EXPECT_EQ(takes, as_doubles && exactly) << sources[c] << " on " << text << " (Ajv: " << as_doubles << ", exactly: " << exactly << ")";
      taken += takes;
      differ += as_doubles != exactly;
    }
  }
  EXPECT_GT(taken, 200u);
  EXPECT_GT(differ, 100u);  // the texts reach where the two kinds of validator differ
}

// One class counted is held as its star with the counts as lengths (string_pattern.h): exactly, past the
// 65,536 copies a pattern's automaton could spell out (a string of 100,000 characters is taken, one of
// 100,001 refused at its last character), merged with minLength and maxLength (the tighter of each), and
// refused by name when they leave no length.
TEST(JsonSchema, ACountedClassIsHeldToItsCountsExactly) {
  auto fed = [](const std::string& schema, const std::string& text) {
    JsonSchemaMatcher matcher(JsonSchema::compile(schema));
    JsonSchemaBytes state = matcher.start();
    size_t taken = 0;
    while (taken < text.size() && state.feed(uint8_t(text[taken]))) ++taken;
    return std::make_pair(taken, taken == text.size() && state.complete());
  };
  const std::string wide = R"({"type": "string", "pattern": "^[a-z]{1,100000}$"})";
  EXPECT_EQ(fed(wide, "\"" + std::string(100000, 'a') + "\""), std::make_pair(size_t(100002), true));
  EXPECT_EQ(fed(wide, "\"" + std::string(100001, 'a') + "\"").first, size_t(100001));  // the 100,001st character
  EXPECT_EQ(fed(wide, "\"\"").first, size_t(1));  // at least one character
  const std::string merged = R"({"type": "string", "pattern": "^(?:[a-c]){2,6}$", "minLength": 3, "maxLength": 9})";
  for (size_t length = 0; length <= 8; ++length) {
    const std::string text = "\"" + std::string(length, 'b') + "\"";
    EXPECT_EQ(fed(merged, text).second, length >= 3 && length <= 6) << length;
  }
  EXPECT_EQ(fed(merged, "\"abd\"").first, size_t(3));  // d: not in the class
  try {
    JsonSchema::compile(R"({"type": "string", "pattern": "^[a-z]{6,9}$", "maxLength": 5})");
    ADD_FAILURE() << "a pattern of 6 to 9 characters beside maxLength 5 was taken";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("#/pattern: no string of minLength to maxLength characters matches it"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace tilefire::testing
