// Prefill of the whole prompt then decode gives the same logits as feeding the prompt token by token, and
// the KV cache carries a sequence across steps without recomputation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/common/adjusted_greedy.h"
#include "tests/common/compare.h"
#include "tests/common/refusal.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

// The built-in sample on two threads, over `tp` ranks, with a 512-position cache.
EngineOptions sample_options(uint32_t tp) {
  EngineOptions options;
  options.threads = 2;
  options.tp = tp;
  options.max_context = 512;
  return options;
}

TEST(PrefillDecode, WholePromptEqualsTokenByToken) {
  EngineOptions options;  // the built-in sample
  options.threads = 2;
  Engine engine(options);
  const std::vector<int32_t> prompt = {10, 200, 300, 4, 5, 66, 77, 8, 9, 100, 11};

  std::vector<float> prefilled = engine.prefill(prompt);
  std::vector<float> after_prefill = engine.decode(123);

  engine.reset();
  std::vector<float> stepped;
  for (int32_t t : prompt) stepped = engine.decode(t);
  std::vector<float> after_steps = engine.decode(123);

  // The two paths tile the same matmuls over different token counts; accumulation order per output is
  // the same (it depends only on K), so they agree to rounding of the attention sums.
  double scale = 0;  // of the token-by-token logits, the reference (not of the values under test)
  for (float v : stepped) scale = std::max(scale, double(std::fabs(v)));
  Mismatches a = compare_close(prefilled, stepped, 1e-5 * scale, 1e-5);
  EXPECT_EQ(a.count, 0u) << "last prompt token's logits\n" << a.first;
  Mismatches b = compare_close(after_prefill, after_steps, 1e-5 * scale, 1e-5);
  EXPECT_EQ(b.count, 0u) << "first decoded token's logits\n" << b.first;
  EXPECT_EQ(engine.position(), prompt.size() + 1);
}

// Prefill at a position past 0 (a second prompt after decoding), and a prompt longer than one prefill
// chunk (128 tokens): the same logits as feeding every token alone.
TEST(PrefillDecode, ChunkedAndLaterPrefillsEqualTokenByToken) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  std::vector<int32_t> long_prompt(300);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = int32_t((i * 131 + 7) % 512);
  const std::vector<int32_t> second = {5, 6, 7, 8, 9, 10, 11};

  std::vector<float> a = engine.prefill(long_prompt);
  engine.decode(42);
  std::vector<float> b = engine.prefill(second);
  EXPECT_EQ(engine.position(), long_prompt.size() + 1 + second.size());

  engine.reset();
  std::vector<float> a_steps, b_steps;
  for (int32_t t : long_prompt) a_steps = engine.decode(t);
  engine.decode(42);
  for (int32_t t : second) b_steps = engine.decode(t);

  double scale = 0;
  for (float v : a_steps) scale = std::max(scale, double(std::fabs(v)));
  Mismatches ma = compare_close(a, a_steps, 1e-5 * scale, 1e-5);
  EXPECT_EQ(ma.count, 0u) << "300-token prompt\n" << ma.first;
  Mismatches mb = compare_close(b, b_steps, 1e-5 * scale, 1e-5);
  EXPECT_EQ(mb.count, 0u) << "prefill at position 301\n" << mb.first;
}

// EngineOptions::prefill_chunk: a 200-token prompt prefilled in chunks of 1, 7, 64 and 128 tokens (the
// last chunk shorter), on one rank and on two, gives the logits of feeding every token alone, and the
// decode step after it too. Out of 1 to 128 it is refused, naming the option.
TEST(PrefillDecode, EveryPrefillChunkSizeGivesTheSameLogits) {
  std::vector<int32_t> prompt(200);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 97 + 3) % 512);
  for (uint32_t tp : {1u, 2u}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    EngineOptions options = sample_options(tp);
    Engine stepped_engine(options);
    std::vector<float> stepped;
    for (int32_t t : prompt) stepped = stepped_engine.decode(t);
    const std::vector<float> stepped_next = stepped_engine.decode(9);
    double scale = 0;
    for (float v : stepped) scale = std::max(scale, double(std::fabs(v)));
    for (uint32_t chunk : {1u, 7u, 64u, 128u}) {
      SCOPED_TRACE("chunks of " + std::to_string(chunk));
      options.prefill_chunk = chunk;
      Engine engine(options);
      const std::vector<float> prefilled = engine.prefill(prompt);
      EXPECT_EQ(engine.position(), prompt.size());
      const std::vector<float> next = engine.decode(9);
      Mismatches a = compare_close(prefilled, stepped, 1e-5 * scale, 1e-5);
      EXPECT_EQ(a.count, 0u) << "the prompt's last logits\n" << a.first;
      Mismatches b = compare_close(next, stepped_next, 1e-5 * scale, 1e-5);
      EXPECT_EQ(b.count, 0u) << "the next step's logits\n" << b.first;
    }
  }
  for (uint32_t bad : {0u, 129u}) {
    EngineOptions options;
    options.threads = 1;
    options.prefill_chunk = bad;
    try {
      Engine engine(options);
      ADD_FAILURE() << "prefill_chunk " << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("EngineOptions::prefill_chunk (--prefill-chunk) must be 1 to 128 prompt tokens, got " +
                                           std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
}

// An engine keeps the programs of its last few prefill lengths (four) and drops the least recently used.
// Prompts of eight lengths in an order that evicts and recompiles, some past a 128-token chunk: each
// prefill and the decode step after it are bitwise what a fresh engine gives, on one rank and on two.
TEST(PrefillDecode, EvictedPrefillProgramsGiveTheSameLogits) {
  const std::vector<uint32_t> lengths = {3, 17, 5, 29, 3, 11, 17, 64, 133, 5, 29, 260, 11, 3};
  for (uint32_t tp : {1u, 2u}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    EngineOptions options = sample_options(tp);
    Engine engine(options);
    for (uint32_t length : lengths) {
      SCOPED_TRACE("a prompt of " + std::to_string(length));
      std::vector<int32_t> prompt(length);
      for (uint32_t i = 0; i < length; ++i) prompt[i] = int32_t((i * 41 + length) % 512);
      engine.reset();
      const std::vector<float> prefilled = engine.prefill(prompt);
      const std::vector<float> decoded = engine.decode(7);
      Engine fresh(options);
      ASSERT_EQ(fresh.prefill(prompt), prefilled);
      ASSERT_EQ(fresh.decode(7), decoded);
    }
  }
}

// GenerateRequest::logprobs: each sampled token's own probability and log-probability
// (GenerateResult::token_probabilities) are those of softmax over the logits the step API gives for the
// same tokens, computed here in double; the most probable tokens' list agrees with it too.
TEST(PrefillDecode, EachSampledTokensProbabilityIsTheSoftmaxOfItsLogits) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {10, 200, 300, 4, 5};
  request.max_new_tokens = 6;
  request.stop_at_eos = false;
  request.sampling = Sampling{.temperature = 1.5f, .seed = 99};  // hot: a sampled token need not be the most probable
  request.logprobs = 3;
  const GenerateResult result = engine.generate(request);
  ASSERT_EQ(result.token_probabilities.size(), result.tokens.size());
  ASSERT_EQ(result.logprobs.size(), result.tokens.size());

  Engine stepped(options);
  std::vector<float> logits = stepped.prefill(request.prompt);
  for (size_t i = 0; i < result.tokens.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    double max_logit = -INFINITY, sum = 0;
    for (float l : logits) max_logit = std::max(max_logit, double(l));
    for (float l : logits) sum += std::exp(double(l) - max_logit);
    auto expected_logprob = [&](int32_t token) { return double(logits[size_t(token)]) - max_logit - std::log(sum); };
    const TokenProbability& chosen = result.token_probabilities[i];
    EXPECT_EQ(chosen.token, result.tokens[i]);
    EXPECT_NEAR(chosen.logprob, expected_logprob(chosen.token), 1e-4);
    EXPECT_NEAR(chosen.probability, std::exp(expected_logprob(chosen.token)), 1e-6);
    for (const TokenProbability& listed : result.logprobs[i]) EXPECT_NEAR(listed.logprob, expected_logprob(listed.token), 1e-4);
    logits = stepped.decode(result.tokens[i]);
  }
}

TEST(PrefillDecode, StepApiRejectsBadTokensBeforeRunning) {
  EngineOptions options;
  options.threads = 1;
  options.max_context = 64;
  Engine engine(options);
  EXPECT_THROW(engine.prefill(std::vector<int32_t>(100000, 1)), InputError);  // past the context
  EXPECT_THROW(engine.prefill({1, 2, 512}), InputError);                      // outside the vocabulary
  EXPECT_THROW(engine.prefill({}), InputError);
  EXPECT_THROW(engine.decode(-1), InputError);
  EXPECT_EQ(engine.position(), 0u);  // nothing ran
  engine.prefill(std::vector<int32_t>(64, 3));
  EXPECT_THROW(engine.decode(1), InputError);  // the context is full
}

TEST(PrefillDecode, RunTwiceIsBitwiseEqual) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = byte_tokens("Hello, Tilefire");
  request.max_new_tokens = 12;
  request.logprobs = 3;
  GenerateResult first = engine.generate(request);
  GenerateResult second = engine.generate(request);
  EXPECT_EQ(first.tokens, second.tokens);
  ASSERT_EQ(first.logprobs.size(), second.logprobs.size());
  for (size_t i = 0; i < first.logprobs.size(); ++i)
    for (size_t k = 0; k < first.logprobs[i].size(); ++k) {
      EXPECT_EQ(first.logprobs[i][k].token, second.logprobs[i][k].token);
      EXPECT_EQ(first.logprobs[i][k].probability, second.logprobs[i][k].probability);
    }
}

TEST(PrefillDecode, SampledGenerationDependsOnlyOnTheSeed) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = byte_tokens("seeded");
  request.max_new_tokens = 16;
  request.sampling.temperature = 1.0f;
  request.sampling.top_k = 50;
  request.sampling.top_p = 0.9f;
  request.sampling.seed = 7;
  GenerateResult a = engine.generate(request);
  GenerateResult b = engine.generate(request);
  EXPECT_EQ(a.tokens, b.tokens);
  request.sampling.seed = 8;
  GenerateResult c = engine.generate(request);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(PrefillDecode, PromptLongerThanTheContextIsAnInputError) {
  EngineOptions options;
  options.threads = 1;
  options.max_context = 8;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = std::vector<int32_t>(9, 1);
  try {
    engine.generate(request);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("context holds 8"), std::string::npos) << e.what();
  }
}

// A refused option's message names the EngineOptions field a program set (and the flag, for the command
// line's users).
TEST(PrefillDecode, RefusedOptionsNameTheField) {
  auto message = [](EngineOptions options) {
    try {
      Engine engine(options);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EngineOptions o;
  o.threads = 1;
  o.tp = 0;
  EXPECT_NE(message(o).find("EngineOptions::tp (--tp) must be at least 1"), std::string::npos) << message(o);
  o = {};
  o.threads = 300;
  EXPECT_NE(message(o).find("EngineOptions::threads (--threads) 300"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.max_context = 1 << 20;
  EXPECT_NE(message(o).find("EngineOptions::max_context (--max-context)"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.policy = "fastest";
  EXPECT_NE(message(o).find("EngineOptions::policy (--policy): unknown placement policy 'fastest'"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.preset = "tiny";
  o.preset_dtype = "f64";
  EXPECT_NE(message(o).find("EngineOptions::preset_dtype (--dtype)"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.stress_delay_us = 4000000000u;  // every task of a step waiting up to an hour would seem to hang
  EXPECT_NE(message(o).find("EngineOptions::stress_delay_us 4000000000"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.cuda_ctas = 64;  // the cpu backend would ignore it
  EXPECT_NE(message(o).find("apply to the cuda backend"), std::string::npos) << message(o);
  o = {};
  o.threads = 1;
  o.cuda_step_deadline_ms = 1000;
  EXPECT_NE(message(o).find("cuda_step_deadline_ms apply to the cuda backend"), std::string::npos) << message(o);
  o = {};
  o.backend = Backend::cuda;
  o.stress_delay_us = 5;  // refused before any GPU is looked for
  EXPECT_NE(message(o).find("EngineOptions::stress_delay_us (--stress-delay-us) applies to the cpu backend only"), std::string::npos)
      << message(o);
}

// Options and sampling values the command line refuses are refused through the API too, before anything
// runs: an option the engine would ignore, or a value no sampler means.
TEST(PrefillDecode, OutOfRangeOptionsAndSamplingAreInputErrors) {
  auto refused = [](EngineOptions options) {
    options.threads = 1;
    EXPECT_THROW(Engine engine(options), InputError);
  };
  EngineOptions o;
  o.kv_splits = 100000;
  refused(o);
  o = {};
  o.tp_timeout_ms = 0;
  refused(o);
  o = {};
  o.schedule = Schedule(9);
  refused(o);
  o = {};
  o.preset_dtype = "bf16";  // without a preset: the sample is f32, so this would be ignored
  refused(o);
  o = {};
  o.model_dir = "/nonexistent";
  o.preset = "tiny";
  refused(o);

  EngineOptions sample;
  sample.threads = 1;
  Engine engine(sample);
  EXPECT_THROW(engine.set_schedule(Schedule(7)), InputError);
  // A refused request leaves the sequence as it was, whatever refused it.
  engine.prefill({1, 2, 3});
  GenerateRequest bad_token;
  bad_token.prompt = {1, 100000};
  EXPECT_THROW(engine.generate(bad_token), InputError);
  GenerateRequest bad_trace;
  bad_trace.prompt = {1, 2};
  bad_trace.trace_path = "/nonexistent/dir/trace.json";
  EXPECT_THROW(engine.generate(bad_trace), InputError);
  EXPECT_EQ(engine.position(), 3u);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float temperature : {-1.0f, nan, inf}) {
    GenerateRequest request;
    request.prompt = {1, 2, 3};
    request.sampling.temperature = temperature;
    EXPECT_THROW(engine.generate(request), InputError) << "temperature " << temperature;
  }
  GenerateRequest too_many;
  too_many.prompt = {1, 2, 3};
  too_many.logprobs = engine.model().vocab + 1;  // the command line refuses it; so does the API
  EXPECT_THROW(engine.generate(too_many), InputError);
  EXPECT_EQ(engine.position(), 3u);
  for (float top_p : {0.0f, -0.5f, 1.5f, nan}) {
    GenerateRequest request;
    request.prompt = {1, 2, 3};
    request.sampling.temperature = 1.0f;
    request.sampling.top_p = top_p;
    EXPECT_THROW(engine.generate(request), InputError) << "top_p " << top_p;
  }
}

// The helpers refuse what they cannot measure with a message, not a crash (threads * 32 overflowed and
// divided by zero) or a silent 0.
TEST(PrefillDecode, MeasuringHelpersRefuseWhatTheyCannotMeasure) {
  EXPECT_THROW(measure_read_bandwidth_gbs(0, 1 << 20), InputError);
  EXPECT_THROW(measure_read_bandwidth_gbs(1u << 27, 1 << 20), InputError);
  EXPECT_THROW(measure_read_bandwidth_gbs(2, 100), InputError);
  EXPECT_THROW(measure_read_bandwidth_gbs(1, 1ull << 62), InputError);
  EXPECT_THROW(measure_compile_ms("tiny", 1u << 20), InputError);
  EXPECT_THROW(write_random_model("tiny", "", "f32", 0), InputError);
  const double gbs = measure_read_bandwidth_gbs(2, 8 << 20);
  EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << gbs;
}

// generate() with a trace ends the sequence where it would without one, and records a step whenever the
// prompt leaves room for one: with one new token (the trace's extra step is taken back), and with a
// prompt one short of the context (the only decode step is the one recorded).
TEST(PrefillDecode, ATraceDoesNotChangeWhereTheSequenceEnds) {
  TempDir dir("trace-position");
  const std::string trace = (dir.path() / "t.json").string();
  EngineOptions options;
  options.threads = 2;
  options.max_context = 16;
  Engine engine(options);
  const std::vector<int32_t> prompt(11, 5);
  for (uint32_t new_tokens : {1u, 2u, 3u}) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_new_tokens = new_tokens;
    request.stop_at_eos = false;
    const GenerateResult plain = engine.generate(request);
    const uint32_t plain_position = engine.position();
    request.trace_path = trace;
    const GenerateResult traced = engine.generate(request);
    EXPECT_TRUE(traced.trace_written) << new_tokens << " new tokens";
    EXPECT_EQ(traced.tokens, plain.tokens) << new_tokens << " new tokens";
    EXPECT_EQ(engine.position(), plain_position) << new_tokens << " new tokens";
  }
  GenerateRequest last;
  last.prompt = std::vector<int32_t>(15, 5);  // room for one decode step
  last.max_new_tokens = 16;
  last.stop_at_eos = false;
  last.trace_path = trace;
  const GenerateResult result = engine.generate(last);
  EXPECT_TRUE(result.trace_written);
  EXPECT_EQ(result.finish_reason, "context");
  EXPECT_EQ(engine.position(), 16u);
}

// A checkpoint whose LM head holds one infinite weight makes one logit infinite. No call returns or
// samples from such logits: prefill, decode, greedy and sampled generation with and without logprobs
// all end with an InputError naming the position.
TEST(PrefillDecode, NonFiniteLogitsAreAnInputErrorOnEveryPath) {
  TempDir dir("nonfinite-logits");
  const std::filesystem::path folder = write_test_model(variant_spec(Variant::llama), dir.path() / "m");
  overwrite_f32(folder, "lm_head.weight", 0, std::numeric_limits<float>::infinity());  // row 0: token 0's logit

  EngineOptions options;
  options.model_dir = folder.string();
  options.threads = 2;
  Engine engine(options);
  auto expect_named = [](const auto& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": no InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << what << ": " << e.what();
    }
  };
  // A call that throws leaves the sequence where it began (its step's KV entries are overwritten later).
  expect_named([&] { engine.prefill({1, 2, 3}); }, "prefill");
  EXPECT_EQ(engine.position(), 0u);
  engine.reset();
  expect_named([&] { engine.decode(1); }, "decode");
  EXPECT_EQ(engine.position(), 0u);
  engine.reset();
  expect_named([&] { engine.decode_greedy(1); }, "decode_greedy");
  EXPECT_EQ(engine.position(), 0u);
  // Two tensor-parallel ranks see the same gathered logits: a greedy step's non-finite logits are the
  // same InputError, not a failed rank that leaves the engine refusing every later step.
  EngineOptions two_ranks = options;
  two_ranks.tp = 2;
  Engine tp_engine(two_ranks);
  for (int attempt = 0; attempt < 2; ++attempt) {
    expect_named([&] { tp_engine.decode_greedy(1); }, "decode_greedy, two ranks");
    EXPECT_EQ(tp_engine.position(), 0u);
  }
  for (uint32_t logprobs : {0u, 2u}) {
    GenerateRequest request;
    request.prompt = {1, 2, 3};
    request.max_new_tokens = 2;
    request.sampling.temperature = 1.0f;
    request.logprobs = logprobs;
    expect_named([&] { engine.generate(request); }, logprobs ? "sampled generate with logprobs" : "sampled generate");
  }
}

// generate() and its on_token callback: a call into the engine from the callback would move the sequence
// under the running generate(), so every such call is refused, and the generation goes on unharmed.
TEST(PrefillDecode, GenerateRefusesCallsIntoTheEngineFromItsCallback) {
  EngineOptions options;
  options.threads = 1;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {5, 6, 7, 8};
  request.max_new_tokens = 4;
  request.stop_at_eos = false;
  const GenerateResult alone = engine.generate(request);
  std::vector<std::string> refusals;
  auto refused = [&](const auto& call) {
    try {
      call();
    } catch (const InputError& e) {
      refusals.push_back(e.what());
    }
  };
  request.on_token = [&](int32_t) {
    refused([&] { engine.generate(request); });
    refused([&] { engine.reset(); });
    refused([&] { engine.rewind(1); });
    refused([&] { engine.prefill({1}); });
    refused([&] { engine.decode(1); });
    refused([&] { engine.decode_greedy(1); });
    refused([&] { engine.set_schedule(Schedule::bsp); });
  };
  const GenerateResult with_callback = engine.generate(request);
  ASSERT_EQ(refusals.size(), 7u * 4u);
  EXPECT_NE(refusals[1].find("Engine::reset was called while Engine::generate runs"), std::string::npos) << refusals[1];
  EXPECT_EQ(with_callback.tokens, alone.tokens);
  std::vector<int32_t> expected_sequence = request.prompt;
  expected_sequence.insert(expected_sequence.end(), alone.tokens.begin(), alone.tokens.end() - 1);
  EXPECT_EQ(engine.sequence(), expected_sequence);
  engine.reset();  // usable again once generate() has returned
  EXPECT_EQ(engine.position(), 0u);
}

// stop_when sees every token generated so far, after on_token, and ends the generation on the first true:
// the tokens are those of the full generation up to there, the cache holds all but the last (as after any
// generate), and a token that is also a stop token reads "eos".
TEST(PrefillDecode, StopWhenEndsTheGenerationAfterTheTokenItSees) {
  EngineOptions options;
  options.threads = 1;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {5, 6, 7, 8};
  request.max_new_tokens = 8;
  request.stop_at_eos = false;
  const GenerateResult full = engine.generate(request);
  ASSERT_EQ(full.tokens.size(), 8u);
  for (size_t stop_at : {size_t(1), size_t(3)}) {
    std::vector<int32_t> delivered;
    std::vector<size_t> seen_sizes;
    request.on_token = [&](int32_t token) { delivered.push_back(token); };
    request.stop_when = [&](const std::vector<int32_t>& generated) {
      EXPECT_EQ(generated, delivered) << "asked after on_token, with every token so far";
      seen_sizes.push_back(generated.size());
      EXPECT_THROW(engine.reset(), InputError) << "no calls into the engine from stop_when";
      return generated.size() == stop_at;
    };
    const GenerateResult stopped = engine.generate(request);
    EXPECT_EQ(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + stop_at));
    EXPECT_EQ(stopped.finish_reason, "stopped");
    EXPECT_EQ(seen_sizes.size(), stop_at);
    std::vector<int32_t> expected_sequence = request.prompt;
    expected_sequence.insert(expected_sequence.end(), stopped.tokens.begin(), stopped.tokens.end() - 1);
    EXPECT_EQ(engine.sequence(), expected_sequence) << "stopped at " << stop_at;
  }
  request.on_token = nullptr;
  request.stop_tokens = {full.tokens[0]};
  request.stop_when = [](const std::vector<int32_t>&) { return true; };
  EXPECT_EQ(engine.generate(request).finish_reason, "eos") << "eos before stopped";
}

// on_probabilities streams what the result will hold: each token's own probability and the K most probable,
// bitwise the result's entries, just before on_token gets that token; without logprobs it is refused.
TEST(PrefillDecode, OnProbabilitiesGivesEachTokensEntriesBeforeOnToken) {
  EngineOptions options;
  options.threads = 2;
  Engine engine(options);
  GenerateRequest request;
  request.prompt = {5, 6, 7, 8};
  request.max_new_tokens = 6;
  request.stop_at_eos = false;
  request.sampling.temperature = 0.8f;
  request.sampling.seed = 7;
  request.logprobs = 3;
  std::vector<TokenProbability> chosen;
  std::vector<std::vector<TokenProbability>> most_probable;
  std::vector<int32_t> delivered;
  request.on_probabilities = [&](const TokenProbability& c, const std::vector<TokenProbability>& top) {
    EXPECT_EQ(chosen.size(), delivered.size()) << "one call per token, before that token's on_token";
    chosen.push_back(c);
    most_probable.push_back(top);
  };
  request.on_token = [&](int32_t token) {
    ASSERT_FALSE(chosen.empty());
    EXPECT_EQ(chosen.back().token, token);
    delivered.push_back(token);
  };
  const GenerateResult result = engine.generate(request);
  ASSERT_EQ(result.tokens.size(), 6u);
  EXPECT_EQ(delivered, result.tokens);
  ASSERT_EQ(chosen.size(), result.token_probabilities.size());
  ASSERT_EQ(most_probable.size(), result.logprobs.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    EXPECT_EQ(chosen[i].token, result.token_probabilities[i].token);
    EXPECT_EQ(chosen[i].logprob, result.token_probabilities[i].logprob);
    EXPECT_EQ(chosen[i].probability, result.token_probabilities[i].probability);
    ASSERT_EQ(most_probable[i].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(most_probable[i][k].token, result.logprobs[i][k].token);
      EXPECT_EQ(most_probable[i][k].logprob, result.logprobs[i][k].logprob);
    }
  }
  request.logprobs = 0;  // the callback would never be called: refused, naming what to ask for
  const std::string refused = refusal([&] { engine.generate(request); });
  EXPECT_NE(refused.find("on_probabilities is set but logprobs is 0"), std::string::npos) << "'" << refused << "'";
}

// A request's logit bias and penalties, greedy, against the step API's logits adjusted by a reference; a
// value out of its range is refused naming the field.
TEST(PrefillDecode, LogitBiasAndPenaltiesAreAppliedAsTheReferenceDoes) {
  TempDir dir("adjusted-greedy");  // random weights: the built-in sample's choices are too sure to move
  EngineOptions options;
  options.model_dir = write_test_model(variant_spec(Variant::llama), dir.path()).string();
  options.threads = 2;
  Engine engine(options);
  expect_adjusted_greedy_matches_reference(engine, {5, 6, 7, 8, 5, 6}, 12);
  const std::vector<std::pair<std::function<void(Sampling&)>, std::string>> refused = {
      {[](Sampling& s) { s.min_p = 1.5f; }, "min_p (--min-p) must be from 0"},
      {[](Sampling& s) { s.repetition_penalty = 0.0f; }, "repetition_penalty (--repetition-penalty) must be above 0"},
      {[](Sampling& s) { s.presence_penalty = 2.5f; }, "presence_penalty (--presence-penalty) must be from -2 to 2"},
      {[](Sampling& s) { s.frequency_penalty = std::nanf(""); }, "frequency_penalty (--frequency-penalty) must be from -2 to 2"},
      {[](Sampling& s) { s.logit_bias = {{-1, 1.0f}}; }, "names token -1, outside the vocabulary"},
      {[](Sampling& s) { s.logit_bias = {{3, 101.0f}}; }, "gives token 3 a bias of 101"}};
  for (const auto& [spoil, message] : refused) {
    GenerateRequest bad = adjusted_greedy_request({5, 6}, 2, false);
    spoil(bad.sampling);
    const std::string refused = refusal([&] { engine.generate(bad); });
    EXPECT_NE(refused.find(message), std::string::npos) << "expected '" << message << "', got '" << refused << "'";
  }
}

// A stop token no model output can be (the wrong tokenizer's id) would silently never stop anything; a
// request with nothing to generate leaves the cached sequence alone, reuse_prefix or not.
TEST(PrefillDecode, GenerateRefusesStopTokensOutsideTheVocabularyAndKeepsTheSequenceForZeroTokens) {
  EngineOptions options;
  options.threads = 1;
  Engine engine(options);
  engine.prefill({5, 6, 7, 8, 9, 10});
  const std::vector<int32_t> before = engine.sequence();
  GenerateRequest request;
  request.prompt = {5, 6, 7};
  for (int32_t stop : {-1, int32_t(engine.model().vocab)}) {
    request.stop_tokens = {2, stop};
    try {
      engine.generate(request);
      ADD_FAILURE() << "stop token " << stop << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("GenerateRequest::stop_tokens holds " + std::to_string(stop)), std::string::npos) << e.what();
    }
    EXPECT_EQ(engine.sequence(), before);
  }
  request.stop_tokens = {2};
  request.max_new_tokens = 0;
  for (bool reuse : {false, true}) {
    request.reuse_prefix = reuse;
    const GenerateResult result = engine.generate(request);
    EXPECT_TRUE(result.tokens.empty());
    EXPECT_EQ(result.finish_reason, "length");
    EXPECT_EQ(result.reused_tokens, 0u);
    EXPECT_EQ(engine.sequence(), before) << "reuse_prefix " << reuse;
  }
}

// NaN logits found while generate() runs: the sequence goes back to where the failing step began, which
// with reuse_prefix keeps the cached prefix (token 300's embedding is NaN, so a step that feeds it fails).
TEST(PrefillDecode, NonFiniteLogitsInGenerateLeaveTheSequenceWhereTheFailingStepBegan) {
  TempDir dir("nonfinite-embedding");
  const std::filesystem::path folder = write_test_model(variant_spec(Variant::llama), dir.path() / "m");
  const int32_t poisoned = 300;
  overwrite_f32(folder, "model.embed_tokens.weight", uint64_t(poisoned) * variant_spec(Variant::llama).hidden,
                std::numeric_limits<float>::quiet_NaN());

  EngineOptions options;
  options.model_dir = folder.string();
  options.threads = 1;
  Engine engine(options);
  engine.prefill({5, 6, 7});
  GenerateRequest request;
  request.prompt = {5, 6, 7, poisoned};
  request.reuse_prefix = true;
  for (float temperature : {0.0f, 1.0f}) {  // greedy and sampled pick their tokens on different paths
    request.sampling.temperature = temperature;
    EXPECT_THROW(engine.generate(request), InputError);
    EXPECT_EQ(engine.sequence(), (std::vector<int32_t>{5, 6, 7})) << "temperature " << temperature;
  }
}

}  // namespace
}  // namespace tilefire::testing
