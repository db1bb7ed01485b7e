// Timing greedy decode steps (decode_timing.h).
#include "decode_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace tilefire::cli {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

std::string model_label(const ModelInfo& model) {
  if (model.origin.find("(" + model.dtype) != std::string::npos) return model.origin;
  return model.origin + " (" + model.dtype + ")";
}

std::array<double, 3> median_and_quartiles(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {median(values), values[values.size() / 4], values[values.size() * 3 / 4]};
}

std::array<double, 3> paired_ratios(const std::vector<double>& predicted, const std::vector<double>& measured) {
  std::vector<double> ratios;
  for (size_t r = 0; r < predicted.size() && r < measured.size(); ++r) ratios.push_back(predicted[r] / measured[r]);
  return median_and_quartiles(ratios);
}

SimulateReport predict_decode(const EngineOptions& options, const Engine& engine, uint32_t context, uint32_t batch) {
  SimulateOptions sim;
  sim.model_dir = options.model_dir;
  sim.preset = options.preset;        // empty with no model: the built-in sample, the tiny preset
  sim.dtype = engine.model().dtype;   // a checkpoint's: its weights', which the engine read (not config.json's)
  sim.device = "cpu";
  sim.policy = options.policy;
  sim.granularity = granularity_name(options.granularity);
  sim.kv_splits = options.kv_splits;
  sim.threads = engine.threads();
  sim.context = context;
  sim.batch = batch;
  return simulate_model(sim);
}

void RoundPredictions::add(const SimulateReport& report) {
  step_ms.push_back(report.step_ms);
  last = report;
  const std::string warning = busy_machine_warning(report);
  if (warning.empty()) return;
  ++busy_rounds;
  busy_warning = warning;
}

void RoundPredictions::warn_if_busy() const {
  if (busy_rounds > 0) std::fprintf(stderr, "%u of %zu rounds' predictions: %s\n", busy_rounds, step_ms.size(), busy_warning.c_str());
}

std::vector<double> time_decode(Engine& engine, Schedule schedule, uint32_t prompt_len, uint32_t steps, uint64_t* launches) {
  engine.set_schedule(schedule);
  engine.reset();
  std::vector<int32_t> prompt(prompt_len);
  for (uint32_t i = 0; i < prompt_len; ++i) prompt[i] = int32_t((i * 7 + 1) % engine.model().vocab);
  engine.prefill(prompt);
  // One untimed step: it binds the decode program, and on the cuda backend a resident engine (re)starts
  // its kernel here (another engine's launches stop it between rounds), not in the timed steps.
  int32_t token = engine.decode_greedy(1);
  std::vector<double> times;
  const uint64_t launches_before = engine.kernel_launches();
  for (uint32_t s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    token = engine.decode_greedy(token);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  *launches += engine.kernel_launches() - launches_before;
  return times;
}

}  // namespace tilefire::cli
