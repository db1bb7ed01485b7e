// GET /metrics of `tilefire serve` (serve_metrics.h).
#include "serve_metrics.h"

#include <cstdio>
#include <cstdlib>

namespace tilefire::cli {

namespace {

// The shortest decimal that reads back as `value` (0.0025, not 0.0025000000000000001), as Prometheus's
// own clients write numbers.
std::string number(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void ServeMetrics::Histogram::observe(double seconds) {
  size_t bucket = 0;
  while (bucket < kBucketSeconds.size() && seconds > kBucketSeconds[bucket]) ++bucket;
  ++counts[bucket];
  sum += seconds;
  ++count;
}

void ServeMetrics::request_ended(const std::string& path, int status, double seconds) {
  const bool generation = path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses";
  const bool known = generation || path == "/v1/models" || path == "/tokenize" || path == "/detokenize" || path == "/health" || path == "/metrics";
  // A model's own path is counted under one label: the names asked for are the clients', unbounded.
  const std::string label = known ? path : path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{model}" : "other";
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{label, status}];
  if (generation) generation_request_.observe(seconds);
}

void ServeMetrics::generation_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++in_flight_;
}

void ServeMetrics::generation_ended(const GenerateResult& result) {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
  prompt_tokens_ += result.prompt_tokens.size();
  reused_prompt_tokens_ += result.reused_tokens;
  generation_tokens_ += result.tokens.size();
  draft_tokens_ += result.draft_tokens;
  accepted_tokens_ += result.accepted_tokens;
  ++finished_[result.finish_reason];
  if (!result.tokens.empty()) ttft_.observe(result.ttft_ms * 1e-3);
  if (result.tokens.size() > 1) tpot_.observe(result.tpot_ms * 1e-3);  // one token has no time between tokens
}

void ServeMetrics::generation_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
}

std::string ServeMetrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  header(out, "tilefire_http_requests_total", "counter", "Requests answered, by path and HTTP status.");
  for (const auto& [key, count] : requests_)
    out += "tilefire_http_requests_total{path=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  header(out, "tilefire_prompt_tokens_total", "counter", "Prompt tokens of the generations that ran.");
  out += "tilefire_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  header(out, "tilefire_reused_prompt_tokens_total", "counter",
         "Prompt tokens not prefilled: the KV cache held them, or they were copied from another sequence's slot.");
  out += "tilefire_reused_prompt_tokens_total " + std::to_string(reused_prompt_tokens_) + "\n";
  header(out, "tilefire_generation_tokens_total", "counter", "Tokens generated.");
  out += "tilefire_generation_tokens_total " + std::to_string(generation_tokens_) + "\n";
  header(out, "tilefire_draft_tokens_total", "counter", "Tokens proposed by speculative decoding (--speculate).");
  out += "tilefire_draft_tokens_total " + std::to_string(draft_tokens_) + "\n";
  header(out, "tilefire_accepted_draft_tokens_total", "counter", "Proposed tokens the model's own choice agreed with.");
  out += "tilefire_accepted_draft_tokens_total " + std::to_string(accepted_tokens_) + "\n";
  header(out, "tilefire_generations_finished_total", "counter",
         "Generations that ran, by finish reason (eos, stopped, length, context).");
  for (const auto& [reason, count] : finished_)
    out += "tilefire_generations_finished_total{reason=\"" + reason + "\"} " + std::to_string(count) + "\n";
  header(out, "tilefire_generations_in_flight", "gauge", "Generation requests waiting for the engine or running.");
  out += "tilefire_generations_in_flight " + std::to_string(in_flight_) + "\n";
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h.counts.size(); ++b) {
      cumulative += h.counts[b];
      const std::string le = b < kBucketSeconds.size() ? number(kBucketSeconds[b]) : "+Inf";
      out += std::string(name) + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += std::string(name) + "_sum " + number(h.sum) + "\n";
    out += std::string(name) + "_count " + std::to_string(h.count) + "\n";
  };
  histogram("tilefire_time_to_first_token_seconds", "From a generation's start on the engine to its first token.", ttft_);
  histogram("tilefire_time_per_output_token_seconds", "Mean time between a generation's tokens after the first.", tpot_);
  histogram("tilefire_generation_request_seconds", "A generation request from being read to being answered, waiting included.",
            generation_request_);
  return out;
}

}  // namespace tilefire::cli
