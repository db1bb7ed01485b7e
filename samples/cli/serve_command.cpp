// tilefire serve: the engine behind an HTTP server that speaks the OpenAI completions and chat completions
// APIs (what most clients and SDKs send), on one address of this machine. By default requests take turns
// on the engine, each keeping what the KV cache holds of its prompt's beginning, so a chat's next turn
// prefills only what is new; with --sequences N they decode together (serve_batcher.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "commands.h"
#include "http.h"
#include "model_folder.h"
#include "serve_batcher.h"
#include "serve_logprobs.h"
#include "serve_metrics.h"
#include "sampling_flags.h"
#include "serve_requests.h"
#include "serve_responses.h"
#include "serve_tokenize.h"
#include "serve_chat_reply.h"
#include "serve_thinking_first.h"
#include "stop_text.h"
#include "stream_writer.h"
#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"
#include "tilefire/json_constraint.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

namespace {

using nlohmann::json;

const char* kServeHelp = R"(usage: tilefire serve [--model DIR] [flags]

An HTTP server on this machine that speaks the OpenAI API: POST /v1/completions, POST /v1/chat/completions
(with the model's chat template), POST /v1/responses (the Responses API's shapes of a chat), GET /v1/models,
GET /health, GET /metrics (Prometheus text: requests, tokens, time to first token and per token, generations
in flight), and vLLM's POST /tokenize and /detokenize (a prompt or a chat as tokens, tokens as text).
Requests take turns on the one engine, each keeping the KV cache's match of its prompt's
beginning (a chat's earlier turns), or with --sequences N decode together. Ctrl-C (SIGINT) or SIGTERM stops
it: generations in flight end and their clients get what was generated. A device or transport fault stops it
too, with exit status 3, for a supervisor to restart it.

  --model DIR            Hugging Face folder (config.json + safetensors, tokenizer.json for text); default:
                         the built-in sample (text as bytes)
  --host ADDRESS         IPv4 address to listen on (default 127.0.0.1: this machine only)
  --port N               TCP port (default 8000; 0: any free port, printed at start)
  --chat-template FILE   a Jinja chat template instead of the folder's (or for a folder without one)
  --served-model-name N  the model's id in /v1/models and in replies (default: the folder's name; "tiny"
                         for the built-in sample); GET /v1/models/N answers it. A request's "model" is not
                         checked: the one model answers every request
  --api-key KEY          the /v1/ paths, /tokenize and /detokenize answer only requests with
                         "Authorization: Bearer KEY" (401 otherwise);
                         default: the TILEFIRE_API_KEY environment variable, else none. /health and /metrics
                         stay open
  --max-connections N    requests served or waiting at once; more are answered 503 (default 32)
  --io-timeout-ms N      a request must arrive whole within this, and a client that does not take a write
                         of its reply within this is dropped (default 30000)
  --json-whitespace N    replies with a response_format of json_object or json_schema hold whitespace
                         runs of at most N bytes, 0 to 32 (default 32; 0: compact JSON, for a model that
                         would pad its reply with newlines)
  --tool-call-parser P   a chat with tools and tool_choice "auto" (the default with tools) reads the model's
                         own calls from its reply in the format P its chat template teaches it: hermes
                         (<tool_call>{...}</tool_call>: Qwen 2.5 and 3, Hermes), llama3_json ({"name": ...,
                         "parameters": {...}}: Llama 3.1-3.3), mistral ([TOOL_CALLS][{...}] or
                         [TOOL_CALLS]name[ARGS]{...}), pythonic ([name(key=value)]: Llama 3.2 and 4),
                         granite (<|tool_call|>[{...}]: Granite 3), qwen3_coder (<tool_call><function=name>
                         <parameter=key>value</parameter>...: Qwen3-Coder; also named qwen3_xml),
                         deepseek_v3 (<|tool calls begin|>...: DeepSeek-V3, R1 and V3.1; also named
                         deepseek_v31) or phi4_mini_json (functools[{...}]: Phi-4-mini); default
                         none: "auto" is refused (a named function or "required" need no parser:
                         constrained decoding holds them)
  --reasoning-parser P   a chat reply's thinking goes to "reasoning_content", apart from its "content": qwen3
                         (the reply opens <think>...</think>: Qwen3) or deepseek_r1 (the template opens it:
                         DeepSeek-R1 and its distillations); default none: the thinking is content. A
                         reply a format or a held tool call holds is held after the thinking where the
                         tokenizer has <think> and </think> as tokens of their own
  --threads N            worker threads (default: all cores)
  --tp N                 tensor-parallel ranks of this process (not one rank per process under mpirun)
  --tp-timeout-ms N      a collective waiting longer for a peer fails the request (default 10000)
  --max-context N        KV-cache positions: prompt and reply must fit (default min(model, 4096))
  --sequences N          continuous batching (with --tp too): up to N requests decode together,
                         one token of each per step, joining as others finish (default 1: in turn)
  --prefill-chunks N     with --sequences: each step prefills at most N chunks of prompt tokens of the
                         requests joining, after the others' tokens (default 1; 0: a joining prompt is
                         prefilled whole while the others wait)
  --prefill-chunk N      prompt tokens per chunk, 1 to 128 (default 128): smaller, the others wait less
                         per step and a joining prompt takes more steps
  --separate-prefill     with --sequences: every chunk runs as a program of its own after the decode
                         step (by default a step's first chunk runs in the decode step's program, one
                         pass over the weights for both, cut to what 128 rows leave beside the others)
  --schedule dataflow|bsp, --policy NAME, --granularity G, --kv-splits N   as in tilefire run
)";

std::atomic<bool> stopping{false};
extern "C" void stop_serving(int) { stopping.store(true); }

// What every request reads: the engine (one request at a time holds `mutex`; with --sequences, the
// batcher's thread alone runs it), the text tools, and names.
struct Served {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Batcher> batcher;             // --sequences N > 1: continuous batching
  std::unique_ptr<Tokenizer> tokenizer;        // null: the model's text is its bytes (the sample, gen-model)
  std::unique_ptr<ChatTemplate> chat_template;  // null: /v1/chat/completions is refused
  std::vector<int32_t> end_of_reply;            // the template's stop tokens
  std::string name;                             // the model's id in requests and responses
  size_t max_body = 0;                          // bytes of a request's body: room for a context of prompt
  int io_timeout_ms = 0;                        // a request arrives whole within this
  std::mutex mutex;
  std::atomic<uint64_t> requests{0};
  std::mutex log_mutex;
  std::mutex failure_mutex;
  std::string engine_failure;  // the fault that stopped the engine (engine_failed), empty while it runs
  ServeMetrics metrics;        // GET /metrics
  std::string api_key;         // --api-key: what the /v1/ paths require; empty: nothing
  Speculation speculation;     // --speculate: every request's
  // The tokens' bytes for replies constrained to JSON (response_format json_object, json_schema): the tokenizer's, or
  // without one a byte per id below 256 (the text of such a model is its tokens' bytes).
  std::shared_ptr<const TokenTrie> json_tokens;
  uint32_t json_whitespace = kMostJsonWhitespace;  // --json-whitespace
  ToolCallParser tool_call_parser = ToolCallParser::none;  // --tool-call-parser
  ReasoningParser reasoning_parser = ReasoningParser::none;  // --reasoning-parser
  std::optional<ThinkingTokens> thinking;  // its tags' tokens: a chat reply a format holds is held after its thinking
  std::map<int32_t, std::string> call_markers;  // the parser's special tokens, written in replies read for calls

  std::string failure() {
    std::lock_guard<std::mutex> lock(failure_mutex);
    return engine_failure;
  }
};

void log_line(Served& served, const std::string& line) {
  std::lock_guard<std::mutex> lock(served.log_mutex);
  std::fprintf(stderr, "tilefire serve: %s\n", line.c_str());
}

// A device or transport fault (DeviceError, TransportError) leaves the engine refusing every later step
// (errors.h), so the server stops as on SIGTERM and exits with status 3, for a supervisor to restart it;
// until it is down, /health answers 503 naming the fault and a request still waiting gets 503.
bool is_engine_fault(const std::exception& e) {
  return dynamic_cast<const DeviceError*>(&e) != nullptr || dynamic_cast<const TransportError*>(&e) != nullptr;
}
void engine_failed(Served& served, const std::exception& e) {
  {
    std::lock_guard<std::mutex> lock(served.failure_mutex);
    if (!served.engine_failure.empty()) return;  // the first fault is the one to report
    served.engine_failure = e.what();
  }
  log_line(served, std::string("the engine stopped after a fault, so the server stops (exit status 3): ") + e.what());
  stopping.store(true);
}
// What a request refused while the server stops is told.
std::string stopping_reason(Served& served) {
  const std::string failure = served.failure();
  return failure.empty() ? "the server is stopping" : "the server is stopping: its engine failed (" + failure + ")";
}

json error_body(int status, const std::string& message) {
  return {{"error", {{"message", message}, {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                     {"param", nullptr}, {"code", nullptr}}}};
}

std::string json_response(int status, const json& body) {
  return http::response(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

// How much of `bytes` ends in whole UTF-8 characters: an incomplete one at the end waits for its next
// bytes (the text of a model without a tokenizer streams a byte per token).
size_t whole_characters(const std::string& bytes) {
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const unsigned char byte = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? bytes.size() - back : bytes.size();
  }
  return bytes.size();
}

// A streamed reply: `event` makes a piece of its text into what goes to the client, on the generating
// thread as the piece comes (so it can carry the logprobs of the tokens that made it); `write` sends that
// (false: the client has gone) on the reply's StreamWriter thread, so a client that stops reading never
// holds up the engine (nor, with --sequences, the other clients' tokens).
struct StreamedReply {
  std::function<std::string(const std::string& piece)> event;  // "": nothing to send for it yet
  std::function<bool(const std::string& event)> write;
};
void add_event(StreamWriter& writer, std::string event) {
  if (!event.empty()) writer.add(std::move(event));
}

// One generation on the engine, its text streamed through `streamed` (a client gone, or one that closed
// its side, `fd`, ends the generation); `write` has run for the last time when this returns. Without
// `streamed`, returns the whole text, cut at a stop string. Also says whether the server's stopping cut
// the generation short.
struct Generated {
  GenerateResult result;
  std::string text;
  bool cut_short = false;
  bool stream_broken = false;  // a streamed reply's writer gave the client up: pieces of it never went out
  // With --reasoning-parser: what each token added to the reply's text (markers written, before stop
  // strings cut it; what a stream held to the end goes with the last), for the usage's count of thinking.
  std::vector<std::string> token_texts;
};
Generated generate(Served& served, int fd, GenerateRequest request, const std::vector<std::string>& stops,
                   const StreamedReply* streamed, const ReplyFormat& reply_format, const ThinkingTokens* thinking,
                   const std::map<int32_t, std::string>* markers) {
  // In flight from here (its wait for the engine included) until it has run, or has thrown.
  struct InFlight {
    ServeMetrics& metrics;
    bool ended = false;
    explicit InFlight(ServeMetrics& m) : metrics(m) { metrics.generation_started(); }
    void end(const GenerateResult& result) {
      metrics.generation_ended(result);
      ended = true;
    }
    ~InFlight() {
      if (!ended) metrics.generation_failed();
    }
  } in_flight(served.metrics);
  std::optional<StopText> stop_text;
  if (!stops.empty()) stop_text.emplace(stops);
  std::optional<StreamingText> stream;
  std::string held_bytes;  // without a tokenizer: bytes of a character not yet whole
  bool client_gone = false;
  std::optional<StreamWriter> writer;  // before the lock: a reply still being written does not hold the engine
  if (streamed) writer.emplace(streamed->write);
  std::unique_lock<std::mutex> lock(served.mutex, std::defer_lock);
  if (!served.batcher) {  // requests take turns
    lock.lock();
    if (stopping.load()) throw http::Error{503, stopping_reason(served)};  // a request that waited its turn
  }
  request.reuse_prefix = true;  // each keeps the cache's match of its prompt (with the batcher: a free slot's)
  request.speculation = served.speculation;  // with the batcher: by prompt lookup, checked in the batched steps
  // With the batcher, the callbacks below run on its thread while this one waits in run().
  if (served.tokenizer) stream.emplace(*served.tokenizer, request.prompt);
  auto text_of = [&](int32_t token) {
    if (served.tokenizer) {
      std::string piece = stream->add(token);
      if (markers) {
        const auto marker = markers->find(token);
        if (marker != markers->end()) piece += marker->second;  // a special token, which the text leaves out
      }
      return piece;
    }
    held_bytes += bytes_text({token});
    const size_t whole = whole_characters(held_bytes);
    std::string text = held_bytes.substr(0, whole);
    held_bytes.erase(0, whole);
    return text;
  };
  // vLLM's min_tokens: a stop string counts where it ends in the text of token min_tokens or later (a
  // character whose bytes the tokens before it began counts as the token that completes it).
  auto shown = [&](const std::string& piece, bool protected_piece = false) {
    return stop_text ? stop_text->add(piece, protected_piece) : piece;
  };
  uint32_t tokens_out = 0;
  // Not streamed, with stop strings or special markers: the reply as its pieces give it (a whole decoding
  // would leave the markers out).
  const bool by_pieces = stop_text || (markers && !markers->empty());
  std::string shown_text;
  std::vector<std::string> token_texts;
  const bool counts_thinking = served.reasoning_parser != ReasoningParser::none;
  request.on_token = [&](int32_t token) {
    std::string text = text_of(token);
    if (counts_thinking) token_texts.push_back(text);
    const std::string piece = shown(std::move(text), ++tokens_out < request.min_new_tokens);
    if (writer && !piece.empty()) add_event(*writer, streamed->event(piece));
    if (!writer && by_pieces) shown_text += piece;
  };
  request.stop_when = [&](const std::vector<int32_t>&) {
    client_gone = client_gone || (writer && writer->gone()) || http::peer_closed(fd);
    return client_gone || stopping.load() || (stop_text && stop_text->stopped());
  };
  // The request's allowed_token_ids (set by its parser), kept beside a format's constraint: a token must be
  // allowed by both.
  std::function<void(const std::vector<int32_t>&, std::vector<uint8_t>&)> only = std::move(request.allowed_tokens);
  const bool restricted = static_cast<bool>(only);
  request.allowed_tokens = nullptr;
  // After stop_when, which the constraint keeps, and the stop tokens (which a pattern allows where its text matches).
  if (reply_format) {
    auto constrain = [&](GenerateRequest& held) {
      reply_format.constrain(held, served.json_tokens, served.engine->model().eos_tokens, served.json_whitespace);
    };
    if (thinking) {
      hold_after_thinking(request, *thinking, request.ending_tokens(served.engine->model().eos_tokens), constrain);
    } else {
      constrain(request);
    }
  }
  if (only && !request.allowed_tokens) {
    request.allowed_tokens = std::move(only);
  } else if (only) {
    request.allowed_tokens = [format = std::move(request.allowed_tokens), only = std::move(only)](const std::vector<int32_t>& generated,
                                                                                                 std::vector<uint8_t>& allowed) {
      format(generated, allowed);
      std::vector<uint8_t> listed(allowed.size(), 0);
      only(generated, listed);
      for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = allowed[t] && listed[t];
    };
  }
  // max_tokens 0 with nothing to score runs nothing (generate() returns at once; a batch would refuse it).
  auto nothing_run = [&] {
    GenerateResult none;
    none.prompt_tokens = request.prompt;
    none.finish_reason = "length";
    return none;
  };
  const bool runs = request.max_new_tokens > 0 || request.prompt_logprobs > 0;
  // A choice the list leaves empty is named by the request's field (the engine names its own callback).
  auto run = [&] {
    try {
      return served.batcher ? served.batcher->run(request) : served.engine->generate(request);
    } catch (const InputError& e) {
      const std::string what = e.what(), asked = "GenerateRequest::allowed_tokens, asked for generated token ";
      const size_t at = what.find(asked);
      if (!restricted || at == std::string::npos || what.find("allowed no token") == std::string::npos) throw;
      const std::string token = what.substr(at + asked.size(), what.find(',', at + asked.size()) - at - asked.size());
      throw InputError("'allowed_token_ids' leaves no token to choose for generated token " + token +
                       (reply_format ? " beside " + reply_format.named : std::string()) +
                       (what.find("min_new_tokens") != std::string::npos ? " while min_tokens holds back the ending tokens" : ""));
    }
  };
  Generated generated{!runs ? nothing_run() : run(), "", false, false, {}};
  if (lock.owns_lock()) lock.unlock();  // the next request's turn while this reply's last pieces are written
  const GenerateResult& result = generated.result;
  in_flight.end(result);
  generated.cut_short = result.finish_reason == "stopped" && stopping.load() && !(stop_text && stop_text->stopped());
  if (counts_thinking && !token_texts.empty()) token_texts.back() += served.tokenizer ? stream->finish() : held_bytes;
  generated.token_texts = std::move(token_texts);
  if (writer) {
    std::string rest = shown(served.tokenizer ? stream->finish() : held_bytes);
    if (stop_text) rest += stop_text->finish();
    if (!rest.empty() && !client_gone) add_event(*writer, streamed->event(rest));
    writer->finish();
    generated.stream_broken = writer->gone();
  } else if (by_pieces) {  // what the stop strings let through, markers written, as a stream would have given it
    generated.text = shown_text + shown(served.tokenizer ? stream->finish() : held_bytes) + (stop_text ? stop_text->finish() : "");
  } else {  // the whole reply at once
    generated.text = served.tokenizer ? served.tokenizer->continuation(result.prompt_tokens, result.tokens) : bytes_text(result.tokens);
  }
  return generated;
}

// OpenAI's finish reasons: "stop" for a stop token or string, "length" for max_tokens, a full context, or
// a reply the server's stopping cut short.
const char* openai_finish_reason(const Generated& generated) {
  const std::string& reason = generated.result.finish_reason;
  return !generated.cut_short && (reason == "eos" || reason == "stopped") ? "stop" : "length";
}

// The text a token adds after its context, as a reply's logprobs name it: decoded after the context's last
// few tokens (a SentencePiece tokenizer drops a text's first space), special tokens written out; the
// tokens' bytes for a model without a tokenizer.
std::string token_text(const Served& served, const std::vector<int32_t>& context, int32_t token) {
  if (!served.tokenizer) return bytes_text({token});
  constexpr size_t kWindow = 8;
  std::vector<int32_t> window(context.end() - std::min(context.size(), kWindow), context.end());
  const std::string before = served.tokenizer->decode(window);
  window.push_back(token);
  const std::string after = served.tokenizer->decode(window);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  return served.tokenizer->decode({token});  // the token completed a character the window had cut
}

// Runs `run(i)` for each of `n` choices: together on a thread each when `together` (--sequences: they
// decode in one batch), else one after another on this thread (requests in turn would queue for the
// engine anyway). Rethrows the first failure once every choice has ended.
std::vector<Generated> run_choices(uint32_t n, bool together, const std::function<Generated(uint32_t)>& run) {
  std::vector<Generated> generated(n);
  if (n == 1 || !together) {
    for (uint32_t i = 0; i < n; ++i) generated[i] = run(i);
    return generated;
  }
  std::vector<std::exception_ptr> failures(n);
  std::vector<std::thread> threads;
  try {
    for (uint32_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        try {
          generated[i] = run(i);
        } catch (...) {
          failures[i] = std::current_exception();
        }
      });
  } catch (...) {  // a thread that could not start: the others end before the failure leaves
    for (std::thread& thread : threads) thread.join();
    throw;
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
  return generated;
}

// The usage of a reply's choices, `per_prompt` of each prompt in turn: each prompt once, every choice's
// tokens. OpenAI's prompt_tokens_details.cached_tokens: of those prompt tokens, the ones not prefilled
// (the KV cache held them, or they were copied from another sequence's slot: reused_tokens), the fewest
// of a prompt's choices (the others copy what the first prefilled, whichever came first). With
// `reasoning_tokens` (each choice's thinking tokens: a chat's with --reasoning-parser), OpenAI's
// completion_tokens_details, their sum.
json usage(const std::vector<Generated>& choices, uint32_t per_prompt, const std::vector<size_t>* reasoning_tokens = nullptr) {
  size_t prompt = 0, completion = 0, cached = 0;
  for (size_t c = 0; c < choices.size(); ++c) {
    completion += choices[c].result.tokens.size();
    if (c % per_prompt != 0) continue;
    prompt += choices[c].result.prompt_tokens.size();
    uint32_t fewest = choices[c].result.reused_tokens;
    for (size_t j = c + 1; j < c + per_prompt && j < choices.size(); ++j) fewest = std::min(fewest, choices[j].result.reused_tokens);
    cached += fewest;
  }
  json counts = {{"prompt_tokens", prompt},
                 {"completion_tokens", completion},
                 {"total_tokens", prompt + completion},
                 {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (reasoning_tokens) {
    size_t reasoning = 0;
    for (size_t count : *reasoning_tokens) reasoning += count;
    counts["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  }
  return counts;
}

std::string summary_of(const std::vector<Generated>& choices, uint32_t per_prompt) {
  std::string summary =
      choices.size() == 1 ? std::to_string(choices[0].result.tokens.size()) + " tokens, " + choices[0].result.finish_reason
                          : std::to_string(choices.size()) + " choices, " + usage(choices, per_prompt).at("completion_tokens").dump() + " tokens";
  for (const Generated& g : choices)  // the reply is whole; the log says why it took longer
    if (!g.result.draft_error.empty()) return summary + "; speculation stopped partway: " + g.result.draft_error;
  return summary;
}

// POST /v1/completions and /v1/chat/completions: parses `body`, generates (each of "n" choices), answers
// (whole or as events). For /v1/responses, a whole reply's body goes through `reshape`, and a stream's
// chunks through `responses_stream`.
void serve_generation(Served& served, int fd, const std::string& body_text, bool chat, int& status, std::string& summary,
                      const std::function<json(const json&)>& reshape = nullptr, ResponsesStream* responses_stream = nullptr) {
  const ParsedRequest parsed = chat ? parse_chat_request(body_text, served.tokenizer.get(), served.chat_template.get(),
                                                         served.end_of_reply, served.engine->model(), served.tool_call_parser)
                                    : parse_completion_request(body_text, served.tokenizer.get(), served.engine->model());
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + (parsed.request_id.empty() ? std::to_string(++served.requests) : parsed.request_id);
  const long long created = static_cast<long long>(std::time(nullptr));
  const char* object = chat ? "chat.completion" : "text_completion";
  const uint32_t per_prompt = parsed.choices;
  const uint32_t n = uint32_t(parsed.prompts.size()) * per_prompt;  // choice c: prompt c / per_prompt
  // A choice: a chat's whole message, or a stream chunk's delta; a completion's text.
  auto choice = [&](uint32_t index, const json& content, const json& finish_reason, bool chunk) {
    json c = {{"index", index}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
    if (chat) c[chunk ? "delta" : "message"] = content;
    else c["text"] = content;
    return c;
  };
  // A chat choice's text becomes its message through a reader of its own: the thinking split off, the
  // content read for calls. A reply a format holds is held after the thinking where the model's tags are
  // tokens (serve_thinking_first.h), else from its first token, with no thinking.
  const ThinkingTokens* thinking = chat && parsed.reply_format && served.thinking ? &*served.thinking : nullptr;
  const ReasoningParser reasoning = parsed.reply_format && !thinking ? ReasoningParser::none : served.reasoning_parser;
  // A reply the parser reads for calls keeps its special markers (vLLM's mistral parser keeps special tokens).
  const std::map<int32_t, std::string>* markers =
      chat && parsed.tool_calling.choice == ToolCalling::Choice::automatic ? &served.call_markers : nullptr;
  std::vector<ChatReplyReader> readers;
  readers.reserve(n);
  for (uint32_t i = 0; chat && i < n; ++i) readers.emplace_back(parsed.tool_calling, reasoning);
  // vLLM's include_reasoning false: the thinking is split off and left out (its tokens still counted).
  auto without_thinking = [&](json message) {
    if (!parsed.include_reasoning) message.erase("reasoning_content");
    return message;
  };
  // A chat's usage counts its thinking tokens where the server splits thinking off (none in a reply a format
  // holds from its first token).
  auto usage_of = [&](const std::vector<Generated>& generated) {
    if (!chat || served.reasoning_parser == ReasoningParser::none) return usage(generated, per_prompt);
    std::vector<size_t> reasoning_tokens;
    for (const Generated& g : generated)
      reasoning_tokens.push_back(reasoning_token_count(reasoning, g.token_texts));
    return usage(generated, per_prompt, &reasoning_tokens);
  };
  // Choice c is of prompt c / per_prompt and draws from the request's seed + c % per_prompt: each prompt's
  // samples, each repeatable with a seed.
  auto request_of = [&](uint32_t c) {
    GenerateRequest r = parsed.request;
    r.prompt = parsed.prompts[c / per_prompt];
    r.sampling.seed += c % per_prompt;
    return r;
  };

  const TokenText text_of = [&](const std::vector<int32_t>& context, int32_t token) { return token_text(served, context, token); };
  // An echoed prompt as the model read it: its tokens' texts, which its logprobs entries and their
  // text_offset name (a tokenizer's start token written out).
  std::vector<std::string> echoed(parsed.prompts.size());  // by prompt
  for (size_t p = 0; parsed.echo && p < parsed.prompts.size(); ++p) {
    std::vector<int32_t> before;  // the prompt's tokens before the one read
    for (int32_t token : parsed.prompts[p]) {
      echoed[p] += text_of(before, token);
      before.push_back(token);
    }
  }
  if (!parsed.stream) {
    const std::vector<Generated> generated =
        run_choices(n, served.batcher != nullptr, [&](uint32_t i) {
          return generate(served, fd, request_of(i), parsed.stops, nullptr, parsed.reply_format, thinking, markers);
        });
    json choices = json::array();
    for (uint32_t i = 0; i < n; ++i) {
      std::string finish_reason = openai_finish_reason(generated[i]);
      const json message = chat ? without_thinking(readers[i].message(generated[i].text, finish_reason)) : json(echoed[i / per_prompt] + generated[i].text);
      json reply_choice = choice(i, message, finish_reason, false);
      if (parsed.logprobs) {
        ReplyLogprobs logprobs(chat, parsed.top_logprobs, parsed.prompts[i / per_prompt], text_of);
        if (parsed.echo) logprobs.add_prompt(generated[i].result);
        logprobs.add_all(generated[i].result);
        reply_choice["logprobs"] = logprobs.take();
      }
      choices.push_back(std::move(reply_choice));
    }
    const json body = {{"id", id}, {"object", object}, {"created", created}, {"model", served.name},
                       {"choices", choices}, {"usage", usage_of(generated)}};
    status = 200;
    summary = summary_of(generated, per_prompt);
    http::write_all(fd, json_response(200, reshape ? reshape(body) : body));
    return;
  }
  // Events: a chunk per piece of text of a choice (with the logprobs of its tokens generated since its
  // chunk before, when asked), then each choice's chunk with its finish reason (and the logprobs of tokens
  // whose text a stop string held back), the last with the usage, then [DONE].
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  std::vector<std::optional<ReplyLogprobs>> logprobs(n);
  std::vector<GenerateRequest> generations;
  for (uint32_t i = 0; i < n; ++i) {
    generations.push_back(request_of(i));
    generations[i].prompt_logprobs = 0;  // an echoed prompt's scores come first, from a run of their own below
    if (!parsed.logprobs) continue;
    logprobs[i].emplace(chat, parsed.top_logprobs, parsed.prompts[i / per_prompt], text_of);
    generations[i].on_probabilities = [&logprobs, i](const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable) {
      logprobs[i]->add(chosen, most_probable);
    };
  }
  auto chunk = [&](uint32_t i, const json& content, const json& finish_reason) {
    json body{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", served.name},
              {"choices", {choice(i, content, finish_reason, true)}}};
    if (parsed.include_usage) body["usage"] = nullptr;  // the usage comes in a chunk of its own
    return body;
  };
  // Only where choice i's generation is (or has ended): the writers' threads never touch `logprobs`.
  auto with_logprobs = [&](uint32_t i, json body) {
    if (logprobs[i] && logprobs[i]->has_pending()) body["choices"][0]["logprobs"] = logprobs[i]->take();
    return body;
  };
  auto event = [&](const json& body) {
    return responses_stream ? responses_stream->events(body) : http::event(body.dump(-1, ' ', false, json::error_handler_t::replace));
  };
  auto send = [&](const json& body) { return http::write_all(fd, event(body)); };
  // The head goes with the first piece of text: a request refused before it (a prompt the engine refuses, a
  // server stopping) is answered with its own status, not a stream. The choices' writer threads share the
  // socket: one event at a time, under `writing`.
  std::mutex writing;
  bool head_sent = false, open = true;
  std::vector<std::string> heads;  // each chat choice's first chunk, made before any piece of it (a Responses stream numbers its events)
  for (uint32_t i = 0; chat && i < n; ++i) heads.push_back(event(chunk(i, readers[i].head(), nullptr)));
  auto send_head = [&] {
    if (head_sent) return;
    head_sent = true;
    status = 200;
    open = http::write_all(fd, http::event_stream_head());
    for (size_t i = 0; open && i < heads.size(); ++i) open = http::write_all(fd, heads[i]);
  };
  try {
    std::vector<StreamedReply> streamed;
    for (uint32_t i = 0; i < n; ++i)
      streamed.push_back(StreamedReply{
          [&, i](const std::string& piece) {
            const json delta = chat ? without_thinking(readers[i].delta(piece)) : json(piece);
            if (chat ? delta.empty() : piece.empty()) return std::string();  // held back: its logprobs go with a later chunk
            return event(with_logprobs(i, chunk(i, delta, nullptr)));
          },
          [&](const std::string& piece_event) {
            std::lock_guard<std::mutex> lock(writing);
            send_head();
            return open = open && http::write_all(fd, piece_event);
          }});
    // With echo, a choice's first chunk is its prompt's text, with the prompt's scores when logprobs are
    // asked for: those come from a run that scores the prompt and generates nothing (its cache then holds
    // the prompt, which the generation reuses), so they lead the choice's entries as they lead a whole reply's.
    auto echo_first = [&](uint32_t i) {
      if (logprobs[i]) {
        GenerateRequest scoring = request_of(i);
        scoring.max_new_tokens = 0;
        logprobs[i]->add_prompt(generate(served, fd, scoring, {}, nullptr, ReplyFormat{}, nullptr, nullptr).result);
      }
      streamed[i].write(streamed[i].event(echoed[i / per_prompt]));
    };
    const std::vector<Generated> generated = run_choices(n, served.batcher != nullptr, [&](uint32_t i) {
      if (parsed.echo) echo_first(i);
      return generate(served, fd, generations[i], parsed.stops, &streamed[i], parsed.reply_format, thinking, markers);
    });
    send_head();  // every writer has finished: no lock is needed from here
    for (const Generated& g : generated) open = open && !g.stream_broken;  // a reply with a gap must not end as if whole
    for (uint32_t i = 0; open && i < n; ++i) {
      std::string finish_reason = openai_finish_reason(generated[i]);
      if (responses_stream) responses_stream->ending(finish_reason);  // before the held deltas it closes items with
      if (chat)  // what the reader held back: thinking and text that began no call, then the calls whole
        for (const json& delta : readers[i].finish(finish_reason))
          if (const json shown = without_thinking(delta); !shown.empty()) open = open && send(chunk(i, shown, nullptr));
      if (!open) break;
      json last = with_logprobs(i, chunk(i, chat ? json::object() : json(""), finish_reason));
      if (i + 1 == n && !parsed.include_usage) last["usage"] = usage_of(generated);
      open = send(last);
    }
    if (open && parsed.include_usage)  // OpenAI's stream_options.include_usage: the usage alone, no choices
      open = send(json{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", served.name},
                       {"choices", json::array()}, {"usage", usage_of(generated)}});
    if (open) open = http::write_all(fd, responses_stream ? responses_stream->finish() : http::event("[DONE]"));
    summary = summary_of(generated, per_prompt) + ", streamed" + (open ? "" : ", client gone");
  } catch (const http::Error& e) {  // a later choice refused its turn (the server stopping) after the head
    if (!head_sent) throw;
    status = e.status;
    send(error_body(status, e.message));
    summary = "streamed, then failed: " + e.message;
  } catch (const std::exception& e) {
    if (!head_sent) throw;  // answered as any refusal
    const bool refused = dynamic_cast<const InputError*>(&e) != nullptr;  // else a device, transport or internal fault
    status = refused ? 400 : 500;
    send(error_body(status, e.what()));  // the head is out: the error goes as an event
    summary = std::string("streamed, then failed: ") + e.what();
    if (is_engine_fault(e)) engine_failed(served, e);
  }
}

// --api-key: the request's "Authorization: Bearer KEY" must hold the key, compared in time that does not
// depend on where the two first differ.
void check_api_key(const Served& served, const http::Request& request) {
  if (served.api_key.empty()) return;
  const auto header = request.headers.find("authorization");
  const std::string given = header == request.headers.end() ? "" : header->second;
  const std::string expected = "Bearer " + served.api_key;
  unsigned char differ = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) differ |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
  if (differ != 0)
    throw http::Error{401, header == request.headers.end() ? "no API key: send \"Authorization: Bearer <key>\" (the server's --api-key)"
                                                            : "the API key is not the server's (--api-key)"};
}

void handle_connection(Served& served, int fd) {
  int status = 500;
  std::string summary, what = "?", path;
  std::chrono::steady_clock::time_point read_at;
  try {
    const http::Request request = http::read_request(fd, served.max_body, served.io_timeout_ms, stopping);
    read_at = std::chrono::steady_clock::now();
    what = request.method + " " + request.target;
    path = request.target;
    const bool tokenizing = request.target == "/tokenize" || request.target == "/detokenize";  // vLLM's paths
    const bool posted = tokenizing || request.target == "/v1/completions" || request.target == "/v1/chat/completions" ||
                        request.target == "/v1/responses";
    const bool one_model = request.target.rfind("/v1/models/", 0) == 0;  // OpenAI's retrieve: GET /v1/models/ID
    const bool listing = request.target == "/v1/models" || one_model || request.target == "/health" || request.target == "/metrics";
    if (!posted && !listing) throw http::Error{404, "no such path: " + request.target};
    if (request.method != (posted ? "POST" : "GET"))
      throw http::Error{405, request.target + " takes " + (posted ? "POST" : "GET") + ", not " + request.method};
    if (tokenizing || request.target.rfind("/v1/", 0) == 0) check_api_key(served, request);
    if (request.target == "/health") {
      const std::string failure = served.failure();
      status = failure.empty() ? 200 : 503;
      http::write_all(fd, json_response(status, failure.empty() ? json{{"status", "ok"}} : json{{"status", "failed"}, {"error", failure}}));
    } else if (request.target == "/metrics") {
      status = 200;
      http::write_all(fd, http::response(200, "text/plain; version=0.0.4; charset=utf-8", served.metrics.render()));
    } else if (request.target == "/v1/models" || one_model) {
      const json model = {{"id", served.name}, {"object", "model"}, {"created", 0}, {"owned_by", "tilefire"},
                          {"max_model_len", served.engine->model().max_context}};
      const std::string asked = one_model ? request.target.substr(std::string("/v1/models/").size()) : "";
      if (one_model && asked != served.name) throw http::Error{404, "no model '" + asked.substr(0, 200) + "': this server has '" + served.name + "'"};
      status = 200;
      http::write_all(fd, json_response(200, one_model ? model : json{{"object", "list"}, {"data", {model}}}));
    } else if (tokenizing) {  // the tokenizer alone: no turn on the engine
      const json reply = request.target == "/tokenize" ? tokenize_reply(request.body, served.tokenizer.get(), served.chat_template.get(),
                                                                        served.engine->model(), served.tool_call_parser)
                                                       : detokenize_reply(request.body, served.tokenizer.get(), served.engine->model());
      status = 200;
      http::write_all(fd, json_response(200, reply));
    } else if (request.target == "/v1/responses") {  // a chat, asked and answered in the Responses' shapes
      const json responses_request = parse_body(request.body);
      ResponsesStream responses_stream(responses_request);
      try {
        serve_generation(served, fd, chat_body_of_responses_request(responses_request).dump(), true, status, summary,
                         [&](const json& chat_reply) { return response_of_chat_completion(chat_reply, responses_request); }, &responses_stream);
      } catch (const InputError& e) {  // refused before any reply: named as the Responses API names the field
        throw InputError(responses_field_names(e.what()));
      }
    } else {
      serve_generation(served, fd, request.body, request.target == "/v1/chat/completions", status, summary);
    }
  } catch (const http::Error& e) {
    status = e.status;
    // A request read while the server stops says why it stops (http.cpp knows only that it does).
    summary = e.status == 503 && stopping.load() ? stopping_reason(served) : e.message;
    http::write_all(fd, json_response(e.status, error_body(e.status, summary)));
  } catch (const InputError& e) {
    status = 400;
    summary = e.what();
    http::write_all(fd, json_response(400, error_body(400, e.what())));
  } catch (const std::exception& e) {  // a device or transport fault (the server then stops), or one of ours
    status = 500;
    summary = e.what();
    http::write_all(fd, json_response(500, error_body(500, e.what())));
    if (is_engine_fault(e)) engine_failed(served, e);
  }
  const double seconds = read_at == std::chrono::steady_clock::time_point{}
                            ? 0.0
                            : std::chrono::duration<double>(std::chrono::steady_clock::now() - read_at).count();
  served.metrics.request_ended(path, status, seconds);
  log_line(served, what + " " + std::to_string(status) + (summary.empty() ? "" : " (" + summary + ")"));
}

}  // namespace

int serve_command(int argc, char** argv) {
  std::vector<std::string> switches{"--help", "--separate-prefill"}, valued{"--host", "--port", "--chat-template", "--served-model-name", "--api-key", "--max-connections", "--io-timeout-ms", "--json-whitespace",
                                                     "--tool-call-parser", "--reasoning-parser",
                                                     "--sequences", "--prefill-chunks"};
  for (const std::string& flag : engine_valued()) valued.push_back(flag);
  for (const std::string& flag : speculation_valued()) valued.push_back(flag);
  for (const std::string& flag : backend_switches()) switches.push_back(flag);
  for (const std::string& flag : backend_valued()) valued.push_back(flag);
  Args args("serve", switches, valued);
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kServeHelp, stdout);
    std::fputs(kSpeculationHelp, stdout);
    std::fputs(kBackendHelp, stdout);
    return 0;
  }
  EngineOptions options = engine_options_of_flags(args);
  options.sequences = uint32_t(args.unsigned_or("--sequences", 1, 1, 256));
  options.prefill_chunks_per_step = uint32_t(args.unsigned_or("--prefill-chunks", 1, 0, 1u << 20));
  if (args.text("--prefill-chunks") && options.sequences == 1)
    throw InputError("tilefire serve: --prefill-chunks applies to continuous batching: give --sequences N (N > 1) too");
  options.prefill_in_decode_step = !args.has("--separate-prefill");
  if (args.has("--separate-prefill") && (options.sequences == 1 || options.prefill_chunks_per_step == 0))
    throw InputError("tilefire serve: --separate-prefill applies to prompts prefilled by the steps: give --sequences N "
                     "(N > 1) and no --prefill-chunks 0");
  const Speculation speculation = speculation_of_flags(args, "tilefire serve", options);
  if (speculation.source == DraftSource::draft_model && options.sequences > 1)
    throw InputError("tilefire serve: --draft-model drafts for requests served in turn, one at a time; with --sequences " +
                     std::to_string(options.sequences) + " the drafts come by prompt lookup (--speculate K alone)");
  const std::string host = args.text_or("--host", "127.0.0.1");
  const uint16_t port = uint16_t(args.unsigned_or("--port", 8000, 0, 65535));
  const int max_connections = int(args.unsigned_or("--max-connections", 32, 1, 4096));
  const int io_timeout_ms = int(args.unsigned_or("--io-timeout-ms", 30000, 1, 3600 * 1000));
  if (options.tp > 1 && launched_as_one_of_several_ranks())
    throw InputError("tilefire serve: one rank per process (mpirun, RANK / WORLD_SIZE) is not served: requests reach rank 0 "
                     "alone; give --tp N for ranks of this process");

  Served served;
  served.speculation = speculation;
  served.json_whitespace = uint32_t(args.unsigned_or("--json-whitespace", kMostJsonWhitespace, 0, kMostJsonWhitespace));
  if (const auto parser = args.text("--tool-call-parser")) served.tool_call_parser = tool_call_parser_named(*parser);
  if (const auto parser = args.text("--reasoning-parser")) served.reasoning_parser = reasoning_parser_named(*parser);
  const char* key_variable = std::getenv("TILEFIRE_API_KEY");
  served.api_key = args.text_or("--api-key", key_variable ? key_variable : "");
  for (char c : served.api_key)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      throw InputError("tilefire serve: the API key (--api-key or TILEFIRE_API_KEY) holds a space or control character, which "
                       "an Authorization header cannot carry");
  served.tokenizer = Tokenizer::of_model_folder(options.model_dir);
  if (!served.tokenizer && !options.model_dir.empty()) {
    const std::string other = unread_tokenizer_file(options.model_dir);
    if (!other.empty())
      throw InputError("tilefire serve: " + other + " is this model's tokenizer, and the folder has no tokenizer.json, the only "
                       "tokenizer file Tilefire reads: the server could not read prompts or write replies as text");
  }
  if (const auto path = args.text("--chat-template")) {
    try {
      served.chat_template = ChatTemplate::of_file(*path, options.model_dir);
    } catch (const InputError& error) {  // the file's own errors start with its path: they get the flag too
      const std::string message = error.what();
      if (message.rfind(*path + ": ", 0) == 0) throw InputError("tilefire serve: --chat-template: " + message);
      throw;
    }
  }
  else if (!options.model_dir.empty()) served.chat_template = ChatTemplate::of_model_folder(options.model_dir);
  if (served.chat_template && served.tokenizer) served.end_of_reply = served.chat_template->end_of_reply_tokens(*served.tokenizer);
  if (served.tokenizer) {
    served.thinking = thinking_tokens(*served.tokenizer, served.reasoning_parser);
    served.call_markers = special_call_markers(*served.tokenizer, served.tool_call_parser);
  }
  http::Listener listener(host, port);  // before the model loads: a port in use is refused at once
  served.engine = std::make_unique<Engine>(options);
  served.json_tokens = std::make_shared<const TokenTrie>(vocabulary_bytes(served.tokenizer.get(), served.engine->model().vocab));
  if (options.sequences > 1)
    served.batcher = std::make_unique<Batcher>(*served.engine, options.sequences, [&served] {
      // A request that waited for a free sequence while the server began stopping.
      return stopping.load() ? std::make_exception_ptr(http::Error{503, stopping_reason(served)}) : std::exception_ptr();
    });
  // A request's body: 64 bytes per context position (a prompt of token ids, or of text, with room for
  // JSON's own), at least 1 MiB. A parsed body takes about 30 times its size, so this bounds that too.
  served.max_body = std::max<size_t>(1u << 20, size_t(64) * served.engine->model().max_context);
  served.io_timeout_ms = io_timeout_ms;
  served.name = options.model_dir.empty() ? "tiny" : std::filesystem::path(options.model_dir).lexically_normal().filename().string();
  if (served.name.empty()) served.name = std::filesystem::path(options.model_dir).lexically_normal().parent_path().filename().string();
  if (const auto name = args.text("--served-model-name")) {
    if (name->empty() || name->find_first_of(" \t\r\n/") != std::string::npos)
      throw InputError("--served-model-name must be a name without spaces or '/', got '" + *name + "'");
    served.name = *name;
  }

  struct sigaction action{};
  action.sa_handler = stop_serving;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::printf("tilefire serve: %s (%s, %u layers, %u threads), listening on http://%s:%u\n", served.name.c_str(),
              served.engine->model().architecture.c_str(), served.engine->model().layers, served.engine->threads(), host.c_str(),
              unsigned(listener.port()));
  std::fflush(stdout);

  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Worker> workers;
  auto join_finished = [&](bool all) {
    for (auto it = workers.begin(); it != workers.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (!stopping.load()) {
    const int fd = listener.accept_connection(100, io_timeout_ms);
    join_finished(false);
    if (fd < 0) continue;
    auto refuse = [&](const std::string& why) {
      http::write_all(fd, json_response(503, error_body(503, why + ": try again")));
      ::close(fd);
      log_line(served, "a connection refused: " + why);
    };
    if (int(workers.size()) >= max_connections) {
      refuse("the server has " + std::to_string(max_connections) + " requests in hand (--max-connections)");
      continue;
    }
    Worker& worker = workers.emplace_back();  // the list's node first: a thread is never left unjoined
    worker.done = std::make_shared<std::atomic<bool>>(false);
    try {
      worker.thread = std::thread([&served, fd, done = worker.done] {
        handle_connection(served, fd);
        ::close(fd);
        done->store(true);
      });
    } catch (const std::system_error& e) {
      workers.pop_back();
      refuse(std::string("no thread for it (") + e.what() + ")");
    }
  }
  join_finished(true);
  log_line(served, served.batcher ? "stopped (at most " + std::to_string(served.batcher->widest_step()) + " sequences per step)" : "stopped");
  return served.failure().empty() ? 0 : 3;  // 3: a device or transport fault, as the other commands exit
}

}  // namespace tilefire::cli
