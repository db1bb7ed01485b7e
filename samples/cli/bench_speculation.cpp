// tilefire bench --speculate K (bench_speculation.h). Each round generates the same greedy reply twice on
// one engine, plainly and speculating (the order alternating by round, so drift in the machine hits both);
// its decode time is GenerateResult's, the tokens after the first, callbacks and compiling excluded. Each
// round also times what one check costs against a decode step of that round's plain reply.
#include "bench_speculation.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "decode_timing.h"
#include "tilefire/errors.h"

namespace tilefire::cli {

namespace {

// A greedy reply of `steps` + 1 tokens to `prompt` (every round's as long: no stop at eos), once the
// prompt is checked against the model's vocabulary and context.
GenerateRequest greedy_reply(const ModelInfo& model, const std::vector<int32_t>& prompt, uint32_t steps) {
  for (int32_t t : prompt)
    if (t < 0 || uint32_t(t) >= model.vocab)
      throw InputError("tilefire bench: --prompt-tokens holds " + std::to_string(t) + ", outside the model's vocabulary [0, " +
                       std::to_string(model.vocab) + ")");
  if (prompt.size() + steps + 1 > model.max_context)
    throw InputError("tilefire bench: the prompt's " + std::to_string(prompt.size()) + " tokens + --steps + 1 exceed the context of " +
                     std::to_string(model.max_context));
  GenerateRequest request;
  request.prompt = prompt;
  request.max_new_tokens = steps + 1;
  request.stop_at_eos = false;
  return request;
}

// What both speculation benches tally over their interleaved rounds, and the figures both report from it.
struct SpeculationTally {
  std::vector<double> plain_tok_s, speculating_tok_s, ratios;
  uint64_t drafted = 0, accepted = 0, speculating_steps = 0;

  void add_round(double plain, double speculating) {
    plain_tok_s.push_back(plain);
    speculating_tok_s.push_back(speculating);
    ratios.push_back(speculating / plain);
  }
  double taken() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // The model's steps per token of a round's reply (each of `steps` + 1 tokens but the first).
  double tokens_per_step(uint32_t rounds, uint32_t steps) const {
    return double(rounds) * steps / double(std::max<uint64_t>(speculating_steps, 1));
  }
  nlohmann::json figures(uint32_t rounds, uint32_t steps) const {
    const std::array<double, 3> ratio = median_and_quartiles(ratios);
    return {{"plain_decode_tok_s", median(plain_tok_s)},
            {"speculating_decode_tok_s", median(speculating_tok_s)},
            {"speculating_over_plain", ratio[0]},
            {"speculating_over_plain_quartiles", {ratio[1], ratio[2]}},
            {"drafted_tokens", drafted},
            {"accepted_share", taken()},
            {"tokens_per_step", tokens_per_step(rounds, steps)}};
  }
  // The table's two rows, and the line of the ratio and the drafts, ended by `then`.
  void print(uint32_t rounds, uint32_t steps, const std::string& then) const {
    const std::array<double, 3> ratio = median_and_quartiles(ratios);
    std::printf("| plain | %.1f | 1.00 |\n", median(plain_tok_s));
    std::printf("| speculating | %.1f | %.2f |\n", median(speculating_tok_s), tokens_per_step(rounds, steps));
    std::printf("speculating / plain tokens/s: %.3f, quartiles %.3f-%.3f (interleaved rounds); %llu tokens drafted, %.0f%% of them "
                "taken%s\n", ratio[0], ratio[1], ratio[2], static_cast<unsigned long long>(drafted), 100 * taken(), then.c_str());
  }
};

}  // namespace

int run_speculation_bench(const EngineOptions& options, const Speculation& speculation, uint32_t rounds, uint32_t steps,
                          const std::vector<int32_t>& prompt, bool json) {
  const uint32_t draft_tokens = speculation.draft_tokens;
  const bool draft_model = speculation.source == DraftSource::draft_model;
  if (prompt.empty()) throw InputError("tilefire bench: --speculate needs a prompt (--prompt-tokens)");
  Engine engine(options);
  const ModelInfo& model = engine.model();
  const GenerateRequest plain = greedy_reply(model, prompt, steps);
  GenerateRequest speculating = plain;
  speculating.speculation = speculation;
  // What a check costs: a step of draft_tokens + 1 tokens with every row's logits, timed as a prompt of that
  // many tokens scored alone (the same program; its softmax per row included, at position 0).
  GenerateRequest check;
  for (uint32_t i = 0; i <= draft_tokens; ++i) check.prompt.push_back(prompt[i % prompt.size()]);
  check.max_new_tokens = 0;
  check.prompt_logprobs = 1;
  // Compiled before the rounds (the check program on the first draft): a round times steps alone.
  engine.generate(plain);
  engine.generate(speculating);
  engine.generate(check);

  SpeculationTally tally;
  std::vector<double> check_over_decode;
  size_t first_difference = SIZE_MAX;  // the first token at which the replies differed, in any round
  for (uint32_t r = 0; r < rounds; ++r) {
    GenerateResult a, b;
    if (r % 2 == 0) {
      a = engine.generate(plain);
      b = engine.generate(speculating);
    } else {
      b = engine.generate(speculating);
      a = engine.generate(plain);
    }
    check_over_decode.push_back(engine.generate(check).ttft_ms / a.tpot_ms);
    tally.add_round(a.decode_tok_s, b.decode_tok_s);
    tally.drafted += b.draft_tokens;
    tally.accepted += b.accepted_tokens;
    tally.speculating_steps += b.decode_steps;
    const auto differ = std::mismatch(a.tokens.begin(), a.tokens.end(), b.tokens.begin(), b.tokens.end());
    if (differ.first != a.tokens.end() || differ.second != b.tokens.end())
      first_difference = std::min(first_difference, size_t(differ.first - a.tokens.begin()));
  }
  const bool same = first_difference == SIZE_MAX;
  if (json) {
    nlohmann::json out = {{"model", model.origin},
                          {"device", engine.device_name()},
                          {"threads", engine.threads()},
                          {"prompt_tokens", prompt.size()},
                          {"draft_tokens", draft_tokens},
                          {"drafted_by", draft_model ? options.draft.model_dir : std::string("prompt lookup")},
                          {"steps", steps},
                          {"rounds", rounds},
                          {"check_over_decode_step", median(check_over_decode)},
                          {"same_reply", same}};
    out.update(tally.figures(rounds, steps));
    if (!same) out["first_difference"] = first_difference;
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("model %s, %s, %u %s; a prompt of %zu tokens, greedy replies of %u tokens, drafts of %u by %s\n",
              model_label(model).c_str(), engine.device_name().c_str(), engine.threads(),
              options.backend == Backend::cuda ? "CTAs" : "threads", prompt.size(), steps + 1, draft_tokens,
              draft_model ? ("the draft model " + options.draft.model_dir).c_str() : "prompt lookup");
  // "Tokens per step" counts the model's steps; a draft model's own steps come on top.
  std::printf("| decoding | tokens/s (median of %u rounds) | tokens per step of the model |\n|---|---|---|\n", rounds);
  tally.print(rounds, steps, "");
  if (draft_model)  // the draft model's own steps come on top of the check
    std::printf("a check of %u tokens (a prompt of as many scored) takes %.2f decode steps' time, the draft model's steps "
                "aside\n", draft_tokens + 1, median(check_over_decode));
  else
    std::printf("a check of %u tokens (a prompt of as many scored) takes %.2f decode steps' time: drafts pay when more than "
                "%.2f of them are taken per check\n", draft_tokens + 1, median(check_over_decode),
                std::max(0.0, median(check_over_decode) - 1));
  if (same)
    std::printf("the replies were the same, token for token\n");
  else
    std::printf("the replies differed from token %zu (a check step's logits round apart from a decode step's: a near tie)\n",
                first_difference);
  return 0;
}

namespace {

// A batch's decode throughput: every sequence's tokens after its first over the batch's decode time (the
// sequences take part in the same steps: the longest of their decode times).
double batch_decode_tok_s(const std::vector<GenerateResult>& results) {
  double tokens = 0, decode_ms = 0;
  for (const GenerateResult& r : results) {
    if (r.tokens.size() < 2) continue;
    tokens += double(r.tokens.size() - 1);
    decode_ms = std::max(decode_ms, r.tpot_ms * double(r.tokens.size() - 1));
  }
  return decode_ms > 0 ? 1000.0 * tokens / decode_ms : 0.0;
}

}  // namespace

int run_batched_speculation_bench(EngineOptions options, const Speculation& speculation, uint32_t batch, uint32_t rounds,
                                  uint32_t steps, const std::vector<int32_t>& prompt, bool json) {
  if (speculation.source == DraftSource::draft_model)
    throw InputError("tilefire bench: --draft-model drafts for one sequence at a time; --batch B --speculate K drafts by prompt lookup");
  if (prompt.empty()) throw InputError("tilefire bench: --speculate needs a prompt (--prompt-tokens)");
  options.sequences = batch;
  Engine engine(options);
  const ModelInfo& model = engine.model();
  GenerateRequest request = greedy_reply(model, prompt, steps);
  const std::vector<GenerateRequest> plain(batch, request);
  request.speculation = speculation;
  const std::vector<GenerateRequest> speculating(batch, request);
  engine.generate_batch(plain);  // compiles the batched programs of every width the rounds meet
  engine.generate_batch(speculating);

  SpeculationTally tally;
  bool same = true;
  for (uint32_t r = 0; r < rounds; ++r) {
    std::vector<GenerateResult> a, b;
    if (r % 2 == 0) {
      a = engine.generate_batch(plain);
      b = engine.generate_batch(speculating);
    } else {
      b = engine.generate_batch(speculating);
      a = engine.generate_batch(plain);
    }
    tally.add_round(batch_decode_tok_s(a), batch_decode_tok_s(b));
    for (uint32_t i = 0; i < batch; ++i) {
      tally.drafted += b[i].draft_tokens;
      tally.accepted += b[i].accepted_tokens;
      same = same && a[i].tokens == b[i].tokens;
    }
    tally.speculating_steps += b[0].decode_steps;  // every sequence takes part in every step
  }
  if (engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports
  if (json) {
    nlohmann::json out = {{"model", model.origin},
                          {"device", engine.device_name()},
                          {"threads", engine.threads()},
                          {"batch", batch},
                          {"prompt_tokens", prompt.size()},
                          {"draft_tokens", speculation.draft_tokens},
                          {"steps", steps},
                          {"rounds", rounds},
                          {"same_replies", same}};
    out.update(tally.figures(rounds, steps));
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("model %s, %s, %u %s; %u sequences of a %zu-token prompt, greedy replies of %u tokens, drafts of %u by prompt lookup\n",
              model_label(model).c_str(), engine.device_name().c_str(), engine.threads(),
              options.backend == Backend::cuda ? "CTAs" : "threads", batch, prompt.size(), steps + 1, speculation.draft_tokens);
  std::printf("| decoding, %u sequences per step | tokens/s over all (median of %u rounds) | tokens per step of each |\n|---|---|---|\n",
              batch, rounds);
  tally.print(rounds, steps,
              std::string("; the replies ") + (same ? "the same, token for token" : "DIFFERED (a batched row should be bitwise a decode step's)"));
  return 0;
}

}  // namespace tilefire::cli
