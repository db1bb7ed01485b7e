// Engine::generate_batch: several sequences decoded together give, for each request, exactly what
// generate() gives for it alone (the reference: a separate engine running the requests one by one), with
// sequences finishing at different steps, sampling, logprobs and stop conditions; and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/batch_results.h"
#include "tests/common/refusal.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

// Requests that finish at different steps (so the batch narrows from 4 sequences to 1), of different
// prompt lengths (one over a prefill chunk of 128), greedy and sampled, with and without logprobs, logit
// bias and penalties.
std::vector<GenerateRequest> mixed_requests() {
  std::vector<GenerateRequest> requests(4);
  requests[0].prompt = counting_prompt(5, 1);
  requests[0].max_new_tokens = 9;
  requests[0].logprobs = 3;
  requests[0].sampling.frequency_penalty = 0.6f;
  requests[0].sampling.logit_bias = {{4, 2.0f}};
  requests[1].prompt = counting_prompt(140, 3);
  requests[1].max_new_tokens = 4;
  requests[1].sampling = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7};
  requests[2].prompt = counting_prompt(1, 42);
  requests[2].max_new_tokens = 12;
  requests[2].sampling = {.temperature = 1.2f, .seed = 99, .min_p = 0.05f, .repetition_penalty = 1.2f, .presence_penalty = 0.4f};
  requests[2].logprobs = 2;
  requests[3].prompt = counting_prompt(33, 5);
  requests[3].max_new_tokens = 1;
  for (GenerateRequest& r : requests) r.stop_at_eos = false;  // run to their lengths: the widths vary as planned
  return requests;
}

void expect_batch_equals_one_by_one(EngineOptions options, const std::vector<GenerateRequest>& requests) {
  EngineOptions single = options;
  single.sequences = 1;
  Engine alone(single);
  options.sequences = uint32_t(requests.size());
  Engine batched(options);
  const std::vector<GenerateResult> results = batched.generate_batch(requests);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) expect_same_result(results[i], alone.generate(requests[i]), i);
}

TEST(BatchDecode, EachResultIsWhatGenerateGivesAlone) {
  EngineOptions options;  // the built-in sample
  options.threads = 2;
  expect_batch_equals_one_by_one(options, mixed_requests());
}

TEST(BatchDecode, SameBitsWithSplitKvAttentionAndEveryArchitectureFeature) {
  // Split-KV attention (attention_chunk reads each token's own slot and position), Qwen2's biases and
  // Qwen3's head norms (in the QKV epilogue, before the cache store), tied embeddings (the LM head's
  // rows from the embedding table), a sliding window (each token's window from its own position), on more
  // threads than cores and the dynamic queue.
  for (Variant variant : {Variant::qwen2_bias, Variant::qwen3_qk_norm, Variant::tied, Variant::mistral_window}) {
    SCOPED_TRACE(variant_name(variant));
    TempDir dir(std::string("batch-") + variant_name(variant));
    EngineOptions options;
    options.model_dir = write_test_model(variant_spec(variant), dir.path()).string();
    options.threads = 3;
    options.kv_splits = 3;
    options.policy = variant == Variant::tied ? "dynamic" : "critical-path";
    std::vector<GenerateRequest> requests = mixed_requests();
    requests.resize(3);
    expect_batch_equals_one_by_one(options, requests);
  }
}

TEST(BatchDecode, StopConditionsAndCallbacksArePerRequest) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 3;
  Engine engine(options);
  std::vector<GenerateRequest> requests(3);
  std::vector<std::vector<int32_t>> seen(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = counting_prompt(4 + uint32_t(i), int32_t(10 * i));
    requests[i].max_new_tokens = 8;
    requests[i].stop_at_eos = false;
    requests[i].on_token = [&seen, i](int32_t token) { seen[i].push_back(token); };
  }
  // Request 0 also streams its probabilities: each token's own, before its on_token.
  requests[0].logprobs = 2;
  std::vector<TokenProbability> streamed;
  requests[0].on_probabilities = [&](const TokenProbability& chosen, const std::vector<TokenProbability>& top) {
    EXPECT_EQ(streamed.size(), seen[0].size()) << "before that token's on_token";
    EXPECT_EQ(top.size(), 2u);
    streamed.push_back(chosen);
  };
  requests[1].stop_when = [](const std::vector<int32_t>& generated) { return generated.size() == 3; };
  // Request 2 stops at the token request 2 alone generates third (found with generate() first).
  {
    EngineOptions single = options;
    single.sequences = 1;
    Engine alone(single);
    GenerateRequest probe = requests[2];
    probe.on_token = nullptr;
    const GenerateResult r = alone.generate(probe);
    ASSERT_GE(r.tokens.size(), 3u);
    requests[2].stop_tokens = {r.tokens[2]};
  }
  const std::vector<GenerateResult> results = engine.generate_batch(requests);
  EXPECT_EQ(results[0].finish_reason, "length");
  EXPECT_EQ(results[0].tokens.size(), 8u);
  EXPECT_EQ(results[1].finish_reason, "stopped");
  EXPECT_EQ(results[1].tokens.size(), 3u);
  EXPECT_EQ(results[2].finish_reason, "eos");
  EXPECT_LE(results[2].tokens.size(), 3u);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(seen[i], results[i].tokens) << "request " << i;
  ASSERT_EQ(streamed.size(), results[0].token_probabilities.size());
  for (size_t t = 0; t < streamed.size(); ++t) {
    EXPECT_EQ(streamed[t].token, results[0].tokens[t]);
    EXPECT_EQ(streamed[t].logprob, results[0].token_probabilities[t].logprob) << "token " << t;
  }
  for (const GenerateResult& r : results) {
    EXPECT_GE(r.ttft_ms, 0.0);
    EXPECT_GT(r.tasks_per_step, 0u);
  }
  EXPECT_GT(results[0].tpot_ms, 0.0);
}

TEST(BatchDecode, TheStepApiContinuesTheFirstRequest) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 3;
  Engine engine(options);
  engine.prefill(counting_prompt(20, 1));  // replaced: generate_batch starts new sequences
  std::vector<GenerateRequest> requests(3);
  requests[0].prompt = counting_prompt(6, 2);
  requests[0].max_new_tokens = 0;  // takes no slot: request 1 is the first that generates
  requests[1].prompt = counting_prompt(7, 9);
  requests[1].max_new_tokens = 5;
  requests[1].stop_at_eos = false;
  requests[2].prompt = counting_prompt(3, 4);
  requests[2].max_new_tokens = 6;
  requests[2].stop_at_eos = false;
  const std::vector<GenerateResult> results = engine.generate_batch(requests);
  EXPECT_EQ(results[0].finish_reason, "length");
  EXPECT_TRUE(results[0].tokens.empty());

  options.sequences = 1;
  Engine alone(options);
  const GenerateResult first = alone.generate(requests[1]);
  EXPECT_EQ(engine.sequence(), alone.sequence());
  EXPECT_EQ(engine.position(), alone.position());
  const std::vector<float> next = engine.decode(first.tokens.back());
  const std::vector<float> expected = alone.decode(first.tokens.back());
  ASSERT_EQ(next.size(), expected.size());
  for (size_t v = 0; v < next.size(); ++v) ASSERT_TRUE(same_bits(next[v], expected[v])) << "logit " << v;
}

// 34 sequences that finish one step apart narrow the batch through 33 widths of batched programs, past the
// 32 an engine keeps: the least recently used is evicted, and every result is still generate()'s alone.
TEST(BatchDecode, ManyWidthsEvictTheLeastRecentlyUsedProgram) {
  std::vector<GenerateRequest> requests;
  for (uint32_t i = 0; i < 34; ++i) requests.push_back(counting_request(3, int32_t(i * 5), i + 1));
  EngineOptions options;
  options.threads = 2;
  options.max_context = 64;
  expect_batch_equals_one_by_one(options, requests);
}

// Under tensor parallelism (ranks as thread groups of this process) a batched step's logits all-gather
// carries every sequence's row; each result is what generate() gives alone with the same degree, bit for
// bit (the ranks' partial sums add in the same order whatever else shares the step), with the prompts
// prefilled whole or by the steps, on an even and an uneven vocabulary and FFN split.
TEST(BatchDecode, UnderTensorParallelismEachResultIsWhatGenerateGivesAlone) {
  for (uint32_t tp : {2u, 4u}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    EngineOptions options;
    options.threads = 2;
    options.tp = tp;
    expect_batch_equals_one_by_one(options, mixed_requests());
    options.prefill_chunks_per_step = 1;
    expect_batch_equals_one_by_one(options, mixed_requests());
  }
  TempDir dir("batch-tp-uneven");
  ModelSpec uneven = preset_spec("tiny");
  uneven.vocab = 513;  // 257 and 256 rows of the LM head: the ranks' rows of the logits differ in length
  uneven.ffn = 641;    // 321 and 320
  EngineOptions options;
  options.model_dir = write_test_model(uneven, dir.path()).string();
  options.threads = 2;
  options.tp = 2;
  std::vector<GenerateRequest> requests = mixed_requests();
  requests.resize(3);
  expect_batch_equals_one_by_one(options, requests);
}

// GenerateRequest::trace_path in a batch: the timeline of the request's second decode step, which every
// sequence of that step shares, its tasks the batched program's; the results bitwise those without a
// trace; none for a request that runs no decode step; a path that cannot be written fails that request.
TEST(BatchDecode, ATraceOfABatchedStepIsWrittenAndChangesNothing) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 4;
  const std::vector<GenerateRequest> plain = mixed_requests();
  Engine untraced(options);
  const std::vector<GenerateResult> expected = untraced.generate_batch(plain);
  TempDir dir("batch-trace");
  std::vector<GenerateRequest> requests = plain;
  requests[0].trace_path = (dir.path() / "first.json").string();
  requests[3].trace_path = (dir.path() / "none.json").string();  // one token: no decode step
  Engine traced(options);
  const std::vector<GenerateResult> results = traced.generate_batch(requests);
  for (size_t i = 0; i < requests.size(); ++i) expect_same_result(results[i], expected[i], i);
  EXPECT_TRUE(results[0].trace_written);
  EXPECT_FALSE(results[1].trace_written);
  EXPECT_FALSE(results[3].trace_written);
  EXPECT_FALSE(std::filesystem::exists(requests[3].trace_path));
  const nlohmann::json trace = nlohmann::json::parse(read_file_text(requests[0].trace_path));
  uint32_t slices = 0;
  for (const nlohmann::json& event : trace["traceEvents"]) slices += event.value("ph", "") == "X" ? 1 : 0;
  EXPECT_EQ(slices, results[0].tasks_per_step) << "a slice per task of the step of 3 sequences";

  requests = plain;
  requests[2].trace_path = (dir.path() / "no-such-folder" / "t.json").string();
  const std::string message = refusal([&] { traced.generate_batch(requests); });
  EXPECT_NE(message.find("generate_batch: request 2: --trace: cannot write"), std::string::npos) << message;
}

// The step API after a batch under tensor parallelism: every rank's position follows slot 0's sequence.
TEST(BatchDecode, UnderTensorParallelismTheStepApiContinuesTheFirstRequest) {
  EngineOptions options;
  options.threads = 2;
  options.tp = 2;
  options.sequences = 2;
  Engine engine(options);
  std::vector<GenerateRequest> requests(2);
  requests[0].prompt = counting_prompt(7, 9);
  requests[0].max_new_tokens = 5;
  requests[1].prompt = counting_prompt(3, 4);
  requests[1].max_new_tokens = 8;
  for (GenerateRequest& r : requests) r.stop_at_eos = false;
  const std::vector<GenerateResult> results = engine.generate_batch(requests);
  options.sequences = 1;
  Engine alone(options);
  alone.generate(requests[0]);
  EXPECT_EQ(engine.position(), alone.position());
  const std::vector<float> next = engine.decode(results[0].tokens.back());
  const std::vector<float> expected = alone.decode(results[0].tokens.back());
  ASSERT_EQ(next.size(), expected.size());
  for (size_t v = 0; v < next.size(); ++v) ASSERT_TRUE(same_bits(next[v], expected[v])) << "logit " << v;
}

// EngineOptions::prefill_chunks_per_step: the prompts are prefilled by the steps, after their decode, and
// every result is still generate()'s for its request alone, bit for bit (the chunks are the same).
TEST(BatchDecode, PromptsPrefilledByTheStepsGiveWhatGenerateGives) {
  EngineOptions options;
  options.threads = 2;
  options.prefill_chunks_per_step = 1;
  expect_batch_equals_one_by_one(options, mixed_requests());
}

// A long prompt joining a sequence that decodes: each step gives that sequence its token and prefills one
// chunk of the prompt; the newcomer's first token comes from the step that ends its prompt. One taken out
// mid-prompt leaves its slot holding the part prefilled, which a request reusing it skips. In the decode
// step's program (EngineOptions::prefill_in_decode_step) a chunk is the 128 rows a step holds less the
// decoding sequence's one: chunks of 127, 127 and 46, the same replies bit for bit.
void expect_a_long_prompt_joins_a_chunk_per_step(bool in_decode_step) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 2;
  options.prefill_chunks_per_step = 1;
  options.prefill_in_decode_step = in_decode_step;
  const uint32_t first_chunk = in_decode_step ? 127 : 128;
  Engine engine(options);
  uint32_t short_tokens = 0, long_tokens = 0;
  GenerateRequest short_request = counting_request(5, 11, 12);
  short_request.on_token = [&](int32_t) { ++short_tokens; };
  GenerateRequest long_request = short_request;
  long_request.prompt = counting_prompt(300, 2);  // chunks of 128, 128 and 44
  long_request.max_new_tokens = 3;
  long_request.on_token = [&](int32_t) { ++long_tokens; };

  const uint64_t short_id = engine.add_sequence(short_request);
  EXPECT_EQ(short_tokens, 0u) << "add_sequence only takes the slot";
  EXPECT_EQ(engine.step_sequences(), 1u);
  EXPECT_EQ(short_tokens, 1u) << "the step that prefills the whole prompt picks the first token";
  const uint64_t long_id = engine.add_sequence(long_request);
  const std::vector<uint32_t> long_after_step{0, 0, 1, 2, 3};
  for (uint32_t step = 0; step < long_after_step.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(engine.step_sequences(), step + 1 < long_after_step.size() ? 2u : 1u);
    EXPECT_EQ(short_tokens, step + 2) << "one token of the decoding sequence every step";
    EXPECT_EQ(long_tokens, long_after_step[step]);
    EXPECT_EQ(engine.sequence_finished(long_id), long_tokens == long_request.max_new_tokens);
  }
  const GenerateResult long_result = engine.remove_sequence(long_id);

  GenerateRequest cut_request = long_request;  // taken out after its first chunk
  cut_request.prompt = counting_prompt(300, 9);
  cut_request.on_token = nullptr;
  const uint64_t cut_id = engine.add_sequence(cut_request);
  engine.step_sequences();
  const GenerateResult cut = engine.remove_sequence(cut_id);
  EXPECT_EQ(cut.finish_reason, "stopped");
  EXPECT_TRUE(cut.tokens.empty());
  GenerateRequest reusing = cut_request;
  reusing.reuse_prefix = true;
  const uint64_t reusing_id = engine.add_sequence(reusing);
  while (!engine.sequence_finished(reusing_id)) engine.step_sequences();
  const GenerateResult reused = engine.remove_sequence(reusing_id);
  EXPECT_EQ(reused.reused_tokens, first_chunk) << "the slot holds the chunk prefilled before it was taken out";
  while (!engine.sequence_finished(short_id)) engine.step_sequences();
  const GenerateResult short_result = engine.remove_sequence(short_id);

  options.sequences = 1;
  options.prefill_chunks_per_step = 0;
  Engine alone(options);
  short_request.on_token = long_request.on_token = nullptr;
  expect_same_result(short_result, alone.generate(short_request), 0);
  expect_same_result(long_result, alone.generate(long_request), 1);
  reusing.reuse_prefix = false;
  expect_same_result(reused, alone.generate(reusing), 2);
}

TEST(BatchDecode, ALongPromptJoiningDelaysTheOthersByAChunkPerStep) { expect_a_long_prompt_joins_a_chunk_per_step(true); }

TEST(BatchDecode, ALongPromptJoiningInChunksOfTheirOwnDelaysTheOthersByAChunkPerStep) {
  expect_a_long_prompt_joins_a_chunk_per_step(false);
}

// A prompt whose logits are not finite (a token whose embedding holds an infinity) fails its own
// sequence only: with the prompts prefilled by the steps, its last chunk fails after the step's decode,
// and step_sequences throws a SequenceError with its id (the chunk's prompt scores taken back). Taken out, it leaves the other sequence to go
// on to generate()'s result for its request alone. The same when the chunk runs in the decode step's
// program (EngineOptions::prefill_in_decode_step; a scored prompt never does) as when it runs apart.
void expect_non_finite_logits_fail_their_sequence_alone(bool in_decode_step) {
  TempDir dir(in_decode_step ? "batch-nonfinite-in-step" : "batch-nonfinite");
  const std::filesystem::path folder = write_test_model(variant_spec(Variant::llama), dir.path() / "m");
  EngineOptions options;
  options.model_dir = folder.string();
  options.threads = 2;
  GenerateRequest good = counting_request(5, 11, 10);
  std::vector<int32_t> seen;  // the good request's tokens, prompt and reply: the poisoned one is none of them
  {
    Engine clean(options);
    seen = clean.generate(good).tokens;
  }
  seen.insert(seen.end(), good.prompt.begin(), good.prompt.end());
  int32_t poisoned = 0;
  while (std::find(seen.begin(), seen.end(), poisoned) != seen.end()) ++poisoned;
  overwrite_f32(folder, "model.embed_tokens.weight", uint64_t(poisoned) * variant_spec(Variant::llama).hidden,
                std::numeric_limits<float>::infinity());

  Engine alone(options);
  const GenerateResult expected = alone.generate(good);
  options.sequences = 2;
  options.prefill_chunks_per_step = 1;
  options.prefill_in_decode_step = in_decode_step;
  Engine engine(options);
  uint32_t good_tokens = 0;
  good.on_token = [&](int32_t) { ++good_tokens; };
  const uint64_t good_id = engine.add_sequence(good);
  engine.step_sequences();  // its prompt and first token
  GenerateRequest bad = good;
  bad.on_token = nullptr;
  bad.prompt = {3, 4, poisoned};  // scored too: rows 0 and 1 are finite, the last one not
  bad.prompt_logprobs = 1;
  const uint64_t bad_id = engine.add_sequence(bad);
  try {
    engine.step_sequences();
    ADD_FAILURE() << "the poisoned prompt's step did not fail";
  } catch (const SequenceError& e) {
    EXPECT_EQ(e.sequence, bad_id);
    EXPECT_NE(std::string(e.what()).find("sequence " + std::to_string(bad_id) + ": "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(good_tokens, 2u) << "the step's decode came before the failed chunk";
  EXPECT_THROW(engine.step_sequences(), SequenceError) << "left in, it fails again";
  const GenerateResult failed = engine.remove_sequence(bad_id);
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_TRUE(failed.prompt_logprobs.empty()) << "a failed chunk's scores are taken back, or its retry lists them twice";

  // One that copies the good prompt from its slot and fails on the token after: its retry starts after the
  // copy, and once taken out its slot claims the copied prompt and no more.
  GenerateRequest copying = bad;
  copying.prompt = good.prompt;
  copying.prompt.push_back(poisoned);
  copying.prompt_logprobs = 0;
  copying.reuse_prefix = true;
  const uint64_t copying_id = engine.add_sequence(copying);
  EXPECT_THROW(engine.step_sequences(), SequenceError);
  EXPECT_THROW(engine.step_sequences(), SequenceError) << "left in, it fails again";
  EXPECT_EQ(good_tokens, 5u) << "each failed step's decode came before the failed chunk";
  EXPECT_EQ(engine.remove_sequence(copying_id).reused_tokens, good.prompt.size());
  GenerateRequest after = copying;
  after.prompt.back() = good.prompt[0];
  after.max_new_tokens = 2;
  const uint64_t after_id = engine.add_sequence(after);
  while (!engine.sequence_finished(after_id)) engine.step_sequences();
  const GenerateResult after_result = engine.remove_sequence(after_id);
  EXPECT_EQ(after_result.reused_tokens, good.prompt.size());
  EXPECT_EQ(after_result.finish_reason, "length");

  while (!engine.sequence_finished(good_id)) engine.step_sequences();
  expect_same_result(engine.remove_sequence(good_id), expected, 0);
}

TEST(BatchDecode, ASequenceWhoseLogitsAreNotFiniteFailsAloneNamingItsId) { expect_non_finite_logits_fail_their_sequence_alone(true); }

TEST(BatchDecode, ASequenceWhoseLogitsAreNotFiniteInAChunkOfItsOwnFailsAlone) {
  expect_non_finite_logits_fail_their_sequence_alone(false);
}

// Continuous batching: five requests through three slots, each joining when a slot frees (mid-way
// through the others' generations), one taken out before it finished; every result that ran to its end
// is generate()'s for its request alone.
TEST(BatchDecode, SequencesJoiningAndLeavingBetweenStepsEachGetWhatGenerateGives) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 3;
  Engine engine(options);
  std::vector<GenerateRequest> requests = mixed_requests();
  GenerateRequest extra = counting_request(9, 77, 7);
  extra.sampling = {.temperature = 0.9f, .top_k = 5, .seed = 3};
  requests.push_back(extra);
  requests.push_back(extra);
  requests.back().sampling.seed = 4;
  requests.back().max_new_tokens = 30;  // taken out after a few steps

  std::vector<GenerateResult> results(requests.size());
  std::vector<std::pair<uint64_t, size_t>> in;  // (sequence id, request)
  size_t next = 0;
  uint32_t steps = 0;
  while (next < requests.size() || !in.empty()) {
    while (next < requests.size() && engine.sequences_in() < options.sequences) {
      in.emplace_back(engine.add_sequence(requests[next]), next);
      ++next;
    }
    engine.step_sequences();
    ++steps;
    for (size_t k = 0; k < in.size();) {
      const bool cut = in[k].second == requests.size() - 1 && steps % 4 == 0;
      if (engine.sequence_finished(in[k].first) || cut) {
        results[in[k].second] = engine.remove_sequence(in[k].first);
        in.erase(in.begin() + ptrdiff_t(k));
      } else {
        ++k;
      }
    }
  }
  EXPECT_EQ(engine.sequences_in(), 0u);
  EngineOptions single = options;
  single.sequences = 1;
  Engine alone(single);
  for (size_t i = 0; i + 1 < requests.size(); ++i) expect_same_result(results[i], alone.generate(requests[i]), i);
  // The one taken out: "stopped", its tokens the beginning of what it would have generated.
  const GenerateResult& cut = results.back();
  EXPECT_EQ(cut.finish_reason, "stopped");
  const GenerateResult whole = alone.generate(requests.back());
  ASSERT_LT(cut.tokens.size(), whole.tokens.size());
  EXPECT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), whole.tokens.begin()));
}

TEST(BatchDecode, ContinuousBatchingRefusals) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 2;
  Engine engine(options);
  GenerateRequest request = counting_request(4, 3, 3);
  GenerateRequest none = request;
  none.max_new_tokens = 0;
  EXPECT_THROW(engine.add_sequence(none), InputError);
  EXPECT_EQ(engine.sequences_in(), 0u);
  const uint64_t a = engine.add_sequence(request);
  const uint64_t b = engine.add_sequence(request);
  EXPECT_NE(a, b);
  EXPECT_THROW(engine.add_sequence(request), InputError);  // both slots taken
  EXPECT_THROW(engine.remove_sequence(a + b + 100), InputError);
  EXPECT_THROW(engine.sequence_finished(a + b + 100), InputError);
  for (const char* call : {"reset", "decode", "generate", "generate_batch"}) {
    std::string message;
    try {
      if (std::string(call) == "reset") engine.reset();
      if (std::string(call) == "decode") engine.decode(1);
      if (std::string(call) == "generate") engine.generate(request);
      if (std::string(call) == "generate_batch") engine.generate_batch({request});
    } catch (const InputError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(std::string("Engine::") + call + " was called while 2 sequence(s) added by add_sequence are in"),
              std::string::npos) << message;
  }
  engine.remove_sequence(a);
  EXPECT_THROW(engine.remove_sequence(a), InputError);  // once only
  const uint64_t c = engine.add_sequence(request);  // the freed slot
  while (engine.step_sequences() > 0) {
  }
  EXPECT_TRUE(engine.sequence_finished(b));
  EXPECT_EQ(engine.remove_sequence(b).tokens.size(), 3u);
  EXPECT_EQ(engine.remove_sequence(c).tokens.size(), 3u);
  EXPECT_EQ(engine.step_sequences(), 0u);  // nothing in: nothing to do
  engine.reset();  // the step API again
  EXPECT_EQ(engine.position(), 0u);
}

// A request that begins with what a removed sequence's slot holds prefills only the rest, and gets what
// generate() with reuse_prefix gives after the same history; an unrelated one reuses nothing.
TEST(BatchDecode, AReusedPrefixPrefillsOnlyTheRestAndGivesWhatGenerateGives) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 2;
  Engine engine(options);
  GenerateRequest first = counting_request(10, 3, 6);
  first.logprobs = 2;
  GenerateRequest other = first;
  other.prompt = counting_prompt(12, 50);
  const uint64_t other_id = engine.add_sequence(other);  // slot 0
  const uint64_t first_id = engine.add_sequence(first);  // slot 1
  while (engine.step_sequences() > 0) {
  }
  engine.remove_sequence(other_id);
  const GenerateResult first_result = engine.remove_sequence(first_id);

  GenerateRequest next = first;  // the conversation's next turn: all of it so far, and more
  next.prompt.insert(next.prompt.end(), first_result.tokens.begin(), first_result.tokens.end());
  for (int32_t t : {7, 8, 9}) next.prompt.push_back(t);
  next.reuse_prefix = true;
  next.max_new_tokens = 5;
  const GenerateResult reused = engine.remove_sequence(engine.add_sequence(next));
  // (a sequence taken out at once ends "stopped"; the tokens it took are compared below)
  EXPECT_EQ(reused.reused_tokens, first.prompt.size() + first_result.tokens.size() - 1);
  const uint64_t whole_id = engine.add_sequence(next);
  while (!engine.sequence_finished(whole_id)) engine.step_sequences();
  const GenerateResult whole = engine.remove_sequence(whole_id);
  EXPECT_EQ(whole.reused_tokens, next.prompt.size() - 1) << "the sequence just removed holds all but the prompt's last token";

  options.sequences = 1;
  Engine alone(options);
  const GenerateResult alone_first = alone.generate(first);
  EXPECT_EQ(alone_first.tokens, first_result.tokens);
  const GenerateResult alone_next = alone.generate(next);
  EXPECT_EQ(alone_next.reused_tokens, reused.reused_tokens);
  ASSERT_GE(alone_next.tokens.size(), 1u);
  EXPECT_EQ(reused.tokens, std::vector<int32_t>(alone_next.tokens.begin(), alone_next.tokens.begin() + 1));
  expect_same_result(whole, alone.generate(next), 0);  // a third turn: alone reuses all but the last token too

  GenerateRequest unrelated = first;
  unrelated.prompt = counting_prompt(5, 200);
  unrelated.reuse_prefix = true;
  EXPECT_EQ(engine.remove_sequence(engine.add_sequence(unrelated)).reused_tokens, 0u);
}

// This process's resident memory, KiB (VmRSS of /proc/self/status).
long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

// The KV caches' memory is committed as the sequences reach it, not every slot's whole context up front:
// an engine of 128 sequences of 1024 positions of the sample (4 layers of 2 KV heads of 32: 256 MiB of
// f32 cache) running two short sequences grows this process by far less than the cache's size.
TEST(BatchDecode, KvCacheMemoryIsCommittedAsSequencesReachIt) {
  const long before = resident_kib();
  EngineOptions options;
  options.threads = 2;
  options.sequences = 128;
  options.max_context = 1024;
  Engine engine(options);
  GenerateRequest request = counting_request(20, 3, 4);
  const std::vector<GenerateResult> results = engine.generate_batch({request, request});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].tokens, results[1].tokens);
  const long grown_kib = resident_kib() - before;
  EXPECT_LT(grown_kib, 96 * 1024) << "the engine of 256 MiB of KV cache made this process " << grown_kib / 1024 << " MiB larger";
}

TEST(BatchDecode, RefusesWhatItCannotRunNamingIt) {
  EngineOptions options;
  options.threads = 2;
  for (uint32_t bad : {0u, 257u}) {
    options.sequences = bad;
    EXPECT_NE(refusal([&] { Engine e(options); }).find("EngineOptions::sequences must be 1 to 256"), std::string::npos);
  }
  // A cache past the machine's memory is refused before anything is allocated (16M positions of 256
  // sequences of the tiny shape: about 8 TiB).
  {
    TempDir dir("batch-huge-context");
    ModelSpec spec = variant_spec(Variant::llama);
    spec.max_context = 1u << 24;
    EngineOptions huge = options;
    huge.model_dir = write_test_model(spec, dir.path()).string();
    huge.max_context = 1u << 24;
    huge.sequences = 256;
    const std::string message = refusal([&] { Engine e(huge); });
    EXPECT_NE(message.find("the KV cache would take"), std::string::npos) << message;
    EXPECT_NE(message.find("lower EngineOptions::max_context (--max-context) or sequences"), std::string::npos) << message;
  }
  options.sequences = 2;
  Engine engine(options);
  const std::vector<int32_t> kept = counting_prompt(4, 1);
  engine.prefill(kept);
  GenerateRequest good;
  good.prompt = counting_prompt(3, 8);
  good.max_new_tokens = 2;
  auto expect_refused = [&](std::vector<GenerateRequest> requests, const std::string& expected) {
    const std::string message = refusal([&] { engine.generate_batch(requests); });
    EXPECT_NE(message.find(expected), std::string::npos) << "got: '" << message << "', expected '" << expected << "'";
    EXPECT_EQ(engine.sequence(), kept) << expected;  // a refused batch leaves the step API's sequence as it was
  };
  expect_refused({}, "generate_batch: no requests");
  expect_refused({good, good, good}, "3 requests, but the engine holds 2 sequences");
  GenerateRequest bad = good;
  bad.prompt = {5, 100000};
  expect_refused({good, bad}, "request 1: token id 100000 is outside the vocabulary");
  bad = good;
  bad.sampling.temperature = -1;
  expect_refused({bad}, "request 0: Sampling::temperature");

  // Calls into the engine from a request's callback are refused, as from generate()'s.
  GenerateRequest calling = good;
  std::string inner;
  calling.on_token = [&](int32_t) { inner = refusal([&] { engine.reset(); }); };
  engine.generate_batch({good, calling});
  EXPECT_NE(inner.find("Engine::reset was called while"), std::string::npos) << inner;
}

}  // namespace
}  // namespace tilefire::testing
