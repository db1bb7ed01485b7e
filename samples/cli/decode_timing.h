#pragma once
// Timing greedy decode steps, and the simulator's prediction of them, shared by `tilefire bench`, its
// --batch and its --sweep.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tilefire/engine.h"
#include "tilefire/simulate.h"

namespace tilefire::cli {

double median(std::vector<double> values);
// The model as bench's headers name it: its origin, with its dtype where the origin does not say it
// already ("preset tiny (bf16, seed 0)" does; a folder's path does not).
std::string model_label(const ModelInfo& model);
// The median and the lower and upper quartiles (of per-round ratios).
std::array<double, 3> median_and_quartiles(std::vector<double> values);
// The median and quartiles of predicted[r] / measured[r] over the rounds (both of one size).
std::array<double, 3> paired_ratios(const std::vector<double>& predicted, const std::vector<double>& measured);

// The simulator's prediction of the engine's decode step of `batch` sequences, one token each
// (docs/SIMULATOR.md, "Checking the model"): the same model, policy, granularity, split and workers, at
// `context` positions (per sequence), on the cpu device measured now, in this process.
SimulateReport predict_decode(const EngineOptions& options, const Engine& engine, uint32_t context, uint32_t batch);

// bench --predict's rounds: each round's predicted step, the last round's report, and the rounds whose
// cpu device measured a busy machine (tilefire/simulate.h, busy_machine_warning).
struct RoundPredictions {
  std::vector<double> step_ms;
  SimulateReport last;
  uint32_t busy_rounds = 0;
  std::string busy_warning;  // the last busy round's

  void add(const SimulateReport& report);
  // On stderr, once: how many rounds measured a busy machine, and the warning. Nothing when none did.
  void warn_if_busy() const;
};

// Prefill `prompt_len` tokens, run one untimed decode step, then time `steps` greedy decode steps with
// `schedule`; returns per-step milliseconds and adds the kernel launches of the timed steps (cuda) to
// *launches.
std::vector<double> time_decode(Engine& engine, Schedule schedule, uint32_t prompt_len, uint32_t steps, uint64_t* launches);

}  // namespace tilefire::cli
