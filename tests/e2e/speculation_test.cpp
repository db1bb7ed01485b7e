// Speculative decoding by prompt lookup (GenerateRequest::speculation). The oracle is generate() without
// it on a second engine: the same tokens (greedy and sampled, with the same seed), the same finish, the
// same sequence left in the cache, logprobs within rounding (a check step's rows are computed as a prefill
// chunk's, not a decode step's). The drafts themselves are checked on hand-made histories, and a run must
// take some of its drafts and turn some down, so both ways through a check are exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megakernel/speculation.h"
#include "tests/common/cli_runner.h"
#include "tests/common/refusal.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"

namespace tilefire::testing {
namespace {

TEST(PromptLookupDraft, FollowsTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  // The suffix {7, 8} occurred at 0 and at 4: the latest (4) is followed by 9, 1.
  EXPECT_EQ(prompt_lookup_draft({7, 8, 2, 3, 7, 8, 9, 1, 7, 8}, 2, 1, 3), (std::vector<int32_t>{9, 1}));
  // {5, 7, 8} occurred at 0 (followed by 2), {7, 8} alone later (followed by 4): the longer one wins.
  EXPECT_EQ(prompt_lookup_draft({5, 7, 8, 2, 6, 7, 8, 4, 5, 7, 8}, 1, 1, 3), (std::vector<int32_t>{2}));
  // With the longest n-gram 2, the later {7, 8} is taken.
  EXPECT_EQ(prompt_lookup_draft({5, 7, 8, 2, 6, 7, 8, 4, 5, 7, 8}, 1, 1, 2), (std::vector<int32_t>{4}));
}

TEST(PromptLookupDraft, ReadsOnIntoItselfPastTheHistorysEnd) {
  // {1, 2, 3} repeating: the match of {2, 3} at 1 is followed by 1, 2, 3 and then the draft's own 1, 2, ...
  EXPECT_EQ(prompt_lookup_draft({1, 2, 3, 1, 2, 3}, 7, 1, 2), (std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1}));
  // A run of one token continues as that token.
  EXPECT_EQ(prompt_lookup_draft({4, 9, 9}, 3, 1, 3), (std::vector<int32_t>{9, 9, 9}));
}

TEST(PromptLookupDraft, NothingWithoutAnEarlierOccurrenceOfAtLeastTheShortest) {
  EXPECT_TRUE(prompt_lookup_draft({1, 2, 3, 4}, 4, 1, 3).empty());
  EXPECT_TRUE(prompt_lookup_draft({5}, 4, 1, 3).empty());
  EXPECT_TRUE(prompt_lookup_draft({}, 4, 1, 3).empty());
  // {3} occurred before, but no 2-gram ending the history did: with the shortest 2, no draft.
  EXPECT_TRUE(prompt_lookup_draft({3, 1, 2, 3}, 4, 2, 3).empty());
  EXPECT_EQ(prompt_lookup_draft({3, 1, 2, 3}, 2, 1, 3), (std::vector<int32_t>{1, 2}));
}

EngineOptions tiny_options() {
  EngineOptions options;  // the built-in sample (tiny): greedy replies fall into loops a lookup finds
  options.threads = 2;
  options.max_context = 160;
  return options;
}

// Prompts whose greedy replies take some drafts and turn others down (their lookups find n-grams the
// model does not continue as before, and loops it falls into): 40 tokens of the first take all but 2 of
// 40 drafted with drafts of 8, of the second 7 of 12 with drafts of 4.
const std::vector<std::vector<int32_t>> kPrompts = {
    byte_tokens("Once upon a time"),
    byte_tokens("The cat sat on the mat"),
    {5, 6, 7, 8, 5, 6, 7, 8, 5, 6},
};

struct Pair {
  Engine plain{tiny_options()};
  Engine speculating{tiny_options()};
};

// Both engines' results on the request, the second with `speculation`; checks they agree and returns the
// speculating one's.
GenerateResult expect_same_reply(Pair& engines, const GenerateRequest& request, const Speculation& speculation,
                                 const std::string& what) {
  SCOPED_TRACE(what);
  const GenerateResult want = engines.plain.generate(request);
  GenerateRequest speculative = request;
  speculative.speculation = speculation;
  const GenerateResult got = engines.speculating.generate(speculative);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.finish_reason, want.finish_reason);
  EXPECT_EQ(engines.speculating.sequence(), engines.plain.sequence()) << "the sequence left in the cache";
  EXPECT_EQ(engines.speculating.position(), engines.plain.position());
  EXPECT_EQ(want.draft_tokens, 0u);
  EXPECT_LE(got.accepted_tokens, got.draft_tokens);
  // Every step after the first token gives one token, or a check step gives one more than it took.
  const uint32_t after_first = got.tokens.empty() ? 0 : uint32_t(got.tokens.size()) - 1;
  EXPECT_LE(got.decode_steps, after_first);
  EXPECT_GE(got.decode_steps + got.accepted_tokens, after_first);
  EXPECT_EQ(want.decode_steps, after_first);
  EXPECT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < std::min(got.logprobs.size(), want.logprobs.size()); ++i) {
    EXPECT_EQ(got.logprobs[i].size(), want.logprobs[i].size());
    for (size_t k = 0; k < std::min(got.logprobs[i].size(), want.logprobs[i].size()); ++k) {
      EXPECT_EQ(got.logprobs[i][k].token, want.logprobs[i][k].token) << "position " << i << " rank " << k;
      EXPECT_NEAR(got.logprobs[i][k].logprob, want.logprobs[i][k].logprob, 1e-4) << "position " << i << " rank " << k;
    }
    EXPECT_NEAR(got.token_probabilities[i].logprob, want.token_probabilities[i].logprob, 1e-4) << "position " << i;
  }
  return got;
}

TEST(Speculation, GreedyRepliesAreThoseOfDecodeSteps) {
  Pair engines;
  uint32_t drafted = 0, accepted = 0, speculating_steps = 0, plain_steps = 0;
  for (uint32_t k : {1u, 4u, 8u})
    for (size_t p = 0; p < kPrompts.size(); ++p) {
      GenerateRequest request;
      request.prompt = kPrompts[p];
      request.max_new_tokens = 60;
      const GenerateResult got =
          expect_same_reply(engines, request, {k, 3, 1}, "prompt " + std::to_string(p) + ", draft " + std::to_string(k));
      drafted += got.draft_tokens;
      accepted += got.accepted_tokens;
      speculating_steps += got.decode_steps;
      plain_steps += uint32_t(got.tokens.size()) - 1;  // what decode steps take for the same reply
    }
  EXPECT_GT(accepted, 0u) << "no draft was taken";
  EXPECT_LT(accepted, drafted) << "no draft was turned down";
  EXPECT_LT(speculating_steps, plain_steps) << "speculation took no step fewer than decoding";
  // Every taken draft token saves a step, and nothing else does; a reply's last token may be a taken one
  // that saved none (the reply ended there), once per reply at most.
  EXPECT_LE(plain_steps, speculating_steps + accepted);
  EXPECT_LE(speculating_steps + accepted, plain_steps + 3 * uint32_t(kPrompts.size()));
}

TEST(Speculation, SampledRepliesAndTheirLogprobsAreThoseOfDecodeSteps) {
  Pair engines;
  GenerateRequest request;
  request.prompt = kPrompts[0];
  request.max_new_tokens = 40;
  request.logprobs = 3;
  // The sample's distributions are flat: a low temperature, or the two most probable, keep some drafts right.
  uint32_t accepted = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    request.sampling.seed = seed;
    request.sampling.temperature = 1.0f;
    request.sampling.top_k = 2;
    accepted += expect_same_reply(engines, request, {4, 3, 1}, "top-k 2, seed " + std::to_string(seed)).accepted_tokens;
    request.sampling.temperature = 0.1f;
    request.sampling.top_k = 0;
    accepted += expect_same_reply(engines, request, {4, 3, 1}, "temperature 0.1, seed " + std::to_string(seed)).accepted_tokens;
  }
  EXPECT_GT(accepted, 0u) << "no draft was taken: the sampled path through a check step is untested";
  // The logit adjustments see the reply as it grows within a check step, as they do step by step. Mild
  // ones, greedy: stronger penalties break the sample's loop, and no draft would be taken.
  request.sampling.temperature = 0.0f;
  request.sampling.repetition_penalty = 1.02f;
  request.sampling.frequency_penalty = 0.02f;
  request.min_new_tokens = 5;
  EXPECT_GT(expect_same_reply(engines, request, {6, 2, 1}, "penalties").accepted_tokens, 0u)
      << "no draft was taken: the penalties never saw a check step's later rows";
}

TEST(Speculation, EndsWhereDecodeStepsEnd) {
  Pair engines;
  GenerateRequest request;
  request.prompt = kPrompts[1];
  request.stop_at_eos = false;
  // The limit inside a check step of 8 drafted tokens.
  for (uint32_t limit : {1u, 2u, 3u, 7u, 13u}) {
    request.max_new_tokens = limit;
    const GenerateResult got = expect_same_reply(engines, request, {8, 3, 1}, "max_new_tokens " + std::to_string(limit));
    EXPECT_EQ(got.tokens.size(), limit);
  }
  request.max_new_tokens = 40;
  const std::vector<int32_t> free_run = engines.plain.generate(request).tokens;
  // A stop token that comes up late: a check step that drafted past it ends there.
  request.stop_tokens = {free_run[30]};
  expect_same_reply(engines, request, {8, 3, 1}, "stop token");
  request.stop_tokens.clear();
  request.stop_when = [](const std::vector<int32_t>& generated) { return generated.size() == 23; };
  EXPECT_EQ(expect_same_reply(engines, request, {8, 3, 1}, "stop_when").tokens.size(), 23u);
  // A callback that throws inside a check step leaves the sequence as decode steps leave it when it throws
  // at the same token.
  request.stop_when = [](const std::vector<int32_t>& generated) {
    if (generated.size() == 17) throw std::runtime_error("the client went away");
    return false;
  };
  request.prompt = kPrompts[0];  // whose reply takes nearly every draft: token 17 comes from a check step's later rows
  GenerateRequest speculative = request;
  speculative.speculation = {8, 3, 1};
  {
    GenerateRequest first_17 = speculative;
    first_17.stop_when = nullptr;
    first_17.max_new_tokens = 17;
    const GenerateResult taken = engines.speculating.generate(first_17);
    ASSERT_GE(taken.accepted_tokens, 8u) << "the first 17 tokens took few drafts: the case below may not end inside a check";
  }
  EXPECT_THROW(engines.plain.generate(request), std::runtime_error);
  EXPECT_THROW(engines.speculating.generate(speculative), std::runtime_error);
  EXPECT_EQ(engines.speculating.sequence(), engines.plain.sequence()) << "after a callback threw";
  EXPECT_EQ(engines.speculating.position(), engines.plain.position());
  request.stop_when = nullptr;
  // The context's end: the last steps have no room for a check of 8 and decode one token each.
  request.max_new_tokens = 400;
  const GenerateResult full = expect_same_reply(engines, request, {8, 3, 1}, "context");
  EXPECT_EQ(full.finish_reason, "context");
}

// The cache a speculating reply leaves holds what decode steps would have left: the next step's logits
// agree (the turned-down drafts' entries past the position take no part).
TEST(Speculation, TheCacheContinuesAsAfterDecodeSteps) {
  Pair engines;
  GenerateRequest request;
  request.prompt = kPrompts[1];
  request.max_new_tokens = 37;
  const GenerateResult got = expect_same_reply(engines, request, {8, 3, 1}, "reply");
  ASSERT_GT(got.draft_tokens, got.accepted_tokens);
  const std::vector<float> want = engines.plain.decode(got.tokens.back());
  const std::vector<float> next = engines.speculating.decode(got.tokens.back());
  ASSERT_EQ(next.size(), want.size());
  for (size_t v = 0; v < want.size(); ++v) ASSERT_NEAR(next[v], want[v], 1e-4) << "logit " << v;
  // And a conversation's next turn, reusing the cache, replies alike.
  GenerateRequest turn = request;
  turn.prompt = engines.plain.sequence();
  turn.prompt.push_back(got.tokens.back());
  turn.prompt.insert(turn.prompt.end(), {40, 41, 42});
  turn.reuse_prefix = true;
  EXPECT_GT(expect_same_reply(engines, turn, {8, 3, 1}, "next turn").reused_tokens, 0u);
}

TEST(Speculation, TensorParallelRanksSpeculateAsOneRank) {
  Engine one(tiny_options());
  EngineOptions options = tiny_options();
  options.tp = 2;
  Engine two(options);
  GenerateRequest request;
  request.prompt = kPrompts[0];
  request.max_new_tokens = 40;
  const GenerateResult want = one.generate(request);
  request.speculation = {4, 3, 1};
  const GenerateResult got = two.generate(request);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(two.sequence(), one.sequence());
  EXPECT_GT(got.accepted_tokens, 0u);
}

TEST(Speculation, RefusesWhatItCannotDo) {
  Engine engine(tiny_options());
  GenerateRequest request;
  request.prompt = kPrompts[0];
  request.max_new_tokens = 8;
  request.speculation = {32, 3, 1};
  EXPECT_NE(refusal([&] { engine.generate(request); }).find("draft_tokens (--speculate) 32 is more than 31"), std::string::npos);
  request.speculation = {4, 0, 1};
  EXPECT_NE(refusal([&] { engine.generate(request); }).find("max_ngram (--speculate-ngram) must be 1 to 16"), std::string::npos);
  request.speculation = {4, 2, 3};
  EXPECT_NE(refusal([&] { engine.generate(request); }).find("min_ngram (--speculate-min-ngram) must be 1 to max_ngram"),
            std::string::npos);
  request.speculation = {4, 3, 1};
  request.trace_path = "unused.json";
  EXPECT_NE(refusal([&] { engine.generate(request); }).find("--trace records a decode step, and with --speculate"),
            std::string::npos);
  // In a batch too: a trace, and drafts out of bounds.
  EXPECT_NE(refusal([&] { engine.generate_batch({request}); }).find("--trace records a decode step, and with --speculate"),
            std::string::npos);
  EXPECT_NE(refusal([&] { engine.add_sequence(request); }).find("--trace records a decode step, and with --speculate"),
            std::string::npos);
  request.trace_path.clear();
  request.speculation = {32, 3, 1};
  EXPECT_NE(refusal([&] { engine.add_sequence(request); }).find("draft_tokens (--speculate) 32 is more than 31"), std::string::npos);
  request.speculation = {4, 3, 1};
  EXPECT_EQ(engine.sequences_in(), 0u);
  EXPECT_EQ(engine.position(), 0u) << "a refused request ran";

  EngineOptions small_chunks = tiny_options();
  small_chunks.prefill_chunk = 4;
  Engine chunked(small_chunks);
  request.speculation = {4, 3, 1};
  EXPECT_NE(refusal([&] { chunked.generate(request); }).find("at most the prefill chunk of 4"), std::string::npos);
  request.speculation = {3, 3, 1};
  EXPECT_EQ(chunked.generate(request).tokens.size(), 8u);
}

// Speculation in a batch (generate_batch, add_sequence): each sequence's draft is checked in the batched
// step, its rows beside the others'. On the cpu every row computes what a decode step at its position
// computes, bitwise, so each result is bitwise plain batched decoding's: tokens, logprobs, finish.
// Greedy, sampled and penalized requests; one that ends by stop_when and one at the context, mid-draft
// as it may be; one of a single token and one that does not speculate beside them; drafts taken and
// turned down.
void expect_batched_speculation_is_plain(EngineOptions options, const Speculation& speculation) {
  std::vector<GenerateRequest> requests;
  for (const std::vector<int32_t>& prompt : kPrompts) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_new_tokens = 40;
    request.stop_at_eos = false;
    request.logprobs = 2;
    requests.push_back(request);
  }
  requests.push_back(requests[0]);
  requests.back().sampling = {.temperature = 0.8f, .seed = 3};
  requests.push_back(requests[1]);
  requests.back().sampling.frequency_penalty = 0.5f;
  requests.push_back(requests[2]);
  requests.back().max_new_tokens = 1;
  requests.push_back(requests[0]);  // ends after 17 tokens
  requests.back().stop_when = [](const std::vector<int32_t>& generated) { return generated.size() >= 17; };
  requests.push_back(requests[1]);  // runs into the context
  requests.back().max_new_tokens = 200;
  options.max_context = 72;  // the longest prompt (22 tokens) and 40 new fit
  options.sequences = uint32_t(requests.size()) + 1;
  Engine plain(options), speculating(options);
  requests.push_back(requests[0]);  // does not speculate
  const std::vector<GenerateResult> want = plain.generate_batch(requests);
  for (size_t i = 0; i + 1 < requests.size(); ++i) requests[i].speculation = speculation;
  const std::vector<GenerateResult> got = speculating.generate_batch(requests);
  EXPECT_EQ(got[6].finish_reason, "stopped");
  EXPECT_EQ(got[7].finish_reason, "context");
  EXPECT_EQ(got.back().draft_tokens, 0u) << "a request without speculation takes no draft";
  uint32_t drafted = 0, accepted = 0, fewer_steps = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason);
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (size_t t = 0; t < want[i].logprobs.size(); ++t)
      for (size_t k = 0; k < want[i].logprobs[t].size(); ++k) {
        EXPECT_EQ(got[i].logprobs[t][k].token, want[i].logprobs[t][k].token) << "token " << t;
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i].logprobs[t][k].logprob), std::bit_cast<uint32_t>(want[i].logprobs[t][k].logprob))
            << "token " << t << ": bitwise a decode step's";
      }
    drafted += got[i].draft_tokens;
    accepted += got[i].accepted_tokens;
    fewer_steps += got[i].decode_steps + 1 < got[i].tokens.size() ? 1 : 0;
  }
  EXPECT_GT(accepted, 0u) << "the sample's loops take drafts";
  EXPECT_LT(accepted, drafted) << "and some are turned down";
  EXPECT_GT(fewer_steps, 0u);
}

TEST(BatchedSpeculation, EachReplyIsBitwisePlainBatchedDecodings) {
  expect_batched_speculation_is_plain(tiny_options(), {4, 3, 2});
}

// Drafts of 31 for the sequences that decode would be up to 256 rows: a step carries at most 128, the
// room shared among them. Prompts prefilled by the steps, a chunk a step, as serve --sequences does.
TEST(BatchedSpeculation, LongDraftsAndPromptsPrefilledByTheSteps) {
  EngineOptions options = tiny_options();
  options.prefill_chunks_per_step = 1;
  expect_batched_speculation_is_plain(options, {31, 3, 1});
}

// Under tensor parallelism the collectives' window holds the widest step the engine was sized for, a
// prefill chunk or a token of every sequence: with chunks of 16 and 9 sequences, the drafts share the 7
// rows the sequences' own tokens leave (drafts cut short, most sequences drafting nothing in a step).
TEST(BatchedSpeculation, TensorParallelRanksSpeculateAsOneRank) {
  EngineOptions options = tiny_options();
  options.tp = 2;
  options.prefill_chunk = 16;  // the window holds 16 rows: 9 sequences' tokens and 7 draft rows
  expect_batched_speculation_is_plain(options, {4, 3, 2});
}

struct Refused {
  std::vector<std::string> flags;
  std::string names;  // what the message must hold
};

// Each command `base` + flags exits with status 2 and a message naming what was wrong.
void expect_refused(const std::vector<std::string>& base, const std::vector<Refused>& cases) {
  for (const Refused& r : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), r.flags.begin(), r.flags.end());
    const RunResult refused = run_cli(args);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find(r.names), std::string::npos) << refused.err;
  }
}

TEST(Speculation, RunTakesTheFlagsAndGivesTheSameReply) {
  const std::vector<std::string> base{"--prompt-tokens", "5,6,7,8,5,6,7,8,5,6", "--max-new-tokens", "40", "--threads", "1"};
  const nlohmann::json want = run_json(base);
  std::vector<std::string> flags = base;
  flags.insert(flags.end(), {"--speculate", "6", "--speculate-ngram", "4", "--speculate-min-ngram", "2"});
  const nlohmann::json got = run_json(flags);
  EXPECT_EQ(tokens_of(got), tokens_of(want));
  EXPECT_GT(got.at("accepted_tokens").get<uint32_t>(), 0u);
  EXPECT_LT(got.at("decode_steps").get<uint32_t>(), want.at("decode_steps").get<uint32_t>());
  EXPECT_FALSE(want.contains("draft_tokens"));

  const RunResult text = run_cli({"run", "--prompt-tokens", "5,6,7,8,5,6,7,8,5,6", "--max-new-tokens", "20", "--speculate", "4"});
  EXPECT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("speculation: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" drafted tokens taken"), std::string::npos) << text.out;

  expect_refused({"run", "--max-new-tokens", "4"},
                 {
                     {{"--speculate", "32"}, "--speculate"},
                     {{"--speculate-ngram", "2"}, "--speculate-ngram goes with --speculate K"},
                     {{"--speculate", "4", "--speculate-ngram", "2", "--speculate-min-ngram", "3"}, "--speculate-min-ngram 3 is more than"},
                     {{"--speculate", "8", "--prefill-chunk", "4"},
                      "--speculate 8 checks a draft in a step of 9 tokens, more than --prefill-chunk 4"},
                     {{"--speculate", "2", "--trace", "t.json"}, "with --speculate"},
                 });
}

// bench --speculate: both replies the same, the drafts taken on the sample (whose greedy reply loops);
// what it times is not asserted (a benchmark, not a test of speed).
TEST(Speculation, BenchComparesTheRepliesAndCountsTheDrafts) {
  const RunResult r = run_cli({"bench", "--speculate", "4", "--steps", "24", "--rounds", "2", "--threads", "1", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_TRUE(out.at("same_reply").get<bool>()) << r.out;
  EXPECT_GT(out.at("drafted_tokens").get<double>(), 0) << r.out;
  EXPECT_GT(out.at("accepted_share").get<double>(), 0.5) << r.out;
  EXPECT_GT(out.at("tokens_per_step").get<double>(), 1.5) << r.out;
  EXPECT_GT(out.at("plain_decode_tok_s").get<double>(), 0) << r.out;
  EXPECT_GT(out.at("speculating_decode_tok_s").get<double>(), 0) << r.out;
  EXPECT_GT(out.at("check_over_decode_step").get<double>(), 0) << r.out;
  EXPECT_EQ(out.at("prompt_tokens").get<uint32_t>(), byte_tokens("Once upon a time").size());

  const RunResult text = run_cli({"bench", "--speculate", "2", "--steps", "4", "--rounds", "1", "--threads", "1",
                                  "--prompt-tokens", "5,6,5,6"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("a prompt of 4 tokens, greedy replies of 5 tokens, drafts of 2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("| speculating |"), std::string::npos) << text.out;

  // --batch B: B replies together, drafts checked in the batched steps; bitwise plain decoding's on the cpu.
  const RunResult batched = run_cli({"bench", "--batch", "3", "--speculate", "4", "--steps", "24", "--rounds", "2", "--threads", "1",
                                     "--json"});
  ASSERT_EQ(batched.status, 0) << describe(batched);
  const nlohmann::json batch_out = nlohmann::json::parse(batched.out);
  EXPECT_TRUE(batch_out.at("same_replies").get<bool>()) << batched.out;
  EXPECT_EQ(batch_out.at("batch").get<uint32_t>(), 3u);
  EXPECT_GT(batch_out.at("accepted_share").get<double>(), 0.5) << batched.out;
  EXPECT_GT(batch_out.at("tokens_per_step").get<double>(), 1.5) << batched.out;
  EXPECT_GT(batch_out.at("speculating_decode_tok_s").get<double>(), 0) << batched.out;

  expect_refused({"bench", "--rounds", "1", "--steps", "2"},
                 {
                     {{"--prompt-tokens", "1,2"}, "--prompt-tokens applies to --speculate K"},
                     {{"--speculate", "4", "--prompt-len", "2"}, "--prompt-len does not apply to --speculate"},
                     {{"--speculate", "4", "--batch", "1"}, "--batch"},
                     {{"--speculate", "0"}, "--speculate"},
                     {{"--speculate", "4", "--prefill-chunk", "2"}, "more than --prefill-chunk 2"},
                     {{"--speculate", "4", "--prompt-tokens", "1,999999"}, "outside the model's vocabulary"},
                 });
}

}  // namespace
}  // namespace tilefire::testing
