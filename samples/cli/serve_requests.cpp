#include "serve_requests.h"

#include <algorithm>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tilefire::cli {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& field, const std::string& what) {
  throw InputError("'" + field + "' " + what);
}

json parse_body(const std::string& body) {
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    throw InputError(std::string("the request body is not JSON: ") + e.what());
  }
  if (!parsed.is_object()) throw InputError("the request body is not a JSON object");
  return parsed;
}

std::string shortest(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

bool given(const json& body, const char* field) { return body.contains(field) && !body.at(field).is_null(); }

double number(const json& body, const char* field, double fallback, double min, double max) {
  if (!given(body, field)) return fallback;
  const json& value = body.at(field);
  if (!value.is_number() || !(value.get<double>() >= min && value.get<double>() <= max))
    refuse(field, "must be a number from " + shortest(min) + " to " + shortest(max) + ", got " + value.dump());
  return value.get<double>();
}

uint64_t count(const json& body, const char* field, uint64_t fallback, uint64_t max) {
  if (!given(body, field)) return fallback;
  const json& value = body.at(field);
  if (!value.is_number_integer() || (value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() < 0) ||
      value.get<uint64_t>() > max)
    refuse(field, "must be a whole number from 0 to " + std::to_string(max) + ", got " + value.dump());
  return value.get<uint64_t>();
}

// What the engine cannot honour: refused unless it has its no-op value.
void refuse_unsupported(const json& body) {
  for (const char* field : {"n", "best_of"})
    if (given(body, field) && body.at(field) != json(1)) refuse(field, "must be 1: one choice per request");
  for (const char* field : {"presence_penalty", "frequency_penalty", "repetition_penalty"})
    if (given(body, field) && !(body.at(field).is_number() && body.at(field).get<double>() == 0.0))
      refuse(field, "is not supported (only 0)");
  if (given(body, "logit_bias") && !body.at("logit_bias").empty()) refuse("logit_bias", "is not supported");
  if (given(body, "echo") && body.at("echo") != json(false)) refuse("echo", "is not supported");
  if (given(body, "suffix")) refuse("suffix", "is not supported");
  for (const char* field : {"logprobs", "top_logprobs"})
    if (given(body, field) && body.at(field) != json(false) && body.at(field) != json(0)) refuse(field, "is not supported");
  for (const char* field : {"tools", "functions"})
    if (given(body, field) && !body.at(field).empty()) refuse(field, "is not supported: the replies are plain text");
  if (given(body, "response_format") && body.at("response_format") != json{{"type", "text"}})
    refuse("response_format", "is not supported (only {\"type\": \"text\"})");
}

// The fields every generation takes: sampling, max tokens, stop strings, stream.
ParsedRequest common_fields(const json& body, const ModelInfo& model, const char* max_field, uint32_t default_max) {
  refuse_unsupported(body);
  ParsedRequest parsed;
  GenerateRequest& request = parsed.request;
  request.max_new_tokens = uint32_t(count(body, max_field, default_max, model.max_context));
  request.sampling.temperature = float(number(body, "temperature", 1.0, 0.0, 100.0));  // OpenAI's default
  request.sampling.top_p = float(number(body, "top_p", 1.0, 1e-6, 1.0));
  request.sampling.top_k = uint32_t(count(body, "top_k", 0, 1u << 30));
  // Without a seed each request samples anew, as OpenAI's API does; with one it is repeatable.
  request.sampling.seed = given(body, "seed") ? count(body, "seed", 0, UINT64_MAX) : std::random_device{}();
  if (given(body, "stop")) {
    const json& stop = body.at("stop");
    if (stop.is_string()) parsed.stops.push_back(stop.get<std::string>());
    else if (stop.is_array() && stop.size() <= 4 && std::all_of(stop.begin(), stop.end(), [](const json& s) { return s.is_string(); }))
      for (const json& s : stop) parsed.stops.push_back(s.get<std::string>());
    else refuse("stop", "must be a string or a list of up to 4 strings, got " + stop.dump().substr(0, 200));
    for (const std::string& s : parsed.stops)
      if (s.empty()) refuse("stop", "holds an empty string");
  }
  if (given(body, "stream")) {
    if (!body.at("stream").is_boolean()) refuse("stream", "must be true or false, got " + body.at("stream").dump());
    parsed.stream = body.at("stream").get<bool>();
  }
  return parsed;
}

}  // namespace

ParsedRequest parse_completion_request(const std::string& body_text, const Tokenizer* tokenizer, const ModelInfo& model) {
  const json body = parse_body(body_text);
  ParsedRequest parsed = common_fields(body, model, "max_tokens", 16);  // OpenAI's default
  if (!given(body, "prompt")) refuse("prompt", "is missing");
  json prompt = body.at("prompt");
  if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) prompt = prompt[0];
  auto encode = [&](const std::string& text) {
    try {
      return tokenizer ? tokenizer->encode(text) : byte_tokens(text);
    } catch (const InputError& e) {
      refuse("prompt", e.what());
    }
  };
  if (prompt.is_string()) {
    parsed.request.prompt = encode(prompt.get<std::string>());
  } else if (prompt.is_array() && std::all_of(prompt.begin(), prompt.end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const json& token : prompt) {
      if (token.is_number_unsigned() ? token.get<uint64_t>() >= model.vocab : token.get<int64_t>() < 0)
        refuse("prompt", "holds token " + token.dump() + ", outside the vocabulary of " + std::to_string(model.vocab));
      parsed.request.prompt.push_back(token.get<int32_t>());
    }
  } else {
    refuse("prompt", "must be a string or a list of token ids (one prompt per request), got " + prompt.dump().substr(0, 200));
  }
  if (parsed.request.prompt.empty()) refuse("prompt", "is empty");
  return parsed;
}

ParsedRequest parse_chat_request(const std::string& body_text, const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                                 const std::vector<int32_t>& end_of_reply, const ModelInfo& model) {
  if (!tokenizer) throw InputError("this model has no tokenizer.json: chat messages cannot be put into tokens");
  if (!chat_template)
    throw InputError("this model has no chat template (tokenizer_config.json or chat_template.jinja): give tilefire serve "
                     "--chat-template FILE, or use /v1/completions");
  check_chat_json(body_text, "the request body");  // integers past 64 bits, as the template would see them
  const json body = parse_body(body_text);
  const char* max_field = given(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  ParsedRequest parsed = common_fields(body, model, max_field, model.max_context);  // default: until the reply ends
  if (!given(body, "messages") || !body.at("messages").is_array() || body.at("messages").empty())
    refuse("messages", "must be a non-empty list of {\"role\", \"content\"} objects");
  const std::string text = chat_template->render_json(body.at("messages").dump(), true);
  parsed.request.prompt = tokenizer->encode(text, false);  // the template writes the start token
  if (parsed.request.prompt.empty()) refuse("messages", "rendered an empty prompt through the chat template");
  parsed.request.stop_tokens = end_of_reply;
  return parsed;
}

}  // namespace tilefire::cli
