#pragma once
// Reading a config.json's keys with one message shape for every failure ("<origin>: key 'k' must be
// ..."): what the config parser's files (graph/model_spec.cpp, graph/model_spec_attention.cpp) share.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tilefire/errors.h"

namespace tilefire::model_spec_detail {

[[noreturn]] inline void fail(const std::string& origin, const std::string& what) { throw InputError(origin + ": " + what); }

// Reads config keys with one message shape for every failure: "<origin>: key 'k' must be ...".
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& object, std::string origin, std::string prefix = "")
      : object_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return object_.contains(key); }
  bool has_non_null(const char* key) const { return has(key) && !object_.at(key).is_null(); }
  const nlohmann::json& at(const char* key) const { return object_.at(key); }
  std::string key_name(const char* key) const { return prefix_ + key; }

  [[noreturn]] void bad(const char* key, const std::string& expected) const {
    fail(origin_, "key '" + key_name(key) + "' must be " + expected + describe_value(key));
  }

  // A required positive integer that fits uint32 (sizes and counts).
  uint32_t positive_u32(const char* key) const {
    if (!has(key)) fail(origin_, "missing required key '" + key_name(key) + "' (a positive integer)");
    return positive_u32_value(key);
  }
  uint32_t positive_u32_or(const char* key, uint32_t fallback) const {
    return has_non_null(key) ? positive_u32_value(key) : fallback;
  }

  // A positive finite number (eps, theta, scaling factors); integers are accepted as numbers.
  float positive_float_or(const char* key, float fallback) const {
    if (!has_non_null(key)) return fallback;
    const nlohmann::json& value = at(key);
    if (!value.is_number()) bad(key, "a positive number");
    double number = value.get<double>();
    if (!std::isfinite(number) || number <= 0.0 || number > std::numeric_limits<float>::max()) {
      bad(key, "a positive number");
    }
    return static_cast<float>(number);
  }
  float positive_float(const char* key) const {
    if (!has_non_null(key)) fail(origin_, "missing required key '" + key_name(key) + "' (a positive number)");
    return positive_float_or(key, 0.0f);
  }

  // A required list of positive finite numbers.
  std::vector<float> positive_floats(const char* key) const {
    if (!has_non_null(key)) fail(origin_, "missing required key '" + key_name(key) + "' (a list of positive numbers)");
    const nlohmann::json& list = at(key);
    if (!list.is_array()) bad(key, "a list of positive numbers");
    std::vector<float> values;
    for (const nlohmann::json& value : list) {
      const double number = value.is_number() ? value.get<double>() : 0.0;
      if (!std::isfinite(number) || number <= 0.0 || number > std::numeric_limits<float>::max())
        fail(origin_, "key '" + key_name(key) + "' must be a list of positive numbers (item " + std::to_string(values.size()) +
                          " is " + value.dump() + ")");
      values.push_back(static_cast<float>(number));
    }
    return values;
  }

  bool bool_or(const char* key, bool fallback) const {
    if (!has_non_null(key)) return fallback;
    if (!at(key).is_boolean()) bad(key, "true or false");
    return at(key).get<bool>();
  }

  // A token id: a non-negative integer that fits int32.
  int32_t token_id(const char* key, const nlohmann::json& value) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      bad(key, "a non-negative integer token id (or a list of them)");
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }

 private:
  uint32_t positive_u32_value(const char* key) const {
    const nlohmann::json& value = at(key);
    if (!value.is_number_integer()) bad(key, "a positive integer");
    // is_number_integer covers signed and unsigned storage; read through the matching type.
    if (value.is_number_unsigned()) {
      uint64_t number = value.get<uint64_t>();
      if (number == 0 || number > std::numeric_limits<uint32_t>::max()) bad(key, "a positive integer");
      return static_cast<uint32_t>(number);
    }
    int64_t number = value.get<int64_t>();
    if (number <= 0 || number > int64_t(std::numeric_limits<uint32_t>::max())) bad(key, "a positive integer");
    return static_cast<uint32_t>(number);
  }

  std::string describe_value(const char* key) const {
    if (!has(key)) return "";
    std::string text = at(key).dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return " (got " + text + ")";
  }

  const nlohmann::json& object_;
  std::string origin_;
  std::string prefix_;
};

}  // namespace tilefire::model_spec_detail
