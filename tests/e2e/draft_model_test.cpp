// Speculative decoding with a draft model (EngineOptions::draft, Speculation::source draft_model). The
// oracle is generate() without speculation on an engine without a draft: the same tokens, finish and
// sequence. Two drafts bound what a draft can do: the model itself (the built-in sample drafting for
// itself: every draft taken) and another model of the same vocabulary (random weights of another seed:
// nearly every draft turned down); both must leave the reply as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megakernel/speculation.h"
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
  for (const char* text : {"Once upon a time", "The cat sat on the mat", "0123456789"}) {
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

// A turned-down draft's K and V stay in the cache past the sequence's position until a later step writes
// over them, and nothing may attend to them before. A draft token whose embedding is NaN in the model (fed
// by a check, never taken: the reply does not hold it) must leave the reply as plain decoding gives it, with
// no error; had its entries been read, the logits would be NaN.
TEST(DraftModel, ATurnedDownDraftsEntriesTakeNoPart) {
  TempDir dir("draft-model-nan");
  const std::filesystem::path folder = gen_tiny_model(dir, "model");  // the sample's weights, as a folder
  EngineOptions options = sample_options();
  options.model_dir = folder.string();
  GenerateRequest request;
  request.prompt = byte_tokens("The cat sat on the mat");
  request.max_new_tokens = 24;
  request.stop_at_eos = false;
  const std::vector<int32_t> reply = Engine(options).generate(request).tokens;
  // The first check's draft: the draft model's greedy continuation of the prompt and the first token.
  EngineOptions draft_options = sample_options();
  draft_options.preset = "tiny";
  draft_options.preset_seed = 5;
  Engine draft(draft_options);
  std::vector<int32_t> seen = request.prompt;
  seen.push_back(reply[0]);
  const std::vector<float> logits = draft.prefill(seen);
  std::vector<int32_t> drafted{int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())};
  while (drafted.size() < 4) drafted.push_back(draft.decode_greedy(drafted.back()));
  int32_t poisoned = -1;  // a drafted token neither the prompt nor the reply holds
  for (int32_t t : drafted)
    if (std::find(seen.begin(), seen.end(), t) == seen.end() && std::find(reply.begin(), reply.end(), t) == reply.end()) poisoned = t;
  ASSERT_GE(poisoned, 0) << "every token of the first draft is in the reply: pick another prompt";
  overwrite_f32(folder, "model.embed_tokens.weight", uint64_t(poisoned) * draft.model().hidden, std::nanf(""));

  Engine plain(options);
  EXPECT_EQ(plain.generate(request).tokens, reply) << "the reply never feeds the poisoned token";
  options.draft.preset = "tiny";
  options.draft.preset_seed = 5;
  Engine drafting(options);
  request.speculation = by_draft_model(4);
  GenerateResult got;
  ASSERT_NO_THROW(got = drafting.generate(request)) << "a turned-down draft token's entries were read";
  EXPECT_EQ(got.tokens, reply);
  EXPECT_LT(got.accepted_tokens, got.draft_tokens);
}

// Models of one family may pad their embeddings apart (up to 256 rows are taken): a draft model with fewer
// rows drafts while the sequence holds only tokens it has, and the reply is the model's throughout.
TEST(DraftModel, ADraftModelWithAFewRowsLessDraftsWhileItKnowsTheTokens) {
  TempDir dir("draft-model-padded");
  ModelSpec smaller = variant_spec(Variant::llama);
  smaller.vocab = 480;
  EngineOptions options = sample_options();
  options.draft.model_dir = write_test_model(smaller, dir.path() / "padded-apart").string();
  Engine drafting(options);
  Engine plain(sample_options());
  GenerateRequest request;
  request.prompt = byte_tokens("Once upon a time");
  request.max_new_tokens = 16;
  expect_plain_reply(plain, drafting, request, 3, "tokens the draft model has");
  request.prompt.push_back(500);  // a row of the model's the draft model lacks: no draft for this sequence
  request.speculation = by_draft_model(3);
  const GenerateResult got = drafting.generate(request);
  request.speculation = Speculation{};
  EXPECT_EQ(got.tokens, plain.generate(request).tokens);
  EXPECT_EQ(got.draft_tokens, 0u);
  EXPECT_TRUE(got.draft_error.empty()) << got.draft_error;
}

// The reply never depends on a draft: a draft model whose logits are NaN stops drafting for the request
// (GenerateResult::draft_error says why), and the reply goes on by decode steps, whole; `run` warns.
TEST(DraftModel, ABrokenDraftModelStopsTheDraftsNotTheReply) {
  TempDir dir("draft-model-nan-logits");
  const std::filesystem::path broken = gen_tiny_model(dir, "broken");
  overwrite_f32(broken, "lm_head.weight", 0, std::nanf(""));
  EngineOptions options = sample_options();
  options.draft.model_dir = broken.string();
  Engine drafting(options);
  Engine plain(sample_options());
  GenerateRequest request;
  request.prompt = byte_tokens("Once upon a time");
  request.max_new_tokens = 12;
  const std::vector<int32_t> want = plain.generate(request).tokens;
  request.speculation = by_draft_model(3);
  const GenerateResult got = drafting.generate(request);
  EXPECT_EQ(got.tokens, want);
  EXPECT_EQ(got.draft_tokens, 0u);
  EXPECT_NE(got.draft_error.find("the draft model: "), std::string::npos) << got.draft_error;
  EXPECT_NE(got.draft_error.find("NaN"), std::string::npos) << got.draft_error;
  const RunResult run = run_cli({"run", "--max-new-tokens", "12", "--speculate", "3", "--draft-model", broken.string()});
  EXPECT_EQ(run.status, 0) << describe(run);
  EXPECT_NE(run.err.find("warning: speculation stopped partway"), std::string::npos) << run.err;
}

// The draft model keeps in step with the sequence by what its cache shares with it: after a draft turned
// down, after drafts taken, after a sequence that went elsewhere, its draft is what a fresh engine's
// greedy continuation of the same sequence is.
TEST(DraftModel, TheDraftModelKeepsInStepWithTheSequence) {
  EngineOptions options = sample_options();
  options.preset = "tiny";
  options.preset_seed = 5;
  Engine draft(options);
  Engine fresh(options);
  auto continuation = [&](const std::vector<int32_t>& history, uint32_t count) {
    fresh.reset();
    const std::vector<float> logits = fresh.prefill(history);
    std::vector<int32_t> out{int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    while (out.size() < count) out.push_back(fresh.decode_greedy(out.back()));
    return out;
  };
  std::vector<int32_t> history = byte_tokens("Once upon a time");
  history.push_back(40);
  std::vector<int32_t> drafted = draft_model_draft(draft, history, 4, 512);
  EXPECT_EQ(drafted, continuation(history, 4)) << "the first draft";
  // A check that took the first two drafted tokens and corrected the third.
  history.insert(history.end(), drafted.begin(), drafted.begin() + 2);
  history.push_back(drafted[2] == 7 ? 8 : 7);
  drafted = draft_model_draft(draft, history, 4, 512);
  EXPECT_EQ(drafted, continuation(history, 4)) << "after two taken and a correction";
  // Every drafted token taken, and the bonus one.
  history.insert(history.end(), drafted.begin(), drafted.end());
  history.push_back(99);
  drafted = draft_model_draft(draft, history, 3, 512);
  EXPECT_EQ(drafted, continuation(history, 3)) << "after all four taken";
  // A sequence that shares only the prompt's first tokens (another conversation).
  history.resize(5);
  history.insert(history.end(), {300, 301, 302, 303, 304, 305});
  drafted = draft_model_draft(draft, history, 4, 512);
  EXPECT_EQ(drafted, continuation(history, 4)) << "after the sequence went elsewhere";
  // With a model of 100 tokens the draft is cut before its first token past them.
  std::vector<int32_t> below = continuation(history, 4);
  below.erase(std::find_if(below.begin(), below.end(), [](int32_t t) { return t >= 100; }), below.end());
  EXPECT_EQ(draft_model_draft(draft, history, 4, 100), below);
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
  EngineOptions batching = with_draft(sample_options(), 0);
  batching.sequences = 2;
  Engine with(batching);  // a batch's drafts come by prompt lookup
  EXPECT_NE(refusal([&] { with.add_sequence(request); }).find("in a batch (generate_batch, add_sequence, serve --sequences) drafts come by prompt lookup"),
            std::string::npos);
  EXPECT_NE(refusal([&] { with.generate_batch({request}); }).find("drafts come by prompt lookup"), std::string::npos);
  EXPECT_EQ(with.sequences_in(), 0u);

  TempDir dir("draft-model-vocab");
  ModelSpec other = variant_spec(Variant::llama);
  other.vocab = 200;  // another tokenizer's
  EngineOptions options = sample_options();
  options.draft.model_dir = write_test_model(other, dir.path() / "other-vocab").string();
  EXPECT_NE(refusal([&] { Engine engine(options); }).find("has a vocabulary of 200 tokens, the model 512"), std::string::npos);
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

// A draft model's KV cache lives on this host beside the model's, and its own engine checks it alone: each
// of the two caches here takes 60% of the machine's memory (by K and V of every layer and KV head, f32), so
// each fits alone and both do not, and the model's engine refuses them together before either is built.
TEST(DraftModel, TheDraftModelsCacheCountsAgainstTheMachinesMemory) {
  TempDir dir("draft-model-memory");
  ModelSpec spec = variant_spec(Variant::llama);
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  const double position_bytes = 2.0 * spec.layers * spec.kv_heads * spec.head_dim * 4;
  const uint32_t positions = uint32_t(0.6 * memory / position_bytes);
  spec.max_context = positions;
  EngineOptions options = sample_options();
  options.model_dir = write_test_model(spec, dir.path() / "long-context").string();
  options.max_context = positions;
  options.draft.model_dir = options.model_dir;  // the model drafting for itself
  const std::string message = refusal([&] { Engine engine(options); });
  EXPECT_NE(message.find("the KV cache would take"), std::string::npos) << message;
  const uint64_t each_gib = uint64_t(positions * position_bytes) >> 30;
  EXPECT_NE(message.find("and the draft model's " + std::to_string(each_gib) + " GiB beside it"), std::string::npos) << message;
  EXPECT_NE(message.find("or draft by prompt lookup (--speculate without --draft-model)"), std::string::npos) << message;
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
           {{"bench", "--speculate", "2", "--draft-model", draft.string(), "--batch", "2"}, "drafts for one sequence at a time"},
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

  EXPECT_EQ(result.draft_error, nullptr);

  request.speculate_source = 7;
  EXPECT_EQ(tilefire_generate(engine, &request, &result), TILEFIRE_ERROR_INPUT);
  EXPECT_NE(std::string(tilefire_last_error()).find("speculate_source is 7, not TILEFIRE_DRAFT_PROMPT_LOOKUP or _MODEL"),
            std::string::npos) << tilefire_last_error();
  tilefire_engine_free(engine);

  // A draft model whose logits are NaN: the reply is whole, and the result says why drafting stopped.
  TempDir dir("draft-model-c-api-broken");
  const std::filesystem::path broken = gen_tiny_model(dir, "broken");
  overwrite_f32(broken, "lm_head.weight", 0, std::nanf(""));
  const std::string broken_dir = broken.string();
  options.draft_preset = nullptr;
  options.draft_preset_seed = 0;
  options.draft_model_dir = broken_dir.c_str();
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  request.speculate_source = TILEFIRE_DRAFT_MODEL;
  ASSERT_EQ(tilefire_generate(engine, &request, &result), TILEFIRE_OK) << tilefire_last_error();
  EXPECT_EQ(result.token_count, 20u);
  ASSERT_NE(result.draft_error, nullptr);
  EXPECT_NE(std::string(result.draft_error).find("the draft model: "), std::string::npos) << result.draft_error;
  tilefire_generate_result_free(&result);
  EXPECT_EQ(result.draft_error, nullptr);
  tilefire_engine_free(engine);

  // A result of API version 6's size (it ended before the speculation fields) is refused by generate and
  // left alone by the free: the bytes past its size (here a pointer that was never handed out) are
  // neither read as its fields nor zeroed.
  tilefire_generate_result older{};
  older.struct_size = uint32_t(offsetof(tilefire_generate_result, decode_steps));
  static char never_handed_out;
  older.draft_error = &never_handed_out;
  tilefire_generate_result_free(&older);
  EXPECT_EQ(older.draft_error, &never_handed_out);
}

// Through the C API, a batch speculates by prompt lookup (each draft checked in the batched steps): its
// replies are the C++ engine's plain batch's, bit for bit on the cpu; a draft model's drafts are refused
// there, naming why.
TEST(DraftModel, TheCApiBatchDraftsByPromptLookup) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  options.threads = 2;
  options.max_context = 128;
  options.sequences = 2;
  options.draft_preset = "tiny";  // the sample's own shape: there, but not for a batch
  tilefire_engine* engine = nullptr;
  ASSERT_EQ(tilefire_engine_create(&options, &engine), TILEFIRE_OK) << tilefire_last_error();
  const std::vector<std::vector<int32_t>> prompts = {byte_tokens("Once upon a time"), byte_tokens("The cat sat on the mat")};
  std::vector<tilefire_generate_request> requests(2);
  std::vector<GenerateRequest> same(2);
  for (size_t i = 0; i < 2; ++i) {
    tilefire_generate_request_init(&requests[i]);
    requests[i].prompt = prompts[i].data();
    requests[i].prompt_count = prompts[i].size();
    requests[i].max_new_tokens = 30;
    requests[i].speculate_draft_tokens = 4;
    same[i].prompt = prompts[i];
    same[i].max_new_tokens = 30;
  }
  std::vector<tilefire_generate_result> results(2);
  for (tilefire_generate_result& r : results) r.struct_size = sizeof r;
  ASSERT_EQ(tilefire_generate_batch(engine, requests.data(), 2, results.data()), TILEFIRE_OK) << tilefire_last_error();
  EngineOptions plain_options = sample_options();
  plain_options.sequences = 2;
  Engine plain(plain_options);
  const std::vector<GenerateResult> want = plain.generate_batch(same);
  uint32_t accepted = 0;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::vector<int32_t>(results[i].tokens, results[i].tokens + results[i].token_count), want[i].tokens) << "request " << i;
    accepted += results[i].accepted_tokens;
    tilefire_generate_result_free(&results[i]);
  }
  EXPECT_GT(accepted, 0u);
  requests[1].speculate_source = TILEFIRE_DRAFT_MODEL;
  EXPECT_EQ(tilefire_generate_batch(engine, requests.data(), 2, results.data()), TILEFIRE_ERROR_INPUT);
  EXPECT_NE(std::string(tilefire_last_error()).find("drafts come by prompt lookup"), std::string::npos) << tilefire_last_error();
  tilefire_engine_free(engine);
}

}  // namespace
}  // namespace tilefire::testing
