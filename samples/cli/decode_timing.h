#pragma once
// Timing greedy decode steps, shared by `tilefire bench` and its --sweep.
#include <cstdint>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::cli {

double median(std::vector<double> values);

// Prefill `prompt_len` tokens, run one untimed decode step, then time `steps` greedy decode steps with
// `schedule`; returns per-step milliseconds and adds the kernel launches of the timed steps (cuda) to
// *launches.
std::vector<double> time_decode(Engine& engine, Schedule schedule, uint32_t prompt_len, uint32_t steps, uint64_t* launches);

}  // namespace tilefire::cli
