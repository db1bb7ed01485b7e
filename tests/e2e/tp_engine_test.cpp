// Tensor parallelism on the cpu backend, ranks as thread groups: TP = 2, 4 (and 8 where the heads allow)
// against TP = 1 on the `tiny` and `small` presets: logits within tolerance after the prefill and at
// every decode step, the same greedy tokens, bitwise the same logits across runs for a fixed TP and
// across the dataflow and bsp schedules (the sums run in rank order).
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>

#include <unistd.h>

#include "tests/common/compare.h"
#include "tests/common/random_shapes.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

struct Trajectory {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

Trajectory run_trajectory(Engine& engine, uint32_t prompt_length, uint32_t steps) {
  Trajectory t;
  std::vector<int32_t> prompt(prompt_length);
  for (uint32_t i = 0; i < prompt_length; ++i) prompt[i] = int32_t((i * 37 + 11) % engine.model().vocab);
  engine.reset();
  t.logits.push_back(engine.prefill(prompt));
  for (uint32_t s = 0; s < steps; ++s) {
    const std::vector<float>& last = t.logits.back();
    t.tokens.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    t.logits.push_back(engine.decode(t.tokens.back()));
  }
  return t;
}

EngineOptions preset_options(const std::string& preset, uint32_t tp) {
  EngineOptions o;
  o.preset = preset;
  o.preset_dtype = "f32";
  o.preset_seed = 3;
  o.threads = 2;
  o.tp = tp;
  o.max_context = 64;
  return o;
}

void expect_tp_matches_single_rank(const std::string& preset, std::vector<uint32_t> degrees) {
  Engine single(preset_options(preset, 1));
  const Trajectory reference = run_trajectory(single, 20, 8);
  for (uint32_t tp : degrees) {
    SCOPED_TRACE(preset + ", tp " + std::to_string(tp));
    Engine engine(preset_options(preset, tp));
    EXPECT_EQ(engine.tensor_parallel_ranks(), tp);
    const Trajectory first = run_trajectory(engine, 20, 8);
    for (size_t s = 0; s < reference.logits.size(); ++s) {
      EXPECT_LT(relative_l2_error(first.logits[s], reference.logits[s]), 1e-5) << "step " << s;
      if (s < reference.tokens.size() && clear_winner(reference.logits[s], 1e-3f)) {
        EXPECT_EQ(first.tokens[s], reference.tokens[s]) << "greedy token of step " << s;
      }
    }
    const Trajectory again = run_trajectory(engine, 20, 8);
    for (size_t s = 0; s < first.logits.size(); ++s) ASSERT_EQ(first.logits[s], again.logits[s]) << "run 2, step " << s;
    engine.set_schedule(Schedule::bsp);
    const Trajectory bsp = run_trajectory(engine, 20, 8);
    for (size_t s = 0; s < first.logits.size(); ++s) ASSERT_EQ(first.logits[s], bsp.logits[s]) << "bsp, step " << s;
  }
}

TEST(TensorParallelEngine, TinyMatchesOneRank) { expect_tp_matches_single_rank("tiny", {2, 4, 8}); }

TEST(TensorParallelEngine, SmallMatchesOneRank) { expect_tp_matches_single_rank("small", {2, 4}); }

// `spec`'s random checkpoint at each {degree, threads} against one rank with `single`'s options: logits
// within tolerance after the prefill and every decode step, greedy tokens where the winner is clear.
void expect_checkpoint_matches_single_rank(const ModelSpec& spec, const std::string& tag, EngineOptions single,
                                           const std::vector<std::pair<uint32_t, uint32_t>>& degrees_and_threads) {
  TempDir dir(tag);
  write_test_model(spec, dir.path());
  single.model_dir = dir.path().string();
  single.max_context = 64;
  Engine one(single);
  const Trajectory reference = run_trajectory(one, 9, 4);
  for (const auto& [tp, threads] : degrees_and_threads) {
    SCOPED_TRACE("tp " + std::to_string(tp) + ", " + std::to_string(threads) + " threads");
    EngineOptions o = single;
    o.tp = tp;
    o.threads = threads;
    Engine engine(o);
    const Trajectory t = run_trajectory(engine, 9, 4);
    for (size_t s = 0; s < reference.logits.size(); ++s) {
      EXPECT_LT(relative_l2_error(t.logits[s], reference.logits[s]), 1e-5) << "step " << s;
      if (s < reference.tokens.size() && clear_winner(reference.logits[s], 1e-3f)) {
        EXPECT_EQ(t.tokens[s], reference.tokens[s]) << "greedy token of step " << s;
      }
    }
  }
}

// A vocabulary and an FFN that no degree divides (the ranks' shares differ by a row, and the smaller share
// is a multiple of every power-of-two tile width): every rank still runs the same tasks, and the result
// is TP=1's.
TEST(TensorParallelEngine, UnevenVocabularyAndFfnMatchOneRank) {
  ModelSpec spec = preset_spec("tiny");
  spec.vocab = 513;  // 257 / 256 rows on two ranks, 129 / 128 / 128 / 128 on four
  spec.ffn = 641;    // 321 / 320, 161 / 160 / 160 / 160
  EngineOptions single;
  single.threads = 2;
  expect_checkpoint_matches_single_rank(spec, "tp-uneven", single, {{2, 2}, {4, 2}});
}

// The locality policy weighs tiles by their bytes, which differ by a row between the ranks of an uneven
// split; it placed rank 3's tiles apart from rank 0's, and the engine refused the degree. Every rank now
// takes rank 0's queues (graph/compile.cpp). The shape of random_shapes.h's seed 119: an FFN of 698 and
// a vocabulary of 43 over four ranks of three workers each.
TEST(TensorParallelEngine, LocalityPolicyOnAnUnevenSplitMatchesOneRank) {
  ModelSpec spec = draw_random_case(119).spec;
  spec.ffn = 698;
  spec.vocab = 43;
  EngineOptions single;
  single.threads = 3;
  single.policy = "locality";
  expect_checkpoint_matches_single_rank(spec, "tp-locality", single, {{4, 12}});
}

// The granularity of events changes what waits on what, never the arithmetic: bitwise the same logits.
TEST(TensorParallelEngine, HeadAndOpGranularityGiveTheSameLogits) {
  Engine tile(preset_options("tiny", 2));
  const Trajectory reference = run_trajectory(tile, 9, 4);
  for (Granularity granularity : {Granularity::head, Granularity::op}) {
    EngineOptions o = preset_options("tiny", 2);
    o.granularity = granularity;
    Engine engine(o);
    const Trajectory t = run_trajectory(engine, 9, 4);
    for (size_t s = 0; s < reference.logits.size(); ++s)
      ASSERT_EQ(t.logits[s], reference.logits[s]) << granularity_name(granularity) << ", step " << s;
  }
}

// Each variant on 2 and 4 ranks against one, with decode attention unsplit and in 3 split-KV chunks.
void expect_variants_match_one_rank_unsplit_and_split(std::initializer_list<Variant> variants) {
  for (Variant variant : variants)
    for (uint32_t kv_splits : {0u, 3u}) {
      SCOPED_TRACE(std::string(variant_name(variant)) + ", kv splits " + std::to_string(kv_splits));
      EngineOptions single;
      single.threads = 2;
      single.kv_splits = kv_splits;
      expect_checkpoint_matches_single_rank(variant_spec(variant), std::string("tp-") + variant_name(variant), single, {{2, 2}, {4, 2}});
    }
}

// Sliding windows on each rank's heads (a prompt of 9 and 4 steps past windows of 7 and 4; Qwen2's first
// layer full), unsplit and in split-KV chunks of the window: the same trajectory as one rank.
TEST(TensorParallelEngine, SlidingWindowsMatchOneRank) {
  expect_variants_match_one_rank_unsplit_and_split({Variant::mistral_window, Variant::qwen2_window});
}

// Granite's multipliers under tensor parallelism: each rank's partial O and down sums carry the residual
// multiplier before the all-reduce adds them; the same trajectory as one rank.
TEST(TensorParallelEngine, GraniteMultipliersMatchOneRank) {
  EngineOptions single;
  single.threads = 2;
  expect_checkpoint_matches_single_rank(variant_spec(Variant::granite), "tp-granite", single, {{2, 2}, {4, 2}});
}

// Gemma 3's sandwich norms under tensor parallelism: the O and down all-reduces sum the ranks' partials
// without the residual, each rank normalises the whole sum and adds the residual (norm_residual); its
// sliding layer at its own RoPE base; Gemma 2's soft caps on each rank's scores and on each rank's share
// of the vocabulary. The same trajectory as one rank, unsplit and in split-KV chunks.
TEST(TensorParallelEngine, GemmaSandwichNormsMatchOneRank) {
  expect_variants_match_one_rank_unsplit_and_split({Variant::gemma3, Variant::gemma2});
}

// Split-KV attention on each rank's heads: the same trajectory as one unsplit rank, within tolerance.
TEST(TensorParallelEngine, SplitKvAttentionMatchesOneRank) {
  Engine single(preset_options("tiny", 1));
  const Trajectory reference = run_trajectory(single, 9, 4);
  EngineOptions o = preset_options("tiny", 2);
  o.kv_splits = 3;
  Engine engine(o);
  const Trajectory t = run_trajectory(engine, 9, 4);
  for (size_t s = 0; s < reference.logits.size(); ++s)
    EXPECT_LT(relative_l2_error(t.logits[s], reference.logits[s]), 1e-5) << "step " << s;
}

TEST(TensorParallelEngine, RefusedDegreesAndBackends) {
  EXPECT_THROW(Engine(preset_options("tiny", 3)), InputError);  // 8 query heads over 3 ranks
  EngineOptions cuda = preset_options("tiny", 2);
  cuda.backend = Backend::cuda;
  EXPECT_THROW(Engine{cuda}, InputError);
  // A ready queue would order each rank's collectives differently: refused, saying why.
  EngineOptions dynamic = preset_options("tiny", 2);
  dynamic.policy = "dynamic";
  try {
    Engine engine(dynamic);
    FAIL() << "--policy dynamic ran with --tp";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--policy dynamic cannot run with --tp"), std::string::npos) << e.what();
  }
}

// The memory check counts every rank's KV cache: with 8 ranks over 2 KV heads each head is held by 4
// ranks, so the caches take 4 times the model's. A context that fits once (0.4 of the machine's memory)
// but not four times is refused before anything is allocated; counted once, it was let through and the
// allocation took the machine down.
TEST(TensorParallelEngine, KvCacheOfEveryRankIsCountedAgainstMemory) {
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  ASSERT_GT(memory, 0.0);
  ModelSpec spec = variant_spec(Variant::llama);  // tiny's 8 query and 2 KV heads of 32, 2 layers
  ASSERT_EQ(spec.kv_heads, 2u);
  const double whole_model_bytes_per_position = 2.0 * spec.layers * spec.kv_dim() * sizeof(float);
  const uint32_t sequences = 256;
  const uint32_t context = uint32_t(0.4 * memory / (whole_model_bytes_per_position * sequences));
  spec.max_context = std::max(context, 1024u);
  TempDir dir("tp-kv-memory");
  EngineOptions options;
  options.model_dir = write_test_model(spec, dir.path()).string();
  options.threads = 2;
  options.tp = 8;
  options.max_context = context;
  options.sequences = sequences;
  try {
    Engine engine(options);
    FAIL() << "8 ranks' KV caches of " << context << " positions of " << sequences << " sequences were allocated";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the KV cache would take"), std::string::npos) << message;
    EXPECT_NE(message.find("over the 8 ranks on this host"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tilefire::testing
