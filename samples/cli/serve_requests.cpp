#include "serve_requests.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "json_text.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& field, const std::string& what) { refuse_field(field, what); }

std::string shortest(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}


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

// What the engine cannot honour: refused unless it has its no-op value (OpenAI's fields, and the extensions
// of other servers that clients send).
void refuse_unsupported(const json& body) {
  const std::pair<const char*, double> neutral[] = {{"typical_p", 1}, {"length_penalty", 1}};
  for (const auto& [field, value] : neutral)
    if (given(body, field) && !(body.at(field).is_number() && body.at(field).get<double>() == value))
      refuse(field, "is not supported (only " + shortest(value) + ")");
  for (const char* field : {"use_beam_search", "include_stop_str_in_output", "return_tokens_as_token_ids", "return_token_ids"})
    if (given(body, field) && body.at(field) != json(false)) refuse(field, "is not supported (only false)");
  if (given(body, "suffix")) refuse("suffix", "is not supported");
  // vLLM's fields that would change the reply or what it carries, not built: refused unless neutral.
  for (const char* field : {"bad_words", "logits_processors"})
    if (given(body, field) && body.at(field) != json::array()) refuse(field, "is not supported (only an empty list)");
  if (given(body, "priority") && body.at("priority") != json(0))
    refuse("priority", "is not supported (only 0: requests are served in the order they come)");
  if (given(body, "prompt_logprobs"))
    refuse("prompt_logprobs", "is not supported: /v1/completions' \"echo\" with \"logprobs\" scores a prompt's tokens");
  if (given(body, "guided_whitespace_pattern"))
    refuse("guided_whitespace_pattern", "is not supported: tilefire serve --json-whitespace N bounds a JSON reply's whitespace");
  if (given(body, "cache_salt"))
    refuse("cache_salt", "is not supported: every request reuses what the KV cache holds of its prompt, whoever sent it");
  for (const char* field : {"prompt_embeds", "kv_transfer_params", "vllm_xargs"})
    if (given(body, field)) refuse(field, "is not supported");
  // OpenAI's: other modalities, web search and verbosity would each change the reply.
  if (given(body, "modalities") && body.at("modalities") != json::array({"text"}))
    refuse("modalities", "is not supported (only [\"text\"]: the model writes text)");
  for (const char* field : {"audio", "web_search_options", "verbosity"})
    if (given(body, field)) refuse(field, "is not supported");
}

// OpenAI's response_format: {"type": "text"} (what a reply is anyway), {"type": "json_object"} (a JSON
// object, by constrained decoding) or {"type": "json_schema", "json_schema": {"name": N, "description": D,
// "schema": S, "strict": B}} (a JSON text S accepts; "strict" false is held to S all the same). A schema
// outside the subset Tilefire reads is refused naming its keyword, never loosened.
ReplyFormat response_format(const json& body) {
  ReplyFormat reply;
  if (!given(body, "response_format")) return reply;
  const json& format = body.at("response_format");
  const json* type = format.is_object() && format.contains("type") ? &format.at("type") : nullptr;
  const bool schema = type && *type == "json_schema";
  if (!type || (*type != "text" && *type != "json_object" && !schema) || format.size() != (schema ? 2u : 1u) ||
      (schema && !format.contains("json_schema")))
    refuse("response_format", "must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
                              "\"json_schema\": {\"name\": ..., \"schema\": {...}}}, got " + format.dump().substr(0, 200));
  if (*type == "text") return reply;
  reply.named = "response_format " + type->get<std::string>();
  if (!schema) return reply;
  const json& described = format.at("json_schema");
  if (!described.is_object())
    refuse("response_format", "json_schema must be an object ({\"name\": ..., \"schema\": {...}}), got " + described.dump().substr(0, 200));
  for (const auto& [field, value] : described.items()) {
    if (field != "name" && field != "description" && field != "strict" && field != "schema")
      refuse("response_format", "json_schema has \"" + field + "\": its fields are name, description, schema and strict");
    if (value.is_null() || field == "schema") continue;  // null: not given
    if (field == "strict" ? !value.is_boolean() : !value.is_string())
      refuse("response_format", "json_schema's \"" + field + "\" must be " + (field == "strict" ? "true or false" : "a string") +
                                    ", got " + value.dump().substr(0, 80));
  }
  // Without a schema (OpenAI's is optional) the reply is any JSON value.
  const json schema_given = given(described, "schema") ? described.at("schema") : json(true);
  try {
    reply.schema = JsonSchema::compile_cached(schema_given.dump());
  } catch (const InputError& e) {
    refuse("response_format", e.what());
  }
  return reply;
}

// vLLM's structured_outputs: {"regex": R}, {"choice": [T, ...]}, {"json": S} (a schema, or its JSON
// text) or {"grammar": G} (GBNF), one of them. Its other ways (structural tags) and vLLM's older guided_*
// fields are refused by name: a reply that silently skipped them would be wrong output.
ReplyFormat structured_outputs(const json& body) {
  for (const char* older : {"guided_regex", "guided_choice", "guided_json", "guided_grammar"})
    if (given(body, older))
      refuse(older, std::string("is vLLM's older field: give \"structured_outputs\": {\"") + (older + 7) + "\": ...} (regex, choice, json or grammar)");
  if (given(body, "guided_decoding_backend")) refuse("guided_decoding_backend", "is vLLM's older field, and Tilefire has one way to hold a reply");
  ReplyFormat reply;
  if (!given(body, "structured_outputs")) return reply;
  const json& given_ways = body.at("structured_outputs");
  json asked = json::object();  // its fields but those null (not given)
  if (given_ways.is_object())
    for (const auto& [field, value] : given_ways.items())
      if (!value.is_null()) asked[field] = value;
  if (!given_ways.is_object() || asked.size() != 1)
    refuse("structured_outputs", "must be one of {\"regex\": ...}, {\"choice\": [...]}, {\"json\": {...}} or {\"grammar\": ...}, got " +
                                     given_ways.dump().substr(0, 200));
  const std::string kind = asked.begin().key();
  const json& value = asked.begin().value();  // asked holds it
  reply.named = "structured_outputs " + kind;
  try {
    if (kind == "regex") {
      if (!value.is_string()) refuse("structured_outputs", "regex must be a string, got " + value.dump().substr(0, 80));
      reply.pattern = ReplyPattern::compile_cached(value.get<std::string>());
    } else if (kind == "choice") {
      if (!value.is_array() || !std::all_of(value.begin(), value.end(), [](const json& c) { return c.is_string(); }))
        refuse("structured_outputs", "choice must be a list of strings, got " + value.dump().substr(0, 80));
      reply.pattern = ReplyPattern::of_choices(value.get<std::vector<std::string>>());
    } else if (kind == "json") {
      if (!value.is_object() && !value.is_boolean() && !value.is_string())
        refuse("structured_outputs", "json must be a JSON Schema (an object, or its text), got " + value.dump().substr(0, 80));
      reply.schema = JsonSchema::compile_cached(value.is_string() ? value.get<std::string>() : value.dump());
    } else if (kind == "grammar") {
      if (!value.is_string()) refuse("structured_outputs", "grammar must be a string (GBNF), got " + value.dump().substr(0, 80));
      reply.grammar = ReplyGrammar::compile_cached(value.get<std::string>());
    } else {
      refuse("structured_outputs", "has \"" + kind + "\": Tilefire holds a reply to a regex, a choice, a json schema or a grammar");
    }
  } catch (const InputError& e) {
    if (std::string(e.what()).rfind("'structured_outputs'", 0) == 0) throw;
    refuse("structured_outputs", kind + ": " + e.what());
  }
  return reply;
}

ReplyFormat reply_format(const json& body) {
  ReplyFormat format = response_format(body), structured = structured_outputs(body);
  if (format && structured) refuse("structured_outputs", "and " + format.named + " both hold the reply: give one");
  return format ? format : structured;
}

// A reply a format holds ends where the format lets it, however few its tokens: min_tokens cannot hold.
void refuse_min_tokens_beside_a_format(const ParsedRequest& parsed) {
  if (parsed.request.min_new_tokens > 0 && parsed.reply_format)
    refuse("min_tokens", "with " + parsed.reply_format.named + ": the reply ends where its " + parsed.reply_format.ends_where() +
                             ", however few its tokens");
}

// The fields every generation takes: sampling, max tokens, stop strings, stream.
ParsedRequest common_fields(const json& body, const ModelInfo& model, const Tokenizer* tokenizer, const char* max_field, uint32_t default_max) {
  refuse_unsupported(body);
  ParsedRequest parsed;
  parsed.reply_format = reply_format(body);
  GenerateRequest& request = parsed.request;
  // "n" choices, each its own sample of the same prompt; "best_of" above n would choose among samples
  // the reply does not show, which is not done.
  if (given(body, "n")) {
    const json& n = body.at("n");
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > int64_t(kMostChoices))
      refuse("n", "must be a whole number from 1 to " + std::to_string(kMostChoices) + ", got " + n.dump().substr(0, 40));
    parsed.choices = n.get<uint32_t>();
  }
  if (given(body, "best_of") && body.at("best_of") != json(1) && body.at("best_of") != json(parsed.choices))
    refuse("best_of", "must be 1 or n: choosing the best of samples the reply does not show is not supported");
  request.max_new_tokens = uint32_t(count(body, max_field, default_max, model.max_context));
  // vLLM's min_tokens: the eos and stop tokens are not chosen before it, and a stop string ends a reply only
  // where it ends in the text of token min_tokens or later (generate() in serve_generation.cpp).
  request.min_new_tokens = uint32_t(count(body, "min_tokens", 0, model.max_context));
  if (request.min_new_tokens > request.max_new_tokens)
    refuse("min_tokens", "is " + std::to_string(request.min_new_tokens) + ", more than " + max_field + " (" +
                             std::to_string(request.max_new_tokens) + ")");
  refuse_min_tokens_beside_a_format(parsed);
  request.sampling.temperature = float(number(body, "temperature", 1.0, 0.0, 100.0));  // OpenAI's default
  request.sampling.top_p = float(number(body, "top_p", 1.0, 0.0, 1.0));
  if (request.sampling.top_p == 0.0f) {  // the smallest set holding no probability: the most probable token
    request.sampling.temperature = 0.0f;
    request.sampling.top_p = 1.0f;
  }
  request.sampling.top_k = uint32_t(count(body, "top_k", 0, 1u << 30));
  request.sampling.min_p = float(number(body, "min_p", 0.0, 0.0, 1.0));  // vLLM's, as are top_k and repetition_penalty
  request.sampling.presence_penalty = float(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  request.sampling.frequency_penalty = float(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  request.sampling.repetition_penalty = float(number(body, "repetition_penalty", 1.0, 1e-3, 100.0));
  // OpenAI's logit_bias: {"token id": bias from -100 to 100}, the ids as strings (JSON's keys).
  if (given(body, "logit_bias")) {
    const json& bias = body.at("logit_bias");
    if (!bias.is_object()) refuse("logit_bias", "must be an object of token ids to biases, got " + bias.dump().substr(0, 200));
    for (const auto& [key, value] : bias.items()) {
      char* end = nullptr;
      const unsigned long long token = std::strtoull(key.c_str(), &end, 10);
      if (key.empty() || !std::isdigit(static_cast<unsigned char>(key[0])) || *end != '\0' || token >= model.vocab)
        refuse("logit_bias", "names '" + key.substr(0, 40) + "', not a token id of the vocabulary of " + std::to_string(model.vocab));
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
        refuse("logit_bias", "gives token " + key + " " + value.dump().substr(0, 40) + ": a bias must be a number from -100 to 100");
      request.sampling.logit_bias.emplace_back(int32_t(token), value.get<float>());
    }
  }
  // Without a seed each request samples anew, as OpenAI's API does; with one (any 64-bit integer) it is
  // repeatable.
  if (!given(body, "seed")) request.sampling.seed = std::random_device{}();
  else if (body.at("seed").is_number_integer()) request.sampling.seed = body.at("seed").get<uint64_t>();
  else refuse("seed", "must be a whole number, got " + body.at("seed").dump());
  request.stop_at_eos = !boolean_field(body, "ignore_eos", false);
  if (given(body, "stop_token_ids")) {
    const json& ids = body.at("stop_token_ids");
    if (!ids.is_array()) refuse("stop_token_ids", "must be a list of token ids");
    for (const json& id : ids) {
      if (!id.is_number_integer() || (!id.is_number_unsigned() && id.get<int64_t>() < 0) || id.get<uint64_t>() >= model.vocab)
        refuse("stop_token_ids", "holds " + id.dump() + ", not a token id of the vocabulary of " + std::to_string(model.vocab));
      request.stop_tokens.push_back(id.get<int32_t>());
    }
  }
  // vLLM's allowed_token_ids: each token is chosen among these alone (the eos too only when listed), as
  // constrained decoding chooses (generate() in serve_generation.cpp keeps both where a format holds the reply).
  if (given(body, "allowed_token_ids")) {
    const json& ids = body.at("allowed_token_ids");
    if (!ids.is_array() || ids.empty()) refuse("allowed_token_ids", "must be a non-empty list of token ids");
    // With a tokenizer, its ids alone (as vLLM checks them): a model's rows past them (Gemma 3 4B has 262208
    // rows, more than its tokenizer has ids) are padding, with no text to write.
    const uint64_t known = tokenizer ? std::min<uint64_t>(model.vocab, uint64_t(tokenizer->vocab_size())) : model.vocab;
    std::vector<int32_t> allowed;
    for (const json& id : ids) {
      if (!id.is_number_integer() || (!id.is_number_unsigned() && id.get<int64_t>() < 0) || id.get<uint64_t>() >= known)
        refuse("allowed_token_ids", "holds " + id.dump().substr(0, 40) + ", not a token id of the " +
                                        (known < model.vocab ? "tokenizer (ids below " + std::to_string(known) + "; the model's rows past them have no text)"
                                                             : "vocabulary of " + std::to_string(model.vocab)));
      if (tokenizer && tokenizer->token_string(id.get<int32_t>()).empty())
        refuse("allowed_token_ids", "holds " + id.dump() + ", an id the tokenizer has no token for");
      allowed.push_back(id.get<int32_t>());
    }
    request.allowed_tokens = [allowed](const std::vector<int32_t>&, std::vector<uint8_t>& mask) {
      for (int32_t id : allowed)
        if (size_t(id) < mask.size()) mask[size_t(id)] = 1;
    };
  }
  if (given(body, "stop")) {
    const json& stop = body.at("stop");
    if (stop.is_string()) parsed.stops.push_back(stop.get<std::string>());
    else if (stop.is_array() && stop.size() <= 4 && std::all_of(stop.begin(), stop.end(), [](const json& s) { return s.is_string(); }))
      for (const json& s : stop) parsed.stops.push_back(s.get<std::string>());
    else refuse("stop", "must be a string or a list of up to 4 strings, got " + stop.dump().substr(0, 200));
    for (const std::string& s : parsed.stops)
      if (s.empty()) refuse("stop", "holds an empty string");
  }
  parsed.skip_special_tokens = boolean_field(body, "skip_special_tokens", true);
  if (given(body, "request_id")) {
    const json& id = body.at("request_id");
    if (!id.is_string() || id.get_ref<const std::string&>().empty() || id.get_ref<const std::string&>().size() > 256 ||
        std::any_of(id.get_ref<const std::string&>().begin(), id.get_ref<const std::string&>().end(),
                    [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7F; }))
      refuse("request_id", "must be a string of 1 to 256 bytes without spaces or control characters, got " + id.dump().substr(0, 80));
    parsed.request_id = id.get<std::string>();
  }
  parsed.stream = boolean_field(body, "stream", false);
  // OpenAI's stream_options: include_usage asks for a last chunk of the usage alone (empty choices). vLLM's
  // continuous_usage_stats (usage in every chunk) is not built: refused unless false.
  if (given(body, "stream_options")) {
    const json& options = body.at("stream_options");
    if (!options.is_object()) refuse("stream_options", "must be an object, got " + options.dump().substr(0, 200));
    if (!parsed.stream) refuse("stream_options", "applies to a streamed reply (\"stream\": true)");
    for (const auto& [key, value] : options.items()) {
      if (key == "include_usage" && value.is_boolean()) parsed.include_usage = value.get<bool>();
      else if (key == "include_usage") refuse("stream_options.include_usage", "must be true or false, got " + value.dump());
      else if (!(key == "continuous_usage_stats" && value == false))
        refuse("stream_options." + key, key == "continuous_usage_stats" ? "usage in every chunk is not built (only false)"
                                                                      : "is not an option Tilefire knows (include_usage is)");
    }
  }
  return parsed;
}

// After the endpoint has read its logprobs fields: the engine gives every token's probability when it is
// asked for one alternative at least.
void ask_for_logprobs(ParsedRequest& parsed) {
  if (!parsed.logprobs) return;
  parsed.request.logprobs = std::max(parsed.top_logprobs, 1u);
}

// The longest reply asked for: max_tokens, or max_completion_tokens (the newer name) when given.
const char* max_tokens_field(const json& body) { return given(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens"; }

// vLLM's truncate_prompt_tokens: K keeps a prompt's last K tokens (-1: what the context holds beside
// the reply's max_tokens when it is given, else the whole context). A text's tokens the tokenizer added
// around it (`added_before`, `added_after`: its start token) stay, as Hugging Face's truncation keeps
// them: K counts them. The prompt as the model then reads it is what the usage counts.
void truncate_prompt(const json& body, const ModelInfo& model, uint32_t max_new_tokens, std::vector<int32_t>& prompt,
                     size_t added_before = 0, size_t added_after = 0) {
  if (!given(body, "truncate_prompt_tokens")) return;
  const json& value = body.at("truncate_prompt_tokens");
  if (!value.is_number_integer() || (value.is_number_unsigned() ? value.get<uint64_t>() == 0 || value.get<uint64_t>() > model.max_context
                                                                 : value.get<int64_t>() != -1))
    refuse("truncate_prompt_tokens", "must be -1 (the context's length) or a whole number from 1 to " + std::to_string(model.max_context) +
                                         ", got " + value.dump().substr(0, 40));
  size_t keep = value.get<int64_t>() == -1 ? model.max_context : value.get<size_t>();
  if (value.get<int64_t>() == -1 && given(body, max_tokens_field(body))) {
    if (max_new_tokens >= model.max_context)
      refuse("truncate_prompt_tokens", "is -1, and " + std::string(max_tokens_field(body)) + " (" + std::to_string(max_new_tokens) +
                                           ") leaves no room in the context of " + std::to_string(model.max_context) + " for a prompt");
    keep = model.max_context - max_new_tokens;
  }
  if (prompt.size() <= keep) return;
  const size_t added = added_before + added_after;
  if (keep <= added)
    refuse("truncate_prompt_tokens", "is " + std::to_string(keep) + ", which leaves no room for the prompt beside the " + std::to_string(added) +
                                         " tokens the tokenizer adds around it");
  prompt.erase(prompt.begin() + ptrdiff_t(added_before), prompt.end() - ptrdiff_t(added_after) - ptrdiff_t(keep - added));
}

// How many tokens the tokenizer added before and after a text's own (`with` its special tokens, `without`
// them): {0, 0} where `without` is not found inside `with`.
std::pair<size_t, size_t> added_around(const std::vector<int32_t>& with, const std::vector<int32_t>& without) {
  for (size_t before = 0; before + without.size() <= with.size(); ++before)
    if (std::equal(without.begin(), without.end(), with.begin() + ptrdiff_t(before))) return {before, with.size() - without.size() - before};
  return {0, 0};
}

// A prompt the context cannot hold is refused here, before a stream's head is sent.
void check_prompt_fits(const std::vector<int32_t>& prompt, const ModelInfo& model, const char* field) {
  if (prompt.size() > model.max_context)
    refuse(field, "makes a prompt of " + std::to_string(prompt.size()) + " tokens, and the context holds " +
                      std::to_string(model.max_context) + " (tilefire serve --max-context)");
}

// What transformers adds after the last message's text for continue_final_message, to cut the prompt at.
const std::string kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// The length of the character of Python's str.isspace() that begins at `at` in UTF-8 `text` (0: none):
// ASCII's spaces, the separators U+001C to U+001F, and Unicode's spaces and line and paragraph separators.
size_t python_space_at(const std::string& text, size_t at) {
  const auto byte = [&](size_t k) { return at + k < text.size() ? static_cast<unsigned char>(text[at + k]) : 0u; };
  const unsigned b0 = byte(0);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) return 1;
  if (b0 == 0xC2 && (byte(1) == 0x85 || byte(1) == 0xA0)) return 2;
  if (b0 == 0xE1 && byte(1) == 0x9A && byte(2) == 0x80) return 3;  // U+1680
  if (b0 == 0xE2 && byte(1) == 0x80 && ((byte(2) >= 0x80 && byte(2) <= 0x8A) || byte(2) == 0xA8 || byte(2) == 0xA9 || byte(2) == 0xAF)) return 3;
  if (b0 == 0xE2 && byte(1) == 0x81 && byte(2) == 0x9F) return 3;  // U+205F
  if (b0 == 0xE3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

std::string python_rstrip(const std::string& text) {
  size_t end = text.size();
  for (bool trimmed = true; trimmed && end > 0;) {
    trimmed = false;
    for (size_t length = 1; length <= 3 && length <= end; ++length)
      if (python_space_at(text, end - length) == length) {
        end -= length;
        trimmed = true;
        break;
      }
  }
  return text.substr(0, end);
}

std::string python_strip(const std::string& text) {
  size_t begin = 0;
  while (begin < text.size())
    if (const size_t length = python_space_at(text, begin)) begin += length;
    else break;
  return python_rstrip(text.substr(begin));
}

// A message's content as transformers' text-only templates take it: a string; a list of text parts is
// joined with new lines (as other OpenAI-compatible servers do for text models); other parts are refused.
json text_messages(const json& messages) {
  json flat = messages;
  for (size_t i = 0; i < flat.size(); ++i) {
    if (!flat[i].is_object() || !flat[i].contains("content") || !flat[i]["content"].is_array()) continue;
    std::string text;
    for (const json& part : flat[i]["content"]) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        refuse("messages[" + std::to_string(i) + "].content", "holds a part that is not {\"type\": \"text\", \"text\": ...}: the model reads text only");
      if (!text.empty()) text += '\n';
      text += part["text"].get<std::string>();
    }
    flat[i]["content"] = text;
  }
  return flat;
}

}  // namespace

bool boolean_field(const json& body, const char* field, bool fallback) {
  if (!given(body, field)) return fallback;
  if (!body.at(field).is_boolean()) refuse(field, "must be true or false, got " + body.at(field).dump().substr(0, 200));
  return body.at(field).get<bool>();
}

json parse_body(const std::string& body) {
  // Nesting past 400 levels, and integers past 64 bits, are refused before the parse (a parse or a dump of
  // a value nested 100,000 deep recurses until the stack runs out).
  check_chat_json(body, "the request body");
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {  // a syntax error, or a number past double's range (1e400)
    throw InputError(std::string("the request body is not JSON we can read: ") + e.what());
  }
  if (!parsed.is_object()) throw InputError("the request body is not a JSON object");
  return parsed;
}

bool chat_add_special_tokens(const json& body) { return boolean_field(body, "add_special_tokens", false); }  // the template writes the start token

std::string render_chat_prompt(const json& body, const ChatTemplate& chat_template, const json& tools, ToolCallParser tool_call_parser) {
  if (!given(body, "messages") || !body.at("messages").is_array() || body.at("messages").empty())
    refuse("messages", "must be a non-empty list of {\"role\", \"content\"} objects");
  if (given(body, "chat_template"))  // as vLLM without --trust-request-chat-template: a template is code the server runs
    refuse("chat_template", "is not taken from a request: give tilefire serve --chat-template FILE");
  const bool continue_final_message = boolean_field(body, "continue_final_message", false);
  if (continue_final_message && boolean_field(body, "add_generation_prompt", false))
    refuse("continue_final_message", "and \"add_generation_prompt\" cannot both be true: the prompt either goes on with the last message or opens a new one");
  const bool add_generation_prompt = boolean_field(body, "add_generation_prompt", !continue_final_message);
  // With continue_final_message, transformers' way: a tag after the last message's text, rendered, and the
  // prompt cut where the tag is, so what the template writes after the message (its end of turn) is left
  // out, and a text that appears elsewhere in the prompt cannot be mistaken for the message's.
  json messages = text_messages(body.at("messages"));
  std::string last_text;
  if (continue_final_message) {
    json& last = messages.back();
    if (!last.is_object() || !last.contains("content") || !last.at("content").is_string())
      refuse("continue_final_message", "needs a last message with text to go on with");
    last_text = last.at("content").get<std::string>();
    last["content"] = last_text + kContinueTag;
  }
  const json with_objects = template_tool_calls(messages);
  // The template's variables: the tools (with tool_choice "none" too, as vLLM's does), the documents of a
  // retrieval template (Granite's), then chat_template_kwargs ({"enable_thinking": false} for Qwen3).
  json variables = json::object();
  if (!tools.is_null()) variables["tools"] = tools;
  if (given(body, "documents")) {
    const json& documents = body.at("documents");
    if (!documents.is_array() || !std::all_of(documents.begin(), documents.end(), [](const json& d) { return d.is_object(); }))
      refuse("documents", "must be a list of objects (each a document's fields, such as \"title\" and \"text\")");
    variables["documents"] = documents;
  }
  // OpenAI's reasoning_effort reaches the template as its variable of that name, as vLLM gives it: a
  // template that reads it (gpt-oss's) acts on it; one that does not, as the models' templates here, ignores it.
  if (given(body, "reasoning_effort")) {
    if (!body.at("reasoning_effort").is_string()) refuse("reasoning_effort", "must be a string, got " + body.at("reasoning_effort").dump().substr(0, 80));
    variables["reasoning_effort"] = body.at("reasoning_effort");
  }
  if (given(body, "chat_template_kwargs")) {
    const json& kwargs = body.at("chat_template_kwargs");
    if (!kwargs.is_object()) refuse("chat_template_kwargs", "must be an object of the template's variables, got " + kwargs.dump().substr(0, 200));
    for (const auto& [key, value] : kwargs.items()) {
      if (key == "chat_template") refuse("chat_template_kwargs.chat_template", "is not taken from a request: give tilefire serve --chat-template FILE");
      if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt" || key == "continue_final_message")
        refuse("chat_template_kwargs." + key, "is the request's own \"" + key + "\" field: give it there");
      variables[key] = value;
    }
  }
  // Earlier calls' arguments go in as objects, transformers' form. DeepSeek's templates join them to text
  // instead ('...' + arguments), which an object cannot be: with --tool-call-parser deepseek_v3, a template
  // that fails on the objects is given the arguments as JSON text, and when that fails too the first
  // failure is named. Only there: elsewhere a failure stays one (a template that writes the arguments with
  // tojson would show text where the call had an object).
  std::string text;
  try {
    text = chat_template.render_json(with_objects.dump(), add_generation_prompt, variables.dump());
  } catch (const InputError&) {
    if (tool_call_parser != ToolCallParser::deepseek_v3 || with_objects == messages) throw;
    const std::exception_ptr first = std::current_exception();
    try {
      text = chat_template.render_json(template_tool_calls_as_text(messages).dump(), add_generation_prompt, variables.dump());
    } catch (const InputError&) {
      std::rethrow_exception(first);
    }
  }
  if (!continue_final_message) return text;
  const std::string tag_word = kContinueTag.substr(0, kContinueTag.size() - 1);  // the tag without its space
  const size_t at = text.rfind(tag_word);
  if (at == std::string::npos || text.find(python_strip(last_text)) == std::string::npos)
    refuse("continue_final_message", "is set, but the chat template does not write the last message's text into the prompt");
  // A template that keeps the text as it is keeps the tag's space too; one that trims the text trims it,
  // and the text's own trailing whitespace with it.
  if (text.compare(at, kContinueTag.size(), kContinueTag) == 0) return text.substr(0, at);
  return python_rstrip(text.substr(0, at));
}

ParsedRequest parse_completion_request(const json& body, const Tokenizer* tokenizer, const ModelInfo& model) {
  for (const char* field : {"tools", "tool_choice", "functions", "function_call"})
    if (given(body, field)) refuse(field, "is a field of /v1/chat/completions (a completion's reply is its text)");
  ParsedRequest parsed = common_fields(body, model, tokenizer, max_tokens_field(body), 16);  // OpenAI's default
  if (!given(body, "prompt")) refuse("prompt", "is missing");
  const json& prompt = body.at("prompt");
  // vLLM's add_special_tokens: the tokenizer's start token before a text prompt (its default), or not (a
  // prompt that writes its own, as evaluation harnesses send).
  const bool add_special_tokens = boolean_field(body, "add_special_tokens", true);
  auto encode = [&](const std::string& text) {
    try {
      return tokenizer ? tokenizer->encode(text, add_special_tokens) : byte_tokens(text);
    } catch (const InputError& e) {
      refuse("prompt", e.what());
    }
  };
  auto is_ids = [](const json& p) {
    return p.is_array() && std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer(); });
  };
  // One prompt (a string, or a list of token ids) or several (a list of strings, or of lists of ids).
  auto read_one = [&](const json& p) {
    std::vector<int32_t> tokens;
    std::pair<size_t, size_t> added{0, 0};  // the tokenizer's tokens around a text, which truncation keeps
    if (p.is_string()) {
      tokens = encode(p.get<std::string>());
      if (tokenizer && add_special_tokens && given(body, "truncate_prompt_tokens"))
        added = added_around(tokens, tokenizer->encode(p.get<std::string>(), false));
    } else {
      for (const json& token : p) {
        if (token.is_number_unsigned() ? token.get<uint64_t>() >= model.vocab : token.get<int64_t>() < 0)
          refuse("prompt", "holds token " + token.dump() + ", outside the vocabulary of " + std::to_string(model.vocab));
        tokens.push_back(token.get<int32_t>());
      }
    }
    if (tokens.empty()) refuse("prompt", "is empty");
    truncate_prompt(body, model, parsed.request.max_new_tokens, tokens, added.first, added.second);
    check_prompt_fits(tokens, model, "prompt");
    return tokens;
  };
  const bool several = prompt.is_array() && !prompt.empty() &&
                       std::all_of(prompt.begin(), prompt.end(), [&](const json& p) { return p.is_string() || (is_ids(p) && !p.empty()); }) &&
                       !is_ids(prompt);
  if (prompt.is_string() || is_ids(prompt)) {
    parsed.prompts.push_back(read_one(prompt));
  } else if (several) {
    for (const json& p : prompt) parsed.prompts.push_back(read_one(p));
  } else {
    refuse("prompt", "must be a string, a list of token ids, or a list of those (one prompt each), got " + prompt.dump().substr(0, 200));
  }
  if (parsed.prompts.size() * parsed.choices > kMostChoices)
    refuse("prompt", "holds " + std::to_string(parsed.prompts.size()) + " prompts of " + std::to_string(parsed.choices) +
                         " choices each: at most " + std::to_string(kMostChoices) + " choices in all");
  parsed.request.prompt = parsed.prompts.front();
  // "logprobs": how many alternatives per token, and the sampled token's own (OpenAI's legacy field).
  if (given(body, "logprobs") && body.at("logprobs") != json(false)) {
    parsed.logprobs = true;
    parsed.top_logprobs = uint32_t(count(body, "logprobs", 0, kMostTopLogprobs));
  }
  if (given(body, "top_logprobs") && body.at("top_logprobs") != json(0) && body.at("top_logprobs") != json(false))
    refuse("top_logprobs", "is a field of /v1/chat/completions; a completion's \"logprobs\" gives the alternatives per token");
  ask_for_logprobs(parsed);
  parsed.echo = boolean_field(body, "echo", false);
  if (parsed.echo && parsed.reply_format)
    refuse("echo", "with " + parsed.reply_format.named + ": a reply that begins with its prompt is not " +
                       (parsed.reply_format.pattern ? "held to the pattern" : parsed.reply_format.grammar ? "held to the grammar" : "JSON"));
  if (parsed.echo) parsed.request.prompt_logprobs = parsed.request.logprobs;  // with logprobs, the prompt's too
  return parsed;
}

ParsedRequest parse_chat_request(const json& body, const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                                 const std::vector<int32_t>& end_of_reply, const ModelInfo& model, ToolCallParser tool_call_parser) {
  if (!tokenizer) throw InputError("this model has no tokenizer.json: chat messages cannot be put into tokens");
  if (!chat_template)
    throw InputError("this model has no chat template (chat_template.jinja, tokenizer_config.json or chat_template.json): give tilefire serve "
                     "--chat-template FILE, or use /v1/completions");
  ParsedRequest parsed = common_fields(body, model, tokenizer, max_tokens_field(body), model.max_context);  // default: until the reply ends
  if (given(body, "echo") && body.at("echo") != json(false))
    refuse("echo", "is a field of /v1/completions (a chat's reply does not repeat its messages)");
  if (!given(body, "messages") || !body.at("messages").is_array() || body.at("messages").empty())
    refuse("messages", "must be a non-empty list of {\"role\", \"content\"} objects");
  // After the formats: a tool choice that holds the reply refuses one that would hold it too.
  parsed.tool_calling = read_tool_calling(body, tool_call_parser, parsed.reply_format);
  const bool held_call = parsed.tool_calling.choice == ToolCalling::Choice::named || parsed.tool_calling.choice == ToolCalling::Choice::required;
  if (held_call && !parsed.stops.empty())
    refuse("stop", "with " + parsed.reply_format.named + ": the reply is a call held to its schema, which a stop string would cut");
  refuse_min_tokens_beside_a_format(parsed);
  const std::string text = render_chat_prompt(body, *chat_template, parsed.tool_calling.tools, tool_call_parser);
  const bool add_special_tokens = chat_add_special_tokens(body);
  parsed.request.prompt = tokenizer->encode(text, add_special_tokens);
  if (parsed.request.prompt.empty()) refuse("messages", "rendered an empty prompt through the chat template");
  // The tokenizer's tokens around the rendered text stay; the template's own are text, cut as the rest.
  const std::pair<size_t, size_t> added = add_special_tokens && given(body, "truncate_prompt_tokens")
                                              ? added_around(parsed.request.prompt, tokenizer->encode(text, false))
                                              : std::pair<size_t, size_t>{0, 0};
  truncate_prompt(body, model, parsed.request.max_new_tokens, parsed.request.prompt, added.first, added.second);
  check_prompt_fits(parsed.request.prompt, model, "messages");
  parsed.prompts = {parsed.request.prompt};
  parsed.request.stop_tokens.insert(parsed.request.stop_tokens.end(), end_of_reply.begin(), end_of_reply.end());
  parsed.logprobs = boolean_field(body, "logprobs", false);
  parsed.top_logprobs = uint32_t(count(body, "top_logprobs", 0, kMostTopLogprobs));
  if (parsed.top_logprobs > 0 && !parsed.logprobs) refuse("top_logprobs", "needs \"logprobs\": true");
  ask_for_logprobs(parsed);
  parsed.include_reasoning = boolean_field(body, "include_reasoning", true);
  return parsed;
}

}  // namespace tilefire::cli
