// EngineOptions::prefill_in_decode_step: a prompt's chunk runs in the decode step's program, its rows
// before the decoding sequences'. The references are independent of it: the same calls on an engine that
// runs each chunk as a program of its own (bitwise, on the cpu: every row is computed as a step of its own
// would compute it), and generate() for each request alone on an engine of one sequence.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/batch_results.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

// A request and the step before which it is added (the steps of a schedule count from 0).
struct Arrival {
  GenerateRequest request;
  uint32_t step = 0;
};

// What a schedule gave: each request's result, the step it was added before, its first token's step, and
// its tokens at each step.
struct ScheduleRun {
  std::vector<GenerateResult> results;
  std::vector<uint32_t> added_step, first_token_step;
  std::vector<std::map<uint32_t, uint32_t>> tokens_at_step;
};

// Runs the arrivals through `engine`'s add_sequence and step_sequences, each added before its step (when a
// slot is free; else at the first step after one frees), and taken out when it finishes.
ScheduleRun run_schedule(Engine& engine, std::vector<Arrival> arrivals, uint32_t slots) {
  ScheduleRun run;
  run.results.resize(arrivals.size());
  run.added_step.assign(arrivals.size(), 0);
  run.first_token_step.assign(arrivals.size(), 0);
  run.tokens_at_step.resize(arrivals.size());
  std::vector<std::pair<uint64_t, size_t>> in;  // (sequence id, arrival)
  uint32_t step = 0;
  size_t done = 0;
  std::vector<bool> added(arrivals.size(), false), has_token(arrivals.size(), false);
  for (size_t i = 0; i < arrivals.size(); ++i)
    arrivals[i].request.on_token = [&run, &step, &has_token, i](int32_t) {
      if (!has_token[i]) run.first_token_step[i] = step;
      has_token[i] = true;
      ++run.tokens_at_step[i][step];
    };
  while (done < arrivals.size()) {
    for (size_t i = 0; i < arrivals.size(); ++i)
      if (!added[i] && arrivals[i].step <= step && in.size() < slots) {
        in.emplace_back(engine.add_sequence(arrivals[i].request), i);
        added[i] = true;
        run.added_step[i] = step;
      }
    engine.step_sequences();
    for (size_t k = 0; k < in.size();) {
      if (engine.sequence_finished(in[k].first)) {
        run.results[in[k].second] = engine.remove_sequence(in[k].first);
        run.results[in[k].second].prompt_tokens = arrivals[in[k].second].request.prompt;
        in.erase(in.begin() + ptrdiff_t(k));
        ++done;
      } else {
        ++k;
      }
    }
    ++step;
    if (step > 10'000) {
      ADD_FAILURE() << "the schedule did not end";
      break;
    }
  }
  return run;
}

// Long prompts joining sequences that decode: greedy with logprobs, sampled, penalized, prompts of one
// chunk, several chunks and a chunk's length plus one (chunks of 16).
std::vector<Arrival> joining_arrivals() {
  std::vector<Arrival> arrivals(5);
  arrivals[0].request = counting_request(6, 1, 24);
  arrivals[0].request.logprobs = 3;
  arrivals[1].request = counting_request(70, 3, 6);
  arrivals[1].request.sampling = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7};
  arrivals[1].step = 2;
  arrivals[2].request = counting_request(17, 42, 10);
  arrivals[2].request.sampling = {.temperature = 1.1f, .seed = 99, .repetition_penalty = 1.2f, .presence_penalty = 0.4f};
  arrivals[2].request.logprobs = 2;
  arrivals[2].step = 3;
  arrivals[3].request = counting_request(45, 5, 5);
  arrivals[3].request.sampling.frequency_penalty = 0.6f;
  arrivals[3].step = 3;
  arrivals[4].request = counting_request(33, 9, 4);  // joins as a slot frees
  arrivals[4].step = 4;
  return arrivals;
}

// An engine of `sequences` slots on two threads whose steps prefill one chunk of `prefill_chunk` tokens.
EngineOptions prefilled_by_the_steps(uint32_t sequences, uint32_t prefill_chunk) {
  EngineOptions options;
  options.threads = 2;
  options.sequences = sequences;
  options.prefill_chunk = prefill_chunk;
  options.prefill_chunks_per_step = 1;
  return options;
}

// The arrivals run on an engine whose decode steps take a chunk and on one whose chunks run apart: the
// same results bit for bit, and each generate()'s for its request alone. Returns both runs.
std::pair<ScheduleRun, ScheduleRun> expect_same_in_the_decode_step_as_apart(EngineOptions options, const std::vector<Arrival>& arrivals) {
  options.prefill_in_decode_step = true;
  Engine in_step(options);
  const ScheduleRun mixed = run_schedule(in_step, arrivals, options.sequences);
  options.prefill_in_decode_step = false;
  Engine apart(options);
  const ScheduleRun separate = run_schedule(apart, arrivals, options.sequences);
  options.sequences = 1;
  options.prefill_chunks_per_step = 0;
  Engine alone(options);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    expect_same_result(mixed.results[i], separate.results[i], i);
    expect_same_result(mixed.results[i], alone.generate(arrivals[i].request), i);
  }
  return {mixed, separate};
}

// With 1 and 2 chunks per step, and with the KV positions split in two (the cpu then runs chunks apart:
// a batched program's attention would split where a prefill's does not).
TEST(MixedStep, RepliesAreBitwiseThoseOfChunksRunApart) {
  EngineOptions options = prefilled_by_the_steps(4, 16);
  for (const auto& [chunks, kv_splits] : {std::pair{1u, 0u}, {2u, 0u}, {1u, 2u}}) {
    SCOPED_TRACE(std::to_string(chunks) + " chunks per step, kv_splits " + std::to_string(kv_splits));
    options.prefill_chunks_per_step = chunks;
    options.kv_splits = kv_splits;
    expect_same_in_the_decode_step_as_apart(options, joining_arrivals());
  }
}

// The chunk takes the room the decode rows leave of the 128 a step holds: with the default chunk of 128, a
// 384-token prompt joining three decoding sequences takes four steps (chunks of 125, 125, 125 and 9)
// where apart it takes three (128 each).
TEST(MixedStep, ADefaultChunkIsCutToTheStepsRoom) {
  const EngineOptions options = prefilled_by_the_steps(4, 128);
  std::vector<Arrival> arrivals(4);
  for (int i = 0; i < 3; ++i) arrivals[size_t(i)].request = counting_request(4, 1 + i, 8);
  arrivals[3].request = counting_request(384, 2, 2);
  arrivals[3].step = 4;  // the others decoding
  const auto [mixed, apart] = expect_same_in_the_decode_step_as_apart(options, arrivals);
  EXPECT_EQ(mixed.first_token_step[3], 7u) << "steps 4 to 7 prefill it";
  EXPECT_EQ(apart.first_token_step[3], 6u) << "steps 4 to 6 prefill it";
}

// A chunk of 16 beside three decoding sequences: the step holds 19 rows, and the chunk is not cut (a
// 48-token prompt in three steps).
TEST(MixedStep, ASmallChunkIsNotCut) {
  const EngineOptions options = prefilled_by_the_steps(4, 16);
  std::vector<Arrival> arrivals(4);
  for (int i = 0; i < 3; ++i) arrivals[size_t(i)].request = counting_request(4, 1 + i, 8);
  arrivals[3].request = counting_request(48, 2, 2);
  arrivals[3].step = 4;  // the others decoding
  const auto [mixed, apart] = expect_same_in_the_decode_step_as_apart(options, arrivals);
  EXPECT_EQ(mixed.first_token_step[3], 6u) << "steps 4, 5 and 6 prefill it";
  EXPECT_EQ(apart.first_token_step[3], 6u);
}

TEST(MixedStep, UnderTensorParallelism) {
  EngineOptions options = prefilled_by_the_steps(4, 16);
  options.tp = 2;
  expect_same_in_the_decode_step_as_apart(options, joining_arrivals());
}

// Sequences that speculate beside a joining prompt: the chunk goes first, the drafts share what is left
// (six slots, three empty: a step holds 22 rows, 16 of them the chunk's), and every reply is plain
// decoding's (the reference engine neither speculates nor takes chunks in its decode steps).
TEST(MixedStep, BesideSequencesThatSpeculate) {
  EngineOptions options = prefilled_by_the_steps(6, 16);
  std::vector<Arrival> arrivals(3);
  arrivals[0].request = counting_request(3, 1, 80);  // the sample model falls into a loop: drafts are taken
  arrivals[0].request.speculation.draft_tokens = 4;
  arrivals[1].request = counting_request(5, 8, 30);
  arrivals[1].request.speculation.draft_tokens = 6;
  arrivals[1].step = 1;
  arrivals[2].request = counting_request(90, 4, 5);
  arrivals[2].step = 14;  // the first sequence is in its loop (from its 13th step): its drafts are taken
  options.prefill_in_decode_step = true;
  Engine speculating(options);
  const ScheduleRun run = run_schedule(speculating, arrivals, options.sequences);
  options.prefill_in_decode_step = false;
  Engine plain(options);
  for (Arrival& a : arrivals) a.request.speculation.draft_tokens = 0;
  const ScheduleRun reference = run_schedule(plain, arrivals, options.sequences);
  for (size_t i = 0; i < arrivals.size(); ++i) expect_same_result(run.results[i], reference.results[i], i);
  // A step that ran a chunk of the joining prompt (after it was added, before its first token) in which a
  // speculating sequence took a draft (more than one token).
  bool beside = false;
  for (uint32_t step = run.added_step[2]; step < run.first_token_step[2]; ++step)
    for (size_t i : {0, 1})
      beside = beside || (run.tokens_at_step[i].count(step) && run.tokens_at_step[i].at(step) > 1);
  EXPECT_TRUE(beside) << "no draft was taken beside the joining prompt's chunks";
}

// The chunk is cut to the room the decode rows leave of a step's 128, but never below half of itself: with
// 60 sequences decoding a 300-token prompt joins in chunks of 68 (five steps); with 66, in chunks of 128
// apart from the decode step (three steps), as the engine that runs every chunk apart does. The newcomer's
// reply is generate()'s either way.
TEST(MixedStep, AChunkCutBelowHalfOfItselfRunsApart) {
  const EngineOptions options = prefilled_by_the_steps(70, 128);
  Engine in_step(options);
  EngineOptions apart_options = options;
  apart_options.prefill_in_decode_step = false;
  Engine apart(apart_options);
  EngineOptions single = options;
  single.sequences = 1;
  single.prefill_chunks_per_step = 0;
  Engine alone(single);
  const GenerateRequest newcomer = counting_request(300, 2, 2);
  for (const auto& [decoding, in_step_steps] : {std::pair{60u, 5u}, {66u, 3u}}) {
    SCOPED_TRACE(std::to_string(decoding) + " sequences decoding");
    std::vector<Arrival> arrivals(decoding + 1);
    for (uint32_t i = 0; i < decoding; ++i) arrivals[i].request = counting_request(2, int32_t(i), decoding + 12);
    arrivals[decoding].request = newcomer;
    arrivals[decoding].step = decoding;  // every other sequence decoding
    const ScheduleRun mixed = run_schedule(in_step, arrivals, options.sequences);
    const ScheduleRun separate = run_schedule(apart, arrivals, options.sequences);
    EXPECT_EQ(mixed.first_token_step[decoding] - mixed.added_step[decoding] + 1, in_step_steps);
    EXPECT_EQ(separate.first_token_step[decoding] - separate.added_step[decoding] + 1, 3u);
    expect_same_result(mixed.results[decoding], alone.generate(newcomer), decoding);
    expect_same_result(separate.results[decoding], mixed.results[decoding], decoding);
  }
}

}  // namespace
}  // namespace tilefire::testing
