// tilefire bench: decode tokens/s, achieved memory bandwidth against this machine's measured read
// bandwidth (cpu) or the GPU's measured device-to-device copy bandwidth (cuda), and dataflow against bsp
// (same program, same tiles, same run); on cuda also the resident kernel and the launches per step;
// with --predict (cpu), the simulator's prediction of the same step, the cpu device measured before each
// round in this same process. --batch, --batch --join-prompt-len and --speculate measure other things
// (bench_batch.h, bench_speculation.h).
#include <algorithm>
#include <array>
#include <memory>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "bench_batch.h"
#include "bench_speculation.h"
#include "sampling_flags.h"
#include "decode_timing.h"
#include "sweep.h"
#include "commands.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

namespace {

// The mean context of bench's timed steps: after a prompt of P and one untimed step, S steps attend to
// P + 2 ... P + S + 1 positions, P + 1.5 + S / 2 on average (rounded up here).
uint32_t mean_timed_context(uint32_t prompt_len, uint32_t steps) { return prompt_len + 2 + steps / 2; }

struct ModeTiming {
  std::vector<double> step_ms;
  double median() const { return tilefire::cli::median(step_ms); }
};

}  // namespace

int bench_command(int argc, char** argv) {
  std::vector<std::string> switches{"--json", "--help", "--predict"}, valued{"--model", "--preset", "--dtype", "--seed", "--threads",
      "--steps", "--rounds", "--prompt-len", "--policy", "--granularity", "--kv-splits", "--bandwidth-mb", "--compile-preset", "--tp", "--sweep",
      "--sweep-out", "--tp-timeout-ms", "--batch", "--join-prompt-len", "--prefill-chunks", "--prefill-chunk", "--trace",
      "--prompt-tokens", "--shared-prefix"};
  for (const std::string& flag : speculation_valued()) valued.push_back(flag);
  for (const std::string& flag : backend_switches()) switches.push_back(flag);
  for (const std::string& flag : backend_valued()) valued.push_back(flag);
  Args args("bench", switches, valued);
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::printf(
        "usage: tilefire bench [--model DIR | --preset NAME [--dtype bf16] [--seed S]] [--threads N] [--steps N]\n"
        "                      [--rounds R] [--prompt-len P] [--policy NAME] [--granularity tile|head|op] [--kv-splits N]\n"
        "                      [--bandwidth-mb MB] [--json]\n"
        "                      [--predict]  (cpu, one rank: also the simulator's prediction of the dataflow step,\n"
        "                       the cpu device measured before each round; predicted / measured per round)\n"
        "                      [--compile-preset NAME]  (also time compiling that preset's decode program)\n"
        "                      [--tp N [--tp-timeout-ms N]]  (N tensor-parallel ranks of this process, timed\n"
        "                       against one rank; a collective waiting longer for a peer stops with an error)\n"
        "                      [--sweep policy,granularity,threads [--sweep-out PREFIX]]  (cpu: a grid of cells,\n"
        "                       each against bsp; PREFIX.csv and PREFIX.md, default sweep)\n"
        "                      [--batch B]  (decode throughput of B sequences per step against\n"
        "                       one, on one engine holding B sequences; --steps, --rounds, --prompt-len apply;\n"
        "                       --predict: the simulator's prediction of the step of B sequences; --trace FILE:\n"
        "                       a Perfetto trace of one such step, untimed, after the rounds)\n"
        "                      [--batch B --join-prompt-len P [--prefill-chunks N]]  (instead: B - 1 sequences\n"
        "                       decode while a P-token prompt joins, prefilled whole or N chunks per step\n"
        "                       (default 1), apart from the decode step and the first in it: the longest wait\n"
        "                       for a decoding sequence's token, the newcomer's first; --rounds applies)\n"
        "                      [--batch B --shared-prefix P]  (instead: B requests of one P-token prefix and 8\n"
        "                       tokens each, to their first tokens, the prefix copied from the first's cache\n"
        "                       (reuse_prefix) against each prefilled whole; --rounds applies)\n"
        "                      [--speculate K [--prompt-tokens 1,2,3] [--speculate-ngram N] [--speculate-min-ngram N]\n"
        "                       [--draft-model DIR]]  (instead: greedy replies of --steps + 1 tokens with and\n"
        "                       without speculative decoding, drafts of K by prompt lookup or by the draft model,\n"
        "                       in interleaved rounds: tokens/s, their ratio, the drafts taken, the model's steps\n"
        "                       per token; the prompt by default the bytes of \"Once upon a time\", as run's;\n"
        "                       --steps default 64, --rounds 5; on cuda --resident applies without a draft model;\n"
        "                       with --batch B: B such replies decoded together, drafts by prompt lookup checked\n"
        "                       in the batched steps, tokens/s over all of them)\n"
        "                      [--prefill-chunk N]  (prompt tokens per prefill step, 1 to 128, default 128)\n"
        "                      [--backend cpu|cuda ...]  (cuda: dataflow, bsp and the resident kernel)\n"
        "defaults: --threads every core, --steps 8 decode steps per round (64 on cuda), --rounds 15 (5 on cuda;\n"
        "3 per sweep cell), --prompt-len 8, --bandwidth-mb 1024 (4096 on cuda; 64 to 16384), --policy balanced,\n"
        "--granularity tile, --dtype bf16 for a preset, --seed 0\n%s%s",
        kBackendHelp, policy_help().c_str());
    return 0;
  }
  if (args.has("--model") && args.has("--preset")) throw InputError("tilefire bench: give --model or --preset, not both");
  // Flags that only mean something beside another: alone they would be ignored.
  for (const char* flag : {"--dtype", "--seed"})
    if (args.has(flag) && !args.has("--preset"))
      throw InputError(std::string("tilefire bench: ") + flag + " applies to --preset NAME (a checkpoint, or the built-in sample, has its own)");
  if (args.has("--sweep-out") && !args.has("--sweep")) throw InputError("tilefire bench: --sweep-out names the files of --sweep");
  if (args.has("--compile-preset")) {  // checked before the engine loads and the bandwidth is measured
    const std::string name = args.text_or("--compile-preset", "");
    const std::vector<std::string> names = preset_names();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string expected;
      for (const std::string& n : names) expected += (expected.empty() ? "" : ", ") + n;
      throw InputError("tilefire bench: --compile-preset: unknown preset '" + name + "' (expected one of " + expected + ")");
    }
  }
  EngineOptions options;
  options.model_dir = args.text_or("--model", "");
  options.preset = args.text_or("--preset", "");
  if (!options.preset.empty()) {  // a preset's weights: bf16 by default here (the engine's default is f32)
    options.preset_dtype = args.text_or("--dtype", "bf16");
    options.preset_seed = args.unsigned_or("--seed", 0);
  }
  options.threads = uint32_t(args.unsigned_or("--threads", 0, 1, 256));
  options.tp = uint32_t(args.unsigned_or("--tp", 1, 1, 256));
  options.tp_timeout_ms = uint32_t(args.unsigned_or("--tp-timeout-ms", 10000, 1, 3600 * 1000));
  refuse_tp_timeout_alone(args, options);
  const std::string policy = args.text_or("--policy", "balanced");
  options.policy = policy;
  options.granularity = parse_granularity(args.text_or("--granularity", "tile"));
  options.kv_splits = uint32_t(args.unsigned_or("--kv-splits", 0, 1, 256));
  options.prefill_chunk = uint32_t(args.unsigned_or("--prefill-chunk", 128, 1, 128));
  if (args.has("--stress-delay-us"))
    throw InputError("tilefire bench: --stress-delay-us does not apply to bench (its delays would be timed as the steps')");
  apply_backend_flags(args, options);
  // --speculate times one engine, resident or not, as given.
  if (options.backend == Backend::cuda && args.has("--resident") && !args.has("--speculate"))
    throw InputError("tilefire bench: --resident is measured anyway on --backend cuda (the 'resident' row)");
  const bool cuda = options.backend == Backend::cuda;
  const bool predict = args.has("--predict");
  if (args.has("--prompt-tokens") && !args.has("--speculate"))
    throw InputError("tilefire bench: --prompt-tokens applies to --speculate K (the other benchmarks make their prompts)");
  for (const char* flag : {"--draft-model", "--speculate-ngram", "--speculate-min-ngram"})
    if (args.has(flag) && !args.has("--speculate")) throw InputError(std::string("tilefire bench: ") + flag + " goes with --speculate K");
  if (predict && (cuda || options.tp > 1 || args.has("--sweep")))
    throw InputError("tilefire bench: --predict runs the cpu backend on one rank, one cell (not with --backend cuda, --tp or --sweep)");
  if (args.has("--sweep")) {
    if (cuda || options.tp > 1) throw InputError("tilefire bench: --sweep runs the cpu backend on one rank");
    // A sweep writes its own tables, with an 8-token prompt in every cell and no bandwidth measurement.
    for (const char* unused : {"--json", "--prompt-len", "--bandwidth-mb", "--compile-preset", "--batch", "--join-prompt-len",
                               "--prefill-chunks", "--prefill-chunk", "--trace", "--speculate", "--prompt-tokens", "--shared-prefix"})
      if (args.has(unused))
        throw InputError(std::string("tilefire bench: ") + unused + " does not apply to --sweep (it writes its tables as CSV and "
                         "Markdown, each cell from an 8-token prompt)");
    std::vector<std::string> flags_given;
    for (const char* flag : {"--policy", "--granularity", "--threads"})
      if (args.has(flag)) flags_given.push_back(flag);
    return run_sweep(options, args.text_or("--sweep", ""), args.text_or("--sweep-out", "sweep"),
                     uint32_t(args.unsigned_or("--rounds", 3, 1, 1000)), uint32_t(args.unsigned_or("--steps", 8, 1, 100000)),
                     flags_given);
  }
  if (args.has("--speculate")) {
    for (const char* unused : {"--prompt-len", "--bandwidth-mb", "--compile-preset", "--trace", "--join-prompt-len",
                               "--prefill-chunks", "--tp", "--shared-prefix"})
      if (args.has(unused))
        throw InputError(std::string("tilefire bench: ") + unused + " does not apply to --speculate (it times greedy replies "
                         "with and without drafts, of one sequence or, with --batch B, of B together)");
    args.unsigned_or("--speculate", 1, 1, 31);  // 0 (off) is no benchmark: refused by this range, then read below
    const Speculation speculation = speculation_of_flags(args, "tilefire bench", options);  // --draft-model into options
    if (predict) throw InputError("tilefire bench: --predict does not apply to --speculate");
    const std::vector<int32_t> prompt = args.has("--prompt-tokens") ? args.token_list("--prompt-tokens") : byte_tokens("Once upon a time");
    if (args.has("--batch"))
      return run_batched_speculation_bench(options, speculation, uint32_t(args.unsigned_or("--batch", 1, 2, 256)),
                                           uint32_t(args.unsigned_or("--rounds", 5, 1, 1000)),
                                           uint32_t(args.unsigned_or("--steps", 64, 1, 100000)), prompt, args.has("--json"));
    return run_speculation_bench(options, speculation, uint32_t(args.unsigned_or("--rounds", 5, 1, 1000)),
                                 uint32_t(args.unsigned_or("--steps", 64, 1, 100000)), prompt, args.has("--json"));
  }
  const uint32_t steps = uint32_t(args.unsigned_or("--steps", cuda ? 64 : 8, 1, 100000));
  const uint32_t rounds = uint32_t(args.unsigned_or("--rounds", cuda ? 5 : 15, 1, 1000));
  const uint32_t prompt_len = uint32_t(args.unsigned_or("--prompt-len", 8, 1, 1u << 20));
  if (args.has("--batch")) {
    for (const char* unused : {"--bandwidth-mb", "--compile-preset"})
      if (args.has(unused))
        throw InputError(std::string("tilefire bench: ") + unused + " does not apply to --batch (it times dataflow decode steps "
                         "of B sequences against one)");
    const uint32_t batch = uint32_t(args.unsigned_or("--batch", 1, 2, 256));
    if (args.has("--join-prompt-len")) {
      for (const char* unused : {"--steps", "--prompt-len", "--trace", "--shared-prefix"})
        if (args.has(unused))
          throw InputError(std::string("tilefire bench: ") + unused + " does not apply to --join-prompt-len (the decoding "
                           "sequences have 8-token prompts and run until the newcomer has its first token)");
      if (predict) throw InputError("tilefire bench: --predict does not apply to --join-prompt-len (it predicts decode steps of B sequences)");
      return run_join_bench(options, batch, rounds, uint32_t(args.unsigned_or("--join-prompt-len", 1, 1, 1u << 20)),
                            uint32_t(args.unsigned_or("--prefill-chunks", 1, 1, 1u << 20)), args.has("--json"));
    }
    if (args.has("--prefill-chunks")) throw InputError("tilefire bench: --prefill-chunks applies to --join-prompt-len");
    if (args.has("--shared-prefix")) {
      for (const char* unused : {"--steps", "--prompt-len", "--trace"})
        if (args.has(unused))
          throw InputError(std::string("tilefire bench: ") + unused + " does not apply to --shared-prefix (each request is the "
                           "prefix and 8 tokens of its own, and runs to its first token)");
      if (predict) throw InputError("tilefire bench: --predict does not apply to --shared-prefix (it predicts decode steps of B sequences)");
      return run_shared_prefix_bench(options, batch, rounds, uint32_t(args.unsigned_or("--shared-prefix", 1, 1, 1u << 20)),
                                     args.has("--json"));
    }
    return run_batch_bench(options, batch, rounds, steps, prompt_len, predict, args.has("--json"), args.text_or("--trace", ""));
  }
  for (const char* flag : {"--join-prompt-len", "--prefill-chunks", "--shared-prefix"})
    if (args.has(flag)) throw InputError(std::string("tilefire bench: ") + flag + " applies to --batch B");
  if (args.has("--trace"))
    throw InputError("tilefire bench: --trace applies to --batch B (a step of B sequences; `tilefire run --trace` traces one "
                     "sequence's step)");
  // At most 16 GiB: the copy measures bandwidth well past every cache at 1 GiB; more only risks the memory.
  const uint64_t bandwidth_bytes = args.unsigned_or("--bandwidth-mb", cuda ? 4096 : 1024, 64, 16384) << 20;

  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (prompt_len + steps + 1 > model.max_context)  // + the untimed first decode step
    throw InputError("tilefire bench: --prompt-len + --steps + 1 exceeds the context of " + std::to_string(model.max_context));
  // The ceiling: this machine's read bandwidth with the engine's threads, or the GPU's copy bandwidth.
  const double ceiling_gbs = cuda ? measure_device_copy_bandwidth_gbs(options.cuda_device, bandwidth_bytes)
                                  : measure_read_bandwidth_gbs(engine.threads(), bandwidth_bytes);
  std::unique_ptr<Engine> resident_engine;  // cuda: the same model with the kernel kept alive across steps
  if (cuda && options.tp == 1) {  // (tensor-parallel ranks launch per step: --resident is refused there)
    EngineOptions resident = options;
    resident.cuda_resident = true;
    resident_engine = std::make_unique<Engine>(resident);
  }
  std::unique_ptr<Engine> one_rank;  // --tp N: the same model on one rank, timed in the same rounds
  // (not when ranks are processes: each would time its own copy while its peers wait in collectives)
  if (options.tp > 1 && !engine.ranks_are_processes()) {
    EngineOptions single = options;
    single.tp = 1;
    one_rank = std::make_unique<Engine>(single);
  }

  // Rounds run the modes in turn (the order reverses every round), so drift in the machine hits all
  // alike; a ratio is the median of the per-round ratios of median step times.
  struct Mode {
    std::string name;
    Engine* engine;
    Schedule schedule;
    ModeTiming timing;
    std::vector<double> round_medians;
    uint64_t launches = 0;
  };
  std::vector<Mode> modes{{"dataflow", &engine, Schedule::dataflow, {}, {}, 0}, {"bsp", &engine, Schedule::bsp, {}, {}, 0}};
  if (resident_engine) modes.push_back({"resident", resident_engine.get(), Schedule::dataflow, {}, {}, 0});
  if (one_rank) modes.push_back({"tp=1 dataflow", one_rank.get(), Schedule::dataflow, {}, {}, 0});
  RoundPredictions predicted;  // per round: the cpu device measured and the step simulated just before
                               // the round's dataflow steps
  for (uint32_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < modes.size(); ++i) {
      Mode& mode = modes[r % 2 == 0 ? i : modes.size() - 1 - i];
      if (predict && &mode == &modes[0]) {
        predicted.add(predict_decode(options, engine, mean_timed_context(prompt_len, steps), 1));
      }
      const std::vector<double> times = time_decode(*mode.engine, mode.schedule, prompt_len, steps, &mode.launches);
      mode.round_medians.push_back(median(times));
      mode.timing.step_ms.insert(mode.timing.step_ms.end(), times.begin(), times.end());
    }
  }
  auto ratio_over_dataflow = [&](const Mode& mode) {
    std::vector<double> ratios;
    for (uint32_t r = 0; r < rounds; ++r) ratios.push_back(mode.round_medians[r] / modes[0].round_medians[r]);
    return median_and_quartiles(ratios);
  };
  const std::array<double, 3> bsp_ratio = ratio_over_dataflow(modes[1]);
  std::array<double, 3> predicted_ratio{};  // median and quartiles of predicted / measured dataflow, per round
  if (predict) {
    predicted_ratio = paired_ratios(predicted.step_ms, modes[0].round_medians);
    predicted.warn_if_busy();
  }
  engine.reset();
  // Bytes one decode step reads: every weight once, plus K and V up to the mean position of the run (a
  // sliding layer's: its window).
  const uint64_t kv_bytes = engine.decode_kv_bytes(prompt_len + steps / 2);
  const double step_bytes = double(model.decode_weight_bytes + kv_bytes);
  auto gbs = [&](double ms) { return ms > 0 ? step_bytes / (ms * 1e-3) / 1e9 : 0.0; };
  auto launches_per_step = [&](const Mode& mode) { return double(mode.launches) / (double(rounds) * steps); };
  const double dataflow_ms = modes[0].timing.median(), bsp_ms = modes[1].timing.median();
  double compile_ms = -1;
  std::string compile_preset = args.text_or("--compile-preset", "");
  // For as many workers as this engine has, up to the 256 a program is compiled for (the cuda backend's
  // CTAs over several GPUs may number more).
  if (!compile_preset.empty()) compile_ms = measure_compile_ms(compile_preset, std::min(256u, engine.threads()));

  if (engine.tensor_parallel_rank() != 0) return 0;  // ranks as processes: rank 0 reports
  if (args.has("--json")) {
    nlohmann::json out = {{"model", model.origin},
                          {"dtype", model.dtype},
                          {"backend", cuda ? "cuda" : "cpu"},
                          {"device", engine.device_name()},
                          {"threads", engine.threads()},
                          {"tp", engine.tensor_parallel_ranks()},
                          {"policy", policy},
                          {"granularity", granularity_name(options.granularity)},
                          {cuda ? "measured_copy_gbs" : "measured_read_gbs", ceiling_gbs},
                          {"step_bytes", step_bytes},
                          {"dataflow_step_ms", dataflow_ms},
                          {"bsp_step_ms", bsp_ms},
                          {"decode_tok_s", 1000.0 / dataflow_ms},
                          {"dataflow_gbs", gbs(dataflow_ms)},
                          {"bandwidth_share", gbs(dataflow_ms) / ceiling_gbs},
                          {"bsp_over_dataflow", bsp_ratio[0]},
                          {"bsp_over_dataflow_quartiles", {bsp_ratio[1], bsp_ratio[2]}},
                          {"rounds", rounds},
                          {"tasks_per_step", engine.decode_tasks()},
                          {"events_per_step", engine.decode_events()}};
    if (cuda) {
      out["launches_per_step"] = {{"dataflow", launches_per_step(modes[0])}, {"bsp", launches_per_step(modes[1])}};
      if (resident_engine) {
        out["resident_step_ms"] = modes[2].timing.median();
        out["resident_over_dataflow"] = ratio_over_dataflow(modes[2])[0];
        out["launches_per_step"]["resident"] = launches_per_step(modes[2]);
      }
    }
    if (one_rank) {
      out["tp1_step_ms"] = modes.back().timing.median();
      out["tp1_over_tp"] = ratio_over_dataflow(modes.back())[0];  // above 1: N ranks are faster than one
    }
    if (compile_ms >= 0) out["compile_ms"] = {{"preset", compile_preset}, {"ms", compile_ms}};
    if (predict) {
      out["predicted_step_ms"] = median(predicted.step_ms);
      out["predicted_over_measured"] = predicted_ratio[0];
      out["predicted_over_measured_quartiles"] = {predicted_ratio[1], predicted_ratio[2]};
      out["predicted_round_ms"] = predicted.step_ms;
      out["busy_rounds"] = predicted.busy_rounds;
      out["dataflow_round_ms"] = modes[0].round_medians;
      // What was simulated, to check against the engine's own figures above.
      out["simulated"] = {{"model", predicted.last.model}, {"workers", predicted.last.workers}, {"tasks_per_step", predicted.last.tasks},
                          {"context", mean_timed_context(prompt_len, steps)},
                          // the last round's stalls (a busy machine's are in busy_rounds)
                          {"stall_ns", predicted.last.stall_ns}, {"stall_every_ns", predicted.last.stall_every_ns}};
    }
    std::cout << out.dump() << std::endl;
    return 0;
  }
  if (cuda) {
    std::printf("model %s, cuda on %s, %u CTAs, %u tensor-parallel rank(s), policy %s, %u tasks / %u events per decode step%s\n",
                model_label(model).c_str(), engine.device_name().c_str(), engine.threads(),
                engine.tensor_parallel_ranks(), policy.c_str(), engine.decode_tasks(), engine.decode_events(),
                engine.tensor_parallel_ranks() > 1 ? " (rank 0)" : "");
    std::printf("measured device-to-device copy bandwidth: %.1f GB/s (read + written)\n", ceiling_gbs);
  } else {
    std::printf("model %s, %u threads, %u tensor-parallel rank(s), policy %s, %u tasks / %u events per decode step%s\n",
                model_label(model).c_str(), engine.threads(), engine.tensor_parallel_ranks(), policy.c_str(),
                engine.decode_tasks(), engine.decode_events(), engine.tensor_parallel_ranks() > 1 ? " (rank 0)" : "");
    std::printf("measured read bandwidth: %.2f GB/s (%u threads)\n", ceiling_gbs, engine.threads());
  }
  std::printf("bytes per decode step: %.1f MB (weights %.1f MB, KV %.2f MB)\n", step_bytes / 1e6,
              model.decode_weight_bytes / 1e6, kv_bytes / 1e6);
  std::printf("| schedule | step ms (median of %zu) | tokens/s | GB/s | share of measured |%s\n", modes[0].timing.step_ms.size(),
              cuda ? " launches per step |" : "");
  std::printf("|---|---|---|---|---|%s\n", cuda ? "---|" : "");
  for (const Mode& mode : modes) {
    const double ms = mode.timing.median();
    std::printf("| %s | %.3f | %.1f | %.2f | %.0f%% |", mode.name.c_str(), ms, 1000 / ms, gbs(ms), 100 * gbs(ms) / ceiling_gbs);
    if (cuda) std::printf(" %.2f |", launches_per_step(mode));
    std::printf("\n");
  }
  std::printf("bsp / dataflow step time: %.3f, quartiles %.3f-%.3f (%u interleaved rounds; above 1: dataflow faster)\n",
              bsp_ratio[0], bsp_ratio[1], bsp_ratio[2], rounds);
  if (one_rank) {
    const std::array<double, 3> r = ratio_over_dataflow(modes.back());
    std::printf("tp=1 / tp=%u step time: %.3f, quartiles %.3f-%.3f (above 1: %u ranks are faster than one)\n",
                engine.tensor_parallel_ranks(), r[0], r[1], r[2], engine.tensor_parallel_ranks());
  }
  if (predict)
    std::printf("simulated dataflow step (cpu device measured before each round): %.3f ms; predicted / measured %.3f, "
                "quartiles %.3f-%.3f (per round)\n",
                median(predicted.step_ms), predicted_ratio[0], predicted_ratio[1], predicted_ratio[2]);
  if (compile_ms >= 0) std::printf("compile of the %s decode program: %.1f ms\n", compile_preset.c_str(), compile_ms);
  return 0;
}

}  // namespace tilefire::cli
