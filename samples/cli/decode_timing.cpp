// Timing greedy decode steps (decode_timing.h).
#include "decode_timing.h"

#include <algorithm>
#include <chrono>

namespace tilefire::cli {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
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
