// tilefire bench --batch B: what batching buys on this machine. One engine holds B sequences; each round
// times greedy decode steps of B sequences at once and of one sequence alone (the order alternating by
// round, so drift in the machine hits both), each step from one token of the first sequence to its next,
// which covers the step and picking every sequence's token. The gain is the median over rounds of
// (B / batched step time) / (1 / single step time). With --predict (cpu), the simulator's prediction of the
// batched step (--batch B), the cpu device measured before each round's batched steps, as bench --predict
// does for one sequence.
#include "bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "decode_timing.h"

namespace tilefire::cli {

namespace {

// Milliseconds between consecutive tokens of the batch's first request: one decode step each, after
// the first token (which ends the prefills). With `trace_path`, the first request's trace goes there.
std::vector<double> time_batch_steps(Engine& engine, uint32_t sequences, uint32_t steps, uint32_t prompt_len, uint32_t round,
                                     const std::string& trace_path = "") {
  std::vector<GenerateRequest> requests(sequences);
  std::vector<std::chrono::steady_clock::time_point> stamps;
  for (uint32_t s = 0; s < sequences; ++s) {
    GenerateRequest& r = requests[s];
    for (uint32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(int32_t((i * 7 + s * 13 + round + 1) % engine.model().vocab));
    r.max_new_tokens = steps + 1;
    r.stop_at_eos = false;  // every sequence runs every step: the batch keeps its width
  }
  requests[0].on_token = [&stamps](int32_t) { stamps.push_back(std::chrono::steady_clock::now()); };
  requests[0].trace_path = trace_path;
  engine.generate_batch(requests);
  std::vector<double> times;
  for (size_t i = 1; i < stamps.size(); ++i)
    times.push_back(std::chrono::duration<double, std::milli>(stamps[i] - stamps[i - 1]).count());
  return times;
}

struct JoinTiming {
  double longest_wait_ms = 0;  // between two tokens of the first decoding sequence, over the join
  double newcomer_ttft_ms = 0;
};

// batch - 1 sequences decode; after three steps a request with a join_len-token prompt joins and the steps
// go on until it has its first token, and one more.
JoinTiming time_join(Engine& engine, uint32_t batch, uint32_t join_len, uint32_t round) {
  const uint32_t vocab = engine.model().vocab;
  std::vector<std::chrono::steady_clock::time_point> stamps;
  std::vector<uint64_t> decoding;
  for (uint32_t s = 0; s + 1 < batch; ++s) {
    GenerateRequest r;
    for (uint32_t i = 0; i < 8; ++i) r.prompt.push_back(int32_t((i * 7 + s * 13 + round + 1) % vocab));
    r.max_new_tokens = join_len + 16;  // more than the steps below (a chunk per step, at least a token each)
    r.stop_at_eos = false;
    if (s == 0) r.on_token = [&stamps](int32_t) { stamps.push_back(std::chrono::steady_clock::now()); };
    decoding.push_back(engine.add_sequence(r));
  }
  for (int step = 0; step < 3; ++step) engine.step_sequences();
  GenerateRequest newcomer;
  for (uint32_t i = 0; i < join_len; ++i) newcomer.prompt.push_back(int32_t((i * 11 + round + 3) % vocab));
  newcomer.max_new_tokens = 1;
  const size_t before = stamps.size();
  const uint64_t joined = engine.add_sequence(newcomer);
  while (!engine.sequence_finished(joined)) engine.step_sequences();
  engine.step_sequences();
  JoinTiming timing;
  timing.newcomer_ttft_ms = engine.remove_sequence(joined).ttft_ms;
  for (size_t i = before; i < stamps.size(); ++i)
    timing.longest_wait_ms =
        std::max(timing.longest_wait_ms, std::chrono::duration<double, std::milli>(stamps[i] - stamps[i - 1]).count());
  for (uint64_t id : decoding) engine.remove_sequence(id);
  return timing;
}

// One round of the shared-prefix bench: every request's first token, and how long the call took.
struct SharedPrefixRound {
  double ms = 0;
  uint64_t prefilled = 0;  // prompt tokens run through prefill steps (neither reused nor copied)
  std::vector<int32_t> first_tokens;
};

SharedPrefixRound time_shared_prefix(Engine& engine, uint32_t batch, uint32_t prefix_len, uint32_t round, bool reuse) {
  const uint32_t vocab = engine.model().vocab;
  std::vector<GenerateRequest> requests(batch);
  for (uint32_t s = 0; s < batch; ++s) {
    GenerateRequest& r = requests[s];
    for (uint32_t i = 0; i < prefix_len; ++i) r.prompt.push_back(int32_t((i * 11 + round * 7 + 3) % vocab));
    for (uint32_t i = 0; i < 8; ++i) r.prompt.push_back(int32_t((i * 5 + s * 17 + 1) % vocab));  // its own question
    r.max_new_tokens = 1;
    r.stop_at_eos = false;
    r.reuse_prefix = reuse;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<GenerateResult> results = engine.generate_batch(requests);
  SharedPrefixRound timing;
  timing.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (const GenerateResult& result : results) {
    timing.prefilled += result.prompt_tokens.size() - result.reused_tokens;
    timing.first_tokens.push_back(result.tokens.at(0));
  }
  return timing;
}

// "cpu, 2 threads" and, under tensor parallelism, ", 2 tensor-parallel ranks".
std::string engine_label(const Engine& engine, const EngineOptions& options) {
  std::string label = engine.device_name() + ", " + std::to_string(engine.threads()) +
                      (options.backend == Backend::cuda ? " CTAs" : " threads");
  if (engine.tensor_parallel_ranks() > 1) label += ", " + std::to_string(engine.tensor_parallel_ranks()) + " tensor-parallel ranks";
  return label;
}

}  // namespace

int run_join_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t join_len, uint32_t chunks, bool json) {
  // Three engines: the prompt prefilled whole at add_sequence; by the steps, each chunk a program of its
  // own after the decode step; by the steps, the first chunk in the decode step's program.
  enum Way { whole, apart, in_step, ways };
  options.sequences = batch;
  options.prefill_chunks_per_step = 0;
  Engine whole_engine(options);
  options.prefill_chunks_per_step = chunks;
  options.prefill_in_decode_step = false;
  Engine apart_engine(options);
  options.prefill_in_decode_step = true;
  Engine in_step_engine(options);
  Engine* engines[ways] = {&whole_engine, &apart_engine, &in_step_engine};
  const ModelInfo& model = whole_engine.model();
  if (join_len + 1 > model.max_context)
    throw InputError("tilefire bench: --join-prompt-len + 1 exceeds the context of " + std::to_string(model.max_context));
  for (Engine* engine : engines) time_join(*engine, batch, join_len, 0);  // untimed: compiles the programs
  std::vector<double> wait[ways], ttft[ways];
  for (uint32_t r = 0; r < rounds; ++r) {
    for (int k = 0; k < ways; ++k) {  // each round a rotation of the order, so drift hits every way
      const int way = (k + int(r)) % ways;
      const JoinTiming t = time_join(*engines[way], batch, join_len, r + 1);
      wait[way].push_back(t.longest_wait_ms);
      ttft[way].push_back(t.newcomer_ttft_ms);
    }
  }
  if (whole_engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports
  if (json) {
    std::cout << nlohmann::json{{"model", model.origin},
                                {"dtype", model.dtype},
                                {"backend", options.backend == Backend::cuda ? "cuda" : "cpu"},
                                {"device", whole_engine.device_name()},
                                {"threads", whole_engine.threads()},
                                {"tp", whole_engine.tensor_parallel_ranks()},
                                {"batch", batch},
                                {"join_prompt_len", join_len},
                                {"prefill_chunks_per_step", chunks},
                                {"prefill_chunk", options.prefill_chunk},
                                {"rounds", rounds},
                                {"whole_longest_wait_ms", median(wait[whole])},
                                {"whole_newcomer_ttft_ms", median(ttft[whole])},
                                {"chunked_longest_wait_ms", median(wait[apart])},
                                {"chunked_newcomer_ttft_ms", median(ttft[apart])},
                                {"in_step_longest_wait_ms", median(wait[in_step])},
                                {"in_step_newcomer_ttft_ms", median(ttft[in_step])}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("model %s on %s: %u sequences decoding while a %u-token prompt joins (medians of %u rounds)\n",
              model_label(model).c_str(), engine_label(whole_engine, options).c_str(), batch - 1, join_len, rounds);
  std::printf("| prompt prefilled | longest wait for a decoding sequence's next token, ms | newcomer's time to first token, ms |\n"
              "|---|---|---|\n");
  std::printf("| whole, when it joins | %.2f | %.2f |\n", median(wait[whole]), median(ttft[whole]));
  std::printf("| %u chunk(s) of %u per step, after the decode step | %.2f | %.2f |\n", chunks, options.prefill_chunk,
              median(wait[apart]), median(ttft[apart]));
  std::printf("| %u chunk(s) of %u per step, the first in the decode step | %.2f | %.2f |\n", chunks, options.prefill_chunk,
              median(wait[in_step]), median(ttft[in_step]));
  return 0;
}

int run_batch_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t steps, uint32_t prompt_len, bool predict,
                    bool json, const std::string& trace_path) {
  options.sequences = batch;
  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (prompt_len + steps + 1 > model.max_context)
    throw InputError("tilefire bench: --prompt-len + --steps + 1 exceeds the context of " + std::to_string(model.max_context));
  // The timed steps: step i decodes each sequence's token at position prompt_len + i - 1, attending to
  // prompt_len + i positions, i = 1 .. steps: prompt_len + (steps + 1) / 2 on average (rounded up).
  const uint32_t mean_context = prompt_len + (steps + 2) / 2;
  time_batch_steps(engine, batch, 1, prompt_len, 0);  // untimed: compiles the batched and prefill programs
  std::vector<double> single_ms, batched_ms, gains, batched_round_ms;
  RoundPredictions predicted;
  auto time_batched = [&](uint32_t r) {
    if (predict) {  // just before the steps it is compared with: this kind of VM's bandwidth drifts
      predicted.add(predict_decode(options, engine, mean_context, batch));
    }
    std::vector<double> times = time_batch_steps(engine, batch, steps, prompt_len, r);
    batched_round_ms.push_back(median(times));
    return times;
  };
  for (uint32_t r = 0; r < rounds; ++r) {
    std::vector<double> single, batched;
    if (r % 2 == 0) {
      single = time_batch_steps(engine, 1, steps, prompt_len, r);
      batched = time_batched(r);
    } else {
      batched = time_batched(r);
      single = time_batch_steps(engine, 1, steps, prompt_len, r);
    }
    gains.push_back(double(batch) * median(single) / median(batched));
    single_ms.insert(single_ms.end(), single.begin(), single.end());
    batched_ms.insert(batched_ms.end(), batched.begin(), batched.end());
  }
  const std::array<double, 3> gain_quartiles = median_and_quartiles(gains);
  const double gain = gain_quartiles[0], gain_low = gain_quartiles[1], gain_high = gain_quartiles[2];
  const double one_ms = median(single_ms), many_ms = median(batched_ms);
  std::array<double, 3> predicted_ratio{};  // predicted / measured batched step, per round
  if (predict) {
    predicted_ratio = paired_ratios(predicted.step_ms, batched_round_ms);
    predicted.warn_if_busy();
  }
  if (!trace_path.empty()) {  // untimed
    try {
      time_batch_steps(engine, batch, std::max(steps, 2u), prompt_len, rounds, trace_path);
    } catch (const InputError& e) {  // the trace's own failure, without the batch call's request it names
      const std::string message = e.what();
      const size_t at = message.find("--trace: ");
      if (at == std::string::npos) throw;
      throw InputError("tilefire bench: " + message.substr(at));
    }
  }
  if (engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports
  if (json) {
    nlohmann::json out{{"model", model.origin},
                       {"dtype", model.dtype},
                       {"backend", options.backend == Backend::cuda ? "cuda" : "cpu"},
                       {"device", engine.device_name()},
                       {"threads", engine.threads()},
                       {"tp", engine.tensor_parallel_ranks()},
                       {"policy", options.policy},
                       {"batch", batch},
                       {"prompt_len", prompt_len},
                       {"rounds", rounds},
                       {"single_step_ms", one_ms},
                       {"batch_step_ms", many_ms},
                       {"single_tok_s", 1000.0 / one_ms},
                       {"batch_tok_s", 1000.0 * batch / many_ms},
                       {"throughput_gain", gain},
                       {"throughput_gain_quartiles", {gain_low, gain_high}}};
    if (!trace_path.empty()) out["trace"] = trace_path;
    if (predict) {
      out["predicted_step_ms"] = median(predicted.step_ms);
      out["predicted_over_measured"] = predicted_ratio[0];
      out["predicted_over_measured_quartiles"] = {predicted_ratio[1], predicted_ratio[2]};
      out["predicted_round_ms"] = predicted.step_ms;
      out["busy_rounds"] = predicted.busy_rounds;
      out["batch_round_ms"] = batched_round_ms;
      // What was simulated, to check against the run's own figures.
      out["simulated"] = {{"model", predicted.last.model}, {"workers", predicted.last.workers},
                          {"tokens_per_step", predicted.last.tokens_per_step}, {"context", mean_context},
                          // the last round's device and bound, to read the predictions by
                          {"memory_gbs", predicted.last.memory_gbs}, {"flops", predicted.last.flops}, {"bound_ms", predicted.last.bound_ms},
                          {"stall_ns", predicted.last.stall_ns}, {"stall_every_ns", predicted.last.stall_every_ns}};
    }
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("model %s on %s, policy %s, greedy decode after %u-token prompts\n", model_label(model).c_str(),
              engine_label(engine, options).c_str(), options.policy.c_str(), prompt_len);
  std::printf("| sequences per step | step ms (median of %zu) | tokens/s, all sequences |\n|---|---|---|\n", single_ms.size());
  std::printf("| 1 | %.3f | %.1f |\n", one_ms, 1000.0 / one_ms);
  std::printf("| %u | %.3f | %.1f |\n", batch, many_ms, 1000.0 * batch / many_ms);
  std::printf("throughput of %u sequences per step over one: %.2fx, quartiles %.2f-%.2f (%u interleaved rounds)\n", batch, gain,
              gain_low, gain_high, rounds);
  if (predict)
    std::printf("simulated step of %u sequences (cpu device measured before each round): %.3f ms; predicted / measured %.3f, "
                "quartiles %.3f-%.3f\n",
                batch, median(predicted.step_ms), predicted_ratio[0], predicted_ratio[1], predicted_ratio[2]);
  if (!trace_path.empty())
    std::printf("trace of a decode step of %u sequences (untimed, after the rounds%s): %s\n", batch,
                engine.tensor_parallel_ranks() > 1 ? "; rank 0's" : "", trace_path.c_str());
  return 0;
}

int run_shared_prefix_bench(EngineOptions options, uint32_t batch, uint32_t rounds, uint32_t prefix_len, bool json) {
  options.sequences = batch;
  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (prefix_len + 8 + 1 > model.max_context)
    throw InputError("tilefire bench: --shared-prefix + 9 (each request's own 8 tokens and its first new one) exceeds the context "
                     "of " + std::to_string(model.max_context));
  time_shared_prefix(engine, batch, prefix_len, 0, false);  // untimed: compiles the prefill programs of both
  time_shared_prefix(engine, batch, prefix_len, 1, true);
  std::vector<double> whole_ms, shared_ms, ratios;
  uint64_t whole_prefilled = 0, shared_prefilled = 0, agreeing = 0, compared = 0;
  for (uint32_t r = 0; r < rounds; ++r) {
    SharedPrefixRound whole, shared;
    const uint32_t round = 2 * r + 2;  // a prefix of its own: no free slot holds it
    if (r % 2 == 0) {
      whole = time_shared_prefix(engine, batch, prefix_len, round, false);
      shared = time_shared_prefix(engine, batch, prefix_len, round + 1, true);
    } else {
      shared = time_shared_prefix(engine, batch, prefix_len, round + 1, true);
      whole = time_shared_prefix(engine, batch, prefix_len, round, false);
    }
    // The requests that copied (all but the first, which prefilled the prefix), each prefilled whole
    // (untimed): their first tokens compared.
    const SharedPrefixRound check = time_shared_prefix(engine, batch, prefix_len, round + 1, false);
    for (uint32_t s = 1; s < batch; ++s) agreeing += check.first_tokens[s] == shared.first_tokens[s] ? 1 : 0;
    compared += batch - 1;
    whole_ms.push_back(whole.ms);
    shared_ms.push_back(shared.ms);
    ratios.push_back(whole.ms / shared.ms);
    whole_prefilled = whole.prefilled;
    shared_prefilled = shared.prefilled;
  }
  const std::array<double, 3> ratio = median_and_quartiles(ratios);
  if (engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports
  if (json) {
    std::cout << nlohmann::json{{"model", model.origin},
                                {"dtype", model.dtype},
                                {"backend", options.backend == Backend::cuda ? "cuda" : "cpu"},
                                {"device", engine.device_name()},
                                {"threads", engine.threads()},
                                {"tp", engine.tensor_parallel_ranks()},
                                {"batch", batch},
                                {"shared_prefix", prefix_len},
                                {"rounds", rounds},
                                {"whole_ms", median(whole_ms)},
                                {"shared_ms", median(shared_ms)},
                                {"speedup", ratio[0]},
                                {"speedup_quartiles", {ratio[1], ratio[2]}},
                                {"whole_prefilled_tokens", whole_prefilled},
                                {"shared_prefilled_tokens", shared_prefilled},
                                {"same_first_tokens", agreeing},
                                {"compared_first_tokens", compared}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("model %s on %s: %u requests of one %u-token prefix and 8 tokens each, to their first tokens (medians of %u "
              "interleaved rounds)\n",
              model_label(model).c_str(), engine_label(engine, options).c_str(), batch, prefix_len, rounds);
  std::printf("| prompts | every first token, ms | prompt tokens prefilled |\n|---|---|---|\n");
  std::printf("| each prefilled whole | %.2f | %llu |\n", median(whole_ms), static_cast<unsigned long long>(whole_prefilled));
  std::printf("| the prefix copied from the first (reuse_prefix) | %.2f | %llu |\n", median(shared_ms),
              static_cast<unsigned long long>(shared_prefilled));
  std::printf("speedup %.2fx, quartiles %.2f-%.2f; the same first token as prefilled whole in %llu of the %llu requests that "
              "copied\n", ratio[0], ratio[1], ratio[2],
              static_cast<unsigned long long>(agreeing), static_cast<unsigned long long>(compared));
  return 0;
}

}  // namespace tilefire::cli
