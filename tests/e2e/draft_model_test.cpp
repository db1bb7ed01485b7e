// Speculative decoding with a draft model (EngineOptions::draft, Speculation::source draft_model). The
// oracle is generate() without speculation on an engine without a draft: the same tokens, finish and
// sequence. Two drafts bound what a draft can do: the model itself (the built-in sample drafting for
// itself: every draft taken) and another model of the same vocabulary (random weights of another seed:
// nearly every draft turned down); both must leave the reply as it was.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/refusal.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/errors.h"
#include "tilefire/tilefire.h"

namespace tilefire::testing {
namespace {

EngineOptions sample_options() {
  EngineOptions options;  // the built-in sample (`tiny`, seed 0, f32)
  options.threads = 2;
  options.max_context = 128;
  return options;
}

EngineOptions with_draft(EngineOptions options, uint64_t seed) {
  options.draft.preset = "tiny";
  options.draft.preset_seed = seed;
  return options;
}

Speculation by_draft_model(uint32_t draft_tokens) {
  Speculation s;
  s.draft_tokens = draft_tokens;
  s.source = DraftSource::draft_model;
  return s;
}

// Both engines' replies to the request, the second speculating with its draft model; checks they agree.
GenerateResult expect_plain_reply(Engine& plain, Engine& drafting, GenerateRequest request, uint32_t draft_tokens,
                                  const std::string& what) {
  SCOPED_TRACE(what);
  const GenerateResult want = plain.generate(request);
  request.speculation = by_draft_model(draft_tokens);
  const GenerateResult got = drafting.generate(request);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.finish_reason, want.finish_reason);
  EXPECT_EQ(drafting.sequence(), plain.sequence());
  EXPECT_LE(got.accepted_tokens, got.draft_tokens);
  EXPECT_GT(got.draft_tokens, 0u) << "a draft model drafts at every step but a reply's last";
  return got;
}

TEST(DraftModel, TheModelDraftingForItselfHasEveryDraftTaken) {
  Engine plain(sample_options());
  Engine drafting(with_draft(sample_options(), 0));  // the sample itself
  for (const std::string& text : {"Once upon a time", "The cat sat on the mat", "0123456789"}) {
    GenerateRequest request;
    request.prompt = byte_tokens(text);
    request.max_new_tokens = 30;
    request.stop_at_eos = false;
    const GenerateResult got = expect_plain_reply(plain, drafting, request, 4, text);
    EXPECT_EQ(got.accepted_tokens, got.draft_tokens) << text << ": the model disagreed with its own greedy draft";
    EXPECT_LT(got.decode_steps, 29u);
  }
}

TEST(DraftModel, AnotherModelsDraftsLeaveTheReplyAsItWas) {
  Engine plain(sample_options());
  Engine drafting(with_draft(sample_options(), 5));
  uint32_t drafted = 0, accepted = 0;
  GenerateRequest request;
  request.prompt = byte_tokens("Once upon a time");
  request.max_new_tokens = 30;
  for (uint32_t k : {1u, 3u, 6u}) {
    const GenerateResult got = expect_plain_reply(plain, drafting, request, k, "greedy, drafts of " + std::to_string(k));
    drafted += got.draft_tokens;
    accepted += got.accepted_tokens;
  }
  EXPECT_LT(accepted, drafted) << "no draft was turned down";
  // Sampled: the draft is greedy (a point mass), so the draw decides as decode steps' draws do.
  request.sampling.temperature = 0.8f;
  request.sampling.seed = 9;
  request.logprobs = 2;
  expect_plain_reply(plain, drafting, request, 3, "sampled");
  // A later turn reusing the cache: the draft model keeps what its own cache shares with the sequence.
  GenerateRequest turn = request;
  turn.prompt = drafting.sequence();
  turn.prompt.insert(turn.prompt.end(), {65, 66, 67});
  turn.reuse_prefix = true;
  expect_plain_reply(plain, drafting, turn, 3, "next turn");
}

TEST(DraftModel, TensorParallelRanksDraftAsOneRank) {
  Engine plain(sample_options());
  EngineOptions options = with_draft(sample_options(), 0);
  options.tp = 2;
  Engine drafting(options);
  GenerateRequest request;
  request.prompt = byte_tokens("The cat sat on the mat");
  request.max_new_tokens = 24;
  const GenerateResult got = expect_plain_reply(plain, drafting, request, 4, "tp 2");
  EXPECT_EQ(got.accepted_tokens, got.draft_tokens);
}

TEST(DraftModel, WhatCannotDraftIsRefusedByName) {
  GenerateRequest request;
  request.prompt = byte_tokens("Hi");
  request.max_new_tokens = 4;
  request.speculation = by_draft_model(3);
  Engine without(sample_options());
  EXPECT_NE(refusal([&] { without.generate(request); }).find("the engine has no draft model (EngineOptions::draft, --draft-model)"),
            std::string::npos);

  TempDir dir("draft-model-vocab");
  ModelSpec other = variant_spec(Variant::llama);
  other.vocab = 300;
  const std::filesystem::path folder = write_test_model(other, dir.path() / "other-vocab");
  EngineOptions options = sample_options();
  options.draft.model_dir = folder.string();
  EXPECT_NE(refusal([&] { Engine engine(options); }).find("has a vocabulary of 300 tokens, the model 512"), std::string::npos);
  options.draft.model_dir = (dir.path() / "absent").string();
  const std::string absent = refusal([&] { Engine engine(options); });
  EXPECT_NE(absent.find("the draft model (EngineOptions::draft, --draft-model): "), std::string::npos) << absent;
  EXPECT_NE(absent.find("absent"), std::string::npos) << absent;
  options.draft = DraftModel{};
  options.draft.preset_seed = 3;
  EXPECT_NE(refusal([&] { Engine engine(options); }).find("apply to a draft preset"), std::string::npos);
  options.draft.preset = "no-such-preset";
  EXPECT_NE(refusal([&] { Engine engine(options); }).find("the draft model"), std::string::npos);
}

TEST(DraftModel, RunTakesADraftModelFolder) {
  TempDir dir("draft-model-cli");
  const std::filesystem::path draft = gen_tiny_model(dir, "draft", {"--seed", "5"});
  const std::vector<std::string> base{"--max-new-tokens", "20", "--threads", "1"};
  const nlohmann::json want = run_json(base);
  std::vector<std::string> flags = base;
  flags.insert(flags.end(), {"--speculate", "3", "--draft-model", draft.string()});
  const nlohmann::json got = run_json(flags);
  EXPECT_EQ(tokens_of(got), tokens_of(want));
  EXPECT_GT(got.at("draft_tokens").get<uint32_t>(), 0u);

  const RunResult bench = run_cli({"bench", "--speculate", "2", "--draft-model", draft.string(), "--steps", "6", "--rounds", "1",
                                   "--threads", "1", "--json"});
  ASSERT_EQ(bench.status, 0) << describe(bench);
  const nlohmann::json out = nlohmann::json::parse(bench.out);
  EXPECT_TRUE(out.at("same_reply").get<bool>());
  EXPECT_EQ(out.at("drafted_by"), draft.string());

  for (const auto& [args, names] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"run", "--draft-model", draft.string()}, "--draft-model goes with --speculate K"},
           {{"run", "--speculate", "2", "--draft-model", draft.string(), "--speculate-ngram", "2"}, "--draft-model drafts instead"},
           {{"run", "--speculate", "2", "--draft-model", (dir.path() / "absent").string()}, "the draft model"},
           {{"bench", "--draft-model", draft.string()}, "--draft-model goes with --speculate K"},
       }) {
    const RunResult refused = run_cli(args);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find(names), std::string::npos) << refused.err;
  }
}

// Through the C API (libtilefire.so): the draft model's options and the request's source give the C++
// engine's reply and counts; a source outside the list is refused by name.
TEST(DraftModel, TheCApiDraftsAsTheCppApiDoes) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  options.threads = 2;
  options.max_context = 128;
  options.draft_preset = "tiny";
  options.draft_preset_seed = 5;
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  const std::vector<int32_t> prompt = byte_tokens("Once upon a time");
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  EXPECT_EQ(request.speculate_source, TILEFIRE_DRAFT_PROMPT_LOOKUP);
  request.prompt = prompt.data();
  request.prompt_count = prompt.size();
  request.max_new_tokens = 20;
  request.speculate_draft_tokens = 3;
  request.speculate_source = TILEFIRE_DRAFT_MODEL;
  tilefire_generate_result result{};
  result.struct_size = sizeof result;
  ASSERT_EQ(tilefire_generate(engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();

  Engine cpp(with_draft(sample_options(), 5));
  GenerateRequest same;
  same.prompt = prompt;
  same.max_new_tokens = 20;
  same.speculation = by_draft_model(3);
  const GenerateResult want = cpp.generate(same);
  EXPECT_EQ(std::vector<int32_t>(result.tokens, result.tokens + result.token_count), want.tokens);
  EXPECT_EQ(result.draft_tokens, want.draft_tokens);
  EXPECT_EQ(result.accepted_tokens, want.accepted_tokens);
  EXPECT_GT(result.draft_tokens, 0u);
  tilefire_generate_result_free(&result);

  request.speculate_source = 7;
  EXPECT_EQ(tilefire_generate(engine, &request, &result), TILEFIRE_ERROR_INPUT);
  EXPECT_NE(std::string(tilefire_last_error()).find("speculate_source is 7, not TILEFIRE_DRAFT_PROMPT_LOOKUP or _MODEL"),
            std::string::npos) << tilefire_last_error();
  tilefire_engine_free(engine);
}

}  // namespace
}  // namespace tilefire::testing
