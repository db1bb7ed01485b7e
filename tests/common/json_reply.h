#pragma once
// A reply constrained to a JSON object (constrain_to_json, serve's response_format json_object, run's
// --json-object) checked by nlohmann::json's parser, the independent reference: one that ended is a JSON
// object; one cut short (max tokens) is a prefix of one, so the parser's only complaint is the end of its
// input (reported at byte size + 1).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tilefire::testing {

// `ended`: the reply stopped where its value closed. Returns `ended`, for counting.
inline bool expect_json_object_or_prefix(const std::string& text, bool ended) {
  using nlohmann::json;
  if (ended) {
    json value;
    EXPECT_NO_THROW(value = json::parse(text)) << json(text).dump();
    EXPECT_TRUE(value.is_object()) << text;
    return true;
  }
  try {
    [[maybe_unused]] const json whole = json::parse(text);
    ADD_FAILURE() << "a whole JSON text that did not end the reply: " << json(text).dump();
  } catch (const json::parse_error& e) {
    EXPECT_EQ(e.byte, text.size() + 1) << "not a prefix of JSON: " << json(text).dump() << ": " << e.what();
  }
  return false;
}

}  // namespace tilefire::testing
