// The C API (tilefire/tilefire.h, libtilefire.so) against the C++ API it wraps: the same tokens, logits,
// logprobs and text for the same calls; every refusal a status with a message naming the argument, the
// outputs left as they were; the library exporting the C API and nothing else.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/common/c_api_calls.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"
#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/tilefire.h"
#include "tilefire/tokenizer.h"

// tests/megakernel/c_api_from_c.c
extern "C" int c_api_generate_from_c(const int32_t* prompt, size_t prompt_count, uint32_t max_new_tokens,
                                     size_t stop_after, int32_t* tokens, size_t capacity, size_t* count,
                                     int32_t* next_token, char* finish_reason, size_t finish_capacity, char* error,
                                     size_t error_capacity);
extern "C" void c_api_struct_sizes_in_c(size_t sizes[7]);

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;


TEST(CApi, GenerateGivesTheCppEnginesTokensLogprobsAndFinishReason) {
  CEngine c;
  ASSERT_NE(c.engine, nullptr);
  Engine cpp = cpp_sample();
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  for (float temperature : {0.0f, 0.8f}) {
    tilefire_generate_request request;
    tilefire_generate_request_init(&request);
    request.prompt = prompt.data();
    request.prompt_count = prompt.size();
    request.max_new_tokens = 12;
    request.temperature = temperature;
    request.top_k = 40;
    request.top_p = 0.9f;
    request.seed = 7;
    request.logprobs = 3;
    const tilefire_logit_bias bias[] = {{77, 3.0f}, {80, -100.0f}};
    request.logit_bias = bias;
    request.logit_bias_count = 2;
    request.min_p = 0.01f;
    request.repetition_penalty = 1.2f;
    request.presence_penalty = -0.5f;
    request.frequency_penalty = 0.3f;
    request.min_new_tokens = 2;
    // Each token's probabilities as it is chosen: what the result then holds.
    struct Streamed {
      std::vector<tilefire_token_probability> chosen;
      std::vector<uint32_t> counts;
    } streamed;
    request.user_data = &streamed;
    request.on_probabilities = [](void* user_data, const tilefire_token_probability* chosen, const tilefire_token_probability*,
                                  uint32_t count) {
      static_cast<Streamed*>(user_data)->chosen.push_back(*chosen);
      static_cast<Streamed*>(user_data)->counts.push_back(count);
    };
    tilefire_generate_result result = empty_result();
    ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_STREQ(tilefire_last_error(), "");
    ASSERT_EQ(streamed.chosen.size(), result.token_count);
    for (size_t i = 0; i < result.token_count; ++i) {
      EXPECT_EQ(streamed.chosen[i].token, result.tokens[i]) << "position " << i;
      EXPECT_EQ(streamed.chosen[i].logprob, result.token_probabilities[i].logprob) << "position " << i;
      EXPECT_EQ(streamed.counts[i], 3u);
    }

    GenerateRequest expected_request;
    expected_request.prompt = prompt;
    expected_request.max_new_tokens = 12;
    expected_request.sampling = Sampling{.temperature = temperature, .top_k = 40, .top_p = 0.9f, .seed = 7, .min_p = 0.01f,
                                         .logit_bias = {{77, 3.0f}, {80, -100.0f}}, .repetition_penalty = 1.2f,
                                         .presence_penalty = -0.5f, .frequency_penalty = 0.3f};
    expected_request.logprobs = 3;
    expected_request.min_new_tokens = 2;
    const GenerateResult expected = cpp.generate(expected_request);

    ASSERT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), expected.tokens) << temperature;
    EXPECT_STREQ(result.finish_reason, expected.finish_reason.c_str());
    ASSERT_EQ(result.logprobs_per_token, 3u);
    for (size_t i = 0; i < result.token_count; ++i)
      for (size_t k = 0; k < 3; ++k) {
        const tilefire_token_probability& got = result.logprobs[i * 3 + k];
        EXPECT_EQ(got.token, expected.logprobs[i][k].token) << "position " << i << " rank " << k;
        EXPECT_EQ(got.probability, expected.logprobs[i][k].probability) << "position " << i << " rank " << k;
        EXPECT_EQ(got.logprob, expected.logprobs[i][k].logprob) << "position " << i << " rank " << k;
      }
    ASSERT_NE(result.token_probabilities, nullptr);
    for (size_t i = 0; i < result.token_count; ++i) {
      EXPECT_EQ(result.token_probabilities[i].token, result.tokens[i]) << "position " << i;
      EXPECT_EQ(result.token_probabilities[i].logprob, expected.token_probabilities[i].logprob) << "position " << i;
    }
    EXPECT_EQ(result.tasks_per_step, expected.tasks_per_step);
    EXPECT_EQ(result.events_per_step, expected.events_per_step);
    EXPECT_EQ(tilefire_engine_position(c.engine), cpp.position());
    tilefire_generate_result_free(&result);
    EXPECT_EQ(result.tokens, nullptr);
    EXPECT_EQ(result.token_count, 0u);
    EXPECT_EQ(result.struct_size, sizeof result) << "kept for the next call";
  }
  // A later turn that reuses the cached prompt.
  std::vector<int32_t> longer = cpp.sequence();
  longer.push_back(33);
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  request.prompt = longer.data();
  request.prompt_count = longer.size();
  request.max_new_tokens = 3;
  request.reuse_prefix = 1;
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  GenerateRequest expected_request;
  expected_request.prompt = longer;
  expected_request.max_new_tokens = 3;
  expected_request.reuse_prefix = true;
  const GenerateResult expected = cpp.generate(expected_request);
  EXPECT_EQ(result.reused_tokens, expected.reused_tokens);
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), expected.tokens);
  EXPECT_EQ(result.prompt_scored, 0u);
  EXPECT_EQ(result.prompt_logprobs, nullptr) << "not asked for";
  tilefire_generate_result_free(&result);

  // The prompt scored alone (max_new_tokens 0): its tokens' probabilities and the 2 most probable.
  request.max_new_tokens = 0;
  request.prompt_logprobs = 2;
  ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  expected_request.max_new_tokens = 0;
  expected_request.prompt_logprobs = 2;
  const GenerateResult scored = cpp.generate(expected_request);
  EXPECT_EQ(result.token_count, 0u);
  ASSERT_EQ(result.prompt_scored, longer.size() - 1);
  ASSERT_EQ(result.prompt_logprobs_per_token, 2u);
  for (size_t i = 0; i < result.prompt_scored; ++i) {
    EXPECT_EQ(result.prompt_token_probabilities[i].token, longer[i + 1]);
    EXPECT_EQ(result.prompt_token_probabilities[i].logprob, scored.prompt_token_probabilities[i].logprob) << "prompt token " << i + 1;
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(result.prompt_logprobs[i * 2 + k].token, scored.prompt_logprobs[i][k].token) << "prompt token " << i + 1;
  }
  tilefire_generate_result_free(&result);
  EXPECT_EQ(result.prompt_logprobs, nullptr);

  // Speculation: the C++ engine's reply and counts (the sample's reply to this prompt loops: drafts are taken).
  tilefire_generate_request_init(&request);
  EXPECT_EQ(std::vector<uint32_t>({request.speculate_draft_tokens, request.speculate_max_ngram, request.speculate_min_ngram}),
            std::vector<uint32_t>({0, 3, 2}));
  GenerateRequest speculating;
  speculating.prompt = byte_tokens("Once upon a time");
  speculating.max_new_tokens = 30;
  speculating.speculation = {5, 4, 2};
  request.prompt = speculating.prompt.data();
  request.prompt_count = speculating.prompt.size();
  request.max_new_tokens = 30;
  request.speculate_draft_tokens = 5;
  request.speculate_max_ngram = 4;
  request.speculate_min_ngram = 2;
  ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  const GenerateResult speculated = cpp.generate(speculating);
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), speculated.tokens);
  EXPECT_EQ(std::vector<uint32_t>({result.draft_tokens, result.accepted_tokens, result.decode_steps}),
            std::vector<uint32_t>({speculated.draft_tokens, speculated.accepted_tokens, speculated.decode_steps}));
  EXPECT_GT(result.accepted_tokens, 0u);
  tilefire_generate_result_free(&result);
  request.speculate_min_ngram = 5;  // above the longest
  EXPECT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT);
  EXPECT_NE(std::string(tilefire_last_error()).find("min_ngram (--speculate-min-ngram)"), std::string::npos) << tilefire_last_error();
}

// Batched decoding through the C API: tilefire_generate_batch and continuous batching give what the C++
// engine gives for the same requests (each bitwise what generate gives alone); refusals leave the
// results alone.
TEST(CApi, CAndCppSeeTheSameStructs) {
  size_t in_c[7] = {};
  c_api_struct_sizes_in_c(in_c);
  const size_t in_cpp[7] = {sizeof(tilefire_engine_options), sizeof(tilefire_generate_request), sizeof(tilefire_generate_result),
                            sizeof(tilefire_model_info),      sizeof(tilefire_token_probability), sizeof(tilefire_chat_message),
                            sizeof(tilefire_backend)};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(in_c[i], in_cpp[i]) << "struct " << i;
  EXPECT_EQ(sizeof(tilefire_backend), sizeof(int));
}

TEST(CApi, AProgramInCDrivesTheEngine) {
  const std::vector<int32_t> prompt = {10, 20, 30, 40};
  std::vector<int32_t> tokens(16);
  size_t count = 0;
  int32_t next = -1;
  char finish[16] = {}, error[512] = {};
  ASSERT_EQ(c_api_generate_from_c(prompt.data(), prompt.size(), 8, 5, tokens.data(), tokens.size(), &count, &next,
                                  finish, sizeof finish, error, sizeof error),
            0)
      << error;
  Engine cpp = cpp_sample();
  GenerateRequest request;
  request.prompt = prompt;
  request.max_new_tokens = 8;
  request.stop_at_eos = false;
  const GenerateResult full = cpp.generate(request);
  ASSERT_GE(full.tokens.size(), 6u);
  tokens.resize(count);
  EXPECT_EQ(tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 5)) << "the callback stopped it after 5";
  EXPECT_STREQ(finish, "stopped");
  EXPECT_EQ(next, full.tokens[5]) << "the step after the stopped generation continues the sequence";
}

TEST(CApi, StepApiGivesTheCppEnginesLogits) {
  CEngine c;
  ASSERT_NE(c.engine, nullptr);
  Engine cpp = cpp_sample();
  tilefire_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(tilefire_engine_model_info(c.engine, &info), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(info.vocab, cpp.model().vocab);
  EXPECT_EQ(info.layers, cpp.model().layers);
  EXPECT_EQ(info.max_context, cpp.model().max_context);
  EXPECT_STREQ(info.origin, cpp.model().origin.c_str());
  EXPECT_EQ(std::vector<int32_t>(info.eos_tokens, info.eos_tokens + info.eos_token_count), cpp.model().eos_tokens);
  EXPECT_EQ(tilefire_engine_threads(c.engine), cpp.threads());
  EXPECT_STREQ(tilefire_engine_device_name(c.engine), "cpu");
  EXPECT_EQ(tilefire_engine_decode_tasks(c.engine), cpp.decode_tasks());

  const std::vector<int32_t> prompt = {1, 2, 3, 250, 400};
  std::vector<float> logits(info.vocab);
  ASSERT_EQ(tilefire_engine_prefill(c.engine, prompt.data(), prompt.size(), logits.data(), logits.size()), TILEFIRE_OK)
      << tilefire_last_error();
  EXPECT_EQ(logits, cpp.prefill(prompt)) << "bitwise";
  ASSERT_EQ(tilefire_engine_decode(c.engine, 77, logits.data(), logits.size()), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(logits, cpp.decode(77));
  ASSERT_EQ(tilefire_engine_decode(c.engine, 78, nullptr, 0), TILEFIRE_OK) << "logits may be skipped";
  cpp.decode(78);
  int32_t next = -1;
  ASSERT_EQ(tilefire_engine_decode_greedy(c.engine, 79, &next), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(next, cpp.decode_greedy(79));

  const int32_t* sequence = nullptr;
  size_t count = 0;
  ASSERT_EQ(tilefire_engine_sequence(c.engine, &sequence, &count), TILEFIRE_OK);
  EXPECT_EQ(std::vector<int32_t>(sequence, sequence + count), cpp.sequence());
  EXPECT_EQ(tilefire_engine_position(c.engine), 8u);

  // A logits buffer too small is refused before the step runs: nothing moves, nothing is written.
  std::vector<float> small(info.vocab - 1, -7.0f);
  expect_refused(tilefire_engine_decode(c.engine, 5, small.data(), small.size()), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_decode: the logits buffer holds " + std::to_string(info.vocab - 1) + " floats, the vocabulary " +
                     std::to_string(info.vocab));
  EXPECT_EQ(tilefire_engine_position(c.engine), 8u);
  EXPECT_EQ(small, std::vector<float>(info.vocab - 1, -7.0f));
  // A token outside the vocabulary: the engine's own message.
  expect_refused(tilefire_engine_decode(c.engine, int32_t(info.vocab), nullptr, 0), TILEFIRE_ERROR_INPUT, std::to_string(info.vocab));
  EXPECT_EQ(tilefire_engine_position(c.engine), 8u);

  int can_rewind = -1;
  ASSERT_EQ(tilefire_engine_can_rewind(c.engine, 3, &can_rewind), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(can_rewind, 1);
  ASSERT_EQ(tilefire_engine_can_rewind(c.engine, 99, &can_rewind), TILEFIRE_OK);
  EXPECT_EQ(can_rewind, 0) << "past the sequence";
  expect_refused(tilefire_engine_can_rewind(c.engine, 3, nullptr), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_can_rewind: can_rewind is NULL");
  expect_refused(tilefire_engine_can_rewind(nullptr, 3, &can_rewind), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_can_rewind: engine is NULL");
  ASSERT_EQ(tilefire_engine_rewind(c.engine, 3), TILEFIRE_OK);
  cpp.rewind(3);
  ASSERT_EQ(tilefire_engine_set_schedule(c.engine, TILEFIRE_SCHEDULE_BSP), TILEFIRE_OK);
  ASSERT_EQ(tilefire_engine_decode(c.engine, 9, logits.data(), logits.size()), TILEFIRE_OK);
  EXPECT_EQ(logits, cpp.decode(9)) << "bsp after a rewind";
  expect_refused(tilefire_engine_rewind(c.engine, 99), TILEFIRE_ERROR_INPUT, "rewind: position 99 is past");
  ASSERT_EQ(tilefire_engine_reset(c.engine), TILEFIRE_OK);
  EXPECT_EQ(tilefire_engine_position(c.engine), 0u);
}

// A sliding-window model on the cpu backend with chunks of 4: its rings hold 16 rows (window 7), so after 40
// tokens position 10's window is gone. can_rewind says so, and the rewind it turns down is refused with the
// C++ engine's message; one it allows is taken.
TEST(CApi, CanRewindSaysWhetherTheSlidingWindowRingsStillHoldThePosition) {
  TempDir dir("c_api_ring");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  const std::string model_dir = dir.path().string();
  options.model_dir = model_dir.c_str();
  options.threads = 1;
  options.prefill_chunk = 4;
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % 400);
  ASSERT_EQ(tilefire_engine_prefill(engine, prompt.data(), prompt.size(), nullptr, 0), TILEFIRE_OK) << tilefire_last_error();
  int can_rewind = -1;
  ASSERT_EQ(tilefire_engine_can_rewind(engine, 10, &can_rewind), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(can_rewind, 0);
  expect_refused(tilefire_engine_rewind(engine, 10), TILEFIRE_ERROR_INPUT, "sliding-window");
  EXPECT_EQ(tilefire_engine_position(engine), 40u);
  ASSERT_EQ(tilefire_engine_can_rewind(engine, 37, &can_rewind), TILEFIRE_OK);
  EXPECT_EQ(can_rewind, 1);
  ASSERT_EQ(tilefire_engine_rewind(engine, 37), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(tilefire_engine_position(engine), 37u);
  tilefire_engine_free(engine);
}

// on_token's return value ends the generation; calls into the engine from it are refused.
TEST(CApi, TheCallbackStopsTheGenerationAndCannotCallIntoTheEngine) {
  CEngine c(1);
  ASSERT_NE(c.engine, nullptr);
  struct Seen {
    tilefire_engine* engine;
    std::vector<int32_t> tokens;
    std::vector<tilefire_status> reset_statuses;
    std::string message;
  } seen{c.engine, {}, {}, {}};
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  request.prompt = prompt.data();
  request.prompt_count = prompt.size();
  request.max_new_tokens = 10;
  request.stop_at_eos = 0;
  request.user_data = &seen;
  request.on_token = [](void* user_data, int32_t token) -> int {
    Seen& s = *static_cast<Seen*>(user_data);
    s.tokens.push_back(token);
    s.reset_statuses.push_back(tilefire_engine_reset(s.engine));
    s.message = tilefire_last_error();
    return s.tokens.size() == 3;
  };
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_generate(c.engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_STREQ(result.finish_reason, "stopped");
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), seen.tokens);
  EXPECT_EQ(seen.tokens.size(), 3u);
  EXPECT_EQ(seen.reset_statuses, std::vector<tilefire_status>(3, TILEFIRE_ERROR_INPUT));
  EXPECT_NE(seen.message.find("Engine::reset was called while Engine::generate runs"), std::string::npos) << seen.message;
  EXPECT_EQ(tilefire_engine_position(c.engine), prompt.size() + 2) << "every token but the last is in the cache";
  tilefire_generate_result_free(&result);
}

TEST(CApi, BadArgumentsAreInputErrorsNamingThemAndLeaveTheOutputsAlone) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  tilefire_engine* const untouched = reinterpret_cast<tilefire_engine*>(0x1);
  tilefire_engine* engine = untouched;
  expect_refused(tilefire_engine_create(nullptr, &engine), TILEFIRE_ERROR_INPUT, "tilefire_engine_create: options is NULL");
  expect_refused(tilefire_engine_create(&options, nullptr), TILEFIRE_ERROR_INPUT, "tilefire_engine_create: engine is NULL");
  tilefire_engine_options wrong = options;
  wrong.struct_size -= 8;
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "tilefire_engine_options.struct_size is");
  wrong = options;
  for (int32_t backend : {7, -1}) {
    wrong.backend = backend;
    expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT,
                   "tilefire_engine_options.backend is " + std::to_string(backend));
  }
  wrong = options;
  wrong.schedule = 9;
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "tilefire_engine_options.schedule is 9");
  wrong = options;
  wrong.granularity = 5;
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "tilefire_engine_options.granularity is 5");
  wrong = options;
  wrong.model_dir = "/nonexistent/tilefire-model";
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "/nonexistent/tilefire-model");
  wrong = options;
  wrong.policy = "fastest";
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "fastest");
  wrong = options;
  EXPECT_EQ(wrong.cuda_step_deadline_ms, 0u);
  wrong.cuda_step_deadline_ms = uint64_t(1) << 32;
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_options.cuda_step_deadline_ms is 4294967296, more than 4294967295");
  wrong.cuda_step_deadline_ms = 1000;  // a cuda option: refused on the cpu backend
  expect_refused(tilefire_engine_create(&wrong, &engine), TILEFIRE_ERROR_INPUT, "cuda_step_deadline_ms apply to the cuda backend");
  EXPECT_EQ(engine, untouched) << "a failed create leaves *engine as it was";

  CEngine c(1);
  ASSERT_NE(c.engine, nullptr);
  EXPECT_STREQ(tilefire_last_error(), "") << "a success clears the message";
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  tilefire_generate_result result = empty_result();
  std::memset(&result, 0x5a, sizeof result);
  result.struct_size = sizeof result - 4;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "tilefire_generate: result->struct_size is " + std::to_string(sizeof result - 4));
  result.struct_size = sizeof result;
  const tilefire_generate_result before = result;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "GenerateRequest::prompt is empty");
  request.prompt_count = 3;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "tilefire_generate: request->prompt is NULL with a count of 3");
  const int32_t prompt[] = {1, 2, 3};
  request.prompt = prompt;
  request.top_p = 0.0f;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "Sampling::top_p");
  request.top_p = 1.0f;
  request.logit_bias_count = 2;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT,
                 "tilefire_generate: request->logit_bias is NULL with a count of 2");
  const tilefire_logit_bias outside[] = {{600, 1.0f}, {1, 2.0f}};
  request.logit_bias = outside;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "names token 600, outside the vocabulary");
  request.logit_bias_count = 0;
  request.presence_penalty = 3.0f;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "Sampling::presence_penalty");
  request.presence_penalty = 0.0f;
  request.struct_size = 4;
  expect_refused(tilefire_generate(c.engine, &request, &result), TILEFIRE_ERROR_INPUT, "tilefire_generate_request.struct_size is 4");
  request.struct_size = sizeof request;
  expect_refused(tilefire_generate(nullptr, &request, &result), TILEFIRE_ERROR_INPUT, "tilefire_generate: engine is NULL");
  expect_refused(tilefire_generate(c.engine, nullptr, &result), TILEFIRE_ERROR_INPUT, "tilefire_generate: request is NULL");
  expect_refused(tilefire_generate(c.engine, &request, nullptr), TILEFIRE_ERROR_INPUT, "tilefire_generate: result is NULL");
  EXPECT_EQ(std::memcmp(&result, &before, sizeof result), 0) << "a failed generate leaves *result as it was";
  EXPECT_EQ(tilefire_engine_position(c.engine), 0u);

  expect_refused(tilefire_engine_prefill(c.engine, nullptr, 2, nullptr, 0), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_prefill: tokens is NULL with a count of 2");
  expect_refused(tilefire_engine_decode_greedy(c.engine, 1, nullptr), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_decode_greedy: next_token is NULL");
  expect_refused(tilefire_engine_set_schedule(c.engine, 3), TILEFIRE_ERROR_INPUT,
                 "schedule 3 is not");
  expect_refused(tilefire_engine_model_info(c.engine, nullptr), TILEFIRE_ERROR_INPUT, "info is NULL");
  tilefire_model_info unsized{};
  expect_refused(tilefire_engine_model_info(c.engine, &unsized), TILEFIRE_ERROR_INPUT,
                 "tilefire_engine_model_info: info->struct_size is 0");
  EXPECT_EQ(tilefire_engine_position(c.engine), 0u) << "no refused call moved the sequence";
  EXPECT_EQ(tilefire_engine_threads(nullptr), 0u);
  EXPECT_STREQ(tilefire_engine_device_name(nullptr), "");

  EXPECT_STREQ(tilefire_status_name(TILEFIRE_OK), "ok");
  EXPECT_STREQ(tilefire_status_name(TILEFIRE_ERROR_DEVICE), "device error");
  EXPECT_STREQ(tilefire_status_name(42), "unknown status");
  EXPECT_STREQ(tilefire_status_name(-1), "unknown status");
  EXPECT_EQ(tilefire_api_version(), uint32_t(TILEFIRE_API_VERSION));
  tilefire_engine_free(nullptr);
  tilefire_generate_result_free(nullptr);
  tilefire_free(nullptr);
}

// A folder with the tiny byte-level tokenizer and a chat template (tests/common/cli_runner.h).
fs::path text_model(const TempDir& dir) {
  const fs::path model = dir.path() / "text";
  fs::create_directories(model);
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  write_file_text(model / "tokenizer_config.json",
                  R"({"bos_token": "<|start|>", "eos_token": "<|end|>", "chat_template": "{{ bos_token }}{% for m in messages %})"
                  R"({{ m.role }}: {{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"})");
  write_file_text(model / "generation_config.json", R"({"eos_token_id": 2})");
  return model;
}

TEST(CApi, TokenizerStreamAndChatTemplateGiveTheCppResults) {
  TempDir dir("c-api-text");
  const fs::path model = text_model(dir);
  tilefire_tokenizer* tokenizer = nullptr;
  ASSERT_EQ(tilefire_tokenizer_of_model_folder(model.c_str(), &tokenizer), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_NE(tokenizer, nullptr);
  const std::unique_ptr<Tokenizer> cpp = Tokenizer::of_model_folder(model.string());
  EXPECT_EQ(tilefire_tokenizer_vocab_size(tokenizer), cpp->vocab_size());

  const std::string text = "hello, h\xC3\xA9llo hello\n";
  int32_t* ids = nullptr;
  size_t count = 0;
  for (int special : {0, 1}) {
    ASSERT_EQ(tilefire_tokenizer_encode(tokenizer, text.data(), text.size(), special, &ids, &count), TILEFIRE_OK);
    EXPECT_EQ(tokens_and_free(ids, count), cpp->encode(text, special != 0));
  }
  const std::vector<int32_t> encoded = cpp->encode(text);
  char* decoded = nullptr;
  size_t length = 0;
  for (int skip : {0, 1}) {
    ASSERT_EQ(tilefire_tokenizer_decode(tokenizer, encoded.data(), encoded.size(), skip, &decoded, &length), TILEFIRE_OK);
    EXPECT_EQ(text_and_free(decoded, length), cpp->decode(encoded, skip != 0));
  }
  const std::vector<int32_t> prompt(encoded.begin(), encoded.begin() + 3), generated(encoded.begin() + 3, encoded.end());
  ASSERT_EQ(tilefire_tokenizer_continuation(tokenizer, prompt.data(), prompt.size(), generated.data(), generated.size(),
                                            &decoded, &length),
            TILEFIRE_OK);
  EXPECT_EQ(text_and_free(decoded, length), cpp->continuation(prompt, generated));
  ASSERT_EQ(tilefire_tokenizer_encode(tokenizer, nullptr, 0, 0, &ids, &count), TILEFIRE_OK) << "empty text";
  EXPECT_EQ(count, 0u);
  expect_refused(tilefire_tokenizer_encode(tokenizer, nullptr, 4, 0, &ids, &count), TILEFIRE_ERROR_INPUT,
                 "tilefire_tokenizer_encode: text is NULL with a length of 4");
  expect_refused(tilefire_tokenizer_encode(tokenizer, "\xff", 1, 0, &ids, &count), TILEFIRE_ERROR_INPUT, "UTF-8");

  // Streamed text, a token at a time (the two bytes of é arrive apart), with a refused id in between.
  const std::vector<int32_t> bytes = {104, 0xC3, 0xA9, 33};
  tilefire_text_stream* stream = nullptr;
  ASSERT_EQ(tilefire_text_stream_create(tokenizer, prompt.data(), prompt.size(), &stream), TILEFIRE_OK);
  StreamingText expected_stream(*cpp, prompt);
  for (int32_t token : bytes) {
    expect_refused(tilefire_text_stream_add(stream, -3, &decoded, &length), TILEFIRE_ERROR_INPUT, "-3");
    ASSERT_EQ(tilefire_text_stream_add(stream, token, &decoded, &length), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_EQ(text_and_free(decoded, length), expected_stream.add(token)) << token;
  }
  ASSERT_EQ(tilefire_text_stream_finish(stream, &decoded, &length), TILEFIRE_OK);
  EXPECT_EQ(text_and_free(decoded, length), expected_stream.finish());
  expect_refused(tilefire_text_stream_add(stream, 104, &decoded, &length), TILEFIRE_ERROR_INPUT, "the stream has ended");
  expect_refused(tilefire_text_stream_finish(stream, &decoded, &length), TILEFIRE_ERROR_INPUT, "the stream has ended already");
  tilefire_text_stream_free(stream);

  tilefire_chat_template* chat = nullptr;
  ASSERT_EQ(tilefire_chat_template_of_model_folder(model.c_str(), &chat), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_NE(chat, nullptr);
  const std::unique_ptr<ChatTemplate> cpp_chat = ChatTemplate::of_model_folder(model.string());
  const tilefire_chat_message messages[] = {{"system", "be brief"}, {"user", "hello"}};
  for (int generation_prompt : {0, 1}) {
    ASSERT_EQ(tilefire_chat_render(chat, messages, 2, generation_prompt, &decoded, &length), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_EQ(text_and_free(decoded, length), cpp_chat->render({{"system", "be brief"}, {"user", "hello"}}, generation_prompt != 0));
  }
  const char* json_messages = R"([{"role": "user", "content": "hi"}])";
  ASSERT_EQ(tilefire_chat_render_json(chat, json_messages, nullptr, 1, &decoded, &length), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(text_and_free(decoded, length), "<|start|>user: hi<|end|>assistant:");
  expect_refused(tilefire_chat_render_json(chat, "[{", nullptr, 1, &decoded, &length), TILEFIRE_ERROR_INPUT, "JSON");
  const tilefire_chat_message no_role[] = {{nullptr, "hello"}};
  expect_refused(tilefire_chat_render(chat, no_role, 1, 1, &decoded, &length), TILEFIRE_ERROR_INPUT,
                 "tilefire_chat_render: messages[0].role is NULL");
  ASSERT_EQ(tilefire_chat_end_of_reply_tokens(chat, tokenizer, &ids, &count), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(tokens_and_free(ids, count), cpp_chat->end_of_reply_tokens(*cpp));
  tilefire_chat_template_free(chat);

  write_file_text(dir.path() / "template.jinja", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  ASSERT_EQ(tilefire_chat_template_open((dir.path() / "template.jinja").c_str(), nullptr, &chat), TILEFIRE_OK)
      << tilefire_last_error();
  ASSERT_EQ(tilefire_chat_render(chat, messages, 2, 0, &decoded, &length), TILEFIRE_OK);
  EXPECT_EQ(text_and_free(decoded, length), "[system]be brief[user]hello");
  tilefire_chat_template_free(chat);
  tilefire_tokenizer_free(tokenizer);

  // A folder with neither: OK, and NULL handles. A file that is not a tokenizer: refused, naming it.
  const fs::path empty = dir.path() / "empty";
  fs::create_directories(empty);
  tilefire_tokenizer* none = reinterpret_cast<tilefire_tokenizer*>(0x1);
  ASSERT_EQ(tilefire_tokenizer_of_model_folder(empty.c_str(), &none), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(none, nullptr);
  chat = reinterpret_cast<tilefire_chat_template*>(0x1);
  ASSERT_EQ(tilefire_chat_template_of_model_folder(empty.c_str(), &chat), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(chat, nullptr);
  for (const fs::path& not_a_folder : {dir.path() / "missing", model / "tokenizer.json"}) {
    const std::string expected = "folder '" + not_a_folder.string() + "' is not a folder";
    expect_refused(tilefire_tokenizer_of_model_folder(not_a_folder.c_str(), &none), TILEFIRE_ERROR_INPUT,
                   "tilefire_tokenizer_of_model_folder: " + expected);
    expect_refused(tilefire_chat_template_of_model_folder(not_a_folder.c_str(), &chat), TILEFIRE_ERROR_INPUT,
                   "tilefire_chat_template_of_model_folder: " + expected);
  }
  expect_refused(tilefire_chat_template_open((dir.path() / "template.jinja").c_str(), (dir.path() / "missing").c_str(), &chat),
                 TILEFIRE_ERROR_INPUT, "model_folder '" + (dir.path() / "missing").string() + "' is not a folder (it does not exist)");
  write_file_text(dir.path() / "broken.json", "{\"model\": ");
  expect_refused(tilefire_tokenizer_open((dir.path() / "broken.json").c_str(), &none), TILEFIRE_ERROR_INPUT, "broken.json");
  expect_refused(tilefire_tokenizer_open(nullptr, &none), TILEFIRE_ERROR_INPUT, "tilefire_tokenizer_open: tokenizer_json is NULL");
}

// libtilefire.so exports every function tilefire.h declares, and nothing else (the engine's C++ stays inside).
TEST(CApi, TheLibraryExportsTheHeadersFunctionsAndNothingElse) {
  std::set<std::string> declared;
  const std::string header = read_file_text(fs::path(TILEFIRE_SOURCE_DIR) / "megakernel/include/tilefire/tilefire.h");
  const std::regex declaration(R"(\b(tilefire_[a-z0-9_]+)\()");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), declaration); it != std::sregex_iterator(); ++it)
    declared.insert((*it)[1]);
  declared.erase("tilefire_token_callback");  // the callback's type, written (*tilefire_token_callback)(...)
  ASSERT_GT(declared.size(), 40u);

  const std::string command = std::string("nm -D --defined-only '") + TILEFIRE_C_LIBRARY + "'";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::set<std::string> exported, stray;
  char line[4096];
  while (fgets(line, sizeof line, pipe)) {
    std::string entry(line);
    while (!entry.empty() && (entry.back() == '\n' || entry.back() == '\r')) entry.pop_back();
    const std::string name = entry.substr(entry.rfind(' ') + 1);
    const char kind = entry.size() > 17 ? entry[17] : '?';  // "ADDRESS KIND NAME"
    if (kind == 'T') (name.rfind("tilefire_", 0) == 0 ? exported : stray).insert(name);
    else if (kind != 'A' && kind != 'U') stray.insert(entry);
  }
  ASSERT_EQ(pclose(pipe), 0) << command;
  EXPECT_EQ(exported, declared);
  EXPECT_TRUE(stray.empty()) << "exported beside the C API: " << *stray.begin() << " and " << stray.size() - 1 << " more";
}

}  // namespace
}  // namespace tilefire::testing
