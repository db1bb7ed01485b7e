#include "serve_state.h"

#include <cstdio>

#include "http.h"
#include "tilefire/errors.h"

namespace tilefire::cli {

using nlohmann::json;

std::atomic<bool> stopping{false};

void log_line(Served& served, const std::string& line) {
  // A control character (a client's text in a message: a model's name, a field's value) is written as
  // \xHH, so that each entry is one line and none can pass for another.
  std::string shown;
  shown.reserve(line.size());
  for (const char c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      shown.push_back(c);
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    shown += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
  }
  std::lock_guard<std::mutex> lock(served.log_mutex);
  std::fprintf(stderr, "tilefire serve: %s\n", shown.c_str());
}

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
std::string stopping_reason(Served& served) {
  const std::string failure = served.failure();
  return failure.empty() ? "the server is stopping" : "the server is stopping: its engine failed (" + failure + ")";
}

json error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
  return {{"error", {{"message", message}, {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                     {"param", param.empty() ? json(nullptr) : json(param)}, {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string json_response(int status, const json& body) {
  return http::response(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace tilefire::cli
