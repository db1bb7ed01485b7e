// The C API's batch calls (generate_batch, add_sequence, step_sequences, remove_sequence) against the C++
// engine they wrap: the same results for the same calls, prompts prefilled by the steps (in the decode
// step's program or apart), a failed sequence named while the others step on, and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/c_api_calls.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/tilefire.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;

TEST(CApi, BatchCallsGiveTheCppEnginesResults) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  EXPECT_EQ(options.sequences, 1u);
  options.threads = 2;
  options.sequences = 3;
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  Engine cpp = cpp_sample();
  const std::vector<std::vector<int32_t>> prompts = {{72, 101, 108}, {1, 2, 3, 4, 5, 6, 7}, {200}};
  std::vector<tilefire_generate_request> requests(prompts.size());
  std::vector<GenerateRequest> expected_requests(prompts.size());
  // Request 1's callback ends it after its second token.
  struct Counter {
    int seen = 0;
  } counter;
  for (size_t i = 0; i < prompts.size(); ++i) {
    tilefire_generate_request_init(&requests[i]);
    requests[i].prompt = prompts[i].data();
    requests[i].prompt_count = prompts[i].size();
    requests[i].max_new_tokens = uint32_t(4 + 3 * i);
    requests[i].temperature = i == 2 ? 0.7f : 0.0f;
    requests[i].seed = 5;
    requests[i].logprobs = uint32_t(i);
    requests[i].stop_at_eos = 0;
    expected_requests[i].prompt = prompts[i];
    expected_requests[i].max_new_tokens = requests[i].max_new_tokens;
    expected_requests[i].sampling = Sampling{.temperature = requests[i].temperature, .seed = 5};
    expected_requests[i].logprobs = uint32_t(i);
    expected_requests[i].stop_at_eos = false;
  }
  requests[1].on_token = [](void* user_data, int32_t) { return ++static_cast<Counter*>(user_data)->seen >= 2 ? 1 : 0; };
  requests[1].user_data = &counter;
  expected_requests[1].stop_when = [](const std::vector<int32_t>& generated) { return generated.size() >= 2; };
  auto expect_result = [&](const tilefire_generate_result& got, const GenerateResult& expected, size_t i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(std::vector<int32_t>(got.tokens, got.tokens + got.token_count), expected.tokens);
    EXPECT_STREQ(got.finish_reason, expected.finish_reason.c_str());
    ASSERT_EQ(got.logprobs_per_token, expected_requests[i].logprobs);
    for (size_t t = 0; t < got.token_count; ++t)
      for (size_t k = 0; k < got.logprobs_per_token; ++k)
        EXPECT_EQ(got.logprobs[t * got.logprobs_per_token + k].probability, expected.logprobs[t][k].probability);
  };

  std::vector<tilefire_generate_result> results(prompts.size(), empty_result());
  ASSERT_EQ(tilefire_generate_batch(engine, requests.data(), requests.size(), results.data()), TILEFIRE_OK) << tilefire_last_error();
  for (size_t i = 0; i < prompts.size(); ++i) {
    expect_result(results[i], cpp.generate(expected_requests[i]), i);
    tilefire_generate_result_free(&results[i]);
  }
  EXPECT_EQ(results[1].token_count, 0u);

  // Continuous batching: request 2 joins after two steps of request 0.
  counter.seen = 0;
  uint64_t first = 0, second = 0;
  uint32_t unfinished = 0;
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &requests[0], &first), TILEFIRE_OK) << tilefire_last_error();
  for (int step = 0; step < 2; ++step) ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK);
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &requests[2], &second), TILEFIRE_OK) << tilefire_last_error();
  tilefire_generate_result refused = empty_result();
  expect_refused(tilefire_generate(engine, &requests[0], &refused), TILEFIRE_ERROR_INPUT, "sequence(s) added by add_sequence are in");
  int finished = 0;
  while (!finished) {
    ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
    ASSERT_EQ(tilefire_engine_sequence_finished(engine, second, &finished), TILEFIRE_OK);
  }
  tilefire_generate_result one = empty_result(), two = empty_result();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, first, &one), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, second, &two), TILEFIRE_OK) << tilefire_last_error();
  expect_result(one, cpp.generate(expected_requests[0]), 0);
  expect_result(two, cpp.generate(expected_requests[2]), 2);
  tilefire_generate_result_free(&one);
  tilefire_generate_result_free(&two);

  // Refusals: the results stay as they were.
  std::vector<tilefire_generate_request> four(4, requests[0]);
  std::vector<tilefire_generate_result> untouched(4, empty_result());
  expect_refused(tilefire_generate_batch(engine, four.data(), four.size(), untouched.data()), TILEFIRE_ERROR_INPUT,
                 "4 requests, but the engine holds 3 sequences");
  for (const tilefire_generate_result& r : untouched) EXPECT_EQ(r.tokens, nullptr);
  expect_refused(tilefire_generate_batch(engine, nullptr, 2, untouched.data()), TILEFIRE_ERROR_INPUT,
                 "tilefire_generate_batch: requests is NULL with a count of 2");
  untouched[1].struct_size = 4;
  expect_refused(tilefire_generate_batch(engine, four.data(), 2, untouched.data()), TILEFIRE_ERROR_INPUT, "results[1]");
  four[1].prompt_count = 0;
  untouched[1].struct_size = sizeof(tilefire_generate_result);
  expect_refused(tilefire_generate_batch(engine, four.data(), 2, untouched.data()), TILEFIRE_ERROR_INPUT,
                 "request 1: GenerateRequest::prompt is empty");
  expect_refused(tilefire_engine_remove_sequence(engine, first, &one), TILEFIRE_ERROR_INPUT, "no sequence " + std::to_string(first));
  expect_refused(tilefire_engine_step_sequences(engine, nullptr), TILEFIRE_ERROR_INPUT, "unfinished is NULL");
  uint64_t id = 0;
  expect_refused(tilefire_engine_add_sequence(engine, nullptr, &id), TILEFIRE_ERROR_INPUT, "request is NULL");
  tilefire_engine_free(engine);
}

// options.prefill_chunks_per_step: add_sequence only takes the slot, the steps prefill the prompt (here a
// prompt of four chunks of options.prefill_chunk = 64 tokens: its first token comes from the fourth
// step), and the result is the C++ engine's with the same chunks.
TEST(CApi, PromptsPrefilledByTheStepsGiveTheCppEnginesResults) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  EXPECT_EQ(options.prefill_chunks_per_step, 0u);
  EXPECT_EQ(options.prefill_chunk, 128u);
  options.threads = 2;
  options.sequences = 2;
  options.prefill_chunks_per_step = 1;
  options.prefill_chunk = 64;
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 200; ++i) prompt.push_back((i * 13 + 5) % 256);
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  request.prompt = prompt.data();
  request.prompt_count = prompt.size();
  request.max_new_tokens = 3;
  request.stop_at_eos = 0;
  uint64_t id = 0;
  uint32_t unfinished = 0;
  int finished = 1;
  uint32_t tokens_seen = 0;
  request.user_data = &tokens_seen;
  request.on_token = [](void* seen, int32_t) {
    ++*static_cast<uint32_t*>(seen);
    return 0;
  };
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &request, &id), TILEFIRE_OK) << tilefire_last_error();
  for (uint32_t step = 1; step <= 4; ++step) {
    ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_EQ(unfinished, 1u);
    ASSERT_EQ(tilefire_engine_sequence_finished(engine, id, &finished), TILEFIRE_OK);
    EXPECT_EQ(finished, 0);
    EXPECT_EQ(tokens_seen, step == 4 ? 1u : 0u) << "after step " << step << " of a 200-token prompt in chunks of 64";
  }
  while (unfinished > 0) ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, id, &result), TILEFIRE_OK) << tilefire_last_error();
  GenerateRequest expected_request;
  expected_request.prompt = prompt;
  expected_request.max_new_tokens = 3;
  expected_request.stop_at_eos = false;
  EngineOptions cpp_options;
  cpp_options.threads = 2;
  cpp_options.prefill_chunk = 64;
  Engine cpp(cpp_options);
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), cpp.generate(expected_request).tokens);
  tilefire_generate_result_free(&result);
  tilefire_engine_free(engine);
}

// A sequence whose logits are not finite (its prompt holds a token whose embedding is infinite): the step
// fails with TILEFIRE_ERROR_INPUT naming it, tilefire_engine_failed_sequence gives its id, and once it is
// removed the other sequence steps on.
TEST(CApi, AFailedSequenceIsNamedAndTheOthersStepOn) {
  TempDir dir("c-api-nonfinite");
  const fs::path folder = write_test_model(variant_spec(Variant::llama), dir.path() / "m");
  const int32_t poisoned = 300;
  overwrite_f32(folder, "model.embed_tokens.weight", uint64_t(poisoned) * variant_spec(Variant::llama).hidden,
                std::numeric_limits<float>::infinity());
  const std::string model_dir = folder.string();
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  options.model_dir = model_dir.c_str();
  options.threads = 2;
  options.sequences = 2;
  options.prefill_chunks_per_step = 1;
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  const std::vector<int32_t> good_prompt = {1, 2, 3}, bad_prompt = {1, poisoned, 3};
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  request.prompt = good_prompt.data();
  request.prompt_count = good_prompt.size();
  request.max_new_tokens = 2;
  request.stop_at_eos = 0;
  uint64_t good = 0, bad = 0, sequence = 99;
  uint32_t unfinished = 0;
  int failed = 1;
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &request, &good), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_EQ(tilefire_engine_failed_sequence(engine, &failed, &sequence), TILEFIRE_OK);
  EXPECT_EQ(failed, 0);
  request.prompt = bad_prompt.data();
  ASSERT_EQ(tilefire_engine_add_sequence(engine, &request, &bad), TILEFIRE_OK) << tilefire_last_error();
  expect_refused(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_ERROR_INPUT,
                 "sequence " + std::to_string(bad) + ": ");
  ASSERT_EQ(tilefire_engine_failed_sequence(engine, &failed, &sequence), TILEFIRE_OK);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(sequence, bad);
  expect_refused(tilefire_engine_failed_sequence(engine, &failed, nullptr), TILEFIRE_ERROR_INPUT, "sequence is NULL");
  tilefire_generate_result result = empty_result();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, bad, &result), TILEFIRE_OK) << tilefire_last_error();
  tilefire_generate_result_free(&result);
  int finished = 0;
  ASSERT_EQ(tilefire_engine_sequence_finished(engine, good, &finished), TILEFIRE_OK);
  EXPECT_EQ(finished, 1) << "the failed step's decode gave the good sequence its second token";
  ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
  ASSERT_EQ(tilefire_engine_failed_sequence(engine, &failed, &sequence), TILEFIRE_OK);
  EXPECT_EQ(failed, 0);
  result = empty_result();
  ASSERT_EQ(tilefire_engine_remove_sequence(engine, good, &result), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(result.token_count, 2u);
  tilefire_generate_result_free(&result);
  tilefire_engine_free(engine);
}

// The header lays its structs out alike in C and in C++ (the library is C++, its callers often C).

// options.prefill_in_decode_step (on by default): a 128-token prompt joining a decoding sequence takes two
// steps in the decode step's program (chunks of 127 and 1, a step holding 128 rows) and one step apart (a
// chunk of 128); the same reply either way, the C++ engine's.
TEST(CApi, APromptChunkRunsInTheDecodeStepUnlessTurnedOff) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 128; ++i) prompt.push_back((i * 11 + 3) % 256);
  std::vector<std::vector<int32_t>> replies;
  for (int in_step : {1, 0}) {
    SCOPED_TRACE(in_step ? "in the decode step" : "apart");
    tilefire_engine_options options;
    tilefire_engine_options_init(&options);
    EXPECT_EQ(options.prefill_in_decode_step, 1);
    options.threads = 2;
    options.sequences = 2;
    options.prefill_chunks_per_step = 1;
    options.prefill_in_decode_step = in_step;
    tilefire_engine* engine = nullptr;
    ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
    const int32_t short_prompt[] = {5, 6, 7};
    tilefire_generate_request request;
    tilefire_generate_request_init(&request);
    request.prompt = short_prompt;
    request.prompt_count = 3;
    request.max_new_tokens = 8;
    request.stop_at_eos = 0;
    uint64_t decoding = 0, joining = 0;
    uint32_t unfinished = 0;
    ASSERT_EQ(tilefire_engine_add_sequence(engine, &request, &decoding), TILEFIRE_OK) << tilefire_last_error();
    ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
    uint32_t joining_tokens = 0;
    request.prompt = prompt.data();
    request.prompt_count = prompt.size();
    request.max_new_tokens = 3;
    request.user_data = &joining_tokens;
    request.on_token = [](void* seen, int32_t) {
      ++*static_cast<uint32_t*>(seen);
      return 0;
    };
    ASSERT_EQ(tilefire_engine_add_sequence(engine, &request, &joining), TILEFIRE_OK) << tilefire_last_error();
    ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
    EXPECT_EQ(joining_tokens, in_step ? 0u : 1u) << "after the first step of its prompt";
    int finished = 0;
    while (!finished) {
      ASSERT_EQ(tilefire_engine_step_sequences(engine, &unfinished), TILEFIRE_OK) << tilefire_last_error();
      ASSERT_EQ(tilefire_engine_sequence_finished(engine, joining, &finished), TILEFIRE_OK) << tilefire_last_error();
    }
    tilefire_generate_result result = empty_result();
    ASSERT_EQ(tilefire_engine_remove_sequence(engine, joining, &result), TILEFIRE_OK) << tilefire_last_error();
    replies.emplace_back(result.tokens, result.tokens + result.token_count);
    tilefire_generate_result_free(&result);
    tilefire_engine_free(engine);
  }
  GenerateRequest expected;
  expected.prompt = prompt;
  expected.max_new_tokens = 3;
  expected.stop_at_eos = false;
  Engine cpp = cpp_sample();
  const std::vector<int32_t> alone = cpp.generate(expected).tokens;
  EXPECT_EQ(replies[0], alone);
  EXPECT_EQ(replies[1], alone);
}

}  // namespace
}  // namespace tilefire::testing
