// Prefix copies between the KV caches' sequence slots (docs/ARCHITECTURE.md, "Batched decoding"): a
// request with reuse_prefix that begins with what another slot holds (a sequence still in) copies those
// positions instead of prefilling them. The oracle: the same request reusing a free slot that holds the
// same tokens, bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/batch_results.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

// A request that begins with what a sequence still in holds starts from a copy of that slot's cache:
// `second` (the first's prompt and more) copies all of the first's prompt, and `choice` (the same prompt,
// another sample of it) all but its last token; both then decode beside the first. Each gets, bitwise, what it
// gets reusing a free slot that holds the first's prompt; the first is unchanged.
void expect_copied_prefix_gives_what_reusing_gives(EngineOptions options) {
  GenerateRequest first = counting_request(140, 3, 6);  // over a prefill chunk
  first.logprobs = 2;
  GenerateRequest second = first;
  for (int32_t t : {7, 8, 9}) second.prompt.push_back(t);
  second.reuse_prefix = true;
  second.sampling = {.temperature = 0.9f, .seed = 5};
  second.max_new_tokens = 5;
  GenerateRequest choice = first;
  choice.reuse_prefix = true;
  choice.sampling = {.temperature = 1.1f, .seed = 11};

  options.sequences = 3;
  Engine engine(options);
  const uint64_t first_id = engine.add_sequence(first);
  const uint64_t second_id = engine.add_sequence(second);
  const uint64_t choice_id = engine.add_sequence(choice);
  while (engine.step_sequences() > 0) {
  }
  const GenerateResult first_result = engine.remove_sequence(first_id);
  const GenerateResult second_result = engine.remove_sequence(second_id);
  const GenerateResult choice_result = engine.remove_sequence(choice_id);
  EXPECT_EQ(first_result.reused_tokens, 0u);
  EXPECT_EQ(second_result.reused_tokens, 140u) << "copied from the slot of the first, which was in";
  EXPECT_EQ(choice_result.reused_tokens, 139u) << "all but the prompt's last token, whose logits give the first new one";

  options.sequences = 1;
  Engine reference(options);
  expect_same_result(first_result, reference.generate(first), 0);
  auto reusing_the_first_prompt = [&](const GenerateRequest& request) {
    GenerateRequest prompt_only = first;  // taken out before its first decode: its slot holds the prompt
    prompt_only.max_new_tokens = 1;
    reference.remove_sequence(reference.add_sequence(prompt_only));
    const uint64_t id = reference.add_sequence(request);
    while (!reference.sequence_finished(id)) reference.step_sequences();
    return reference.remove_sequence(id);
  };
  const GenerateResult second_reused = reusing_the_first_prompt(second);
  EXPECT_EQ(second_reused.reused_tokens, 140u);
  expect_same_result(second_result, second_reused, 1);
  expect_same_result(choice_result, reusing_the_first_prompt(choice), 2);
}

TEST(PrefixCopy, ACopiedPrefixGivesWhatReusingAFreeSlotGives) {
  EngineOptions options;
  options.threads = 2;
  expect_copied_prefix_gives_what_reusing_gives(options);
}

TEST(PrefixCopy, UnderTensorParallelismEveryRankCopiesItsShareOfThePrefix) {
  EngineOptions options;
  options.threads = 2;
  options.tp = 2;
  expect_copied_prefix_gives_what_reusing_gives(options);
}

// A sequence that has decoded holds its reply's tokens too: a request that begins with its prompt and the
// tokens it has fed copies them all, into the free slot with the least to lose (an empty one rather than
// the one a removed sequence left, which a later request then still finds). Bitwise what reusing a free
// slot that holds the same gives.
TEST(PrefixCopy, ACopyTakesTheRepliesTokensIntoTheFreeSlotWithLeastToLose) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 3;
  Engine engine(options);
  GenerateRequest first = counting_request(20, 3, 6);
  std::vector<int32_t> reply;
  first.on_token = [&](int32_t token) { reply.push_back(token); };
  const GenerateRequest other = counting_request(30, 90, 1);
  const uint64_t first_id = engine.add_sequence(first);  // slot 0
  engine.remove_sequence(engine.add_sequence(other));    // slot 1, free again: it keeps the other's prompt
  engine.step_sequences();
  engine.step_sequences();
  ASSERT_EQ(reply.size(), 3u);  // the first two fed back: in the cache
  const std::vector<int32_t> three_tokens = reply;
  GenerateRequest copying;
  copying.prompt = first.prompt;
  copying.prompt.insert(copying.prompt.end(), {three_tokens[0], three_tokens[1], 77});
  copying.max_new_tokens = 4;
  copying.stop_at_eos = false;
  copying.reuse_prefix = true;
  copying.logprobs = 2;
  const uint64_t copying_id = engine.add_sequence(copying);
  while (engine.step_sequences() > 0) {
  }
  const GenerateResult copied = engine.remove_sequence(copying_id);
  engine.remove_sequence(first_id);
  EXPECT_EQ(copied.reused_tokens, 22u) << "the prompt and the two tokens fed";
  GenerateRequest later = other;
  later.prompt.push_back(5);
  later.reuse_prefix = true;
  EXPECT_EQ(engine.remove_sequence(engine.add_sequence(later)).reused_tokens, 30u) << "the copy went to the empty slot";

  options.sequences = 1;
  Engine reference(options);
  GenerateRequest first_three = first;  // taken out after three tokens, two of them fed
  first_three.max_new_tokens = 3;
  first_three.on_token = nullptr;
  const uint64_t id = reference.add_sequence(first_three);
  while (!reference.sequence_finished(id)) reference.step_sequences();
  EXPECT_EQ(reference.remove_sequence(id).tokens, three_tokens);
  const uint64_t reused_id = reference.add_sequence(copying);
  while (!reference.sequence_finished(reused_id)) reference.step_sequences();
  const GenerateResult reused = reference.remove_sequence(reused_id);
  EXPECT_EQ(reused.reused_tokens, 22u);
  expect_same_result(copied, reused, 0);
}

// With the prompts prefilled by the steps, two choices of one long prompt added together: the second's
// turn comes once the first's prompt is in, and it copies all but the last token instead of prefilling
// its three chunks, so its first token comes at the step after the first's.
TEST(PrefixCopy, AChoiceWaitingToPrefillCopiesWhatTheOneBeforeItPrefilled) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = 2;
  options.prefill_chunks_per_step = 1;
  Engine engine(options);
  uint32_t first_tokens = 0, second_tokens = 0;
  GenerateRequest first = counting_request(300, 2, 4);  // chunks of 128, 128 and 44
  first.reuse_prefix = true;
  first.on_token = [&](int32_t) { ++first_tokens; };
  GenerateRequest second = first;
  second.sampling = {.temperature = 1.0f, .seed = 3};
  second.logprobs = 1;
  second.on_token = [&](int32_t) { ++second_tokens; };
  const uint64_t first_id = engine.add_sequence(first);
  const uint64_t second_id = engine.add_sequence(second);
  const std::vector<uint32_t> first_after_step{0, 0, 1, 2}, second_after_step{0, 0, 0, 1};
  for (size_t step = 0; step < first_after_step.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    engine.step_sequences();
    EXPECT_EQ(first_tokens, first_after_step[step]);
    EXPECT_EQ(second_tokens, second_after_step[step]);
  }
  while (engine.step_sequences() > 0) {
  }
  const GenerateResult first_result = engine.remove_sequence(first_id);
  const GenerateResult second_result = engine.remove_sequence(second_id);
  EXPECT_EQ(first_result.reused_tokens, 0u);
  EXPECT_EQ(second_result.reused_tokens, 299u);

  options.sequences = 1;
  options.prefill_chunks_per_step = 0;
  Engine reference(options);
  first.on_token = second.on_token = nullptr;
  expect_same_result(first_result, reference.generate(first), 0);
  GenerateRequest prompt_only = first;  // its slot keeps the prompt
  prompt_only.max_new_tokens = 1;
  reference.remove_sequence(reference.add_sequence(prompt_only));
  const uint64_t id = reference.add_sequence(second);
  while (!reference.sequence_finished(id)) reference.step_sequences();
  expect_same_result(second_result, reference.remove_sequence(id), 1);
}

}  // namespace
}  // namespace tilefire::testing
