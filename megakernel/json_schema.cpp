// Reading a JSON Schema into nodes (tilefire/json_schema.h). What is read: type (one or a list), enum and
// const, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, pattern,
// anyOf, oneOf whose branches no value can match two of (a discriminated union), allOf of one schema,
// $ref to a place in the same document (recursion included), format (ten held, json_schema_formats.cpp; the
// rest annotations) and annotations (title, description, default, examples, ...). Anything else is
// refused by name: a keyword the reply could break without the automaton knowing is never ignored.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "json_schema_node.h"
#include "tilefire/chat.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using nlohmann::json;
static_assert(std::numeric_limits<long double>::digits >= 64, "an integer bound is read exactly as a long double");
using Node = JsonSchema::Node;

// Keywords that say what a schema is about without constraining a value (JSON Schema 2020-12 treats
// "format" as an annotation unless a validator is asked to assert it; a reply is held to the formats of
// json_schema_formats.cpp all the same, so it is valid either way: docs/ARCHITECTURE.md says so).
const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions", "format", "contentEncoding", "contentMediaType", "discriminator"};
// Keywords each type reads; those of other types do not apply to a value of this one (JSON Schema).
const std::set<std::string> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeywords = {"items", "minItems", "maxItems"};
const std::set<std::string> kStringKeywords = {"minLength", "maxLength", "pattern"};
// Bounds are held on integers alone (a decimal's prefix with an exponent to come can reach nearly any value).
const std::set<std::string> kIntegerKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
// Keywords of JSON Schema the automaton does not hold a reply to: refused with this reason.
const std::map<std::string, std::string> kUnsupported = {
    {"patternProperties", "keys by regular expression are not checked"},
    {"propertyNames", "key schemas are not checked"},
    {"minProperties", "property counts are not checked"},
    {"maxProperties", "property counts are not checked"},
    {"dependentRequired", "dependencies between properties are not checked"},
    {"dependentSchemas", "dependencies between properties are not checked"},
    {"dependencies", "dependencies between properties are not checked"},
    {"unevaluatedProperties", "give additionalProperties instead"},
    {"unevaluatedItems", "give items instead"},
    {"prefixItems", "tuples are not supported: give items"},
    {"additionalItems", "tuples are not supported: give items"},
    {"contains", "array contents are checked by items only"},
    {"minContains", "array contents are checked by items only"},
    {"maxContains", "array contents are checked by items only"},
    {"uniqueItems", "uniqueness is not checked"},
    {"multipleOf", "multiples are not checked"},
    {"not", "negation is not supported"},
    {"if", "conditionals are not supported"},
    {"then", "conditionals are not supported"},
    {"else", "conditionals are not supported"},
    {"$anchor", "give $ref a JSON pointer (#/...)"},
    {"$dynamicRef", "give $ref a JSON pointer (#/...)"},
    {"$dynamicAnchor", "give $ref a JSON pointer (#/...)"},
};
const std::vector<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

// The format a reply is held to that a schema names, or null (none, or one that stays an annotation).
const StringFormat* held_format(const json& schema) {
  const auto format = schema.find("format");
  return format != schema.end() && format->is_string() ? asserted_format(format->get<std::string>()) : nullptr;
}

size_t code_points(const std::string& text) {  // of UTF-8 text: the bytes that begin a character
  return size_t(std::count_if(text.begin(), text.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
}

std::string pointer_token(const std::string& key) {  // RFC 6901: ~ is ~0, / is ~1
  std::string token;
  for (char c : key) token += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return token;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& document) : document_(document) {}

  std::unique_ptr<JsonSchema::Compiled> run() {
    auto compiled = std::make_unique<JsonSchema::Compiled>();
    compiled->root = compile(document_, "#");
    // The $ref targets, each compiled once, in turn: a chain of references through $defs is as long as
    // it likes, and no recursion here follows it.
    while (!pending_.empty()) {
      const PendingRef ref = pending_.back();
      pending_.pop_back();
      const json* schema = nullptr;
      try {
        schema = &document_.at(json::json_pointer(ref.target.substr(1)));
      } catch (const json::exception&) {
        refuse(ref.where + "/$ref", ref.target + " is not a place in the schema");
      }
      Node alias;  // the reference: an anyOf of its target alone
      alias.kind = Node::Kind::any_of;
      alias.branches.push_back(compile(*schema, ref.target));
      nodes_[size_t(ref.node)] = std::move(alias);
    }
    compiled->nodes = std::move(nodes_);
    gather_choices(compiled->nodes);
    for (const auto& [node, where] : one_ofs_) check_one_of(compiled->nodes, node, where);
    settle_min_frames(compiled->nodes);
    const uint32_t root_frames = compiled->nodes[size_t(compiled->root)].min_frames;
    if (root_frames == kUnfinishable)
      throw InputError("json_schema: no finite JSON value matches the schema (a required property, or an array's "
                       "least items, holds its own kind again and again)");
    if (1 + root_frames > kMostSchemaFrames)
      throw InputError("json_schema: every value the schema matches nests deeper than " + std::to_string(kMostJsonDepth) +
                       " arrays and objects");
    return compiled;
  }

 private:
  [[noreturn]] static void refuse(const std::string& where, const std::string& what) {
    throw InputError("json_schema: " + where + ": " + what);
  }

  // The node of a schema (a subschema at `where`, a JSON pointer into the document).
  int32_t compile(const json& schema, const std::string& where) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) refuse(where, "the schema false matches no value");
      return add(Node{}, where);  // true: any value
    }
    if (!schema.is_object()) refuse(where, "a schema must be an object or a boolean, got " + schema.dump().substr(0, 80));
    for (const auto& [keyword, value] : schema.items()) check_keyword(keyword, where);
    const auto only_annotations_beside = [&](const std::string& keyword) {
      for (const auto& [other, value] : schema.items())
        if (other != keyword && ((!kAnnotations.count(other) && other.rfind("x-", 0) != 0) || (other == "format" && held_format(schema))))
          refuse(where, "'" + other + "' beside '" + keyword + "' is not supported: put it inside");
    };
    if (schema.contains("anyOf") && schema.contains("oneOf")) refuse(where, "give anyOf or oneOf, not both");
    if (schema.contains("$ref")) {
      only_annotations_beside("$ref");
      return resolve(schema.at("$ref"), where);
    }
    if (schema.contains("allOf")) {
      only_annotations_beside("allOf");
      const json& all = schema.at("allOf");
      if (!all.is_array() || all.size() != 1) refuse(where + "/allOf", "only an allOf of one schema is supported");
      return compile(all[0], where + "/allOf/0");
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!schema.contains(keyword)) continue;
      only_annotations_beside(keyword);
      const json& any = schema.at(keyword);
      const std::string at = where + "/" + keyword;
      if (!any.is_array() || any.empty()) refuse(at, "must be a list of at least one schema");
      Node node;
      node.kind = Node::Kind::any_of;
      const int32_t index = reserve(where);
      for (size_t i = 0; i < any.size(); ++i) node.branches.push_back(compile(any[i], at + "/" + std::to_string(i)));
      nodes_[size_t(index)] = std::move(node);
      // oneOf is anyOf once no value can match two branches: checked when every node is known.
      if (std::string(keyword) == "oneOf") one_ofs_.push_back({index, at});
      return index;
    }
    const std::vector<std::string> types = types_of(schema, where);
    for (const std::string& keyword : kIntegerKeywords)
      if (schema.contains(keyword) && std::find(types.begin(), types.end(), "integer") == types.end() &&
          std::find(types.begin(), types.end(), "number") == types.end())
        refuse(where, "'" + keyword + "' bounds a number here: give \"type\": \"number\" or \"integer\"");
    if (schema.contains("enum") || schema.contains("const")) return literals(schema, types, where);
    if (types.empty()) return add(Node{}, where);  // no type, no keyword that narrows it: any value
    if (types.size() == 1) {
      const int32_t index = typed(schema, types[0], where, true);
      // Read as that type's (stricter than JSON Schema, which lets values of other types through): oneOf's
      // proof must know.
      nodes_[size_t(index)].implied_type = !schema.contains("type");
      return index;
    }
    Node node;
    node.kind = Node::Kind::any_of;
    const int32_t index = reserve(where);
    for (const std::string& type : types) node.branches.push_back(typed(schema, type, where + "(" + type + ")", false));
    nodes_[size_t(index)] = std::move(node);
    return index;
  }

  void check_keyword(const std::string& keyword, const std::string& where) const {
    if (keyword == "$id" && where != "#")  // a $ref below it would resolve against it, not the document
      refuse(where, "'$id' below the schema's root is not supported: give $defs at the root");
    if (kAnnotations.count(keyword) || keyword.rfind("x-", 0) == 0) return;
    if (auto unsupported = kUnsupported.find(keyword); unsupported != kUnsupported.end())
      refuse(where, "'" + keyword + "' is not supported: " + unsupported->second);
    static const std::set<std::string> read = {"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "type"};
    if (read.count(keyword) || kObjectKeywords.count(keyword) || kArrayKeywords.count(keyword) || kStringKeywords.count(keyword) ||
        kIntegerKeywords.count(keyword))
      return;
    refuse(where, "'" + keyword + "' is not a keyword of the JSON Schema subset Tilefire reads");
  }

  // The types a schema names, or those its keywords imply when it names none (a schema with properties
  // is read as an object's: stricter than JSON Schema, which lets other types through, so every reply
  // still validates).
  std::vector<std::string> types_of(const json& schema, const std::string& where) const {
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const json& type = schema.at("type");
      const json list = type.is_array() ? type : json::array({type});
      if (list.empty()) refuse(where + "/type", "names no type");
      for (const json& name : list) {
        if (!name.is_string() || std::find(kTypes.begin(), kTypes.end(), name.get<std::string>()) == kTypes.end())
          refuse(where + "/type", "must be one of object, array, string, number, integer, boolean, null (or a list of them), got " +
                                      name.dump().substr(0, 80));
        if (std::find(types.begin(), types.end(), name.get<std::string>()) != types.end())
          refuse(where + "/type", "names " + name.dump() + " twice");
        types.push_back(name.get<std::string>());
      }
      return types;
    }
    for (const auto& [type, keywords] : {std::pair{"object", &kObjectKeywords}, {"array", &kArrayKeywords}, {"string", &kStringKeywords}})
      for (const std::string& keyword : *keywords)
        if (schema.contains(keyword) && std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
    if (held_format(schema) && std::find(types.begin(), types.end(), "string") == types.end()) types.push_back("string");
    if (types.size() > 1) refuse(where, "keywords of " + types[0] + " and " + types[1] + " without a 'type': give one");
    return types;
  }

  int32_t typed(const json& schema, const std::string& type, const std::string& where, bool register_where) {
    Node node;
    const int32_t index = register_where ? reserve(where) : reserve("");
    if (type == "object") {
      object(schema, where, node);
    } else if (type == "array") {
      node.kind = Node::Kind::array;
      node.items = schema.contains("items") ? compile(schema.at("items"), where + "/items") : add(Node{}, "");
      node.min_items = bound(schema, "minItems", 0, where);
      node.max_items = bound(schema, "maxItems", kUnfinishable, where);
      if (node.min_items > node.max_items) refuse(where, "minItems is more than maxItems");
    } else if (type == "string") {
      node.kind = Node::Kind::string;
      node.min_length = bound(schema, "minLength", 0, where);
      node.max_length = bound(schema, "maxLength", kUnfinishable, where);
      if (node.min_length > node.max_length) refuse(where, "minLength is more than maxLength");
      string_pattern(schema, where, node);
    } else if (type == "number" || type == "integer") {
      node.kind = type == "number" ? Node::Kind::number : Node::Kind::integer;
      numeric_bounds(schema, type, where, node);
    } else {  // boolean, null: their literals
      node.kind = Node::Kind::literals;
      for (const char* text : type == "boolean" ? std::vector<const char*>{"true", "false"} : std::vector<const char*>{"null"}) {
        node.texts.insert(text, 0, 0);
        node.literal_texts.push_back(text);
      }
    }
    nodes_[size_t(index)] = std::move(node);
    return index;
  }

  // A string's pattern (string_pattern.h) and format (one a reply is held to, json_schema_formats.cpp) as
  // one automaton, and with its lengths the table that keeps them from leaving a reply's string with no
  // way to end.
  static void string_pattern(const json& schema, const std::string& where, Node& node) {
    static_assert(kUnfinishable == UINT32_MAX, "PatternLengths reads UINT32_MAX as no maxLength");
    const json* pattern = schema.contains("pattern") ? &schema.at("pattern") : nullptr;
    if (pattern && !pattern->is_string()) refuse(where + "/pattern", "must be a string (a regular expression), got " + pattern->dump().substr(0, 40));
    const StringFormat* format = held_format(schema);
    if (!pattern && !format) return;
    const std::string at = where + (pattern ? "/pattern" : "/format");
    if (format && format->most_length < node.max_length) {
      node.max_length = format->most_length;
      if (node.min_length > node.max_length)
        refuse(where, "minLength is more than the " + std::to_string(format->most_length) + " characters the format allows");
    }
    try {
      if (pattern) {
        // One class counted between parts of one length (^[A-Z][a-z]{1,400}$): ^P C* S$, the counts as
        // the string's lengths (string_pattern.h).
        if (std::optional<StringPattern::CountedClass> counted = StringPattern::counted_class(pattern->get<std::string>())) {
          node.pattern = counted->star;
          node.min_length = std::max(node.min_length, counted->least);
          node.max_length = std::min(node.max_length, counted->most);  // past minLength: refused below
        } else {
          node.pattern = StringPattern::compile(pattern->get<std::string>());
        }
      }
      if (format) node.pattern = node.pattern ? StringPattern::intersect(*node.pattern, *format->pattern) : format->pattern;
      if (node.min_length > 0 || node.max_length != kUnfinishable)
        node.pattern_lengths = PatternLengths(*node.pattern, node.min_length, node.max_length);
    } catch (const InputError& error) {
      refuse(at, error.what());
    }
    if (!node.pattern_lengths.can_end(StringPattern::kStart, node.min_length, node.max_length))
      refuse(at, std::string("no string of minLength to maxLength characters matches ") + (pattern ? "it" : "the format"));
  }

  // An exclusive bound on integers, also as doubles: validators such as Ajv compare the doubles that
  // integers round to, and past 2^53 an integer beyond the bound can round onto the bound's double (then
  // it is not beyond it there). From the first integer beyond it exactly, `from`, on to the first whose
  // double is beyond it too: at most half a double's spacing there (1,024 near int64's ends). Inclusive
  // bounds need none of this: rounding keeps order, so an integer within one rounds within its double.
  static int64_t first_beyond_as_doubles(int64_t from, double bound, bool lower, const std::string& where, const json& written) {
    const int64_t last = lower ? INT64_MAX : -INT64_MAX;
    int64_t value = from;
    while (lower ? double(value) <= bound : double(value) >= bound) {
      if (value == last)
        refuse(where, "leaves no integer Tilefire bounds (int64) beyond it as a double too: " + written.dump().substr(0, 40));
      value += lower ? 1 : -1;
    }
    return value;
  }

  // minimum, maximum, exclusiveMinimum, exclusiveMaximum: an integer's as an inclusive range of int64 (a
  // bound past it is the end of int64: a bounded integer is one); a number's as an inclusive range of
  // units of 10^-15 (json_schema_numbers.cpp: a bounded number is written with at most 15 digits).
  static void numeric_bounds(const json& schema, const std::string& type, const std::string& where, Node& node) {
    bool as_doubles = false;  // an exclusive bound moved by first_beyond_as_doubles
    for (const std::string& keyword : kIntegerKeywords) {
      if (!schema.contains(keyword)) continue;
      const json& bound = schema.at(keyword);
      if (!bound.is_number()) refuse(where + "/" + keyword, "must be a number, got " + bound.dump().substr(0, 40));
      const bool lower = keyword == "minimum" || keyword == "exclusiveMinimum";
      if (type == "number") {  // exactly, in units of 10^-15 (json_schema_numbers.cpp)
        const __int128 units = number_bound_units(bound.is_number_integer() ? bound.dump() : decimal_of_bound(bound.get<double>()),
                                                  lower, keyword == "exclusiveMinimum" || keyword == "exclusiveMaximum");
        if (lower) node.min_units = std::max(node.min_units, units);
        else node.max_units = std::min(node.max_units, units);
        node.bounded = true;
        continue;
      }
      const long double value = bound.get<long double>();
      const long double highest = 9223372036854775807.0L;  // INT64_MAX, exact in x86's 64-bit mantissa
      const long double inclusive = keyword == "minimum"            ? std::ceil(value)
                                    : keyword == "exclusiveMinimum" ? std::floor(value) + 1
                                    : keyword == "maximum"          ? std::floor(value)
                                                                    : std::ceil(value) - 1;
      // A bound that leaves no int64 is refused (moving it to int64's end would let integers past it
      // through); one past int64's other end bounds nothing that a bounded integer can be.
      if (lower ? inclusive > highest : inclusive < -highest)
        refuse(where + "/" + keyword, "leaves no integer Tilefire bounds (int64): " + bound.dump().substr(0, 40));
      int64_t clamped = int64_t(std::max(-highest, std::min(highest, inclusive)));
      if (keyword == "exclusiveMinimum" || keyword == "exclusiveMaximum") {
        const int64_t exactly = clamped;
        clamped = first_beyond_as_doubles(clamped, bound.get<double>(), lower, where + "/" + keyword, bound);
        as_doubles = as_doubles || clamped != exactly;
      }
      if (lower) node.min_value = std::max(node.min_value, clamped);
      else node.max_value = std::min(node.max_value, clamped);
      node.bounded = true;
    }
    if (node.min_value > node.max_value)
      refuse(where, std::string("no integer is within its minimum and maximum") + (as_doubles ? " (compared as doubles too, past 2^53)" : ""));
    // A number's: one a reply can write (at most 15 digits, no exponent) must be within them.
    if (type == "number" && node.bounded && !number_reachable(node, NumberPrefix{.negative = true, .begun = false}) &&
        !number_reachable(node, NumberPrefix{.negative = false, .begun = false}))
      refuse(where, "no number of at most " + std::to_string(kBoundedNumberDigits) +
                        " digits (what a bounded number's reply may write) is within its minimum and maximum");
  }

  void object(const json& schema, const std::string& where, Node& node) {
    node.kind = Node::Kind::object;
    if (schema.contains("properties")) {
      const json& properties = schema.at("properties");
      if (!properties.is_object()) refuse(where + "/properties", "must be an object of schemas");
      if (properties.size() > kMostSchemaProperties)
        refuse(where + "/properties", "has " + std::to_string(properties.size()) + " properties, more than the " +
                                          std::to_string(kMostSchemaProperties) + " an object may declare");
      for (const auto& [name, property] : properties.items())
        node.properties.emplace_back(name, compile(property, where + "/properties/" + pointer_token(name)));
    }
    // Absent, additionalProperties is read as false (as OpenAI's strict mode requires it and XGrammar reads
    // it): a reply holds the declared keys only, stricter than JSON Schema's default.
    if (schema.contains("additionalProperties")) {
      const json& additional = schema.at("additionalProperties");
      if (!(additional.is_boolean() && !additional.get<bool>())) node.additional = compile(additional, where + "/additionalProperties");
    }
    for (size_t i = 0; i < node.properties.size(); ++i) {
      const std::string& name = node.properties[i].first;
      // The key as JSON writes it, from after its opening quote to its closing one.
      const std::string written = json(name).dump().substr(1);
      if (node.additional >= 0 && std::any_of(name.begin(), name.end(), [](char c) { return uint8_t(c) < 0x20; }))
        refuse(where + "/properties/" + pointer_token(name), "a key with a control character beside additionalProperties is not supported");
      node.keys.insert(written, int32_t(i), uint64_t(1) << i);
    }
    if (schema.contains("required")) {
      const json& required = schema.at("required");
      if (!required.is_array()) refuse(where + "/required", "must be a list of property names");
      for (const json& name : required) {
        auto it = std::find_if(node.properties.begin(), node.properties.end(),
                               [&](const auto& property) { return name.is_string() && property.first == name.get<std::string>(); });
        if (it == node.properties.end())
          refuse(where + "/required", "names " + name.dump().substr(0, 80) + ", which is not in 'properties'");
        node.required |= uint64_t(1) << (it - node.properties.begin());
      }
    }
  }

  int32_t literals(const json& schema, const std::vector<std::string>& types, const std::string& where) {
    for (const auto& [keyword, value] : schema.items())
      if (keyword != "enum" && keyword != "const" && keyword != "type" && !kAnnotations.count(keyword) && keyword.rfind("x-", 0) != 0)
        refuse(where, "'" + keyword + "' beside enum or const is not supported");
    if (schema.contains("enum") && schema.contains("const")) refuse(where, "give enum or const, not both");
    const json values = schema.contains("const") ? json::array({schema.at("const")}) : schema.at("enum");
    if (!values.is_array() || values.empty()) refuse(where + "/enum", "must be a list of at least one value");
    const StringFormat* format = held_format(schema);
    Node node;
    node.kind = Node::Kind::literals;
    size_t kept = 0;
    for (const json& value : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& type) { return of_type(value, type); }))
        continue;  // a value the schema's type excludes is not one it matches
      // The oneOf proof reads every value of the type: a validator that reads format as an annotation
      // lets them all through.
      node.literal_texts.push_back(value.dump());
      if (format && value.is_string() &&
          (!format->pattern->matches(value.get<std::string>()) || code_points(value.get<std::string>()) > format->most_length))
        continue;  // a string outside the format a reply is held to is not one it may take
      node.texts.insert(value.dump(), 0, 0);
      ++kept;
    }
    if (kept == 0) refuse(where, "none of the enum's values is of the schema's type (and format)");
    return add(std::move(node), where);
  }

  static bool of_type(const json& value, const std::string& type) {
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "number") return value.is_number();
    if (type == "integer") return value.is_number_integer() || (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
    if (type == "boolean") return value.is_boolean();
    return value.is_null();
  }

  static uint32_t bound(const json& schema, const char* keyword, uint32_t fallback, const std::string& where) {
    if (!schema.contains(keyword)) return fallback;
    const json& value = schema.at(keyword);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= int64_t(kUnfinishable))
      refuse(where + "/" + keyword, "must be a whole number from 0 to " + std::to_string(kUnfinishable - 1) + ", got " + value.dump().substr(0, 40));
    return value.get<uint32_t>();
  }

  // A $ref to a place in this document ("#", "#/$defs/Name"): its node, compiled once, however often and
  // however recursively it is referred to.
  int32_t resolve(const json& ref, const std::string& where) {
    if (!ref.is_string() || ref.get<std::string>().rfind('#', 0) != 0)
      refuse(where + "/$ref", "only a reference into the same schema (#/...) is supported, got " + ref.dump().substr(0, 80));
    const std::string target = ref.get<std::string>();
    if (auto known = by_pointer_.find(target); known != by_pointer_.end()) return known->second;
    const int32_t node = reserve(target);  // filled by run() once the target is compiled
    pending_.push_back({target, where, node});
    return node;
  }

  int32_t reserve(const std::string& where) {  // a node filled after its children (which may refer to it)
    if (nodes_.size() >= kMostSchemaNodes)
      refuse(where.empty() ? "#" : where, "the schema has more than " + std::to_string(kMostSchemaNodes) + " subschemas");
    nodes_.emplace_back();
    const int32_t index = int32_t(nodes_.size() - 1);
    if (!where.empty()) by_pointer_.emplace(where, index);
    return index;
  }
  int32_t add(Node node, const std::string& where) {
    const int32_t index = reserve(where);
    nodes_[size_t(index)] = std::move(node);
    return index;
  }

  // A oneOf is read as an anyOf, which holds a reply to one branch; the reply is valid under oneOf only
  // if no value can match two branches, which is proved here or the schema refused: branches of
  // different JSON types, literals of different values, or objects that both require a property whose
  // schemas no value matches both of (a discriminated union's tag: "kind": {"const": "circle"}). The proof
  // reads the schema as JSON Schema does, not as the automaton's stricter reading: a type that keywords
  // only imply ({"minLength": 1}) lets values of every other type through.
  static void check_one_of(const std::vector<Node>& nodes, int32_t node, const std::string& where) {
    OneOfProof proof{nodes, {}, 0};
    const std::vector<int32_t>& branches = nodes[size_t(node)].branches;
    for (size_t a = 0; a < branches.size(); ++a)
      for (size_t b = a + 1; b < branches.size(); ++b) {
        const bool disjoint = proof.disjoint(branches[a], branches[b], 0);
        if (proof.steps > OneOfProof::kMostSteps)
          refuse(where, "proving that no value matches two branches takes too long: give anyOf");
        if (!disjoint)
          refuse(where, "branches " + std::to_string(a) + " and " + std::to_string(b) + " may both match one value, which oneOf "
                        "forbids: give anyOf, or a property both require with a different const in each");
      }
  }

  struct OneOfProof {
    static constexpr size_t kMostSteps = 100000;  // pairs of leaves compared, for one oneOf
    const std::vector<Node>& nodes;
    std::map<std::pair<int32_t, int32_t>, bool> known;  // a pair's verdict (false while it is being proved)
    size_t steps;

    // The JSON types a node's values may have, as bits: object, array, string, number, boolean, null.
    static uint32_t types_of_node(const Node& node) {
      if (node.implied_type) return 63;
      switch (node.kind) {
        case Node::Kind::object: return 1;
        case Node::Kind::array: return 2;
        case Node::Kind::string: return 4;
        case Node::Kind::number: case Node::Kind::integer: return 8;
        case Node::Kind::literals: {
          uint32_t types = 0;
          for (const std::string& text : node.literal_texts) {
            const char first = text[0];
            types |= first == '{' ? 1 : first == '[' ? 2 : first == '"' ? 4 : first == 't' || first == 'f' ? 16 : first == 'n' ? 32 : 8;
          }
          return types;
        }
        default: return 63;  // any value
      }
    }

    // Whether no value matches both nodes (false where it cannot tell: the proof errs towards refusing).
    bool disjoint(int32_t a, int32_t b, int depth) {
      if (depth > 8 || steps > kMostSteps) return false;
      const auto key = std::minmax(a, b);
      if (auto verdict = known.find(key); verdict != known.end()) return verdict->second;
      known[key] = false;  // a pair met again inside its own proof proves nothing
      const auto leaves = [&](int32_t n) {
        return nodes[size_t(n)].kind == Node::Kind::any_of ? nodes[size_t(n)].choices : std::vector<int32_t>{n};
      };
      bool apart = true;
      for (int32_t x : leaves(a))
        for (int32_t y : leaves(b))
          if (apart && !disjoint_leaves(nodes[size_t(x)], nodes[size_t(y)], depth)) apart = false;
      known[key] = apart;
      return apart;
    }

    bool disjoint_leaves(const Node& x, const Node& y, int depth) {
      ++steps;
      if ((types_of_node(x) & types_of_node(y)) == 0) return true;
      if (x.kind == Node::Kind::literals && y.kind == Node::Kind::literals) {
        for (const std::string& one : x.literal_texts)
          for (const std::string& other : y.literal_texts)
            if (json::parse(one) == json::parse(other)) return false;  // 1 and 1.0 are one value
        return true;
      }
      // Objects told apart by a property both require (objects for certain: a value of another type
      // matches neither then; with a type only implied, it could match both).
      if (x.kind != Node::Kind::object || y.kind != Node::Kind::object || x.implied_type || y.implied_type) return false;
      for (size_t i = 0; i < x.properties.size(); ++i) {
        if (!(x.required >> i & 1u)) continue;
        for (size_t j = 0; j < y.properties.size(); ++j)
          if ((y.required >> j & 1u) && x.properties[i].first == y.properties[j].first &&
              disjoint(x.properties[i].second, y.properties[j].second, depth + 1))
            return true;
      }
      return false;
    }
  };

  // Each anyOf's choices: the nodes other than anyOf reached through its branches, each once, by a walk
  // that does not go round a loop of anyOfs (`{"anyOf": [{"$ref": "#"}, {"type": "string"}]}` is a string).
  static void gather_choices(std::vector<Node>& nodes) {
    std::vector<int32_t> seen(nodes.size(), -1), stack;  // seen[n]: the anyOf whose walk reached n last
    for (size_t from = 0; from < nodes.size(); ++from) {
      if (nodes[from].kind != Node::Kind::any_of) continue;
      std::vector<int32_t> choices;
      stack.assign(1, int32_t(from));
      seen[from] = int32_t(from);
      while (!stack.empty()) {
        const int32_t at = stack.back();
        stack.pop_back();
        for (int32_t branch : nodes[size_t(at)].branches) {
          if (seen[size_t(branch)] == int32_t(from)) continue;
          seen[size_t(branch)] = int32_t(from);
          if (nodes[size_t(branch)].kind == Node::Kind::any_of) stack.push_back(branch);
          else choices.push_back(branch);
        }
      }
      std::sort(choices.begin(), choices.end());  // a fixed order: the alternatives past the most kept are the same each time
      nodes[from].choices = std::move(choices);
    }
  }

  // The fewest container frames each node's value needs, the fixed point from "none will do": a scalar
  // none; an object one more than its deepest required property; an array one more than an item when it
  // needs one; anyOf its shallowest choice. A node's value only falls, and only to a bound past which all
  // depths are alike, so re-reading the nodes that use a node each time it falls ends soon.
  static void settle_min_frames(std::vector<Node>& nodes) {
    const auto plus_one = [](uint32_t frames) { return frames == kUnfinishable ? kUnfinishable : frames + 1; };
    const auto frames_of = [&](const Node& node) {
      uint32_t frames = 0;  // a scalar's frame is not counted: the nesting bound is on containers
      switch (node.kind) {
        case Node::Kind::object:
          frames = 1;
          for (size_t i = 0; i < node.properties.size(); ++i)
            if (node.required >> i & 1u) frames = std::max(frames, plus_one(nodes[size_t(node.properties[i].second)].min_frames));
          break;
        case Node::Kind::array:
          frames = node.min_items > 0 ? plus_one(nodes[size_t(node.items)].min_frames) : 1;
          break;
        case Node::Kind::any_of:
          frames = kUnfinishable;
          for (int32_t choice : node.choices) frames = std::min(frames, nodes[size_t(choice)].min_frames);
          break;
        default: break;
      }
      return frames == kUnfinishable ? kUnfinishable : std::min(frames, kMostSchemaFrames + 1);
    };
    std::vector<std::vector<int32_t>> users(nodes.size());  // the nodes whose value depends on each
    for (size_t n = 0; n < nodes.size(); ++n) {
      const Node& node = nodes[n];
      for (size_t i = 0; i < node.properties.size(); ++i)
        if (node.required >> i & 1u) users[size_t(node.properties[i].second)].push_back(int32_t(n));
      if (node.kind == Node::Kind::array && node.min_items > 0) users[size_t(node.items)].push_back(int32_t(n));
      for (int32_t choice : node.choices) users[size_t(choice)].push_back(int32_t(n));
    }
    std::vector<int32_t> queue(nodes.size());
    std::vector<uint8_t> queued(nodes.size(), 1);
    for (size_t n = 0; n < nodes.size(); ++n) queue[n] = int32_t(n);
    while (!queue.empty()) {
      const int32_t n = queue.back();
      queue.pop_back();
      queued[size_t(n)] = 0;
      const uint32_t frames = frames_of(nodes[size_t(n)]);
      if (frames >= nodes[size_t(n)].min_frames) continue;
      nodes[size_t(n)].min_frames = frames;
      for (int32_t user : users[size_t(n)])
        if (!queued[size_t(user)]) {
          queued[size_t(user)] = 1;
          queue.push_back(user);
        }
    }
  }

  const json& document_;
  std::vector<Node> nodes_;
  std::map<std::string, int32_t> by_pointer_;
  struct PendingRef {
    std::string target;  // the JSON pointer referred to
    std::string where;   // the schema whose $ref it is
    int32_t node;        // reserved for it
  };
  std::vector<PendingRef> pending_;
  std::vector<std::pair<int32_t, std::string>> one_ofs_;  // each oneOf's node and place
};

}  // namespace

JsonSchema::JsonSchema(std::unique_ptr<const Compiled> compiled)
    : compiled_(std::move(compiled)), pattern_tables_(std::make_unique<PatternTables>()) {}
JsonSchema::~JsonSchema() = default;

std::shared_ptr<const JsonSchema> JsonSchema::compile(std::string_view schema_text) {
  check_chat_json(schema_text, "the JSON schema");
  json document;
  try {
    document = json::parse(schema_text);
  } catch (const json::exception& e) {
    throw InputError(std::string("json_schema: the schema is not JSON we can read: ") + e.what());
  }
  return std::shared_ptr<const JsonSchema>(new JsonSchema(SchemaCompiler(document).run()));
}

std::shared_ptr<const JsonSchema> JsonSchema::compile_cached(std::string_view schema_text) {
  static RecentlyCompiled<JsonSchema> recent;
  return recent.get(schema_text, [](std::string_view text) { return compile(text); });
}

}  // namespace tilefire
