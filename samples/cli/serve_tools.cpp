#include "serve_tools.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "json_text.h"
#include "tool_call_formats.h"
#include "tilefire/errors.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& field, const std::string& what) { refuse_field(field, what); }


constexpr size_t kMostTools = 128;  // OpenAI's bound on a request's tools

// OpenAI's rule for a function's name: letters, digits, underscores and dashes, 1 to 64 of them.
bool is_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

// A function's parameters: its schema, or (none given) a function that takes none; {} takes any object.
json parameters_of(const json& function) {
  if (!given(function, "parameters")) return {{"type", "object"}, {"properties", json::object()}};
  const json& parameters = function.at("parameters");
  return parameters.empty() ? json{{"type", "object"}, {"additionalProperties", true}} : parameters;
}

// Checks the request's tools and gives their function objects, by index.
std::vector<json> read_tools(const json& tools) {
  if (!tools.is_array() || tools.empty() || tools.size() > kMostTools)
    refuse("tools", "must be a list of 1 to " + std::to_string(kMostTools) + " tools ({\"type\": \"function\", \"function\": {...}}), got " +
                        tools.dump().substr(0, 200));
  std::vector<json> functions;
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& tool = tools[i];
    if (!tool.is_object() || tool.value("type", json()) != "function" || !tool.contains("function") || !tool.at("function").is_object())
      refuse(at, "must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}: Tilefire's tools are functions, got " +
                     tool.dump().substr(0, 200));
    for (const auto& [key, value] : tool.items())
      if (key != "type" && key != "function") refuse(at, "has \"" + key + "\": a tool's fields are type and function");
    const json& function = tool.at("function");
    for (const auto& [key, value] : function.items()) {
      if (key != "name" && key != "description" && key != "parameters" && key != "strict")
        refuse(at + ".function", "has \"" + key + "\": its fields are name, description, parameters and strict");
      if (value.is_null()) continue;
      if (key == "parameters" ? !value.is_object() : key == "strict" ? !value.is_boolean() : !value.is_string())
        refuse(at + ".function." + key, std::string("must be ") + (key == "parameters" ? "a JSON Schema object" : key == "strict" ? "true or false" : "a string") +
                                            ", got " + value.dump().substr(0, 80));
    }
    // A call's arguments are an object (OpenAI's rule): a schema of another type would give calls whose
    // arguments a client cannot take as named parameters.
    if (given(function, "parameters") && !function.at("parameters").empty() && function.at("parameters").value("type", json()) != "object")
      refuse(at + ".function.parameters", "must be a JSON Schema with \"type\": \"object\" (a call's arguments are an object), got " +
                                              function.at("parameters").dump().substr(0, 120));
    const std::string name = function.value("name", json("")).is_string() ? function.value("name", std::string()) : "";
    if (!is_function_name(name))
      refuse(at + ".function.name", "must be 1 to 64 letters, digits, '_' or '-', got " + function.value("name", json()).dump().substr(0, 80));
    if (!names.insert(name).second) refuse(at + ".function.name", "is '" + name + "', the name of an earlier tool");
    functions.push_back(function);
  }
  return functions;
}

// `schema` (a function's parameters) as it reads placed at `place` of a larger schema: its references
// to places in itself ("#/$defs/x") made references to the same places there. The keywords whose value
// maps names to schemas (properties, $defs, ...) have their schemas re-pointed, whatever the names;
// constants and examples are values, not schemas, and stay as they are.
json placed_at(const json& schema, const std::string& place);
json subschemas_placed_at(const json& value, const std::string& place) {  // a schema, or a list of them
  if (!value.is_array()) return placed_at(value, place);
  json placed = json::array();
  for (const json& item : value) placed.push_back(placed_at(item, place));
  return placed;
}
json placed_at(const json& schema, const std::string& place) {
  if (!schema.is_object()) return schema;
  static const std::set<std::string> values = {"const", "enum", "default", "examples"};
  static const std::set<std::string> named_schemas = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"};
  json placed = json::object();
  for (const auto& [key, value] : schema.items()) {
    if (key == "$ref" && value.is_string() && value.get<std::string>().rfind('#', 0) == 0) {
      placed[key] = place + value.get<std::string>().substr(1);
    } else if (values.count(key) || !(value.is_object() || value.is_array())) {
      placed[key] = value;
    } else if (named_schemas.count(key) && value.is_object()) {
      placed[key] = json::object();
      for (const auto& [name, subschema] : value.items()) placed[key][name] = placed_at(subschema, place);
    } else {
      placed[key] = subschemas_placed_at(value, place);
    }
  }
  return placed;
}

// tool_choice "required": a list of calls, each {"name": one of the tools, "parameters": its arguments}.
json required_calls_schema(const std::vector<json>& functions, bool parallel) {
  json branches = json::array();
  for (size_t i = 0; i < functions.size(); ++i) {
    const std::string place = "#/items/anyOf/" + std::to_string(i) + "/properties/parameters";
    branches.push_back({{"type", "object"},
                        {"properties", {{"name", {{"const", functions[i].at("name")}}}, {"parameters", placed_at(parameters_of(functions[i]), place)}}},
                        {"required", {"name", "parameters"}}});
  }
  json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", branches}}}};
  if (!parallel) schema["maxItems"] = 1;
  return schema;
}


// The JSON Schema types `schema` names, added to `types`: its "type", those of its anyOf, oneOf and allOf
// branches, of its enum and const values, and of the schema a local "$ref" ("#/$defs/x", in `root`)
// points to, followed `depth` deep at most (references may loop).
void add_schema_types(const json& schema, const json& root, int depth, std::set<std::string>& types) {
  if (!schema.is_object() || depth < 0) return;
  auto add_type_of = [&](const json& value) {
    static const std::map<json::value_t, const char*> kNames = {
        {json::value_t::null, "null"},     {json::value_t::boolean, "boolean"},         {json::value_t::number_integer, "integer"},
        {json::value_t::number_unsigned, "integer"}, {json::value_t::number_float, "number"}, {json::value_t::string, "string"},
        {json::value_t::object, "object"}, {json::value_t::array, "array"}};
    if (kNames.count(value.type())) types.insert(kNames.at(value.type()));
  };
  if (schema.contains("type")) {
    const json& type = schema.at("type");
    if (type.is_string()) types.insert(type.get<std::string>());
    if (type.is_array())
      for (const json& one : type)
        if (one.is_string()) types.insert(one.get<std::string>());
  }
  if (schema.contains("enum") && schema.at("enum").is_array())
    for (const json& value : schema.at("enum")) add_type_of(value);
  if (schema.contains("const")) add_type_of(schema.at("const"));
  for (const char* branches : {"anyOf", "oneOf", "allOf"})
    if (schema.contains(branches) && schema.at(branches).is_array())
      for (const json& branch : schema.at(branches)) add_schema_types(branch, root, depth - 1, types);
  if (schema.contains("$ref") && schema.at("$ref").is_string()) {
    const std::string ref = schema.at("$ref").get<std::string>();
    if (ref.rfind("#/", 0) != 0) return;
    try {
      add_schema_types(root.at(json::json_pointer(ref.substr(1))), root, depth - 1, types);
    } catch (const json::exception&) {  // a reference to no place in the parameters: no type from it
    }
  }
}

// The JSON Schema types each parameter of `function` is given, {"city": ["string"], "when": ["null",
// "string"], ...} (add_schema_types); null where none is named.
json parameter_types_of(const json& function) {
  json types = json::object();
  const json parameters = parameters_of(function);
  if (!parameters.contains("properties") || !parameters.at("properties").is_object()) return types;
  for (const auto& [name, property] : parameters.at("properties").items()) {
    std::set<std::string> named;
    add_schema_types(property, parameters, 8, named);
    types[name] = named.empty() ? json(nullptr) : json(named);
  }
  return types;
}


}  // namespace

std::map<int32_t, std::string> special_call_markers(const Tokenizer& tokenizer, ToolCallParser parser) {
  std::vector<const char*> markers;
  switch (parser) {
    case ToolCallParser::none: break;
    case ToolCallParser::hermes: markers = {kHermesOpen, kHermesClose}; break;
    case ToolCallParser::llama3_json: markers = {kPythonTag}; break;
    case ToolCallParser::mistral: markers = {kMistralCalls, kMistralArgs}; break;
    case ToolCallParser::pythonic: markers = {kPythonStart, kPythonEnd}; break;
    case ToolCallParser::granite: markers = {kGraniteCalls, kHermesOpen}; break;
    case ToolCallParser::qwen3_coder: markers = {kHermesOpen, kHermesClose}; break;
    case ToolCallParser::phi4_mini_json: break;  // a word, not a token
    case ToolCallParser::deepseek_v3: markers = {kDeepSeekCalls, kDeepSeekCallsEnd, kDeepSeekCall, kDeepSeekCallEnd, kDeepSeekSeparator}; break;
  }
  std::map<int32_t, std::string> special;
  for (const char* marker : markers) {
    const std::vector<int32_t> ids = tokenizer.encode(marker, false);
    // One token, whose text a reply's decoding (special tokens skipped) leaves out.
    if (ids.size() == 1 && tokenizer.decode(ids, false) == marker && tokenizer.decode(ids, true).empty()) special[ids[0]] = marker;
  }
  return special;
}

ToolCallParser tool_call_parser_named(const std::string& name) {
  if (name == "hermes") return ToolCallParser::hermes;
  if (name == "llama3_json") return ToolCallParser::llama3_json;
  if (name == "mistral") return ToolCallParser::mistral;
  if (name == "pythonic") return ToolCallParser::pythonic;
  if (name == "granite") return ToolCallParser::granite;
  if (name == "qwen3_coder" || name == "qwen3_xml") return ToolCallParser::qwen3_coder;  // vLLM has both names for the format
  if (name == "deepseek_v3" || name == "deepseek_v31") return ToolCallParser::deepseek_v3;  // one reader for both forms
  if (name == "phi4_mini_json") return ToolCallParser::phi4_mini_json;
  throw InputError("--tool-call-parser must be hermes (Qwen 2.5 and 3, Hermes), llama3_json (Llama 3.1-3.3), mistral (Mistral), "
                   "pythonic (Llama 3.2 and 4), granite (Granite 3), qwen3_coder (Qwen3-Coder; also named qwen3_xml), "
                   "deepseek_v3 (DeepSeek-V3, R1 and V3.1; also named deepseek_v31) or phi4_mini_json (Phi-4-mini), got '" + name + "'");
}

ToolCalling read_tool_calling(const json& body, ToolCallParser parser, ReplyFormat& format) {
  if (given(body, "functions")) refuse("functions", "is OpenAI's older field: give \"tools\"");
  if (given(body, "function_call")) refuse("function_call", "is OpenAI's older field: give \"tool_choice\"");
  ToolCalling calling;
  calling.parser = parser;
  std::vector<json> functions;
  if (given(body, "tools")) {
    functions = read_tools(body.at("tools"));
    calling.tools = body.at("tools");
    for (const json& function : functions) calling.names.push_back(function.at("name").get<std::string>());
    if (parser == ToolCallParser::qwen3_coder)
      for (const json& function : functions) calling.parameter_types[function.at("name").get<std::string>()] = parameter_types_of(function);
  }
  if (given(body, "parallel_tool_calls")) {
    if (!body.at("parallel_tool_calls").is_boolean())
      refuse("parallel_tool_calls", "must be true or false, got " + body.at("parallel_tool_calls").dump().substr(0, 80));
    calling.parallel = body.at("parallel_tool_calls").get<bool>();
  }
  // OpenAI's default: "auto" with tools, "none" without.
  const json choice = given(body, "tool_choice") ? body.at("tool_choice") : json(functions.empty() ? "none" : "auto");
  const json* named = choice.is_object() && choice.value("type", json()) == "function" && choice.contains("function") &&
                              choice.at("function").is_object() && choice.at("function").contains("name") &&
                              choice.at("function").at("name").is_string()
                          ? &choice.at("function").at("name")
                          : nullptr;
  if (choice == "none") return calling;
  if (choice != "auto" && choice != "required" && !named)
    refuse("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                              choice.dump().substr(0, 200));
  if (functions.empty()) refuse("tool_choice", "is " + choice.dump().substr(0, 80) + ", and the request gives no tools");
  if (format)
    refuse("tool_choice", "is " + choice.dump().substr(0, 80) + ", and " + format.named +
                              " holds the reply too: give \"tool_choice\": \"none\", or leave the format out");
  if (choice == "auto") {
    if (parser == ToolCallParser::none)
      refuse("tool_choice", "is \"auto\" (the default with tools), which reads the model's own calls from its text: start the server with "
                            "--tool-call-parser hermes, llama3_json, mistral, pythonic, granite, qwen3_coder, deepseek_v3 or phi4_mini_json (the format the model's chat template teaches it), or ask for "
                            "\"required\" or a named function (calls held by constrained decoding), or \"none\"");
    calling.choice = ToolCalling::Choice::automatic;
    return calling;
  }
  json schema;
  std::string where = "tools";
  if (named) {
    calling.choice = ToolCalling::Choice::named;
    calling.function = named->get<std::string>();
    const auto function = std::find_if(functions.begin(), functions.end(), [&](const json& f) { return f.at("name") == *named; });
    if (function == functions.end()) refuse("tool_choice", "names the function '" + calling.function.substr(0, 80) + "', which no tool is");
    schema = parameters_of(*function);
    where = "tools[" + std::to_string(function - functions.begin()) + "].function.parameters";
    format.named = "tool_choice function " + calling.function;
  } else {
    calling.choice = ToolCalling::Choice::required;
    schema = required_calls_schema(functions, calling.parallel);
    format.named = "tool_choice required";
  }
  try {
    format.schema = JsonSchema::compile_cached(schema.dump());
  } catch (const InputError& e) {
    format.named.clear();
    refuse(where, std::string("is a schema the reply cannot be held to: ") + e.what());
  }
  return calling;
}

json template_tool_calls(const json& messages) {
  json given_messages = messages;
  for (size_t i = 0; i < given_messages.size(); ++i) {
    json& message = given_messages[i];
    if (!message.is_object() || !message.contains("tool_calls") || !message.at("tool_calls").is_array()) continue;
    json& calls = message.at("tool_calls");
    for (size_t j = 0; j < calls.size(); ++j) {
      if (!calls[j].is_object() || !calls[j].contains("function") || !calls[j].at("function").is_object()) continue;
      json& function = calls[j].at("function");
      if (!function.contains("arguments") || !function.at("arguments").is_string()) continue;
      const std::string text = function.at("arguments").get<std::string>();
      const std::string where = "messages[" + std::to_string(i) + "].tool_calls[" + std::to_string(j) + "].function.arguments";
      if (nested_past_bound(text)) refuse(where, "is nested past " + std::to_string(kMostJsonNesting) + " levels");
      const std::optional<json> arguments = only_whitespace(text) ? json::object() : parse_json(text);  // "": none, as vLLM reads it
      if (!arguments || !arguments->is_object()) refuse(where, "must be a JSON object's text, got " + function.at("arguments").dump().substr(0, 80));
      function["arguments"] = *arguments;
    }
  }
  return given_messages;
}

json template_tool_calls_as_text(const json& messages) {
  json given_messages = messages;
  for (json& message : given_messages) {
    if (!message.is_object() || !message.contains("tool_calls") || !message.at("tool_calls").is_array()) continue;
    for (json& call : message.at("tool_calls"))
      if (call.is_object() && call.contains("function") && call.at("function").is_object() && call.at("function").contains("arguments") &&
          call.at("function").at("arguments").is_string() && only_whitespace(call.at("function").at("arguments").get<std::string>()))
        call["function"]["arguments"] = "{}";
  }
  return given_messages;
}

ToolReply read_tool_reply(const ToolCalling& calling, const std::string& text) {
  ToolReply reply;
  std::optional<ToolReply> read;
  switch (calling.choice) {
    case ToolCalling::Choice::none: break;
    case ToolCalling::Choice::named:
      reply.content = nullptr;
      reply.tool_calls.push_back(tool_call(calling, calling.function, text));
      return reply;
    case ToolCalling::Choice::required: read = required_calls(text, calling); break;
    case ToolCalling::Choice::automatic: read = calls_in_format(calling, text); break;
  }
  if (!read) {
    reply.content = text;
    return reply;
  }
  // parallel_tool_calls false: one call at most (the constraint holds a required list to one; a model's
  // own second call is left out, as OpenAI's model would not have made it).
  if (!calling.parallel && read->tool_calls.size() > 1) read->tool_calls.erase(read->tool_calls.begin() + 1, read->tool_calls.end());
  return *read;
}

std::string new_tool_call_id(ToolCallParser parser) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  // Seeded with 128 bits: random_device gives 32 at a time, and ids of every connection must not collide.
  thread_local std::mt19937_64 random = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }();
  // Mistral's templates refuse a call id that is not 9 letters and digits, and the client sends the id
  // back with the call and its result in the next request.
  const bool mistral = parser == ToolCallParser::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[random() % (sizeof(kAlphabet) - 1)];
  return id;
}

json assistant_message(const ToolReply& reply) {
  json message = {{"role", "assistant"}, {"content", reply.content}};
  if (reply.called()) message["tool_calls"] = reply.tool_calls;
  return message;
}

std::string tool_finish_reason(const ToolCalling& calling, const ToolReply& reply, const std::string& finish_reason) {
  if (finish_reason != "stop" || !reply.called() || calling.choice == ToolCalling::Choice::named) return finish_reason;
  return "tool_calls";
}

json named_call_head(const ToolCalling& calling, const std::string& call_id) {
  return {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls", {{{"index", 0}, {"id", call_id}, {"type", "function"}, {"function", {{"name", calling.function}, {"arguments", ""}}}}}}};
}

json arguments_delta(const std::string& piece) { return {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", piece}}}}}}}; }

json tool_calls_delta(const ToolReply& reply) {
  json calls = json::array();
  for (size_t k = 0; k < reply.tool_calls.size(); ++k) {
    json call = reply.tool_calls[k];
    call["index"] = k;
    calls.push_back(call);
  }
  return {{"tool_calls", calls}};
}

ToolCallStream::ToolCallStream(const ToolCalling& calling) : calling_(calling.for_reading()) {}

size_t ToolCallStream::streamable() {
  switch (calling_.choice) {
    case ToolCalling::Choice::none: return text_.size();
    case ToolCalling::Choice::named:
    case ToolCalling::Choice::required: return 0;
    case ToolCalling::Choice::automatic: break;
  }
  switch (calling_.parser) {
    case ToolCallParser::none: break;
    case ToolCallParser::hermes: return streamable_before(kHermesOpen);
    case ToolCallParser::mistral: return streamable_before(kMistralCalls);
    case ToolCallParser::llama3_json: return streamable_unless_opened_by({"{", kPythonTag});
    case ToolCallParser::pythonic: return streamable_unless_opened_by({"[", kPythonStart});
    case ToolCallParser::granite: return streamable_unless_opened_by({kGraniteCalls, kHermesOpen});
    case ToolCallParser::qwen3_coder: return streamable_before(kHermesOpen);
    case ToolCallParser::deepseek_v3: return streamable_before(kDeepSeekCalls);
    case ToolCallParser::phi4_mini_json: return streamable_before(std::string(kPhi4MiniCalls) + "[");
  }
  return text_.size();
}

size_t ToolCallStream::streamable_unless_opened_by(const std::vector<std::string>& openers) {
  // Known by the reply's start after its whitespace: held while it is, or may yet be, one of the openers.
  // The whitespace is looked at once: scanned_ keeps where it ends so far.
  if (is_text_) return text_.size();
  const size_t first = scanned_ = skip_whitespace(text_, scanned_);
  if (first == text_.size()) return 0;
  for (const std::string& opener : openers) {
    const size_t compared = std::min(opener.size(), text_.size() - first);
    if (text_.compare(first, compared, opener, 0, compared) == 0) return 0;
  }
  is_text_ = true;
  return text_.size();
}

size_t ToolCallStream::streamable_before(const std::string& marker) {
  // The text before the first marker; without one yet, all but a tail that may begin it. Each piece is
  // searched once, with the marker's length before it.
  if (marker_ == std::string::npos) {
    marker_ = text_.find(marker, searched_);
    searched_ = text_.size() >= marker.size() ? text_.size() - marker.size() + 1 : 0;
  }
  size_t ready = marker_;
  if (marker_ == std::string::npos) {
    ready = text_.size();
    for (size_t k = std::min(marker.size() - 1, text_.size()); k > 0; --k)
      if (text_.compare(text_.size() - k, k, marker, 0, k) == 0) {
        ready = text_.size() - k;
        break;
      }
  }
  // Whitespace before the calls is no content (a reply of calls alone has content null): it waits for
  // text that is not whitespace.
  for (; !is_text_ && scanned_ < ready; ++scanned_) is_text_ = !is_json_whitespace(text_[scanned_]);
  return is_text_ ? ready : 0;
}

std::string ToolCallStream::content(const std::string& piece) {
  text_ += piece;
  const size_t ready = streamable();
  if (ready <= sent_) return "";
  std::string out = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return out;
}

ToolReply ToolCallStream::finish() { return read_tool_reply(calling_, text_); }

std::string ToolCallStream::unsent_content(const ToolReply& reply) const {
  if (!reply.content.is_string()) return "";
  const std::string content = reply.content.get<std::string>();
  return content.size() > sent_ ? content.substr(sent_) : "";
}

}  // namespace tilefire::cli
