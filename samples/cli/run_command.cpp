// tilefire run: prefill a prompt and decode, printing the text (or one JSON object) and the timings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string_view>
#include <optional>
#include <functional>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "chat_flags.h"
#include "commands.h"
#include "model_folder.h"
#include "reply_format.h"
#include "sampling_flags.h"
#include "stop_text.h"
#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

namespace {

const char* kRunHelp = R"(usage: tilefire run [--model DIR] [flags]

  --model DIR            Hugging Face folder (config.json + safetensors); default: the built-in sample
  --prompt TEXT          prompt (default "Once upon a time"): encoded by the folder's tokenizer.json; for
                         a model without a tokenizer (the sample, gen-model) its bytes are the tokens; a
                         folder with another tokenizer only (tokenizer.model, ...) takes --prompt-tokens
  --prompt-tokens 1,2,3  prompt as token ids
  --chat TEXT            a user's message, put in the model's chat template (chat_template.jinja,
                         tokenizer_config.json or chat_template.json, rendered as transformers does); prints the reply, which ends
                         at the template's eos_token or generation_config.json's eos_token_id
  --system TEXT          with --chat or --messages: a system message before the conversation
  --messages FILE        with or without --chat (which then comes last): the conversation so far, a JSON
                         list of {"role", "content"} messages as transformers takes them, or an object with
                         "messages" and the template's other variables ("tools", "enable_thinking", ...)
  --chat-template FILE   a Jinja chat template to use instead of the folder's (or for a folder without one)
  --max-new-tokens N     tokens to generate (default 32)
  --seed S               sampling seed (default 0); the sampling flags follow the others below
  --min-new-tokens N     the eos and stop tokens are not chosen before N tokens are generated, and --stop
                         counts only where it ends in the text of token N or later (default 0)
  --threads N            worker threads (default: all cores; shared by the ranks under --tp, at least one each)
  --tp N                 tensor parallelism: N ranks of this process (cpu: thread groups; cuda: rank r on
                         GPU (--cuda-device + r) mod the visible GPUs, ranks sharing a GPU split its SMs),
                         or one rank per process under `mpirun -np N` or RANK / WORLD_SIZE /
                         TILEFIRE_RENDEZVOUS (cuda: over NCCL 2.28, one GPU each; rank 0 prints; the
                         others print nothing)
  --tp-timeout-ms N      a collective waiting longer for a peer stops with an error naming it (default 10000)
  --schedule dataflow|bsp
  --policy NAME          placement of tasks on workers (the policies are listed at the end)
  --granularity G        events per producer tile (tile, default), per head-wide band (head), or per op
  --max-context N        KV-cache positions (default min(model, 4096))
  --kv-splits N          split-KV attention at decode: each KV head's positions in N tiles, then a merge
                         per head (1: no split; default: cuda splits when the heads alone leave SMs idle,
                         cpu never)
  --prefill-chunk N      prompt tokens per prefill step, 1 to 128 (default 128)
  --stop TEXT            end the generation where its text first shows TEXT, which is left out of the
                         output (finish_reason "stopped"); not for a folder whose tokenizer Tilefire does
                         not read
  --logprobs K           the K most probable next tokens at every generated position
  --prompt-logprobs K    score the prompt: each of its tokens' probability after those before it, the K
                         most probable there, and the prompt's total log-probability and perplexity
                         (--max-new-tokens 0: score only)
  --json                 print one JSON object
  --trace FILE           write a Chrome/Perfetto trace of one decode step
)";

// Standard output, unbuffered in effect: a streamed piece shows at once (fwrite: the text may hold a NUL).
void print(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int run_command(int argc, char** argv) {
  std::vector<std::string> switches{"--json", "--help"}, valued{"--prompt", "--prompt-tokens", "--max-new-tokens",
      "--seed", "--min-new-tokens", "--logprobs", "--prompt-logprobs", "--trace", "--chat", "--system", "--messages",
      "--chat-template", "--stop"};
  for (const std::string& flag : reply_format_switches()) switches.push_back(flag);
  for (const std::string& flag : reply_format_valued()) valued.push_back(flag);
  for (const std::string& flag : engine_valued()) valued.push_back(flag);
  for (const std::string& flag : sampling_valued()) valued.push_back(flag);
  for (const std::string& flag : speculation_valued()) valued.push_back(flag);
  for (const std::string& flag : backend_switches()) switches.push_back(flag);
  for (const std::string& flag : backend_valued()) valued.push_back(flag);
  Args args("run", switches, valued);
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kRunHelp, stdout);
    std::fputs(kReplyFormatHelp, stdout);
    std::fputs(kSamplingHelp, stdout);
    std::fputs(kSpeculationHelp, stdout);
    std::fputs(kBackendHelp, stdout);
    std::fputs(policy_help().c_str(), stdout);
    return 0;
  }
  if (args.has("--prompt") && args.has("--prompt-tokens"))
    throw InputError("tilefire run: give --prompt or --prompt-tokens, not both");
  const bool chat = args.has("--chat") || args.has("--messages");
  if (chat && (args.has("--prompt") || args.has("--prompt-tokens")))
    throw InputError("tilefire run: --chat and --messages make the prompt; give them or --prompt / --prompt-tokens, not both");
  for (const char* flag : {"--system", "--chat-template"})
    if (args.has(flag) && !chat) throw InputError(std::string("tilefire run: ") + flag + " goes with --chat or --messages");

  EngineOptions options = engine_options_of_flags(args);

  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::of_model_folder(options.model_dir);
  const std::string unread_tokenizer = tokenizer ? "" : unread_tokenizer_file(options.model_dir);
  if (!unread_tokenizer.empty() && !args.has("--prompt-tokens") && !chat)
    throw InputError("tilefire run: " + unread_tokenizer + " is this model's tokenizer, and the folder has no tokenizer.json, "
                     "the only tokenizer file Tilefire reads: a text prompt's bytes would be arbitrary tokens of its "
                     "vocabulary. Give the prompt as token ids from that tokenizer with --prompt-tokens (the output is "
                     "printed as token ids too)");
  // The text of the output: by the tokenizer, or as bytes for a model without one (each token on its own);
  // none for a tokenizer Tilefire does not read (the output prints as ids).
  const bool output_is_text = tokenizer || unread_tokenizer.empty();
  std::optional<StopText> stop_text;
  if (const std::optional<std::string> stop = args.text("--stop")) {
    if (!output_is_text)
      throw InputError("tilefire run: --stop looks for a text, and this model's output has none: its tokenizer " +
                       unread_tokenizer + " is not one Tilefire reads");
    stop_text.emplace(std::vector<std::string>{*stop});
  }
  // --json-object, --json-schema, --regex, --choices, --grammar or --grammar-file: the reply is held to one.
  const ReplyFormat reply_format = reply_format_of_flags(args, "tilefire run");
  const uint32_t json_whitespace = json_whitespace_of_flags(args, reply_format, "tilefire run");
  if (reply_format && !output_is_text)
    throw InputError("tilefire run: " + reply_format.named + " constrains the reply's text, and this model's output has none: its "
                     "tokenizer " + unread_tokenizer + " is not one Tilefire reads");
  GenerateRequest request;
  const std::string prompt_text = args.text_or("--prompt", "Once upon a time");
  if (chat) {
    Conversation conversation = begin_conversation(args, options.model_dir, tokenizer.get(), "tilefire run");
    if (const auto message = args.text("--chat")) conversation.add("user", *message, "tilefire run: --chat");
    request.prompt = tokenizer->encode(conversation.render("tilefire run"), false);  // the template writes the start token
    request.stop_tokens = conversation.end_of_reply;
  } else if (args.has("--prompt-tokens")) {
    request.prompt = args.token_list("--prompt-tokens");
  } else if (tokenizer) {
    try {
      request.prompt = tokenizer->encode(prompt_text);
    } catch (const InputError& error) {  // the prompt is not UTF-8: name the flag
      throw InputError(std::string("tilefire run: --prompt: ") + error.what());
    }
  } else {
    request.prompt = byte_tokens(prompt_text);
  }
  request.max_new_tokens = uint32_t(args.unsigned_or("--max-new-tokens", 32, 0, 1u << 24));
  request.min_new_tokens = uint32_t(args.unsigned_or("--min-new-tokens", 0, 0, 1u << 24));
  if (request.min_new_tokens > request.max_new_tokens)
    throw InputError("tilefire run: --min-new-tokens " + std::to_string(request.min_new_tokens) + " is more than --max-new-tokens " +
                     std::to_string(request.max_new_tokens));
  if (request.min_new_tokens > 0 && reply_format)
    throw InputError(std::string("tilefire run: --min-new-tokens with ") + reply_format.named + ": the reply ends where its " +
                     reply_format.ends_where() + ", however few its tokens");
  request.sampling = sampling_of_flags(args, "tilefire run");
  request.sampling.seed = args.unsigned_or("--seed", 0);
  request.speculation = speculation_of_flags(args, "tilefire run", options);
  request.logprobs = uint32_t(args.unsigned_or("--logprobs", 0, 0, 1000));
  request.prompt_logprobs = uint32_t(args.unsigned_or("--prompt-logprobs", 0, 0, 1000));
  request.trace_path = args.text_or("--trace", "");

  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (request.logprobs > model.vocab)
    throw InputError("tilefire run: --logprobs " + std::to_string(request.logprobs) + " exceeds the vocabulary of " +
                     std::to_string(model.vocab));
  std::string prompt_origin;  // where a text prompt's ids came from
  if (tokenizer && !args.has("--prompt-tokens")) prompt_origin.append(" (from ").append(tokenizer->path()).append(")");
  if (chat && request.prompt.empty()) throw InputError("tilefire run: the chat template rendered an empty prompt");
  for (int32_t t : request.prompt)
    if (uint32_t(t) >= model.vocab)
      throw InputError("tilefire run: prompt token " + std::to_string(t) + prompt_origin + " is outside the model's vocabulary [0, " +
                       std::to_string(model.vocab) + ")");
  if (request.prompt.size() > model.max_context)
    throw InputError("tilefire run: the prompt has " + std::to_string(request.prompt.size()) +
                     " tokens but the context holds " + std::to_string(model.max_context) +
                     (args.has("--max-context") ? std::string(" (--max-context)")
                                                : std::string(" (the model's limit: max_position_embeddings in config.json, "
                                                              "and at most 4096 unless --max-context says more)")));

  // Rank 0 prints; the text streams as it is generated, after the model's line and the prompt. Those two
  // wait for the first token, so that a run refused before it (a --trace path it cannot write, NaN logits
  // at the prefill) prints nothing on stdout.
  // The text each generated token adds, and the rest at the end.
  std::optional<StreamingText> tokenizer_stream;
  if (tokenizer) tokenizer_stream.emplace(*tokenizer, request.prompt);
  const auto text_of_token = [&](int32_t token) { return tokenizer ? tokenizer_stream->add(token) : bytes_text({token}); };
  bool began = false;
  const auto begin_output = [&] {
    if (began) return;
    began = true;
    if (options.backend == Backend::cuda)
      std::printf("model: %s (%s), cuda on %s, %u CTAs, %s%s\n", model.origin.c_str(), model_shape(model).c_str(),
                  engine.device_name().c_str(), engine.threads(), args.text_or("--schedule", "dataflow").c_str(),
                  options.cuda_resident ? ", resident" : "");
    else
      std::printf("model: %s (%s), %u threads, %s%s\n", model.origin.c_str(), model_shape(model).c_str(), engine.threads(),
                  args.text_or("--schedule", "dataflow").c_str(),
                  options.tp > 1 ? (", " + std::to_string(options.tp) + " tensor-parallel ranks").c_str() : "");
    std::fflush(stdout);
    if (chat) return;  // the reply only: the prompt is the template's text
    if (tokenizer) print(tokenizer->decode(request.prompt, true));  // special tokens left out
    else if (output_is_text) print(bytes_text(request.prompt));
  };
  // Ranks as processes print at the end: a stdout that blocks (a paused terminal) inside the generation
  // loop would hold rank 0 back from the next collective, and the others would time out waiting for it.
  const bool streamed = output_is_text && !args.has("--json") && !engine.ranks_are_processes();
  uint32_t tokens_out = 0;
  std::string shown_text;  // with --stop: what the stop text let through
  if (streamed || stop_text)
    request.on_token = [&](int32_t token) {
      std::string piece = text_of_token(token);
      // Held back while it may begin the stop text, which counts only where it ends in the text of token
      // --min-new-tokens or later (as serve's min_tokens).
      if (stop_text) piece = stop_text->add(piece, ++tokens_out < request.min_new_tokens);
      shown_text += piece;
      if (!streamed) return;
      begin_output();
      print(piece);
    };
  // Every rank sees the same tokens, so ranks as processes stop at the same step.
  if (stop_text) request.stop_when = [&](const std::vector<int32_t>&) { return stop_text->stopped(); };
  if (reply_format)  // after stop_when, which the constraint keeps, and the stop tokens, which a pattern's allows
    reply_format.constrain(request, std::make_shared<const TokenTrie>(vocabulary_bytes(tokenizer.get(), model.vocab)), model.eos_tokens,
                           json_whitespace);
  // The whole generated text (once, not streamed): with --stop, what the stop text let through, as a stream
  // gives it (the same bytes its offsets were counted on).
  const auto generated_text = [&](const GenerateResult& result) {
    if (stop_text) return shown_text + stop_text->add(tokenizer ? tokenizer_stream->finish() : std::string()) + stop_text->finish();
    return tokenizer ? tokenizer->continuation(result.prompt_tokens, result.tokens) : bytes_text(result.tokens);
  };

  GenerateResult result;
  try {
    result = engine.generate(request);
  } catch (...) {  // a fault after the first token: end the streamed line, so the error has its own
    if (began) print("\n");
    throw;
  }
  if (engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports for all
  if (!result.draft_error.empty())  // the reply is whole (it never depends on a draft); only its speed is not
    std::fprintf(stderr, "tilefire run: warning: speculation stopped partway, the reply went on by decode steps: %s\n",
                 result.draft_error.c_str());

  // --prompt-logprobs: the prompt's log-likelihood (every token after the first, given those before it).
  double prompt_logprob = 0;
  for (const TokenProbability& tp : result.prompt_token_probabilities) prompt_logprob += tp.logprob;
  const size_t scored = result.prompt_token_probabilities.size();
  if (args.has("--json")) {
    auto positions = [](const std::vector<std::vector<TokenProbability>>& list) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& position : list) {
        nlohmann::json row = nlohmann::json::array();
        for (const TokenProbability& tp : position) row.push_back({tp.token, tp.probability});
        out.push_back(row);
      }
      return out;
    };
    const nlohmann::json logprobs = positions(result.logprobs);
    // The generated text: by the tokenizer, as bytes for a model without one, none for an unread tokenizer.
    const nlohmann::json text = output_is_text ? nlohmann::json(generated_text(result)) : nlohmann::json();
    nlohmann::json out = {{"model", model.origin},
                          {"backend", args.text_or("--backend", "cpu")},
                          {"device", engine.device_name()},
                          {"threads", engine.threads()},
                          {"tp", engine.tensor_parallel_ranks()},
                          {"schedule", args.text_or("--schedule", "dataflow")},
                          {"prompt_tokens", result.prompt_tokens},
                          {"tokens", result.tokens},
                          {"text", text},
                          {"logprobs", logprobs},
                          {"ttft_ms", result.ttft_ms},
                          {"tpot_ms", result.tpot_ms},
                          {"decode_tok_s", result.decode_tok_s},
                          {"tasks_per_step", result.tasks_per_step},
                          {"events_per_step", result.events_per_step},
                          {"compile_ms", result.compile_ms},
                          {"finish_reason", result.finish_reason},
                          {"decode_steps", result.decode_steps}};
    if (request.speculation.draft_tokens) {
      out["draft_tokens"] = result.draft_tokens;
      out["accepted_tokens"] = result.accepted_tokens;
      if (!result.draft_error.empty()) out["draft_error"] = result.draft_error;
    }
    if (request.prompt_logprobs) {  // the first prompt token has nothing before it: null, as OpenAI's echo gives it
      nlohmann::json token_logprobs = nlohmann::json::array({nullptr}), top = nlohmann::json::array({nullptr});
      for (const TokenProbability& tp : result.prompt_token_probabilities) token_logprobs.push_back(tp.logprob);
      for (const nlohmann::json& row : positions(result.prompt_logprobs)) top.push_back(row);
      out["prompt_token_logprobs"] = token_logprobs;
      out["prompt_logprobs"] = top;
      out["prompt_logprob"] = prompt_logprob;
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    return 0;
  }
  begin_output();
  if (streamed) {
    std::string rest = tokenizer ? tokenizer_stream->finish() : std::string();
    if (stop_text) rest = stop_text->add(rest) + stop_text->finish();
    print(rest + "\n");
  } else if (output_is_text) {
    print(generated_text(result) + "\n");
  } else {  // ids: its own tokenizer turns them into text
    auto ids = [](const std::vector<int32_t>& tokens) {
      std::string text;
      for (int32_t t : tokens) {
        if (!text.empty()) text += ' ';
        text += std::to_string(t);
      }
      return text;
    };
    std::printf("prompt tokens: %s\ngenerated tokens: %s\n", ids(result.prompt_tokens).c_str(), ids(result.tokens).c_str());
  }
  if (result.finish_reason == "context")
    std::printf("(stopped after %zu tokens: the context of %u positions is full; see --max-context)\n",
                result.tokens.size(), model.max_context);
  if (request.prompt_logprobs) {
    for (size_t i = 0; i < scored; ++i) {
      std::printf("  prompt [%zu] token %d: logprob %.4f, most probable", i + 1, result.prompt_token_probabilities[i].token,
                  result.prompt_token_probabilities[i].logprob);
      for (const TokenProbability& tp : result.prompt_logprobs[i]) std::printf(" %d=%.4f", tp.token, tp.probability);
      std::printf("\n");
    }
    std::printf("prompt: %zu tokens scored, log-probability %.4f, perplexity %.4f\n", scored, prompt_logprob,
                scored ? std::exp(-prompt_logprob / double(scored)) : 1.0);
  }
  for (size_t i = 0; i < result.logprobs.size(); ++i) {
    std::printf("  [%zu] token %d:", i, result.tokens[i]);
    for (const TokenProbability& tp : result.logprobs[i]) std::printf(" %d=%.4f", tp.token, tp.probability);
    std::printf("\n");
  }
  if (result.tokens.empty() && request.prompt_logprobs)  // scored only: no token, no decode step
    std::printf("prompt scored in %.2f ms\n", result.ttft_ms);
  else
    std::printf("time to first token %.2f ms, time per output token %.3f ms, decode %.1f tokens/s\n", result.ttft_ms,
                result.tpot_ms, result.decode_tok_s);
  if (request.speculation.draft_tokens)
    std::printf("speculation: %u of %u drafted tokens taken (%.0f%%); %zu tokens after the first in %u steps\n",
                result.accepted_tokens, result.draft_tokens,
                result.draft_tokens ? 100.0 * result.accepted_tokens / result.draft_tokens : 0.0,
                result.tokens.empty() ? size_t(0) : result.tokens.size() - 1, result.decode_steps);
  std::printf("program: %u tasks, %u events per decode step; compiled in %.1f ms\n", result.tasks_per_step,
              result.events_per_step, result.compile_ms);
  if (result.trace_written) std::printf("trace of one decode step: %s\n", request.trace_path.c_str());
  return 0;
}

}  // namespace tilefire::cli
