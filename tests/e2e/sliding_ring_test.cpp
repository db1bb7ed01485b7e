// Sliding-window layers on rings (ops/tile.h, sliding_cache_rows): on the cpu backend a layer with a window
// keeps its window plus a prefill chunk of positions, not max_context. With a chunk of 4 and windows of 4
// and 7 the rings hold 16 rows, so the sequences below go round them several times. Checked: the logits
// against the double-precision reference at every step; what may go back to a position (rewind, a cached
// prefix reused from the cache, a free slot or another sequence's slot, the draft model's own cache) only
// where the rings still hold its window, and the same replies as an engine whose caches never wrap;
// speculation's drafts turned down, in one sequence and in batched steps that carry a prompt's chunk;
// tensor-parallel ranks; the memory the caches take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor_parallel.h"
#include "ops/tile.h"
#include "tests/common/compare.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

int32_t argmax(const std::vector<double>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// The ring's size, and which positions it can go back to, by hand: a window of 7 and steps of up to 4
// tokens need 7 + 4 - 1 = 10 rows, rounded up to 16; positions [p - 6, p) must not have been overwritten,
// i.e. p - 6 + 16 >= the end of what was written.
static_assert(sliding_cache_rows(7, 4, 128) == 16);
static_assert(sliding_cache_rows(512, 128, 4096) == 640);
static_assert(sliding_cache_rows(512, 128, 600) == 600);  // a ring as long as the context never wraps
static_assert(sliding_cache_rows(0, 4, 128) == 128);      // no window: every position
static_assert(sliding_cache_rows(1, 1, 4096) == 16);
static_assert(ring_holds_window_before(0, 7, 16, 1000));  // a new sequence needs nothing
static_assert(ring_holds_window_before(20, 7, 16, 30));   // needs 14 .. 19; 14 + 16 >= 30
static_assert(!ring_holds_window_before(20, 7, 16, 31));  // position 14's row took position 30
static_assert(ring_holds_window_before(5, 7, 16, 16));    // needs 0 .. 4; nothing has wrapped
static_assert(!ring_holds_window_before(5, 7, 16, 17));   // position 0's row took position 16

EngineOptions ring_options(const std::filesystem::path& dir, uint32_t prefill_chunk) {
  EngineOptions options;
  options.model_dir = dir.string();
  options.threads = 2;
  options.max_context = 128;
  options.prefill_chunk = prefill_chunk;  // 4: rings of 16 rows; 128: longer than the context, no ring
  return options;
}

std::vector<int32_t> some_tokens(size_t count, int32_t seed) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < count; ++i) tokens.push_back(int32_t((seed + 37 * i + (i * i) % 11) % 500) + 1);
  return tokens;
}

GenerateRequest greedy(std::vector<int32_t> prompt, uint32_t new_tokens) {
  GenerateRequest request;
  request.prompt = std::move(prompt);
  request.max_new_tokens = new_tokens;
  request.stop_at_eos = false;
  return request;
}

class SlidingRingTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { write_test_model(variant_spec(GetParam()), dir_.path()); }
  TempDir dir_{std::string("ring_") + variant_name(GetParam())};
};

// A 37-token prompt in chunks of 4, then 40 decode steps (past position 76: the 16-row rings wrap four
// times), every step's logits against the reference, which keeps every position. And in chunks of 11:
// a window of 7 then needs exactly 17 rows (a ring of 32); 16 would let a chunk's last token overwrite
// what its first still sees. And decoding in split-KV chunks of each window, each chunk's range of the ring.
TEST_P(SlidingRingTest, LogitsMatchTheReferenceRoundTheRing) {
  const LoadedModel loaded = load_hf_model(dir_.path());
  for (const auto& [chunk, kv_splits] : {std::pair{4u, 1u}, {11u, 1u}, {4u, 3u}}) {
    EngineOptions options = ring_options(dir_.path(), chunk);
    options.kv_splits = kv_splits;  // 3: decode attention in split-KV chunks of the window (attention_chunk)
    Engine engine(options);
    ReferenceModel reference(loaded.spec, loaded.weights, 128);
    const std::vector<int32_t> prompt = some_tokens(37, 3);
    const std::string what = "chunks of " + std::to_string(chunk) + ", " + std::to_string(kv_splits) + " KV split(s), ";
    // Every prompt token's probability after those before it: the rows of a chunk's first tokens too (only
    // the last's logits reach the prefill's; on a two-layer model a row the ring lost never reaches them).
    GenerateRequest scored = greedy(prompt, 0);
    scored.prompt_logprobs = 1;
    const GenerateResult scores = engine.generate(scored);
    ASSERT_EQ(scores.prompt_token_probabilities.size(), prompt.size() - 1) << what;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      const std::vector<double> logits = reference.forward({prompt[i]});
      double largest = logits[0], sum = 0;
      for (double l : logits) largest = std::max(largest, l);
      for (double l : logits) sum += std::exp(l - largest);
      const double expected_log = logits[size_t(prompt[i + 1])] - largest - std::log(sum);
      const double probability = scores.prompt_token_probabilities[i].probability;  // f32: below ~1e-38 it is 0
      if (expected_log > -40)
        EXPECT_NEAR(std::log(probability), expected_log, 2e-3) << what << "prompt token " << i + 1;
      else
        EXPECT_LT(probability, 1e-15) << what << "prompt token " << i + 1 << ", log probability " << expected_log;
      // The engine's most probable token is the reference's, or ties with it (Gemma 2's capped logits do).
      EXPECT_GE(logits.at(size_t(scores.prompt_logprobs[i].at(0).token)), largest - 1e-4 * std::max(1.0, std::fabs(largest)))
          << what << "the most probable after token " << i;
    }
    reference.reset();
    engine.reset();  // generate left the prompt in the cache; the prefill below starts a new sequence
    std::vector<double> expected = reference.forward(prompt);
    expect_logits_match_reference(engine.prefill(prompt), expected, what + "prefill");
    for (int step = 0; step < 40; ++step) {
      const int32_t token = argmax(expected);
      expected = reference.forward({token});
      expect_logits_match_reference(engine.decode(token), expected, what + "decode step " + std::to_string(step));
    }
  }
}

// The same replies with rings (a chunk of 4) as without (a chunk of 128, whose ring would be longer than
// the context): a fresh generation, one that continues the last (its whole prompt still held), one that
// shares only the first 10 tokens of a sequence the rings have moved past (prefilled again: nothing
// reused, where the engine without rings reuses the 10), and speculation by prompt lookup, whose rejected
// drafts write positions the sequence then goes back from.
TEST_P(SlidingRingTest, RepliesMatchAnEngineWhoseCachesNeverWrap) {
  Engine ring(ring_options(dir_.path(), 4)), whole(ring_options(dir_.path(), 128));
  auto both = [&](GenerateRequest request, const std::string& what) {
    const GenerateResult a = ring.generate(request), b = whole.generate(request);
    EXPECT_EQ(a.tokens, b.tokens) << what;
    return std::pair{a, b};
  };
  const std::vector<int32_t> prompt = some_tokens(30, 5);
  GenerateRequest first = greedy(prompt, 24);
  first.reuse_prefix = true;
  const GenerateResult started = both(first, "fresh").first;

  std::vector<int32_t> continued = prompt;
  continued.insert(continued.end(), started.tokens.begin(), started.tokens.end());
  continued.insert(continued.end(), {7, 8, 9});
  GenerateRequest next = greedy(continued, 12);
  next.reuse_prefix = true;
  const auto [ring_next, whole_next] = both(next, "continued");
  EXPECT_GE(ring_next.reused_tokens, prompt.size() + started.tokens.size() - 1);
  EXPECT_EQ(ring_next.reused_tokens, whole_next.reused_tokens);

  std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + 10);
  diverging.insert(diverging.end(), {400, 401, 402, 403, 404});
  GenerateRequest other = greedy(diverging, 12);
  other.reuse_prefix = true;
  const auto [ring_other, whole_other] = both(other, "diverging");
  EXPECT_EQ(ring_other.reused_tokens, 0u);  // positions 4 .. 9 are gone from the rings
  EXPECT_EQ(whole_other.reused_tokens, 10u);
  // That one started over at position 0, so what the rings hold is its own: its continuation reuses it.
  std::vector<int32_t> continued_other = diverging;
  continued_other.insert(continued_other.end(), ring_other.tokens.begin(), ring_other.tokens.end());
  continued_other.push_back(3);
  GenerateRequest after_other = greedy(continued_other, 6);
  after_other.reuse_prefix = true;
  const auto [ring_after, whole_after] = both(after_other, "continuing the diverging one");
  EXPECT_GE(ring_after.reused_tokens, diverging.size() + ring_other.tokens.size() - 1);

  std::vector<int32_t> repeating;
  for (int i = 0; i < 8; ++i) repeating.insert(repeating.end(), {11, 12, 13, 14, 15});
  GenerateRequest plain = greedy(repeating, 40);
  GenerateRequest speculating = plain;
  speculating.speculation.draft_tokens = 3;  // at most the chunk of 4 less one
  speculating.speculation.min_ngram = 1;
  const GenerateResult plain_reply = ring.generate(plain), speculated = ring.generate(speculating);
  EXPECT_EQ(speculated.tokens, plain_reply.tokens);
  // Drafts were checked (on these random weights mistral_window's are all turned down, so the sequence goes
  // back past rows the check wrote; the Gemma variants' are all taken).
  EXPECT_GT(speculated.draft_tokens, 0u);
  if (GetParam() == Variant::mistral_window) {
    EXPECT_LT(speculated.accepted_tokens, speculated.draft_tokens);
  }
  EXPECT_EQ(speculated.tokens, whole.generate(plain).tokens);
}

// Going back to a position whose window the rings no longer hold is refused, saying why; a position they
// hold is taken, and decoding goes on as the reference does from there.
TEST_P(SlidingRingTest, RewindGoesBackOnlyWhereTheRingsHoldTheWindow) {
  Engine engine(ring_options(dir_.path(), 4));
  const LoadedModel loaded = load_hf_model(dir_.path());
  ReferenceModel reference(loaded.spec, loaded.weights, 128);
  const std::vector<int32_t> prompt = some_tokens(40, 9);
  engine.prefill(prompt);
  reference.forward(prompt);
  EXPECT_FALSE(engine.can_rewind(10));
  EXPECT_FALSE(engine.can_rewind(41));  // past the sequence
  try {
    engine.rewind(10);
    ADD_FAILURE() << "rewind(10) was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding-window"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.position(), 40u);  // the refusal left the sequence as it was
  ASSERT_TRUE(engine.can_rewind(37));
  engine.rewind(37);
  reference.rewind(37);
  expect_logits_match_reference(engine.decode(99), reference.forward({99}), "after rewinding to 37");
  ASSERT_TRUE(engine.can_rewind(0));
  engine.rewind(0);
  reference.reset();
  expect_logits_match_reference(engine.prefill({5, 6, 7}), reference.forward({5, 6, 7}), "after rewinding to 0");
}

INSTANTIATE_TEST_SUITE_P(Variants, SlidingRingTest,
                         ::testing::Values(Variant::mistral_window, Variant::qwen2_window, Variant::gemma3, Variant::gemma2),
                         [](const ::testing::TestParamInfo<Variant>& info) { return std::string(variant_name(info.param)); });

// Batched: several sequences in their own slots' rings. A request that shares its first 25 tokens with a
// sequence 30 positions further on gets nothing copied (that sequence's rings have moved past them) and a
// request that shares a prompt just prefilled gets it copied; each reply is the one it gets alone.
TEST(SlidingRing, BatchedSequencesCopyOnlyWhatTheRingsStillHold) {
  TempDir dir("ring_batched");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  EngineOptions options = ring_options(dir.path(), 4);
  options.sequences = 3;
  Engine batched(options);
  Engine alone(ring_options(dir.path(), 4));
  const std::vector<int32_t> shared = some_tokens(30, 21);

  GenerateRequest leader = greedy(shared, 40);
  const uint64_t leader_id = batched.add_sequence(leader);
  for (int i = 0; i < 30; ++i) batched.step_sequences();  // the leader is now past position 55

  std::vector<int32_t> late_prompt(shared.begin(), shared.begin() + 25);
  late_prompt.insert(late_prompt.end(), {300, 301, 302});
  GenerateRequest late = greedy(late_prompt, 10);
  late.reuse_prefix = true;
  const uint64_t late_id = batched.add_sequence(late);
  GenerateRequest twin = greedy(late_prompt, 10);  // the same prompt, just prefilled in late's slot
  twin.reuse_prefix = true;
  const uint64_t twin_id = batched.add_sequence(twin);
  while (batched.step_sequences() > 0) {
  }
  const GenerateResult leader_result = batched.remove_sequence(leader_id);
  const GenerateResult late_result = batched.remove_sequence(late_id);
  const GenerateResult twin_result = batched.remove_sequence(twin_id);
  EXPECT_EQ(late_result.reused_tokens, 0u);
  EXPECT_EQ(twin_result.reused_tokens, late_prompt.size() - 1);
  EXPECT_EQ(leader_result.tokens, alone.generate(leader).tokens);
  const std::vector<int32_t> late_alone = alone.generate(greedy(late_prompt, 10)).tokens;
  EXPECT_EQ(late_result.tokens, late_alone);
  EXPECT_EQ(twin_result.tokens, late_alone);
}

// A free slot's cache lends a prompt only what its rings still hold: a request sharing 25 tokens with the
// 70 the slot's last sequence left gets nothing (prefilled again), one continuing a sequence gets all of it.
TEST(SlidingRing, AFreeSlotLendsOnlyWhatItsRingsStillHold) {
  TempDir dir("ring_free_slot");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  Engine batched(ring_options(dir.path(), 4)), alone(ring_options(dir.path(), 4));
  auto run_alone_in_batch = [&](const GenerateRequest& request) {
    const uint64_t id = batched.add_sequence(request);
    while (batched.step_sequences() > 0) {
    }
    return batched.remove_sequence(id);
  };
  const std::vector<int32_t> shared = some_tokens(30, 23);
  run_alone_in_batch(greedy(shared, 40));

  std::vector<int32_t> diverging(shared.begin(), shared.begin() + 25);
  diverging.insert(diverging.end(), {200, 201});
  GenerateRequest late = greedy(diverging, 10);
  late.reuse_prefix = true;
  const GenerateResult late_result = run_alone_in_batch(late);
  EXPECT_EQ(late_result.reused_tokens, 0u);
  EXPECT_EQ(late_result.tokens, alone.generate(greedy(diverging, 10)).tokens);

  std::vector<int32_t> continuing = diverging;
  continuing.insert(continuing.end(), late_result.tokens.begin(), late_result.tokens.end());
  continuing.push_back(4);
  GenerateRequest next = greedy(continuing, 8);
  next.reuse_prefix = true;
  const GenerateResult next_result = run_alone_in_batch(next);
  EXPECT_GE(next_result.reused_tokens, diverging.size() + late_result.tokens.size() - 1);
  EXPECT_EQ(next_result.tokens, alone.generate(greedy(continuing, 8)).tokens);
}

// Prompts prefilled a chunk per step inside the decode steps (mixed steps), beside sequences that
// speculate by prompt lookup (a check of each one's draft in the same step, drafts turned down going
// back): each reply is the one plain decoding gives it alone.
TEST(SlidingRing, MixedStepsAndBatchedDraftsGiveThePlainReplies) {
  TempDir dir("ring_mixed");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  EngineOptions options = ring_options(dir.path(), 4);
  options.sequences = 3;
  options.prefill_chunks_per_step = 1;  // the decode step carries a joining prompt's chunk
  Engine batched(options), alone(ring_options(dir.path(), 4));
  std::vector<GenerateRequest> requests;
  for (int32_t r = 0; r < 3; ++r) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 6; ++i) prompt.insert(prompt.end(), {40 + r, 41 + r, 42 + r, 43 + r});
    GenerateRequest request = greedy(prompt, 30);
    request.speculation.draft_tokens = 3;
    request.speculation.min_ngram = 1;
    requests.push_back(request);
  }
  const std::vector<GenerateResult> results = batched.generate_batch(requests);
  ASSERT_EQ(results.size(), requests.size());
  uint32_t drafted = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ(results[r].tokens, alone.generate(greedy(requests[r].prompt, 30)).tokens) << "request " << r;
    drafted += results[r].draft_tokens;
  }
  EXPECT_GT(drafted, 0u);
}

// A draft model with rings of its own: after a long reply, a new prompt sharing only its first 10 tokens
// finds the draft model's rings moved past them, so it prefills the draft model again rather than
// rewinding it (which its engine would refuse: the drafts would stop, with draft_error).
TEST(SlidingRing, ADraftModelGoesBackOnlyWhereItsRingsHold) {
  TempDir dir("ring_draft");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  EngineOptions options = ring_options(dir.path(), 4);
  options.draft.model_dir = dir.path().string();  // the model drafts for itself: every draft is taken
  Engine engine(options), plain(ring_options(dir.path(), 4));
  const std::vector<int32_t> prompt = some_tokens(30, 29);
  std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + 10);
  diverging.push_back(55);
  for (const std::vector<int32_t>& p : {prompt, diverging}) {
    GenerateRequest request = greedy(p, 40);
    request.speculation.draft_tokens = 3;
    request.speculation.source = DraftSource::draft_model;
    const GenerateResult result = engine.generate(request);
    EXPECT_EQ(result.draft_error, "");
    EXPECT_GT(result.accepted_tokens, 0u);
    EXPECT_EQ(result.tokens, plain.generate(greedy(p, 40)).tokens);
  }
}

// Tensor-parallel ranks (threads) each keep their KV heads' rings: the same greedy reply as one rank, and
// the same refusal to reuse a prefix the rings have moved past (rank 0's record of what was written).
TEST(SlidingRing, TensorParallelRanksGiveOneRanksReply) {
  TempDir dir("ring_tp");
  write_test_model(variant_spec(Variant::mistral_window), dir.path());
  Engine one(ring_options(dir.path(), 4));
  EngineOptions options = ring_options(dir.path(), 4);
  options.tp = 2;
  Engine two(options);
  const std::vector<int32_t> prompt = some_tokens(33, 17);
  const GenerateRequest request = greedy(prompt, 40);
  EXPECT_EQ(two.generate(request).tokens, one.generate(request).tokens);
  std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + 12);
  diverging.push_back(77);
  GenerateRequest again = greedy(diverging, 10);
  again.reuse_prefix = true;
  const GenerateResult two_again = two.generate(again), one_again = one.generate(again);
  EXPECT_EQ(two_again.reused_tokens, 0u);
  EXPECT_EQ(two_again.tokens, one_again.tokens);
}

// A prefill whose last token makes NaN logits fails, and the sequence goes back to where it began: only
// while the rings still hold that position's window. A 3-token prefill after 10 tokens leaves them holding
// it, so the sequence is its first 10 tokens again; a 20-token one writes positions 10 .. 29 and position
// 26 takes row 10 (16 rows), so the window before 10 is gone and the sequence starts over at 0
// (rewind_after_failure). Both through prefill() and through generate() with reuse_prefix; after each, the
// next prefill's logits are the reference's from that position. The two variants whose embeddings are not
// the LM head's (a tied NaN row would make every step's logits NaN).
TEST(SlidingRing, AFailedPrefillGoesBackToWhereItBeganOnlyWhileTheRingsHoldIt) {
  for (const Variant variant : {Variant::mistral_window, Variant::qwen2_window}) {
    TempDir poisoned_dir(std::string("ring_nan_") + variant_name(variant));
    const ModelSpec spec = variant_spec(variant);
    ASSERT_FALSE(spec.tie_embeddings);
    write_test_model(spec, poisoned_dir.path());
    const int32_t poisoned = 501;  // some_tokens gives 1 .. 500
    overwrite_f32(poisoned_dir.path(), "model.embed_tokens.weight", uint64_t(poisoned) * spec.hidden,
                  std::numeric_limits<float>::quiet_NaN());
    const LoadedModel loaded = load_hf_model(poisoned_dir.path());
    Engine engine(ring_options(poisoned_dir.path(), 4));
    const std::vector<int32_t> first = some_tokens(10, 3);
    for (const size_t failing_length : {size_t(3), size_t(20)}) {
      const bool rings_hold = failing_length == 3;
      std::vector<int32_t> failing = some_tokens(failing_length - 1, 8);
      failing.push_back(poisoned);
      for (const bool through_generate : {false, true}) {
        const std::string label = std::string(variant_name(variant)) + ", " + std::to_string(failing_length) +
                                  (through_generate ? " tokens by generate" : " tokens by prefill");
        engine.rewind(0);
        engine.prefill(first);
        if (through_generate) {
          std::vector<int32_t> prompt = first;
          prompt.insert(prompt.end(), failing.begin(), failing.end());
          GenerateRequest request = greedy(prompt, 2);
          request.reuse_prefix = true;  // keeps the 10 cached tokens, prefills the failing ones after them
          EXPECT_THROW(engine.generate(request), InputError) << label;
        } else {
          EXPECT_THROW(engine.prefill(failing), InputError) << label;
        }
        const std::vector<int32_t> expected_sequence = rings_hold ? first : std::vector<int32_t>{};
        ASSERT_EQ(engine.sequence(), expected_sequence) << label;
        ReferenceModel reference(loaded.spec, loaded.weights, 128);
        if (rings_hold) reference.forward(first);
        const std::vector<int32_t> next = some_tokens(6, 21);
        expect_logits_match_reference(engine.prefill(next), reference.forward(next), label);
      }
    }
  }
}

// The memory the cpu backend's caches take: Gemma 3 1B at 4096 positions keeps 4096 rows in its 4 full
// layers and 640 (a window of 512 and a chunk of 128) in its 22 sliding ones; the cuda backend and `plan`
// (step_tokens 0) keep 4096 everywhere.
TEST(SlidingRing, CachesOfSlidingLayersTakeTheirRingsMemory) {
  const ModelSpec spec = preset_spec("gemma-3-1b", DType::bf16);
  uint32_t full = 0, sliding = 0;
  for (uint32_t layer = 0; layer < spec.layers; ++layer) (spec.attention_window(layer) == 0 ? full : sliding) += 1;
  ASSERT_EQ(full, 4u);
  ASSERT_EQ(sliding, 22u);
  const RankShard whole = split_tensor_parallel(spec, 1).ranks[0];
  const uint64_t per_row = 2ull * spec.kv_heads * spec.head_dim * sizeof(float);  // K and V of one position
  EXPECT_EQ(rank_memory(spec, whole, 4096, 2, 1, 128).kv_cache_bytes, per_row * 2 * (4 * 4096 + 22 * 640));
  EXPECT_EQ(rank_memory(spec, whole, 4096, 2, 1).kv_cache_bytes, per_row * 2 * 26 * 4096);
}

}  // namespace
}  // namespace tilefire::testing
