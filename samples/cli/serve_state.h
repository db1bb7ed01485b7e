#pragma once
// What every request of `tilefire serve` reads (the engine, the text tools, the flags' settings) and the
// server's shared ways of logging, failing and answering with an error.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reply_format.h"
#include "serve_batcher.h"
#include "serve_metrics.h"
#include "serve_reasoning.h"
#include "serve_thinking_first.h"
#include "serve_tools.h"
#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

// Set by SIGINT, SIGTERM or an engine fault: the server stops taking requests and ends those in flight.
extern std::atomic<bool> stopping;

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
  std::map<int32_t, std::string> special_texts;  // every special token's text, for skip_special_tokens false

  std::string failure() {
    std::lock_guard<std::mutex> lock(failure_mutex);
    return engine_failure;
  }
};

void log_line(Served& served, const std::string& line);
// A device or transport fault (DeviceError, TransportError) leaves the engine refusing every later step
// (errors.h), so the server stops as on SIGTERM and exits with status 3, for a supervisor to restart it;
// until it is down, /health answers 503 naming the fault and a request still waiting gets 503.
bool is_engine_fault(const std::exception& e);
void engine_failed(Served& served, const std::exception& e);
// What a request refused while the server stops is told.
std::string stopping_reason(Served& served);
// OpenAI's error object (`param` and `code` null where empty), and a whole JSON response.
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "", const std::string& code = "");
std::string json_response(int status, const nlohmann::json& body);

}  // namespace tilefire::cli
