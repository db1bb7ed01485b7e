#pragma once
// One request of `tilefire serve` that generates: POST /v1/completions and /v1/chat/completions (and
// /v1/responses through them): the request read, each of its choices generated on the engine (in turn, or
// together with --sequences), and the reply written whole or as server-sent events.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve_responses.h"
#include "serve_state.h"

namespace tilefire::cli {

// POST /v1/completions and /v1/chat/completions: reads `request_body` (parse_body's; freed once read),
// generates (each of "n" choices), answers (whole or as events). For /v1/responses, a whole reply's body goes through `reshape`, and a stream's
// chunks through `responses_stream`.
void serve_generation(Served& served, int fd, nlohmann::json request_body, bool chat, int& status, std::string& summary,
                      const std::function<nlohmann::json(const nlohmann::json&)>& reshape = nullptr,
                      ResponsesStream* responses_stream = nullptr);

}  // namespace tilefire::cli
