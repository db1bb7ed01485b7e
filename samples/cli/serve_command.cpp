// tilefire serve: the engine behind an HTTP server that speaks the OpenAI completions and chat completions
// APIs (what most clients and SDKs send), on one address of this machine: its flags, its routes
// (handle_connection), its start and its stop; a generation's request is serve_generation.h's. By default
// requests take turns on the engine, each keeping what the KV cache holds of its prompt's beginning, so a
// chat's next turn prefills only what is new; with --sequences N they decode together (serve_batcher.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "commands.h"
#include "http.h"
#include "model_folder.h"
#include "serve_batcher.h"
#include "serve_metrics.h"
#include "sampling_flags.h"
#include "serve_requests.h"
#include "serve_generation.h"
#include "serve_state.h"
#include "serve_responses.h"
#include "serve_tokenize.h"
#include "serve_thinking_first.h"
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
                         for the built-in sample); GET /v1/models/N answers it. A request whose "model"
                         names another is answered 404, as vLLM does (none, or "": this one)
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

extern "C" void stop_serving(int) { stopping.store(true); }

// The 404 for a model this server does not have (OpenAI's code for it, which clients read).
[[noreturn]] void refuse_unknown_model(const Served& served, const std::string& asked) {
  throw http::Error{404, "no model '" + asked.substr(0, 200) + "': this server has '" + served.name + "' (--served-model-name)", "model",
                    "model_not_found"};
}

// A request's "model" must name the served one, so that a client set up for another model is told, not
// answered by this one (vLLM's 404; a request without one, or with "", gets this model).
void refuse_other_model(const Served& served, const json& body) {
  if (!body.contains("model") || body.at("model").is_null()) return;
  const json& model = body.at("model");
  if (!model.is_string()) refuse_field("model", "must be the served model's id, a string, got " + model.dump().substr(0, 200));
  const std::string& asked = model.get_ref<const std::string&>();
  if (!asked.empty() && asked != served.name) refuse_unknown_model(served, asked);
}

// A path segment with its %XX escapes decoded (a client's SDK escapes the '/' of "org/name"); a '%'
// not followed by two hex digits stays as it is.
std::string percent_decoded(const std::string& segment) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  std::string decoded;
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size() && hex(segment[i + 1]) >= 0 && hex(segment[i + 2]) >= 0) {
      decoded.push_back(static_cast<char>(hex(segment[i + 1]) * 16 + hex(segment[i + 2])));
      i += 2;
    } else {
      decoded.push_back(segment[i]);
    }
  }
  return decoded;
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
      const std::string asked = one_model ? percent_decoded(request.target.substr(std::string("/v1/models/").size())) : "";
      if (one_model && asked != served.name) refuse_unknown_model(served, asked);
      status = 200;
      http::write_all(fd, json_response(200, one_model ? model : json{{"object", "list"}, {"data", {model}}}));
    } else {
      json body = parse_body(request.body);
      refuse_other_model(served, body);  // before the other fields are read (vLLM checks their types first)
      if (tokenizing) {  // the tokenizer alone: no turn on the engine
        const json reply = request.target == "/tokenize" ? tokenize_reply(body, served.tokenizer.get(), served.chat_template.get(),
                                                                          served.engine->model(), served.tool_call_parser)
                                                         : detokenize_reply(body, served.tokenizer.get(), served.engine->model());
        status = 200;
        http::write_all(fd, json_response(200, reply));
      } else if (request.target == "/v1/responses") {  // a chat, asked and answered in the Responses' shapes
        // What the Response repeats of the request is kept; the rest goes to the chat and is freed once read.
        const json echoed = responses_echoed_fields(body);
        ResponsesStream responses_stream(echoed);
        try {
          json chat_body = chat_body_of_responses_request(body);
          body = json();
          serve_generation(served, fd, std::move(chat_body), true, status, summary,
                           [&](const json& chat_reply) { return response_of_chat_completion(chat_reply, echoed); }, &responses_stream);
        } catch (const InputError& e) {  // refused before any reply: named as the Responses API names the field
          throw InputError(responses_field_names(e.what()));
        }
      } else {
        serve_generation(served, fd, std::move(body), request.target == "/v1/chat/completions", status, summary);
      }
    }
  } catch (const http::Error& e) {
    status = e.status;
    // A request read while the server stops says why it stops (http.cpp knows only that it does).
    summary = e.status == 503 && stopping.load() ? stopping_reason(served) : e.message;
    http::write_all(fd, json_response(e.status, error_body(e.status, summary, e.param, e.code)));
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
    // A token the text leaves out (its bytes "") that the vocabulary spells is a special one.
    const std::vector<std::string> bytes = served.tokenizer->token_bytes();
    for (int32_t id = 0; id < int32_t(bytes.size()); ++id)
      if (bytes[size_t(id)].empty())
        if (std::string text = served.tokenizer->token_string(id); !text.empty()) served.special_texts.emplace(id, std::move(text));
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
  // The folder's own name, "." and "dir/" included (a request naming it is answered).
  if (options.model_dir.empty()) {
    served.name = "tiny";
  } else {
    const std::filesystem::path folder = std::filesystem::absolute(options.model_dir).lexically_normal();
    served.name = folder.has_filename() ? folder.filename().string() : folder.parent_path().filename().string();
    if (served.name.empty()) served.name = "model";  // the root directory
  }
  if (const auto name = args.text("--served-model-name")) {
    // "org/name" as a Hugging Face id (vLLM's default) too; GET /v1/models/ID takes it escaped or not.
    if (name->empty() || std::any_of(name->begin(), name->end(), [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; }))
      throw InputError("--served-model-name must be a name without spaces or control characters, got '" + *name + "'");
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
