// The C API's engine (tilefire/tilefire.h): tilefire::Engine behind plain C types.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "megakernel/c_api/c_api.h"

namespace tilefire::c_api {
namespace {

thread_local std::string last_error;

// The C options as the C++ ones; enum values outside their lists are refused by name.
EngineOptions engine_options(const tilefire_engine_options& c) {
  if (c.struct_size != sizeof(tilefire_engine_options))
    throw InputError("tilefire_engine_create: tilefire_engine_options.struct_size is " + std::to_string(c.struct_size) +
                     ", this library's is " + std::to_string(sizeof(tilefire_engine_options)) +
                     ": initialise the options with tilefire_engine_options_init, from the tilefire.h of this library");
  EngineOptions options;
  options.model_dir = string_or_empty(c.model_dir);
  options.preset = string_or_empty(c.preset);
  if (c.preset_dtype) options.preset_dtype = c.preset_dtype;
  options.preset_seed = c.preset_seed;
  switch (c.backend) {
    case TILEFIRE_BACKEND_CPU: options.backend = Backend::cpu; break;
    case TILEFIRE_BACKEND_CUDA: options.backend = Backend::cuda; break;
    default: throw InputError("tilefire_engine_options.backend is " + std::to_string(c.backend) + ", not TILEFIRE_BACKEND_CPU or _CUDA");
  }
  options.threads = c.threads;
  options.tp = c.tp;
  options.tp_timeout_ms = c.tp_timeout_ms;
  switch (c.schedule) {
    case TILEFIRE_SCHEDULE_DATAFLOW: options.schedule = Schedule::dataflow; break;
    case TILEFIRE_SCHEDULE_BSP: options.schedule = Schedule::bsp; break;
    default: throw InputError("tilefire_engine_options.schedule is " + std::to_string(c.schedule) + ", not TILEFIRE_SCHEDULE_DATAFLOW or _BSP");
  }
  options.policy = string_or_empty(c.policy);
  switch (c.granularity) {
    case TILEFIRE_GRANULARITY_TILE: options.granularity = Granularity::tile; break;
    case TILEFIRE_GRANULARITY_HEAD: options.granularity = Granularity::head; break;
    case TILEFIRE_GRANULARITY_OP: options.granularity = Granularity::op; break;
    default:
      throw InputError("tilefire_engine_options.granularity is " + std::to_string(c.granularity) +
                       ", not TILEFIRE_GRANULARITY_TILE, _HEAD or _OP");
  }
  options.max_context = c.max_context;
  options.kv_splits = c.kv_splits;
  options.cuda_device = c.cuda_device;
  options.cuda_ctas = c.cuda_ctas;
  options.cuda_resident = c.cuda_resident != 0;
  options.cuda_stage_weights = c.cuda_stage_weights != 0;
  options.cuda_watchdog_ms = c.cuda_watchdog_ms;
  options.sequences = c.sequences;
  options.prefill_chunks_per_step = c.prefill_chunks_per_step;
  options.prefill_chunk = c.prefill_chunk;
  options.prefill_in_decode_step = c.prefill_in_decode_step != 0;
  if (c.cuda_step_deadline_ms > UINT32_MAX)
    throw InputError("tilefire_engine_options.cuda_step_deadline_ms is " + std::to_string(c.cuda_step_deadline_ms) +
                     ", more than 4294967295 (about 50 days)");
  options.cuda_step_deadline_ms = uint32_t(c.cuda_step_deadline_ms);
  options.draft.model_dir = string_or_empty(c.draft_model_dir);
  options.draft.preset = string_or_empty(c.draft_preset);
  if (c.draft_preset_dtype) options.draft.preset_dtype = c.draft_preset_dtype;
  options.draft.preset_seed = c.draft_preset_seed;
  return options;
}

const char* static_finish_reason(const std::string& reason) {
  for (const char* known : {"eos", "stopped", "length", "context"})
    if (reason == known) return known;
  throw std::logic_error("generate finished for an unknown reason '" + reason + "'");
}

}  // namespace

GenerateRequest generate_request(const tilefire_generate_request& c, const char* call, const char* name, const ModelInfo& model) {
  if (c.struct_size != sizeof(tilefire_generate_request))
    throw InputError(std::string(call) + ": tilefire_generate_request.struct_size is " + std::to_string(c.struct_size) +
                     ", this library's is " + std::to_string(sizeof(tilefire_generate_request)) +
                     ": initialise the request with tilefire_generate_request_init, from the tilefire.h of this library");
  const std::string field = std::string(name) + "->";
  GenerateRequest cpp;
  cpp.prompt = token_vector(c.prompt, c.prompt_count, call, (field + "prompt").c_str());
  cpp.max_new_tokens = c.max_new_tokens;
  cpp.min_new_tokens = c.min_new_tokens;
  cpp.sampling = Sampling{.temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = c.seed, .min_p = c.min_p,
                          .repetition_penalty = c.repetition_penalty, .presence_penalty = c.presence_penalty,
                          .frequency_penalty = c.frequency_penalty};
  if (c.logit_bias_count > 0 && !c.logit_bias)
    throw InputError(std::string(call) + ": " + field + "logit_bias is NULL with a count of " + std::to_string(c.logit_bias_count));
  for (size_t i = 0; i < c.logit_bias_count; ++i) cpp.sampling.logit_bias.emplace_back(c.logit_bias[i].token, c.logit_bias[i].bias);
  cpp.logprobs = c.logprobs;
  cpp.prompt_logprobs = c.prompt_logprobs;
  cpp.stop_at_eos = c.stop_at_eos != 0;
  cpp.stop_tokens = token_vector(c.stop_tokens, c.stop_token_count, call, (field + "stop_tokens").c_str());
  cpp.reuse_prefix = c.reuse_prefix != 0;
  cpp.trace_path = string_or_empty(c.trace_path);
  cpp.speculation = Speculation{.draft_tokens = c.speculate_draft_tokens, .max_ngram = c.speculate_max_ngram,
                                .min_ngram = c.speculate_min_ngram};
  switch (c.speculate_source) {
    case TILEFIRE_DRAFT_PROMPT_LOOKUP: cpp.speculation.source = DraftSource::prompt_lookup; break;
    case TILEFIRE_DRAFT_MODEL: cpp.speculation.source = DraftSource::draft_model; break;
    default:
      throw InputError(std::string(call) + ": " + field + "speculate_source is " + std::to_string(c.speculate_source) +
                       ", not TILEFIRE_DRAFT_PROMPT_LOOKUP or _MODEL");
  }
  if (c.on_probabilities) {
    const tilefire_probability_callback on_probabilities = c.on_probabilities;
    void* const user_data = c.user_data;
    cpp.on_probabilities = [=](const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable) {
      const tilefire_token_probability own{chosen.token, chosen.probability, chosen.logprob};
      std::vector<tilefire_token_probability> listed;
      listed.reserve(most_probable.size());
      for (const TokenProbability& p : most_probable) listed.push_back({p.token, p.probability, p.logprob});
      on_probabilities(user_data, &own, listed.data(), uint32_t(listed.size()));
    };
  }
  if (c.on_token) {
    // The callback's answer to one token, asked by stop_when right after: per request, since a batch's
    // requests take their tokens in turn.
    auto stop_requested = std::make_shared<bool>(false);
    const tilefire_token_callback on_token = c.on_token;
    void* const user_data = c.user_data;
    cpp.on_token = [=](int32_t token) { *stop_requested = on_token(user_data, token) != 0; };
    cpp.stop_when = [=](const std::vector<int32_t>&) { return *stop_requested; };
  }
  // What the reply is held to: json_object, json_schema, regex, choices or grammar (held names the one
  // given, json_kind too when the reply is JSON).
  const char* held = nullptr;
  const std::pair<bool, const char*> kinds[] = {{c.json_object != 0, "json_object"}, {c.json_schema != nullptr, "json_schema"},
                                                {c.regex != nullptr, "regex"}, {c.choices != nullptr || c.choice_count > 0, "choices"},
                                                {c.grammar != nullptr, "grammar"}};
  for (const auto& [given, kind] : kinds) {
    if (!given) continue;
    if (held) throw InputError(std::string(call) + ": " + field + held + " and " + kind + " are both set: give one");
    held = kind;
  }
  const char* json_kind = c.json_object ? "json_object" : c.json_schema ? "json_schema" : nullptr;
  if (c.allowed_tokens && held)
    throw InputError(std::string(call) + ": " + field + "allowed_tokens and " + held + " both constrain the reply: give one");
  if (held && c.min_new_tokens > 0)
    throw InputError(std::string(call) + ": " + field + "min_new_tokens with " + held + ": the reply ends where its " +
                     (json_kind ? "value closes" : c.grammar ? "grammar lets it" : "pattern lets it") + ", however few its tokens");
  if (c.json_tokenizer && !held)
    throw InputError(std::string(call) + ": " + field + "json_tokenizer is set without json_object, json_schema, regex, choices or grammar");
  if (c.json_whitespace != kMostJsonWhitespace && !json_kind)
    throw InputError(std::string(call) + ": " + field + "json_whitespace is set without json_object or json_schema");
  if (c.json_whitespace > kMostJsonWhitespace)
    throw InputError(std::string(call) + ": " + field + "json_whitespace is " + std::to_string(c.json_whitespace) + ", more than " +
                     std::to_string(kMostJsonWhitespace));
  std::shared_ptr<const ReplyPattern> pattern;
  std::shared_ptr<const ReplyGrammar> grammar;
  try {
    if (c.regex) pattern = ReplyPattern::compile_cached(c.regex);
    if (c.grammar) grammar = ReplyGrammar::compile_cached(c.grammar);
    if (c.choices || c.choice_count > 0) {
      if (!c.choices) throw InputError("is NULL with a count of " + std::to_string(c.choice_count));
      std::vector<std::string> choices;
      for (size_t i = 0; i < c.choice_count; ++i) {
        if (!c.choices[i]) throw InputError("choice " + std::to_string(i) + " is NULL");
        choices.emplace_back(c.choices[i]);
      }
      pattern = ReplyPattern::of_choices(choices);
    }
  } catch (const InputError& e) {
    throw InputError(std::string(call) + ": " + field + held + ": " + e.what());
  }
  if (c.allowed_tokens) {
    const tilefire_allowed_tokens_callback allowed_tokens = c.allowed_tokens;
    void* const user_data = c.user_data;
    cpp.allowed_tokens = [=](const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed) {
      allowed_tokens(user_data, generated.data(), generated.size(), allowed.data(), allowed.size());
    };
  }
  if (held) {  // after stop_when, which the constraint keeps, and the stop tokens, which a pattern allows
    std::shared_ptr<const JsonSchema> schema;
    if (c.json_schema) {
      try {
        schema = JsonSchema::compile_cached(c.json_schema);
      } catch (const InputError& e) {
        throw InputError(std::string(call) + ": " + field + e.what());  // "request->" "json_schema: #/...: ..."
      }
    }
    std::shared_ptr<const TokenTrie> tokens;
    if (tilefire_tokenizer* tokenizer = const_cast<tilefire_tokenizer*>(c.json_tokenizer)) {
      std::lock_guard<std::mutex> lock(tokenizer->json_mutex);
      std::shared_ptr<const TokenTrie>& cached = tokenizer->json_tries[model.vocab];
      if (!cached) cached = std::make_shared<const TokenTrie>(vocabulary_bytes(&tokenizer->tokenizer, model.vocab));
      tokens = cached;
    } else {
      tokens = std::make_shared<const TokenTrie>(vocabulary_bytes(nullptr, model.vocab));
    }
    if (pattern) constrain_to_pattern(cpp, std::move(tokens), std::move(pattern), model.eos_tokens);
    else if (grammar) constrain_to_grammar(cpp, std::move(tokens), std::move(grammar), model.eos_tokens);
    else if (schema) constrain_to_json_schema(cpp, std::move(tokens), std::move(schema), c.json_whitespace);
    else constrain_to_json(cpp, std::move(tokens), JsonTop::object, c.json_whitespace);
  }
  return cpp;
}

tilefire_generate_result hand_out_result(const GenerateResult& generated, uint32_t logprobs_per_token, uint32_t struct_size) {
  const size_t count = generated.tokens.size();
  const uint32_t k = logprobs_per_token;
  std::vector<tilefire_token_probability> logprobs, chosen;
  if (k) {
    if (generated.logprobs.size() != count || generated.token_probabilities.size() != count)
      throw std::logic_error("generate gave logprobs for another count of tokens");
    logprobs.reserve(count * k);
    for (const std::vector<TokenProbability>& position : generated.logprobs) {
      if (position.size() != k) throw std::logic_error("generate gave another count of logprobs than asked");
      for (const TokenProbability& p : position) logprobs.push_back({p.token, p.probability, p.logprob});
    }
    for (const TokenProbability& p : generated.token_probabilities) chosen.push_back({p.token, p.probability, p.logprob});
  }
  // The prompt's scores: as many per position as asked (the request's K, at most the vocabulary).
  const size_t scored = generated.prompt_token_probabilities.size();
  const uint32_t prompt_k = generated.prompt_logprobs.empty() ? 0 : uint32_t(generated.prompt_logprobs[0].size());
  std::vector<tilefire_token_probability> prompt_logprobs, prompt_chosen;
  if (generated.prompt_logprobs.size() != scored) throw std::logic_error("generate gave prompt logprobs for another count of tokens");
  for (const std::vector<TokenProbability>& position : generated.prompt_logprobs) {
    if (position.size() != prompt_k) throw std::logic_error("generate gave another count of prompt logprobs per token");
    for (const TokenProbability& p : position) prompt_logprobs.push_back({p.token, p.probability, p.logprob});
  }
  for (const TokenProbability& p : generated.prompt_token_probabilities) prompt_chosen.push_back({p.token, p.probability, p.logprob});
  tilefire_generate_result made{};
  made.struct_size = struct_size;
  made.prompt_scored = scored;
  made.prompt_logprobs_per_token = prompt_k;
  made.finish_reason = static_finish_reason(generated.finish_reason);
  made.token_count = count;
  made.logprobs_per_token = k;
  made.reused_tokens = generated.reused_tokens;
  made.ttft_ms = generated.ttft_ms;
  made.tpot_ms = generated.tpot_ms;
  made.decode_tok_s = generated.decode_tok_s;
  made.compile_ms = generated.compile_ms;
  made.tasks_per_step = generated.tasks_per_step;
  made.events_per_step = generated.events_per_step;
  made.decode_steps = generated.decode_steps;
  made.draft_tokens = generated.draft_tokens;
  made.accepted_tokens = generated.accepted_tokens;
  made.trace_written = generated.trace_written;
  made.tokens = hand_out_array(generated.tokens.data(), count);
  try {
    made.logprobs = hand_out_array(logprobs.data(), logprobs.size());
    made.token_probabilities = hand_out_array(chosen.data(), chosen.size());
    made.prompt_logprobs = hand_out_array(prompt_logprobs.data(), prompt_logprobs.size());
    made.prompt_token_probabilities = hand_out_array(prompt_chosen.data(), prompt_chosen.size());
    if (!generated.draft_error.empty())  // with its NUL
      made.draft_error = hand_out_array(generated.draft_error.c_str(), generated.draft_error.size() + 1);
  } catch (...) {
    std::free(made.tokens);
    std::free(made.logprobs);
    std::free(made.token_probabilities);
    std::free(made.prompt_logprobs);
    std::free(made.prompt_token_probabilities);
    throw;
  }
  return made;
}

namespace {

// The logits buffer of a step, checked before the step runs so that a refused one moves nothing.
void check_logits_buffer(const tilefire_engine& engine, const float* logits, size_t capacity, const char* call) {
  const uint32_t vocab = engine.engine.model().vocab;
  if (logits && capacity < vocab)
    throw InputError(std::string(call) + ": the logits buffer holds " + std::to_string(capacity) + " floats, the vocabulary " +
                     std::to_string(vocab));
}
void copy_logits(const std::vector<float>& values, float* logits) {
  if (logits) std::copy(values.begin(), values.end(), logits);
}

}  // namespace

void set_last_error(std::string message) { last_error = std::move(message); }

std::vector<int32_t> token_vector(const int32_t* tokens, size_t count, const char* call, const char* name) {
  if (!tokens && count) throw InputError(std::string(call) + ": " + name + " is NULL with a count of " + std::to_string(count));
  return tokens ? std::vector<int32_t>(tokens, tokens + count) : std::vector<int32_t>();
}

void check_output_size(uint32_t given, size_t expected, const char* call, const char* name) {
  if (given != expected)
    throw InputError(std::string(call) + ": " + name + "->struct_size is " + std::to_string(given) + ", this library's is " +
                     std::to_string(expected) + ": set it to the sizeof of the struct, from the tilefire.h of this library");
}

void require_folder(const std::string& folder, const char* call, const char* name) {
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error))
    throw InputError(std::string(call) + ": " + name + " '" + folder + "' is not a folder" +
                     (std::filesystem::exists(folder, error) ? "" : " (it does not exist)"));
}

void hand_out_text(const std::string& text, char** out, size_t* length) {
  char* memory = static_cast<char*>(std::malloc(text.size() + 1));
  if (!memory) throw std::bad_alloc();
  std::memcpy(memory, text.data(), text.size());
  memory[text.size()] = '\0';
  *out = memory;
  *length = text.size();
}

void hand_out_tokens(const std::vector<int32_t>& tokens, int32_t** out, size_t* count) {
  *out = hand_out_array(tokens.data(), tokens.size());
  *count = tokens.size();
}

}  // namespace tilefire::c_api

using namespace tilefire;
using tilefire::c_api::guarded;
using tilefire::c_api::required;

extern "C" {

uint32_t tilefire_api_version(void) { return TILEFIRE_API_VERSION; }
const char* tilefire_last_error(void) { return c_api::last_error.c_str(); }
void tilefire_free(void* memory) { std::free(memory); }

const char* tilefire_status_name(int32_t status) {
  switch (status) {
    case TILEFIRE_OK: return "ok";
    case TILEFIRE_ERROR_INPUT: return "input error";
    case TILEFIRE_ERROR_DEVICE: return "device error";
    case TILEFIRE_ERROR_TRANSPORT: return "transport error";
    case TILEFIRE_ERROR_OUT_OF_MEMORY: return "out of memory";
    case TILEFIRE_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

void tilefire_engine_options_init(tilefire_engine_options* options) {
  if (!options) return;
  const EngineOptions defaults;
  *options = tilefire_engine_options{};
  options->struct_size = sizeof(tilefire_engine_options);
  options->preset_seed = defaults.preset_seed;
  options->backend = TILEFIRE_BACKEND_CPU;
  options->threads = defaults.threads;
  options->tp = defaults.tp;
  options->tp_timeout_ms = defaults.tp_timeout_ms;
  options->schedule = TILEFIRE_SCHEDULE_DATAFLOW;
  options->granularity = TILEFIRE_GRANULARITY_TILE;
  options->max_context = defaults.max_context;
  options->kv_splits = defaults.kv_splits;
  options->cuda_device = defaults.cuda_device;
  options->cuda_ctas = defaults.cuda_ctas;
  options->cuda_resident = defaults.cuda_resident;
  options->cuda_stage_weights = defaults.cuda_stage_weights;
  options->cuda_watchdog_ms = defaults.cuda_watchdog_ms;
  options->sequences = defaults.sequences;
  options->prefill_chunks_per_step = defaults.prefill_chunks_per_step;
  options->prefill_chunk = defaults.prefill_chunk;
  options->prefill_in_decode_step = defaults.prefill_in_decode_step ? 1 : 0;
  options->cuda_step_deadline_ms = defaults.cuda_step_deadline_ms;
}

tilefire_status tilefire_engine_create(const tilefire_engine_options* options, tilefire_engine** engine) {
  return guarded([&] {
    required(engine, "tilefire_engine_create", "engine");
    const EngineOptions cpp = c_api::engine_options(required(options, "tilefire_engine_create", "options"));
    *engine = new tilefire_engine(cpp);
  });
}

void tilefire_engine_free(tilefire_engine* engine) { delete engine; }

tilefire_status tilefire_engine_model_info(const tilefire_engine* engine, tilefire_model_info* info) {
  return guarded([&] {
    const ModelInfo& model = required(engine, "tilefire_engine_model_info", "engine").engine.model();
    tilefire_model_info& out = required(info, "tilefire_engine_model_info", "info");
    c_api::check_output_size(out.struct_size, sizeof(tilefire_model_info), "tilefire_engine_model_info", "info");
    out = tilefire_model_info{out.struct_size, model.origin.c_str(), model.architecture.c_str(), model.dtype.c_str(),
                              model.vocab, model.hidden, model.layers, model.heads, model.kv_heads, model.head_dim,
                              model.ffn, model.max_context, model.eos_tokens.data(), model.eos_tokens.size(),
                              model.decode_weight_bytes};
  });
}

uint32_t tilefire_engine_threads(const tilefire_engine* engine) { return engine ? engine->engine.threads() : 0; }
uint32_t tilefire_engine_tp_ranks(const tilefire_engine* engine) { return engine ? engine->engine.tensor_parallel_ranks() : 0; }
uint32_t tilefire_engine_tp_rank(const tilefire_engine* engine) { return engine ? engine->engine.tensor_parallel_rank() : 0; }
const char* tilefire_engine_device_name(const tilefire_engine* engine) { return engine ? engine->device_name.c_str() : ""; }
uint32_t tilefire_engine_decode_tasks(const tilefire_engine* engine) { return engine ? engine->engine.decode_tasks() : 0; }
uint32_t tilefire_engine_decode_events(const tilefire_engine* engine) { return engine ? engine->engine.decode_events() : 0; }

void tilefire_generate_request_init(tilefire_generate_request* request) {
  if (!request) return;
  const GenerateRequest defaults;
  *request = tilefire_generate_request{};
  request->struct_size = sizeof(tilefire_generate_request);
  request->json_whitespace = kMostJsonWhitespace;
  request->max_new_tokens = defaults.max_new_tokens;
  request->temperature = defaults.sampling.temperature;
  request->top_k = defaults.sampling.top_k;
  request->top_p = defaults.sampling.top_p;
  request->seed = defaults.sampling.seed;
  request->min_p = defaults.sampling.min_p;
  request->repetition_penalty = defaults.sampling.repetition_penalty;
  request->presence_penalty = defaults.sampling.presence_penalty;
  request->frequency_penalty = defaults.sampling.frequency_penalty;
  request->logprobs = defaults.logprobs;
  request->stop_at_eos = defaults.stop_at_eos;
  request->reuse_prefix = defaults.reuse_prefix;
  request->speculate_draft_tokens = defaults.speculation.draft_tokens;
  request->speculate_max_ngram = defaults.speculation.max_ngram;
  request->speculate_min_ngram = defaults.speculation.min_ngram;
  request->speculate_source = TILEFIRE_DRAFT_PROMPT_LOOKUP;
}

tilefire_status tilefire_generate(tilefire_engine* engine, const tilefire_generate_request* request,
                                  tilefire_generate_result* result) {
  return guarded([&] {
    const char* call = "tilefire_generate";
    Engine& cpp_engine = required(engine, call, "engine").engine;
    const tilefire_generate_request& c = required(request, call, "request");
    tilefire_generate_result& out = required(result, call, "result");
    c_api::check_output_size(out.struct_size, sizeof(tilefire_generate_result), call, "result");
    const GenerateRequest cpp = c_api::generate_request(c, call, "request", cpp_engine.model());
    out = c_api::hand_out_result(cpp_engine.generate(cpp), cpp.logprobs, out.struct_size);
  });
}

void tilefire_generate_result_free(tilefire_generate_result* result) {
  if (!result) return;
  // A result of another layout (another version's header) was refused by every call that fills one, so it
  // holds nothing this library handed out: it is neither read nor written past its size.
  if (result->struct_size != sizeof(tilefire_generate_result)) return;
  std::free(result->tokens);
  std::free(result->logprobs);
  std::free(result->token_probabilities);
  std::free(result->prompt_logprobs);
  std::free(result->prompt_token_probabilities);
  std::free(result->draft_error);
  const uint32_t struct_size = result->struct_size;
  *result = tilefire_generate_result{};
  result->struct_size = struct_size;
}

tilefire_status tilefire_engine_reset(tilefire_engine* engine) {
  return guarded([&] { required(engine, "tilefire_engine_reset", "engine").engine.reset(); });
}

tilefire_status tilefire_engine_rewind(tilefire_engine* engine, uint32_t position) {
  return guarded([&] { required(engine, "tilefire_engine_rewind", "engine").engine.rewind(position); });
}

tilefire_status tilefire_engine_can_rewind(const tilefire_engine* engine, uint32_t position, int* can_rewind) {
  return guarded([&] {
    const char* call = "tilefire_engine_can_rewind";
    const tilefire::Engine& cpp_engine = required(engine, call, "engine").engine;
    int& out = required(can_rewind, call, "can_rewind");
    out = cpp_engine.can_rewind(position) ? 1 : 0;
  });
}

tilefire_status tilefire_engine_prefill(tilefire_engine* engine, const int32_t* tokens, size_t count, float* logits,
                                        size_t capacity) {
  return guarded([&] {
    const char* call = "tilefire_engine_prefill";
    tilefire_engine& e = required(engine, call, "engine");
    const std::vector<int32_t> prompt = c_api::token_vector(tokens, count, call, "tokens");
    c_api::check_logits_buffer(e, logits, capacity, call);
    c_api::copy_logits(e.engine.prefill(prompt), logits);
  });
}

tilefire_status tilefire_engine_decode(tilefire_engine* engine, int32_t token, float* logits, size_t capacity) {
  return guarded([&] {
    tilefire_engine& e = required(engine, "tilefire_engine_decode", "engine");
    c_api::check_logits_buffer(e, logits, capacity, "tilefire_engine_decode");
    c_api::copy_logits(e.engine.decode(token), logits);
  });
}

tilefire_status tilefire_engine_decode_greedy(tilefire_engine* engine, int32_t token, int32_t* next_token) {
  return guarded([&] {
    tilefire_engine& e = required(engine, "tilefire_engine_decode_greedy", "engine");
    int32_t& next = required(next_token, "tilefire_engine_decode_greedy", "next_token");
    next = e.engine.decode_greedy(token);
  });
}

uint32_t tilefire_engine_position(const tilefire_engine* engine) { return engine ? engine->engine.position() : 0; }

tilefire_status tilefire_engine_sequence(const tilefire_engine* engine, const int32_t** tokens, size_t* count) {
  return guarded([&] {
    const char* call = "tilefire_engine_sequence";
    const std::vector<int32_t>& sequence = required(engine, call, "engine").engine.sequence();
    required(tokens, call, "tokens");
    required(count, call, "count");
    *tokens = sequence.data();
    *count = sequence.size();
  });
}

tilefire_status tilefire_engine_set_schedule(tilefire_engine* engine, int32_t schedule) {
  return guarded([&] {
    tilefire_engine& e = required(engine, "tilefire_engine_set_schedule", "engine");
    if (schedule != TILEFIRE_SCHEDULE_DATAFLOW && schedule != TILEFIRE_SCHEDULE_BSP)
      throw InputError("tilefire_engine_set_schedule: schedule " + std::to_string(schedule) +
                       " is not TILEFIRE_SCHEDULE_DATAFLOW or _BSP");
    e.engine.set_schedule(schedule == TILEFIRE_SCHEDULE_BSP ? Schedule::bsp : Schedule::dataflow);
  });
}

}  // extern "C"
