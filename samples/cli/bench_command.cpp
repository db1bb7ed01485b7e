// tilefire bench: decode tokens/s, achieved memory bandwidth against this machine's measured read
// bandwidth, and dataflow against bsp (same program, same tiles, same run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct ModeTiming {
  std::vector<double> step_ms;
  double median() const { return tilefire::cli::median(step_ms); }
};

// Prefill `prompt_len` tokens, then time `steps` decode steps; returns per-step milliseconds.
std::vector<double> time_decode(Engine& engine, Schedule schedule, uint32_t prompt_len, uint32_t steps) {
  engine.set_schedule(schedule);
  engine.reset();
  std::vector<int32_t> prompt(prompt_len);
  for (uint32_t i = 0; i < prompt_len; ++i) prompt[i] = int32_t((i * 7 + 1) % engine.model().vocab);
  engine.prefill(prompt);
  std::vector<double> times;
  int32_t token = 1;
  for (uint32_t s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    std::vector<float> logits = engine.decode(token);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return times;
}

}  // namespace

int bench_command(int argc, char** argv) {
  Args args("bench", {"--json", "--help"},
            {"--model", "--preset", "--dtype", "--seed", "--threads", "--steps", "--rounds", "--prompt-len",
             "--policy", "--bandwidth-mb", "--compile-preset"});
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::printf(
        "usage: tilefire bench [--model DIR | --preset NAME [--dtype bf16]] [--threads N] [--steps N] [--rounds R]\n"
        "                      [--prompt-len P] [--policy NAME] [--bandwidth-mb MB] [--json]\n"
        "                      [--compile-preset NAME]  (also time compiling that preset's decode program)\n");
    return 0;
  }
  if (args.has("--model") && args.has("--preset")) throw InputError("tilefire bench: give --model or --preset, not both");
  EngineOptions options;
  options.model_dir = args.text_or("--model", "");
  options.preset = args.text_or("--preset", "");
  options.preset_dtype = args.text_or("--dtype", "bf16");
  options.preset_seed = args.unsigned_or("--seed", 0);
  options.threads = uint32_t(args.unsigned_or("--threads", 0, 1, 256));
  const std::string policy = args.text_or("--policy", "balanced");
  options.policy = policy;
  const uint32_t steps = uint32_t(args.unsigned_or("--steps", 8, 1, 100000));
  const uint32_t rounds = uint32_t(args.unsigned_or("--rounds", 15, 1, 1000));
  const uint32_t prompt_len = uint32_t(args.unsigned_or("--prompt-len", 8, 1, 1u << 20));
  const uint64_t bandwidth_bytes = args.unsigned_or("--bandwidth-mb", 1024, 64, 1u << 20) << 20;

  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (prompt_len + steps > model.max_context)
    throw InputError("tilefire bench: --prompt-len + --steps exceeds the context of " + std::to_string(model.max_context));
  const double read_gbs = measure_read_bandwidth_gbs(engine.threads(), bandwidth_bytes);

  // Rounds alternate the modes (the order flips every round), so drift in the machine's bandwidth hits
  // both alike; the ratio is the median of the per-round ratios of median step times.
  ModeTiming dataflow, bsp;
  std::vector<double> round_ratios;
  for (uint32_t r = 0; r < rounds; ++r) {
    std::vector<double> d, b;
    if (r % 2 == 0) {
      d = time_decode(engine, Schedule::dataflow, prompt_len, steps);
      b = time_decode(engine, Schedule::bsp, prompt_len, steps);
    } else {
      b = time_decode(engine, Schedule::bsp, prompt_len, steps);
      d = time_decode(engine, Schedule::dataflow, prompt_len, steps);
    }
    round_ratios.push_back(median(b) / median(d));
    dataflow.step_ms.insert(dataflow.step_ms.end(), d.begin(), d.end());
    bsp.step_ms.insert(bsp.step_ms.end(), b.begin(), b.end());
  }
  const double bsp_over_dataflow = median(round_ratios);
  std::sort(round_ratios.begin(), round_ratios.end());
  const double ratio_q1 = round_ratios[round_ratios.size() / 4], ratio_q3 = round_ratios[round_ratios.size() * 3 / 4];
  engine.reset();
  // Bytes one decode step reads: every weight once, plus K and V up to the mean position of the run.
  const uint64_t kv_bytes = 2ull * model.layers * model.kv_heads * model.head_dim * sizeof(float) * (prompt_len + steps / 2);
  const double step_bytes = double(model.decode_weight_bytes + kv_bytes);
  auto gbs = [&](double ms) { return ms > 0 ? step_bytes / (ms * 1e-3) / 1e9 : 0.0; };
  const double dataflow_ms = dataflow.median(), bsp_ms = bsp.median();
  double compile_ms = -1;
  std::string compile_preset = args.text_or("--compile-preset", "");
  if (!compile_preset.empty()) compile_ms = measure_compile_ms(compile_preset, engine.threads());

  if (args.has("--json")) {
    nlohmann::json out = {{"model", model.origin},
                          {"dtype", model.dtype},
                          {"threads", engine.threads()},
                          {"policy", policy},
                          {"measured_read_gbs", read_gbs},
                          {"step_bytes", step_bytes},
                          {"dataflow_step_ms", dataflow_ms},
                          {"bsp_step_ms", bsp_ms},
                          {"decode_tok_s", 1000.0 / dataflow_ms},
                          {"dataflow_gbs", gbs(dataflow_ms)},
                          {"bandwidth_share", gbs(dataflow_ms) / read_gbs},
                          {"bsp_over_dataflow", bsp_over_dataflow},
                          {"bsp_over_dataflow_quartiles", {ratio_q1, ratio_q3}},
                          {"rounds", rounds},
                          {"tasks_per_step", engine.decode_tasks()},
                          {"events_per_step", engine.decode_events()}};
    if (compile_ms >= 0) out["compile_ms"] = {{"preset", compile_preset}, {"ms", compile_ms}};
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("model %s (%s), %u threads, policy %s, %u tasks / %u events per decode step\n", model.origin.c_str(),
              model.dtype.c_str(), engine.threads(), policy.c_str(), engine.decode_tasks(), engine.decode_events());
  std::printf("measured read bandwidth: %.2f GB/s (%u threads)\n", read_gbs, engine.threads());
  std::printf("bytes per decode step: %.1f MB (weights %.1f MB, KV %.2f MB)\n", step_bytes / 1e6,
              model.decode_weight_bytes / 1e6, kv_bytes / 1e6);
  std::printf("| schedule | step ms (median of %zu) | tokens/s | GB/s | share of measured |\n", dataflow.step_ms.size());
  std::printf("|---|---|---|---|---|\n");
  std::printf("| dataflow | %.3f | %.1f | %.2f | %.0f%% |\n", dataflow_ms, 1000 / dataflow_ms, gbs(dataflow_ms),
              100 * gbs(dataflow_ms) / read_gbs);
  std::printf("| bsp | %.3f | %.1f | %.2f | %.0f%% |\n", bsp_ms, 1000 / bsp_ms, gbs(bsp_ms), 100 * gbs(bsp_ms) / read_gbs);
  std::printf("bsp / dataflow step time: %.3f, quartiles %.3f-%.3f (%u interleaved rounds; above 1: dataflow faster)\n",
              bsp_over_dataflow, ratio_q1, ratio_q3, rounds);
  if (compile_ms >= 0) std::printf("compile of the %s decode program: %.1f ms\n", compile_preset.c_str(), compile_ms);
  return 0;
}

}  // namespace tilefire::cli
