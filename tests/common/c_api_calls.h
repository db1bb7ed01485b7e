#pragma once
// The C API's tests (c_api_test, c_api_batch_test): an engine through it, and its hand-outs taken back.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tilefire/engine.h"
#include "tilefire/tilefire.h"

namespace tilefire::testing {

// The built-in sample (or `model_dir`) through the C API, `sequences` of them at once; the test fails on
// any status but TILEFIRE_OK.
struct CEngine {
  tilefire_engine* engine = nullptr;
  explicit CEngine(uint32_t threads = 2, const char* model_dir = nullptr, uint32_t sequences = 1) {
    tilefire_engine_options options;
    tilefire_engine_options_init(&options);
    options.threads = threads;
    options.model_dir = model_dir;
    options.sequences = sequences;
    EXPECT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  }
  ~CEngine() { tilefire_engine_free(engine); }
  CEngine(const CEngine&) = delete;
  CEngine& operator=(const CEngine&) = delete;
};

inline Engine cpp_sample(uint32_t threads = 2) {
  EngineOptions options;
  options.threads = threads;
  return Engine(options);
}

inline std::string text_and_free(char* text, size_t length) {
  std::string copy(text, length);
  EXPECT_EQ(text[length], '\0') << "handed-out text ends with a NUL";
  tilefire_free(text);
  return copy;
}

inline std::vector<int32_t> tokens_and_free(int32_t* tokens, size_t count) {
  std::vector<int32_t> copy(tokens, tokens + count);
  tilefire_free(tokens);
  return copy;
}

// A result struct ready for tilefire_generate: zeroed, its struct_size set.
inline tilefire_generate_result empty_result() {
  tilefire_generate_result result{};
  result.struct_size = sizeof result;
  return result;
}

// A failing call: its status, and a message holding `expected`.
inline void expect_refused(tilefire_status status, tilefire_status expected_status, const std::string& expected) {
  EXPECT_EQ(status, expected_status) << tilefire_status_name(status) << ": " << tilefire_last_error();
  EXPECT_NE(std::string(tilefire_last_error()).find(expected), std::string::npos)
      << "expected '" << expected << "' in: " << tilefire_last_error();
}

}  // namespace tilefire::testing
