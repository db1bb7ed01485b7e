// The step-level API on the cuda backend, against the cpu backend on the same bf16 checkpoint, under a
// seeded run of random calls: resets, prefills of 1 to 200 tokens (across the 128-token chunk, which
// changes programs and, when resident, relaunches the kernel), decodes, greedy decodes (the argmax on the
// device), rewinds, generate() with reuse_prefix, schedule switches, and calls both must refuse (a token
// outside the vocabulary, a step past the context). The cpu engine is the oracle (tested against the
// double-precision reference in engine_sequence_test). After every call the two agree on position() and
// sequence(); logits within a relative L2 error of 2e-3; greedy tokens wherever the cpu's winner is clear.
// Odd seeds run the resident kernel. TILEFIRE_RANDOM_SHAPES=N runs N seeds (4 by default; 20 passed on
// the emulation when it was written). Skipped without a GPU (run in CI over the host emulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/compare.h"
#include "tests/common/cuda_device.h"
#include "tests/common/random_shapes.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

class CudaEngineSequences : public ::testing::TestWithParam<uint64_t> {};

TEST_P(CudaEngineSequences, FollowTheCpuBackendThroughRandomCalls) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  const uint64_t seed = GetParam();
  const bool resident = seed % 2 == 1;
  TempDir dir("cuda-engine-sequence-" + std::to_string(seed));
  write_random_model("tiny", dir.path().string(), "bf16", uint32_t(seed));
  EngineOptions options;
  options.model_dir = dir.path().string();
  options.max_context = uint32_t(48 + seed * 53 % 200);  // small, so steps past it come up
  options.threads = 2;
  Engine cpu(options);
  options.backend = Backend::cuda;
  options.cuda_resident = resident;
  Engine cuda(options);
  SCOPED_TRACE("seed " + std::to_string(seed) + (resident ? ", resident" : ", a launch per step") + ", context " +
               std::to_string(options.max_context));
  const uint32_t vocab = cpu.model().vocab, context = options.max_context;

  std::mt19937_64 rng(seed * 104729 + 3);
  auto below = [&](uint64_t n) { return uint32_t(rng() % n); };
  auto tokens = [&](uint32_t count) {
    std::vector<int32_t> out(count);
    for (int32_t& t : out) t = int32_t(below(vocab));
    return out;
  };
  auto expect_close = [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_LT(relative_l2_error(got, want), 2e-3) << what << ": relative L2 error of the logits against the cpu backend";
  };
  for (int call = 0; call < 24 && !::testing::Test::HasFailure(); ++call) {
    const uint32_t kind = below(12);
    const uint32_t position = cpu.position();
    std::string what;
    if (kind == 0) {
      what = "reset";
      cpu.reset();
      cuda.reset();
    } else if (kind == 1) {
      const uint32_t to = below(position + 1);
      what = "rewind to " + std::to_string(to) + " of " + std::to_string(position);
      EXPECT_THROW(cuda.rewind(position + 1), InputError) << what;
      cpu.rewind(to);
      cuda.rewind(to);
    } else if (kind == 2) {
      const Schedule schedule = below(2) ? Schedule::bsp : Schedule::dataflow;
      what = schedule == Schedule::bsp ? "schedule bsp" : "schedule dataflow";
      cpu.set_schedule(schedule);
      cuda.set_schedule(schedule);
    } else if (kind == 3) {  // generate() reusing what the cache holds of its prompt's beginning
      GenerateRequest request;
      const std::vector<int32_t> held = cpu.sequence();
      const uint32_t kept = std::min<uint32_t>(below(position + 1), context > 8 ? context - 8 : 0);
      request.prompt.assign(held.begin(), held.begin() + kept);
      for (int32_t t : tokens(1 + below(4))) request.prompt.push_back(t);
      request.max_new_tokens = 1 + below(3);
      request.stop_at_eos = false;
      request.reuse_prefix = true;
      uint32_t reuse = 0;
      while (reuse < held.size() && reuse + 1 < request.prompt.size() && held[reuse] == request.prompt[reuse]) ++reuse;
      what = "greedy generate from " + std::to_string(request.prompt.size()) + " tokens reusing " + std::to_string(reuse);
      const GenerateResult result = cuda.generate(request);
      EXPECT_EQ(result.reused_tokens, reuse) << what;
      // The cpu engine step by step, for the logits behind each greedy choice.
      cpu.rewind(reuse);
      std::vector<float> logits = cpu.prefill(std::vector<int32_t>(request.prompt.begin() + reuse, request.prompt.end()));
      bool tie = false;
      for (size_t i = 0; i < result.tokens.size() && !tie; ++i) {
        tie = !clear_winner(logits, 1e-2f);
        if (tie) break;  // the two may go different ways from here: both start over below
        EXPECT_EQ(result.tokens[i], argmax(logits)) << what << ", token " << i;
        if (i + 1 < result.tokens.size()) logits = cpu.decode(result.tokens[i]);  // the cache keeps all but the last
      }
      if (tie || ::testing::Test::HasFailure()) {
        cpu.reset();
        cuda.reset();
      }
    } else if (kind <= 5) {
      const uint32_t lengths[] = {1, 3, 4, 5, 127, 128, 129, below(200) + 1};
      const std::vector<int32_t> prompt = tokens(lengths[below(std::size(lengths))]);
      what = "prefill of " + std::to_string(prompt.size()) + " at " + std::to_string(position);
      if (position + prompt.size() > context) {
        EXPECT_THROW(cpu.prefill(prompt), InputError) << what << " past the context";
        EXPECT_THROW(cuda.prefill(prompt), InputError) << what << " past the context";
      } else {
        expect_close(cuda.prefill(prompt), cpu.prefill(prompt), what);
      }
    } else if (kind == 6) {
      what = "a token outside the vocabulary";
      EXPECT_THROW(cuda.decode(int32_t(vocab)), InputError) << what;
      EXPECT_THROW(cuda.prefill({1, -1}), InputError) << what;
    } else {
      const int32_t token = int32_t(below(vocab));
      const bool greedy = kind >= 10;
      what = std::string(greedy ? "greedy decode" : "decode") + " at " + std::to_string(position);
      if (position + 1 > context) {
        EXPECT_THROW(cuda.decode(token), InputError) << what << " past the context";
        EXPECT_THROW(cpu.decode(token), InputError) << what << " past the context";
      } else if (greedy) {
        const std::vector<float> logits = cpu.decode(token);
        const int32_t chosen = cuda.decode_greedy(token);
        if (clear_winner(logits, 1e-2f)) { EXPECT_EQ(chosen, argmax(logits)) << what; }
      } else {
        expect_close(cuda.decode(token), cpu.decode(token), what);
      }
    }
    ASSERT_EQ(cuda.position(), cpu.position()) << "after " << what;
    ASSERT_EQ(cuda.sequence(), cpu.sequence()) << "after " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, CudaEngineSequences, ::testing::Range<uint64_t>(1, random_case_count(4) + 1));

}  // namespace
}  // namespace tilefire::testing
