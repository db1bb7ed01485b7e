// The cuda backend end to end, against the cpu backend on the same checkpoint: logits within tolerance
// after a prefill and at every decode step, the same greedy tokens, bitwise the same logits across the
// cuda backend's own modes (launch, resident, bsp, dynamic queue, weights staged or not) and across runs,
// and the launch count per decode step (1, or 0 when resident). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/adjusted_greedy.h"
#include "tests/common/cli_runner.h"
#include "tests/common/cuda_device.h"
#include "tests/common/compare.h"
#include "tests/common/random_shapes.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

struct Trajectory {
  std::vector<std::vector<float>> logits;  // after the prefill, then after each decode step
  std::vector<int32_t> tokens;             // greedy choices
};

// Prefill `prompt`, then decode `steps` tokens greedily, keeping every step's logits.
Trajectory run_trajectory(Engine& engine, const std::vector<int32_t>& prompt, uint32_t steps) {
  Trajectory t;
  engine.reset();
  t.logits.push_back(engine.prefill(prompt));
  for (uint32_t s = 0; s < steps; ++s) {
    const std::vector<float>& last = t.logits.back();
    const int32_t token = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    t.tokens.push_back(token);
    t.logits.push_back(engine.decode(token));
  }
  return t;
}

void expect_close_to_cpu(const Trajectory& cuda, const Trajectory& cpu, double tolerance) {
  ASSERT_EQ(cuda.logits.size(), cpu.logits.size());
  for (size_t s = 0; s < cpu.logits.size(); ++s) {
    const double error = relative_l2_error(cuda.logits[s], cpu.logits[s]);
    EXPECT_LT(error, tolerance) << "step " << s << ": relative L2 error of the logits against the cpu backend";
    if (s < cpu.tokens.size() && clear_winner(cpu.logits[s], 1e-2f)) {
      EXPECT_EQ(cuda.tokens[s], cpu.tokens[s]) << "greedy token of step " << s;
    }
  }
}

void expect_bitwise_equal(const Trajectory& a, const Trajectory& b, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size(); ++s)
    ASSERT_EQ(a.logits[s], b.logits[s]) << what << ": logits of step " << s << " are not bitwise equal";
}

std::vector<int32_t> prompt_of(uint32_t length, uint32_t vocab) {
  std::vector<int32_t> prompt(length);
  for (uint32_t i = 0; i < length; ++i) prompt[i] = int32_t((i * 131 + 7) % vocab);
  return prompt;
}

EngineOptions cuda_options(const std::string& model_dir) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.backend = Backend::cuda;
  o.max_context = 256;
  return o;
}

class CudaEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!CudaExecutor::unavailable_reason().empty()) return;
    dir_ = new TempDir("cuda_engine_test");
    write_random_model("tiny", dir_->path().string(), "bf16", 11);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static void expect_chunks_in_the_decode_step_match_each_alone(uint32_t chunk, uint32_t kv_splits);
};
TempDir* CudaEngine::dir_ = nullptr;

// The tiny preset: a prompt of 21 tokens (prefill passes of 4 tokens and a remainder), 12 decode steps.
TEST_F(CudaEngine, TinyMatchesTheCpuBackendInEveryMode) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions cpu_options = cuda_options(dir_->path().string());
  cpu_options.backend = Backend::cpu;
  Engine cpu(cpu_options);
  const std::vector<int32_t> prompt = prompt_of(21, cpu.model().vocab);
  const Trajectory reference = run_trajectory(cpu, prompt, 12);

  Engine launch(cuda_options(dir_->path().string()));
  const Trajectory first = run_trajectory(launch, prompt, 12);
  expect_close_to_cpu(first, reference, 2e-3);
  expect_bitwise_equal(first, run_trajectory(launch, prompt, 12), "a second run");

  launch.set_schedule(Schedule::bsp);
  expect_bitwise_equal(first, run_trajectory(launch, prompt, 12), "bsp");

  EngineOptions resident = cuda_options(dir_->path().string());
  resident.cuda_resident = true;
  Engine resident_engine(resident);
  expect_bitwise_equal(first, run_trajectory(resident_engine, prompt, 12), "resident");

  EngineOptions direct = cuda_options(dir_->path().string());
  direct.cuda_stage_weights = false;
  Engine direct_engine(direct);
  expect_bitwise_equal(first, run_trajectory(direct_engine, prompt, 12), "weights not staged");

  EngineOptions dynamic = cuda_options(dir_->path().string());
  dynamic.policy = "dynamic";
  Engine dynamic_engine(dynamic);
  expect_bitwise_equal(first, run_trajectory(dynamic_engine, prompt, 12), "dynamic ready queue");
}

// A variant's checkpoint (bf16) on the device against the cpu: a 21-token prompt and 8 decode steps.
void expect_variant_matches_the_cpu_backend(Variant variant) {
  TempDir dir(std::string("cuda-") + variant_name(variant));
  write_test_model(variant_spec(variant), dir.path(), DType::bf16);
  EngineOptions cpu_options = cuda_options(dir.path().string());
  cpu_options.backend = Backend::cpu;
  Engine cpu(cpu_options);
  const std::vector<int32_t> prompt = prompt_of(21, cpu.model().vocab);
  const Trajectory reference = run_trajectory(cpu, prompt, 8);
  Engine cuda(cuda_options(dir.path().string()));
  expect_close_to_cpu(run_trajectory(cuda, prompt, 8), reference, 2e-3);
}

// Phi-3 with LongRoPE and a partial rotation on the device: its fused projections read as views, the long
// factors (256 positions are past its pretrained 64), the scores' factor and the rotated share of each head
// (24 of 32) reach the kernel through the Program as on the cpu.
TEST_F(CudaEngine, Phi3WithLongRopeMatchesTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_variant_matches_the_cpu_backend(Variant::phi3_partial);
}

// Sliding-window attention on the device: a 40-token prompt prefilled on tensor cores (its 16-token
// blocks see windows of 7 that start inside a block of keys) and in chunks of 5, then 8 decode steps
// (whole windows, and split-KV chunks of each window), Qwen2's layers one full and one of window 4,
// against the cpu.
TEST_F(CudaEngine, SlidingWindowsMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (Variant variant : {Variant::mistral_window, Variant::qwen2_window}) {
    SCOPED_TRACE(variant_name(variant));
    TempDir dir(std::string("cuda-") + variant_name(variant));
    write_test_model(variant_spec(variant), dir.path(), DType::bf16);
    EngineOptions cpu_options = cuda_options(dir.path().string());
    cpu_options.backend = Backend::cpu;
    Engine cpu(cpu_options);
    const std::vector<int32_t> prompt = prompt_of(40, cpu.model().vocab);
    const Trajectory reference = run_trajectory(cpu, prompt, 8);
    for (const auto& [chunk, kv_splits] : {std::pair{128u, 0u}, {5u, 3u}}) {
      SCOPED_TRACE("prefill chunk " + std::to_string(chunk) + ", kv splits " + std::to_string(kv_splits));
      EngineOptions options = cuda_options(dir.path().string());
      options.prefill_chunk = chunk;
      options.kv_splits = kv_splits;
      Engine cuda(options);
      expect_close_to_cpu(run_trajectory(cuda, prompt, 8), reference, 2e-3);
    }
  }
}

// SmolLM3 (tied, its second layer NoPE) on the device end to end. At this model's small scores a NoPE
// layer rotated by mistake stays within the trajectory's tolerance (tried): the unrotated q and k are
// checked at the op, CudaOps.QkvProjectionMatchesCpu, and the cpu's NoPE against the reference.
TEST_F(CudaEngine, SmolLM3NoPeLayerMatchesTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_variant_matches_the_cpu_backend(Variant::smollm3);
}

// Granite (tied; embedding, residual, attention and logits multipliers) on the device end to end: a
// factor left out moves the logits far past the tolerance (the logits' alone by a factor of 3).
TEST_F(CudaEngine, GraniteMultipliersMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_variant_matches_the_cpu_backend(Variant::granite);
}

// Gemma 3 on the device end to end: sandwich norms (norm_residual after the O and down projections),
// GeGLU, (1 + w) norms, a sliding layer at its own RoPE base.
TEST_F(CudaEngine, Gemma3MatchesTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_variant_matches_the_cpu_backend(Variant::gemma3);
}

// Gemma 2 on the device end to end: the soft caps on every attention path's scores and on the LM head's
// logits (the fused greedy reduction over capped logits), every other layer sliding.
TEST_F(CudaEngine, Gemma2SoftCapsMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  expect_variant_matches_the_cpu_backend(Variant::gemma2);
}

// EngineOptions::prefill_chunk on the device: a 150-token prompt prefilled in chunks of 7 (21 of them and
// a remainder of 3) and of 128 (and 22), then 4 decode steps, against the cpu backend's default chunks.
TEST_F(CudaEngine, PrefillChunksOfEverySizeMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions cpu_options = cuda_options(dir_->path().string());
  cpu_options.backend = Backend::cpu;
  Engine cpu(cpu_options);
  const std::vector<int32_t> prompt = prompt_of(150, cpu.model().vocab);
  const Trajectory reference = run_trajectory(cpu, prompt, 4);
  for (uint32_t chunk : {7u, 128u}) {
    SCOPED_TRACE("chunks of " + std::to_string(chunk));
    EngineOptions options = cuda_options(dir_->path().string());
    options.prefill_chunk = chunk;
    Engine engine(options);
    expect_close_to_cpu(run_trajectory(engine, prompt, 4), reference, 2e-3);
  }
}

// What the device cannot hold is refused before anything is uploaded, naming what to lower: a KV cache of
// 256 GiB (2 layers of 2 KV heads of 32, 2^21 positions, 128 sequences; more than an H200's memory and
// the emulation's 16 GiB), and more sequences than a step's tokens can carry to the kernel.
TEST_F(CudaEngine, WhatTheGpuCannotHoldIsRefusedNamingWhatToLower) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  TempDir dir("cuda-memory");
  ModelSpec spec = variant_spec(Variant::llama);
  spec.max_context = 1u << 21;
  EngineOptions options = cuda_options(write_test_model(spec, dir.path()).string());
  options.max_context = 1u << 21;
  options.sequences = 128;
  auto refusal = [](const EngineOptions& o) -> std::string {
    try {
      Engine engine(o);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(not refused)";
  };
  const std::string memory = refusal(options);
  for (const char* expected : {"--backend cuda: GPU 0 (", " free, and the model's weights take ", "the KV cache 256.00 GiB (K and V of 2 layers",
                               "lower EngineOptions::max_context (--max-context) or sequences"})
    EXPECT_NE(memory.find(expected), std::string::npos) << "'" << expected << "' in: " << memory;
  options.max_context = 256;
  options.sequences = 129;
  const std::string sequences = refusal(options);
  EXPECT_NE(sequences.find("EngineOptions::sequences 129 on the cuda backend: at most 128"), std::string::npos) << sequences;
}

// Tensor parallelism on one GPU: 2 and 4 ranks as executors of this process sharing its SMs (virtual
// ranks), their collective tiles over windows in device memory. The same tokens and logits within
// tolerance as the cpu backend on one rank; bitwise the same across runs and across dataflow and bsp
// for a fixed TP; the greedy token reduced on the device over the gathered logits matches them.
TEST_F(CudaEngine, TensorParallelVirtualRanksMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions cpu_options = cuda_options(dir_->path().string());
  cpu_options.backend = Backend::cpu;
  Engine cpu(cpu_options);
  const std::vector<int32_t> prompt = prompt_of(13, cpu.model().vocab);
  const Trajectory reference = run_trajectory(cpu, prompt, 8);
  for (uint32_t tp : {2u, 4u}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    EngineOptions o = cuda_options(dir_->path().string());
    o.tp = tp;
    Engine engine(o);
    EXPECT_EQ(engine.tensor_parallel_ranks(), tp);
    const Trajectory first = run_trajectory(engine, prompt, 8);
    expect_close_to_cpu(first, reference, 2e-3);
    expect_bitwise_equal(first, run_trajectory(engine, prompt, 8), "a second run");
    engine.set_schedule(Schedule::bsp);
    expect_bitwise_equal(first, run_trajectory(engine, prompt, 8), "bsp");
    engine.set_schedule(Schedule::dataflow);
    engine.reset();
    engine.prefill(prompt);
    for (uint32_t s = 0; s < first.tokens.size(); ++s) {
      const int32_t greedy = engine.decode_greedy(first.tokens[s]);
      if (s + 1 < first.tokens.size()) {
        EXPECT_EQ(greedy, first.tokens[s + 1]) << "device greedy token after step " << s;
      }
    }
  }
}

TEST_F(CudaEngine, GreedyArgmaxOnTheDeviceMatchesTheLogits) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  Engine engine(cuda_options(dir_->path().string()));
  engine.prefill(prompt_of(5, engine.model().vocab));
  int32_t token = 3;
  std::vector<int32_t> decoded;  // the tokens decoded so far, to rebuild the same cache
  for (int s = 0; s < 6; ++s) {
    const std::vector<float> logits = engine.decode(token);
    const int32_t expected = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    // The same step again from the same cache: the device's argmax must pick the same token.
    engine.reset();
    engine.prefill(prompt_of(5, engine.model().vocab));
    for (int32_t earlier : decoded) engine.decode(earlier);
    EXPECT_EQ(engine.decode_greedy(token), expected) << "step " << s;
    decoded.push_back(token);
    token = expected;
  }
}

// A request with logit bias and penalties takes its logits to the host (no device argmax), and chooses
// as the reference does from the step API's logits.
TEST_F(CudaEngine, LogitBiasAndPenaltiesAreAppliedAsTheReferenceDoes) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  Engine engine(cuda_options(dir_->path().string()));
  expect_adjusted_greedy_matches_reference(engine, prompt_of(6, engine.model().vocab), 10);
}

// A prompt's logprobs: every row of each prefill chunk through the LM head (in passes of the tokens a
// pass holds) and back to the host, as the cpu backend scores them within bf16's rounding; asking for
// them changes no token generated after.
TEST_F(CudaEngine, PromptLogprobsMatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions options = cuda_options(dir_->path().string());
  options.prefill_chunk = 16;  // 30 tokens: a chunk of 16 and one of 14
  Engine cuda(options);
  options.backend = Backend::cpu;
  Engine cpu(options);
  GenerateRequest request;
  request.prompt = prompt_of(30, cpu.model().vocab);
  request.max_new_tokens = 4;
  request.stop_at_eos = false;
  const std::vector<int32_t> plain = cuda.generate(request).tokens;
  request.prompt_logprobs = 2;
  const GenerateResult expected = cpu.generate(request);
  ASSERT_EQ(expected.prompt_token_probabilities.size(), 29u);
  auto expect_close = [&](const GenerateResult& got) {
    ASSERT_EQ(got.prompt_token_probabilities.size(), 29u);
    for (size_t i = 0; i < 29; ++i) {
      EXPECT_EQ(got.prompt_token_probabilities[i].token, request.prompt[i + 1]);
      EXPECT_NEAR(got.prompt_token_probabilities[i].logprob, expected.prompt_token_probabilities[i].logprob, 2e-2) << "token " << i + 1;
      ASSERT_EQ(got.prompt_logprobs[i].size(), 2u);
      EXPECT_NEAR(got.prompt_logprobs[i][0].logprob, expected.prompt_logprobs[i][0].logprob, 2e-2) << "token " << i + 1;
    }
  };
  const GenerateResult got = cuda.generate(request);
  EXPECT_EQ(got.tokens, plain) << "asking for the prompt's logprobs changed the generation";
  expect_close(got);
  // Two virtual ranks: each row's vocabulary shares gathered from both ranks' windows.
  options.backend = Backend::cuda;
  options.tp = 2;
  Engine ranks(options);
  SCOPED_TRACE("tp 2");
  expect_close(ranks.generate(request));
}

// Speculative decoding on the device: a check step's rows come from a prefill program with every row's
// logits copied back, where a decode step reduces the argmax on the device; the reply is the plain one,
// drafted by prompt lookup and by a draft model.
// This prompt's reply takes 5 of 12 drafted tokens on the cpu backend.
TEST_F(CudaEngine, SpeculationGivesThePlainReply) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  Engine cuda(cuda_options(dir_->path().string()));
  GenerateRequest request;
  request.prompt = byte_tokens("Once upon a time");
  request.max_new_tokens = 40;
  const GenerateResult plain = cuda.generate(request);
  const std::vector<int32_t> plain_sequence = cuda.sequence();
  request.speculation = {6, 3, 1};
  const GenerateResult got = cuda.generate(request);
  EXPECT_EQ(got.tokens, plain.tokens);
  EXPECT_EQ(cuda.sequence(), plain_sequence);
  EXPECT_GT(got.accepted_tokens, 0u) << "no draft was taken: the check step's rows went unused";
  EXPECT_LT(got.decode_steps, plain.decode_steps);

  // A draft model on the device too (the same checkpoint: its greedy drafts are the model's own), beside
  // the model in launch mode; a resident kernel holds every SM, so a draft model beside it is refused.
  EngineOptions options = cuda_options(dir_->path().string());
  options.draft.model_dir = dir_->path().string();
  Engine drafting(options);
  request.speculation = {4, 3, 2, DraftSource::draft_model};
  const GenerateResult drafted = drafting.generate(request);
  EXPECT_EQ(drafted.tokens, plain.tokens);
  EXPECT_GT(drafted.draft_tokens, 0u);
  EXPECT_EQ(drafted.accepted_tokens, drafted.draft_tokens) << "the model turned down its own greedy draft";
  options.cuda_resident = true;
  try {
    Engine refused(options);
    ADD_FAILURE() << "a draft model beside a resident kernel was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("with cuda_resident (--resident)"), std::string::npos) << e.what();
  }
}

// Speculation in a batch on the device: each sequence's draft rows go through the batched program beside
// the others' (past 4 rows, on the tensor-core path), their logits copied back. The replies are plain
// batched decoding's. (A launch per step: BatchedSequencesMatchEachAlone checks the resident kernel's.)
TEST_F(CudaEngine, BatchedSpeculationGivesThePlainReplies) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions options = cuda_options(dir_->path().string());
  options.sequences = 2;
  Engine cuda(options);
  std::vector<GenerateRequest> requests(2);
  requests[0].prompt = byte_tokens("Once upon a time");
  requests[1].prompt = byte_tokens("Once upon a time, the");
  for (GenerateRequest& request : requests) request.max_new_tokens = 40;
  const std::vector<GenerateResult> plain = cuda.generate_batch(requests);
  for (GenerateRequest& request : requests) request.speculation = {6, 3, 1};
  const std::vector<GenerateResult> got = cuda.generate_batch(requests);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i].tokens) << "request " << i;
  EXPECT_GT(got[0].accepted_tokens + got[1].accepted_tokens, 0u)
      << "no draft was taken: the draft rows went unused; drafted " << got[0].draft_tokens << ", " << got[1].draft_tokens;
}

TEST_F(CudaEngine, OneLaunchPerDecodeStepAndNoneWhenResident) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (bool resident : {false, true}) {
    EngineOptions o = cuda_options(dir_->path().string());
    o.cuda_resident = resident;
    Engine engine(o);
    engine.prefill(prompt_of(6, engine.model().vocab));
    int32_t token = engine.decode_greedy(1);  // a resident kernel is running from here on
    const uint64_t before = engine.kernel_launches();
    for (int s = 0; s < 10; ++s) token = engine.decode_greedy(token);
    EXPECT_EQ(engine.kernel_launches() - before, resident ? 0u : 10u) << (resident ? "resident" : "launch per step");
  }
}

// Batched decoding on the device: six sequences of different lengths, so steps of 6 down to 1 tokens run
// (past 4 tokens the matrices go through the tensor-core path and the LM head in passes), their KV in six
// slots. Each sequence's tokens and probabilities against the same request alone on the cuda backend,
// for as long as alone's top token leads clearly (the paths round differently); bitwise the same across
// launch and resident modes (the mailbox carries the positions and slots there) and split-KV attention.
// `count` requests of different prompt and reply lengths, each with its whole distribution per token.
std::vector<GenerateRequest> batch_requests(size_t count, uint32_t vocab) {
  std::vector<GenerateRequest> requests(count);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = prompt_of(uint32_t(3 + 4 * i), vocab);
    requests[i].prompt[0] = int32_t(i);  // prompts that differ from their first token
    requests[i].max_new_tokens = uint32_t(2 + i);
    requests[i].logprobs = vocab;  // the whole distribution, by token below
    requests[i].stop_at_eos = false;
  }
  return requests;
}

// Step t's probabilities of a result, indexed by token.
std::vector<float> distribution(const GenerateResult& r, size_t t, uint32_t vocab) {
  std::vector<float> p(vocab, 0.0f);
  for (const TokenProbability& tp : r.logprobs[t]) p[size_t(tp.token)] = tp.probability;
  return p;
}

// Each batched result against the same request generated alone: the probabilities within 2e-3 (relative
// L2), the tokens equal for as long as alone's top token leads clearly. Returns the tokens compared.
uint32_t expect_batch_close_to_alone(const std::vector<GenerateResult>& results, Engine& alone,
                                     const std::vector<GenerateRequest>& requests) {
  const uint32_t vocab = alone.model().vocab;
  uint32_t compared = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const GenerateResult expected = alone.generate(requests[i]);
    EXPECT_EQ(results[i].tokens.size(), expected.tokens.size());
    for (size_t t = 0; t < std::min(expected.tokens.size(), results[i].tokens.size()); ++t) {
      EXPECT_LT(relative_l2_error(distribution(results[i], t, vocab), distribution(expected, t, vocab)), 2e-3) << "token " << t;
      ++compared;
      if (results[i].tokens[t] != expected.tokens[t]) {  // only where alone's top token does not lead clearly
        EXPECT_LT(expected.logprobs[t][0].probability - expected.logprobs[t][1].probability, 1e-3) << "token " << t;
        break;  // the sequences differ from here: nothing more to compare
      }
    }
  }
  return compared;
}

TEST_F(CudaEngine, BatchedSequencesMatchEachAlone) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions options = cuda_options(dir_->path().string());
  Engine alone(options);
  const uint32_t vocab = alone.model().vocab;
  const std::vector<GenerateRequest> requests = batch_requests(6, vocab);
  options.sequences = 6;
  Engine batched(options);
  const std::vector<GenerateResult> results = batched.generate_batch(requests);
  EXPECT_GE(expect_batch_close_to_alone(results, alone, requests), 15u);
  auto expect_same_bits = [&](EngineOptions other, const char* what) {
    Engine engine(other);
    const std::vector<GenerateResult> again = engine.generate_batch(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(again[i].tokens, results[i].tokens) << what << ", request " << i;
      for (size_t t = 0; t < results[i].logprobs.size(); ++t)
        EXPECT_EQ(again[i].logprobs[t][0].probability, results[i].logprobs[t][0].probability) << what << ", request " << i;
    }
  };
  EngineOptions resident = options;
  resident.cuda_resident = true;
  expect_same_bits(resident, "resident");
  EngineOptions split = options;
  split.kv_splits = 1;  // the default splits on the device: one tile per head instead
  Engine unsplit(split);
  const std::vector<GenerateResult> unsplit_results = unsplit.generate_batch(requests);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_LT(relative_l2_error(distribution(unsplit_results[i], 0, vocab), distribution(results[i], 0, vocab)), 2e-3)
        << "request " << i;
}

// Prompts joining sequences that decode, their chunks in the decode steps' program (EngineOptions::
// prefill_in_decode_step), with the decode rows on the tensor-core matrices and the chunk's attention row
// by row: chunks of 8, split over KV positions (the default on the device), and chunks of 16 unsplit. Each
// result against the same request alone, a launch per step and resident; the resident run bitwise the
// launched one.
TEST_F(CudaEngine, ChunksInTheDecodeStepMatchEachAlone) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (const auto& [chunk, kv_splits] : {std::pair{8u, 0u}, {16u, 1u}}) {
    SCOPED_TRACE("chunks of " + std::to_string(chunk) + ", kv_splits " + std::to_string(kv_splits));
    expect_chunks_in_the_decode_step_match_each_alone(chunk, kv_splits);
  }
}

void CudaEngine::expect_chunks_in_the_decode_step_match_each_alone(uint32_t chunk, uint32_t kv_splits) {
  EngineOptions options = cuda_options(dir_->path().string());
  options.kv_splits = kv_splits;
  Engine alone(options);
  std::vector<GenerateRequest> requests = batch_requests(3, alone.model().vocab);
  requests[1].prompt = prompt_of(2 * chunk + 5, alone.model().vocab);  // chunks beside one or two decode rows
  requests[2].prompt = prompt_of(chunk + 5, alone.model().vocab);
  requests[2].prompt[0] = 2;
  options.sequences = 3;
  options.prefill_chunk = chunk;
  options.prefill_chunks_per_step = 1;
  std::vector<std::vector<GenerateResult>> runs;
  for (bool resident : {false, true}) {
    options.cuda_resident = resident;
    Engine engine(options);
    std::vector<uint64_t> ids{engine.add_sequence(requests[0])};
    engine.step_sequences();  // its prompt and first token: it decodes beside the chunks that follow
    ids.push_back(engine.add_sequence(requests[1]));
    ids.push_back(engine.add_sequence(requests[2]));
    while (engine.step_sequences() > 0) {
    }
    std::vector<GenerateResult> results;
    for (uint64_t id : ids) results.push_back(engine.remove_sequence(id));
    runs.push_back(std::move(results));
  }
  EXPECT_GE(expect_batch_close_to_alone(runs[0], alone, requests), 8u);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(runs[1][i].tokens, runs[0][i].tokens) << "resident, request " << i;
    for (size_t t = 0; t < runs[0][i].logprobs.size(); ++t)
      EXPECT_EQ(runs[1][i].logprobs[t][0].probability, runs[0][i].logprobs[t][0].probability) << "resident, request " << i;
  }
}

// A sequence that begins with what a sequence still in holds starts from a device copy of that slot's
// cache (the emulation's memory starts as NaN, so a position not copied would show), a launch per step
// and resident on one GPU, and on two virtual ranks: bitwise what it gets reusing a free slot that holds
// the same prompt.
TEST_F(CudaEngine, ACopiedPrefixIsWhatReusingAFreeSlotGives) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (const auto& [tp, resident] : {std::pair{1u, false}, {1u, true}, {2u, false}}) {  // no resident kernel under tp
    SCOPED_TRACE("tp " + std::to_string(tp) + (resident ? ", resident" : ", a launch per step"));
    EngineOptions options = cuda_options(dir_->path().string());
    options.tp = tp;
    options.cuda_resident = resident;
    options.sequences = 2;
    Engine engine(options);
    GenerateRequest first;
    first.prompt = prompt_of(20, engine.model().vocab);
    first.max_new_tokens = 1;  // finished at add_sequence: its slot holds its prompt
    first.stop_at_eos = false;
    GenerateRequest second = first;
    second.prompt.push_back(first.prompt[3]);
    second.reuse_prefix = true;
    second.max_new_tokens = 4;
    second.logprobs = 2;
    const uint64_t first_id = engine.add_sequence(first);
    const uint64_t second_id = engine.add_sequence(second);
    while (!engine.sequence_finished(second_id)) engine.step_sequences();
    const GenerateResult copied = engine.remove_sequence(second_id);
    engine.remove_sequence(first_id);
    EXPECT_EQ(copied.reused_tokens, 20u);

    Engine reference(options);
    reference.remove_sequence(reference.add_sequence(first));
    const uint64_t id = reference.add_sequence(second);
    while (!reference.sequence_finished(id)) reference.step_sequences();
    const GenerateResult reused = reference.remove_sequence(id);
    EXPECT_EQ(reused.reused_tokens, 20u);
    ASSERT_EQ(copied.tokens, reused.tokens);
    for (size_t t = 0; t < reused.logprobs.size(); ++t)
      for (size_t k = 0; k < reused.logprobs[t].size(); ++k)
        EXPECT_EQ(copied.logprobs[t][k].probability, reused.logprobs[t][k].probability) << "token " << t << ", rank " << k;
  }
}

// Batched decoding over two virtual ranks: the logits all-gather carries every sequence's row (five, so
// the matrices take the tensor-core path). Each result against the same request alone on the two ranks,
// as above, and the batch bitwise the same under bsp.
TEST_F(CudaEngine, TensorParallelBatchedSequencesMatchEachAlone) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  EngineOptions options = cuda_options(dir_->path().string());
  options.tp = 2;
  Engine alone(options);
  const std::vector<GenerateRequest> requests = batch_requests(5, alone.model().vocab);
  options.sequences = 5;
  Engine batched(options);
  const std::vector<GenerateResult> results = batched.generate_batch(requests);
  EXPECT_GE(expect_batch_close_to_alone(results, alone, requests), 10u);
  batched.set_schedule(Schedule::bsp);
  const std::vector<GenerateResult> again = batched.generate_batch(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(again[i].tokens, results[i].tokens) << "bsp, request " << i;
    for (size_t t = 0; t < results[i].logprobs.size(); ++t)
      EXPECT_EQ(again[i].logprobs[t][0].probability, results[i].logprobs[t][0].probability) << "bsp, request " << i;
  }
}

// --trace on the cuda backend: a decode step's timeline with one slice per task, each on a CTA's row.
TEST_F(CudaEngine, TraceOfADecodeStepHasEveryTaskOnce) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  Engine engine(cuda_options(dir_->path().string()));
  TempDir out("cuda_trace");
  GenerateRequest request;
  request.prompt = prompt_of(4, engine.model().vocab);
  request.max_new_tokens = 3;
  request.trace_path = (out.path() / "trace.json").string();
  ASSERT_TRUE(engine.generate(request).trace_written);
  const nlohmann::json trace = nlohmann::json::parse(read_file_text(request.trace_path));
  std::vector<uint32_t> seen(engine.decode_tasks(), 0);
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const uint32_t task = e["args"]["task"].get<uint32_t>();
    ASSERT_LT(task, seen.size());
    ++seen[task];
    EXPECT_LT(e["tid"].get<uint32_t>(), engine.threads()) << "task " << task << " on a worker past the grid";
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  for (uint32_t t = 0; t < seen.size(); ++t) EXPECT_EQ(seen[t], 1u) << "task " << t;
}

// Random shapes and settings (tests/common/random_shapes.h) with bf16 weights, the cuda backend's: odd
// rows (no 16-byte vectors), head_dim 8 to 128, one KV head, prompts past a prefill chunk, split-KV,
// every policy and granularity, virtual ranks, weights staged or not, resident or not. Logits within the
// tiny test's tolerance of the cpu backend on the same checkpoint, and bitwise the same again after a
// longer sequence. 12 seeds; TILEFIRE_RANDOM_SHAPES=N runs N.
TEST(CudaEngineRandomShapes, MatchTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  const uint64_t cases = random_case_count(12);
  for (uint64_t seed = 1; seed <= cases; ++seed) {
    RandomCase c = draw_random_case(seed);
    c.dtype = DType::bf16;
    const bool staged = seed % 2 == 0, resident = seed % 3 == 0 && c.options.tp == 1;
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + c.description + (staged ? "" : ", weights not staged") +
                 (resident ? ", resident" : ""));
    TempDir dir("cuda-random-" + std::to_string(seed));
    try {
      write_test_model(c.spec, dir.path(), c.dtype);
      c.options.model_dir = dir.path().string();
      Engine cpu(c.options);
      const Trajectory reference = run_trajectory(cpu, c.prompt, 4);
      EngineOptions o = c.options;
      o.backend = Backend::cuda;
      o.cuda_stage_weights = staged;
      o.cuda_resident = resident;
      Engine cuda(o);
      const Trajectory first = run_trajectory(cuda, c.prompt, 4);
      expect_close_to_cpu(first, reference, 2e-3);
      // A longer sequence, then the case again: stale keys, values and split-KV partials past its
      // positions must not leak into it.
      run_trajectory(cuda, prompt_of(std::min<uint32_t>(uint32_t(c.prompt.size()) + 16, o.max_context - 4), c.spec.vocab), 2);
      expect_bitwise_equal(first, run_trajectory(cuda, c.prompt, 4), "after a longer sequence");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

// The Llama-3.2-1B shape (random bf16 weights), the size the benchmark runs: TILEFIRE_DEVICE_LARGE_MODEL
// names its folder (tests/device/run.sh writes it with `tilefire gen-model --preset llama-3.2-1b`).
TEST(CudaEngineLarge, Llama1BShapeMatchesTheCpuBackend) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  const char* folder = std::getenv("TILEFIRE_DEVICE_LARGE_MODEL");
  if (!folder) GTEST_SKIP() << "set TILEFIRE_DEVICE_LARGE_MODEL to a llama-3.2-1b folder to run";
  EngineOptions cpu_options = cuda_options(folder);
  cpu_options.backend = Backend::cpu;
  Engine cpu(cpu_options);
  const std::vector<int32_t> prompt = prompt_of(9, cpu.model().vocab);
  const Trajectory reference = run_trajectory(cpu, prompt, 6);
  Engine cuda(cuda_options(folder));
  const Trajectory staged = run_trajectory(cuda, prompt, 6);
  expect_close_to_cpu(staged, reference, 5e-3);
  // The down projection's 16 KiB rows stream in segments (for_each_stream_chunk); read from global memory
  // instead, every row's sums must come out the same, bit for bit.
  EngineOptions direct = cuda_options(folder);
  direct.cuda_stage_weights = false;
  Engine unstaged(direct);
  expect_bitwise_equal(staged, run_trajectory(unstaged, prompt, 6), "weights not staged (1B shape)");
}

}  // namespace
}  // namespace tilefire::testing
